// flashcore_cuda_timing: times the CUDA attention forward through the public API on
// device buffers, the way bench/peers/sdpa_peers.py times PyTorch SDPA (per-call CUDA
// events, median over iterations after warm-up; plus a CUDA-graph time per call for
// short shapes). Prints one JSON line per (shape, kernel). Used by run_on_gpu.sh until
// flashcore-bench's --backend cuda covers the same rows.
//   flashcore_cuda_timing [--all-tiles] [--iters N] [--dtype f16|bf16|f32|e4m3] [--only-mission] [--gqa]
//                         [--hdims 64,128] [--seqs 512,4096] [--profile "B H S D causal"] (of the first --dtype)
//                         [--shapes "B,H,S,D,causal[,Hkv];..."] (these shapes instead of the grid's)
//                         [--descale-heads] (e4m3: per-head descale arrays of ones as well)
//                         [--exp exact|fast] (AttentionParams::exp2; fast: e4m3's chord exponentials)
//                         [--b2b] (host_us and b2b_us, the GPU time per call back to back, on every
//                         shape; without it only on shapes under 100 us)
//                         [--rounds N] (--all-tiles: each shape's kernels N times, the order rotated
//                         by one per round; rows carry "round")
//                         [--inputs randn|pattern] (randn, the default since 2026-11-27 (7e6b148): q, k, v each a
//                         draw of standard normal values rounded to the dtype, as the peer scripts'
//                         torch.randn; pattern: the fixed pattern below, copied into q, k and v alike,
//                         so q = k and each row's diagonal score stands far above the rest (e4m3: a
//                         row max that jumps once, a refused speculative tile); the inputs of every
//                         figure of this tool before 7e6b148)
// (--dtype may be repeated; f32 runs on TF32 unless the FFMA kernel is forced by key;
// e4m3: q/k/v in fp8 with f16 output, V^T (pre-pass or made by the kernel) in every timed call;
// --all-tiles times every listed kernel of the shape's dtype and head dim, both families
// fwd_sm80_* and fwd_sm90_* where the device runs them, plus the dispatcher's own pick;
// --hdims keeps only the grid shapes of those head dims (--seqs: of those lengths, B = 16384 / S); --gqa adds GQA 32/8 rows: decode
// and 16 queries, as bench/peers/sdpa_peers.py --gqa)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.hpp"
#include "flashcore/flashcore.hpp"
#include "timing_util.hpp"

namespace {

using fctiming::median;
using fctiming::read_ints;

struct Shape {
  const char* tag;
  int64_t B, H, S, D;  // S: the keys (and the queries unless Sq is given)
  bool causal;
  int64_t Hkv = 0, Sq = 0;  // GQA rows: KV heads and queries (0: H, S)
};

bool g_descale_heads = false;  // --descale-heads
bool g_randn = true;           // --inputs randn (default) | pattern
bool g_b2b = false;            // --b2b: host_us and b2b_us on every shape, not only short ones
int g_round = 0;               // --all-tiles --rounds: the round of the row being timed
flashcore::Exp2Mode g_exp = flashcore::Exp2Mode::exact;  // --exp

// n standard normal values (a fixed seed per tensor) stored as t; the last few draws are
// kept (the grid's shapes share their element counts, and a draw of 33M values takes ~1 s).
const std::vector<uint8_t>& randn_host(flashcore::DType t, int64_t n, uint64_t seed) {
  static std::map<std::tuple<int, int64_t, uint64_t>, std::vector<uint8_t>> cache;
  const auto key = std::make_tuple(int(t), n, seed);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= 6) cache.clear();
  std::vector<uint8_t>& h = cache[key];
  h.resize(size_t(n) * flashcore::dtype_size(t));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < n; ++i) flashcore::core::store_from_f32(h.data(), i, t, normal(rng));
  return h;
}

void run(const Shape& s, flashcore::DType dt, const char* impl, int iters) {
  using namespace flashcore;
  const size_t es = dtype_size(dt);
  const bool fp8 = dt == DType::e4m3;
  const DType ot = fp8 ? DType::f16 : dt;  // fp8 attention writes f16 here
  const int64_t hkv = s.Hkv > 0 ? s.Hkv : s.H, sq = s.Sq > 0 ? s.Sq : s.S;
  const int64_t nq = s.B * sq * s.H * s.D, nk = s.B * s.S * hkv * s.D, n = std::max(nq, nk);
  void *q, *k, *v, *o;
  CK(cudaMalloc(&q, nq * es));
  CK(cudaMalloc(&k, nk * es));
  CK(cudaMalloc(&v, nk * es));
  CK(cudaMalloc(&o, nq * dtype_size(ot)));
  // Random-ish bits: small finite values (a fixed pattern; correctness is the tests' job),
  // unless --inputs randn.
  std::vector<uint16_t> h16(g_randn ? 0 : n);
  std::vector<float> h32;
  uint32_t x = 12345;
  for (int64_t i = 0; i < int64_t(h16.size()); ++i) {
    x = x * 1664525u + 1013904223u;
    const float f = float(int(x >> 9) % 2001 - 1000) / 1000.f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h16[i] = dt == DType::bf16 ? uint16_t(u >> 16) : 0;
    if (dt == DType::f16) {  // f32 -> f16 by truncation of a value in [-1, 1]
      const uint32_t sign = (u >> 16) & 0x8000u, ex = (u >> 23) & 0xff, man = u & 0x7fffff;
      h16[i] = ex < 113 ? uint16_t(sign) : uint16_t(sign | ((ex - 112) << 10) | (man >> 13));
    }
  }
  if (dt == DType::f32 && !g_randn) {
    h32.resize(n);
    for (int64_t i = 0; i < n; ++i) h32[i] = float(i % 2001 - 1000) / 1000.f;
  }
  std::vector<uint8_t> h8;
  if (fp8 && !g_randn) {  // e4m3 codes of magnitude 2^-3 .. 1.875 * 2^1, either sign
    h8.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      h8[i] = uint8_t((x >> 31) << 7 | (4 + (x >> 12) % 5) << 3 | ((x >> 9) & 7));
    }
  }
  uint64_t seed = 1;
  for (void* p : {q, k, v}) {
    const int64_t count = p == q ? nq : nk;
    if (g_randn) {
      CK(cudaMemcpy(p, randn_host(dt, count, seed++).data(), count * es, cudaMemcpyHostToDevice));
      continue;
    }
    CK(cudaMemcpy(p, fp8 ? static_cast<const void*>(h8.data()) : dt == DType::f32 ? static_cast<const void*>(h32.data()) : h16.data(),
                  count * es, cudaMemcpyHostToDevice));
  }
  Tensor tq = Tensor::contiguous(q, dt, {s.B, sq, s.H, s.D}, Device::cuda);
  Tensor tk = Tensor::contiguous(k, dt, {s.B, s.S, hkv, s.D}, Device::cuda);
  Tensor tv = Tensor::contiguous(v, dt, {s.B, s.S, hkv, s.D}, Device::cuda);
  Tensor to = Tensor::contiguous(o, ot, {s.B, sq, s.H, s.D}, Device::cuda);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  AttentionParams p;
  p.causal = s.causal;
  p.stream = st;
  p.exp2 = g_exp;
  float* heads = nullptr;  // per-head descales (all 1: the same output, the kernel's loads)
  if (fp8 && g_descale_heads) {
    const std::vector<float> ones(size_t(s.B * hkv), 1.f);
    CK(cudaMalloc(&heads, ones.size() * sizeof(float)));
    CK(cudaMemcpy(heads, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
    p.q_descale_heads = p.k_descale_heads = p.v_descale_heads = heads;
  }
  const bool dispatcher = impl != nullptr && std::strcmp(impl, "auto") == 0;
  p.impl = dispatcher ? nullptr : impl;
  PhaseTimes pt;
  try {
    attention(tq, tk, tv, to, p, &pt);
  } catch (const Error& e) {
    std::printf("{\"tag\":\"%s\",\"error\":\"%s\"}\n", s.tag, e.what());
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(heads);
    return;
  }
  // Warm-up: at least 5 calls and 200 ms, so that the first rows of a run (the seed
  // mission's) are not timed while an idle GPU's clocks are still rising.
  const auto w0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5 || std::chrono::steady_clock::now() - w0 < std::chrono::milliseconds(200); ++i) {
    attention(tq, tk, tv, to, p);
    if (i % 64 == 63) CK(cudaStreamSynchronize(st));
  }
  CK(cudaStreamSynchronize(st));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const double us = fctiming::median_event_us(st, a, b, iters, [&] { attention(tq, tk, tv, to, p); });
  // Short shapes (every shape with --b2b): the host time of one call (API checks,
  // dispatch, launch; the call returns before the kernel ends) and the GPU time of one
  // call among back-to-back ones (b2b_us: events around the batch), medians of 20 batches
  // of 10 calls; short shapes also a CUDA graph of 20 calls: the per-call GPU time
  // without launch gaps.
  double graph_us = -1, host_us = -1, b2b_us = -1;
  if (us < 100 || g_b2b) {
    std::vector<float> hs, bs;
    for (int r = 0; r < 20; ++r) {
      CK(cudaEventRecord(a, st));
      const auto h0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 10; ++i) attention(tq, tk, tv, to, p);
      const auto h1 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      hs.push_back(float(std::chrono::duration<double, std::micro>(h1 - h0).count() / 10));
      bs.push_back(ms * 1e3f / 10);
    }
    host_us = median(hs);
    b2b_us = median(bs);
  }
  if (us < 100) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 20; ++i) attention(tq, tk, tv, to, p);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<float> gs;
    for (int i = 0; i < 20; ++i) {
      CK(cudaEventRecord(a, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      gs.push_back(ms / 20);
    }
    graph_us = median(gs) * 1e3;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  const double flops = 4.0 * s.B * s.H * sq * s.S * s.D * (s.causal && sq == s.S ? 0.5 : 1.0);
  // GB/s: Q, K, V read and O written once (decode is judged by it).
  const double gbs = double((2 * nq + 2 * nk) * es) / us / 1e3;
  std::printf(
      "{\"tag\":\"%s\",\"backend\":\"flashcore\",\"kernel\":\"%s\",\"dispatcher\":%s,\"dtype\":\"%s\",\"B\":%lld,"
      "\"H\":%lld,\"S\":%lld,\"D\":%lld,\"causal\":%s,\"us\":%.2f,\"graph_us\":%.2f,\"host_us\":%.2f,\"b2b_us\":%.2f,\"tflops\":%.1f,"
      "\"Hkv\":%lld,\"Sq\":%lld,\"gbs\":%.0f,\"inputs\":\"%s\",\"exp\":\"%s\",\"round\":%d}\n",
      s.tag, pt.kernel.c_str(), impl == nullptr || dispatcher ? "true" : "false", to_string(dt), (long long)s.B, (long long)s.H, (long long)s.S, (long long)s.D,
      s.causal ? "true" : "false", us, graph_us, host_us, b2b_us, flops / us / 1e6, (long long)hkv, (long long)sq, gbs,
      g_randn ? "randn" : "pattern", to_string(g_exp), g_round);
  std::fflush(stdout);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(st);
  cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(heads);
}

}  // namespace

int main(int argc, char** argv) {
  bool all_tiles = false, only_mission = false, dtype_given = false, gqa = false;
  std::string prefix;
  std::vector<int64_t> hdims = {64, 128, 256}, seqs = {512, 2048, 8192, 16384};
  int iters = 30, rounds = 1;
  std::vector<flashcore::DType> dts = {flashcore::DType::f16, flashcore::DType::bf16};
  long long prof[5] = {0, 0, 0, 0, -1};  // --profile's shape (causal >= 0 when given)
  std::vector<Shape> given;               // --shapes
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--all-tiles") all_tiles = true;
    else if (a == "--prefix" && i + 1 < argc) prefix = argv[++i];  // --all-tiles: only keys starting so
    else if (a == "--only-mission") only_mission = true;
    else if (a == "--gqa") gqa = true;
    else if (a == "--descale-heads") g_descale_heads = true;
    else if (a == "--b2b") g_b2b = true;
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--exp" && i + 1 < argc) {
      const std::string ex = argv[++i];
      if (ex != "exact" && ex != "fast") return 2;
      g_exp = ex == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
    }
    else if (a == "--inputs" && i + 1 < argc) {
      const std::string in = argv[++i];
      if (in != "randn" && in != "pattern") return 2;
      g_randn = in == "randn";
    }
    else if (a == "--profile" && i + 1 < argc) {  // "B H S D causal": a few calls of one shape (for ncu)
      int c;
      if (std::sscanf(argv[++i], "%lld %lld %lld %lld %d", &prof[0], &prof[1], &prof[2], &prof[3], &c) != 5) return 2;
      prof[4] = c;
    }
    else if (a == "--shapes" && i + 1 < argc) {  // "B,H,S,D,causal[,Hkv];...": other shapes than the grid's
      for (const char* c = argv[++i]; *c != '\0';) {
        std::vector<long long> v;
        if (!read_ints(c, v) || (v.size() != 5 && v.size() != 6)) return 2;
        given.push_back({"shape", v[0], v[1], v[2], v[3], v[4] != 0, v.size() == 6 ? v[5] : 0});
      }
    }
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if ((a == "--hdims" || a == "--seqs") && i + 1 < argc) {  // comma-separated lists
      std::vector<long long> v;
      const char* c = argv[++i];
      if (!read_ints(c, v) || *c != '\0') return 2;
      (a == "--hdims" ? hdims : seqs).assign(v.begin(), v.end());
    }
    else if (a == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (!dtype_given) dts.clear();
      dtype_given = true;
      dts.push_back(d == "bf16"   ? flashcore::DType::bf16
                    : d == "f32"  ? flashcore::DType::f32
                    : d == "e4m3" ? flashcore::DType::e4m3
                                  : flashcore::DType::f16);
    }
  }
  if (prof[4] >= 0) {  // the first --dtype (f16 by default), the dispatcher's kernel
    run({"profile", prof[0], prof[1], prof[2], prof[3], prof[4] != 0}, dts[0], nullptr, 3);
    return 0;
  }
  std::vector<Shape> shapes = {{"seed-mission", 1, 8, 512, 64, false}, {"seed-mission", 1, 8, 512, 64, true}};
  if (!given.empty()) shapes = given;
  else if (!only_mission)
    for (int64_t D : hdims)
      for (int64_t S : seqs)  // --seqs: other lengths, B = 16384 / S as the grid's
        for (bool c : {false, true}) shapes.push_back({"grid", std::max<int64_t>(16384 / S, 1), 2048 / D, S, D, c});
  // GQA 32/8, D = 128: decode (one query) and a 16-query extension (speculative decoding;
  // without a mask: PyTorch's is_causal aligns Sq != Sk top-left, ours bottom-right).
  if (gqa) {
    for (int64_t S : {4096, 8192}) shapes.push_back({"gqa", 32, 32, S, 128, false, 8, 1});
    shapes.push_back({"gqa", 8, 32, 4096, 128, false, 8, 16});
    // Decode with few KV heads (B1, B4): the backend's KV splits.
    for (int64_t S : {4096, 16384, 65536}) shapes.push_back({"gqa", 1, 32, S, 128, false, 8, 1});
    shapes.push_back({"gqa", 4, 32, 8192, 128, false, 8, 1});
  }
  std::vector<flashcore::KernelInfo> ks(256);
  ks.resize(size_t(flashcore::list_kernels(ks.data(), int(ks.size()))));
  for (flashcore::DType dt : dts)
    for (const Shape& s : shapes) {
      if (!all_tiles) {
        run(s, dt, nullptr, iters);
        continue;
      }
      // f32: the TF32 instances (fwd_sm80_tf32_*), and the exact FFMA kernel up to S = 2048.
      const bool f32 = dt == flashcore::DType::f32;
      const std::string tail = std::string(f32 ? "tf32" : flashcore::to_string(dt)) + "_hd" + std::to_string(s.D) + "_";
      std::vector<std::string> keys;
      for (const auto& k : ks)
        if ((k.key.rfind("fwd_sm80_" + tail, 0) == 0 || k.key.rfind("fwd_sm90_" + tail, 0) == 0) && k.available &&
            k.key.rfind(prefix, 0) == 0)
          keys.push_back(k.key);
      keys.push_back("auto");  // the dispatcher's choice, as a row of its own
      if (f32 && s.S <= 2048) keys.push_back("fwd_sm80_f32_hd256_simt");
      // --rounds N: the list N times, round r starting at its r-th key, so that no kernel is
      // always timed first (a kernel's figure depends on its place in the sequence: up to
      // 10 % on an H200 under its power cap; docs/results/cuda-sm90-fp8-2026-11-22.md,
      // 2026-11-27, 02d9451). Each row names its round.
      for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < keys.size(); ++i) {
          g_round = r;
          run(s, dt, keys[(i + size_t(r)) % keys.size()].c_str(), iters);
        }
    }
  return 0;
}
