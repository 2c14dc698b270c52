// flashcore_cuda_bwd_timing: times the CUDA attention backward (attention_backward on device
// buffers, workspace and every launch included) the way bench/peers/sdpa_bwd_peers.py times
// PyTorch SDPA's: per-call CUDA events, median over iterations after warm-up. One JSON line per
// (shape, kernel), with the keys bench/peers/compare.py joins on (dtype, B, H, S, D, causal).
// TFLOP/s as FlashAttention counts the backward: 2.5 * 4 * B * H * S * S * D, halved when causal.
//   flashcore_cuda_bwd_timing [--dtype bf16|f16]... [--hdims 64,128] [--seqs 512,...,16384]
//                             [--iters N] [--all-tiles] [--deterministic]
//                             [--shapes "B,H,S,D,causal[,Hkv];..."]
// The grid: D in --hdims (default 64,128), S in --seqs (default 512..16384), B = 16384 / S,
// H = 2048 / D, causal and not; inputs standard normal (q, k, v, dO), out and lse from the
// library's CUDA forward of the same inputs. --all-tiles: every bwd_sm90 / bwd_sm80 key of the dtype
// the device runs at each family's smallest head dim >= D, forced, besides the backend's own
// choice ("auto");
// --deterministic: a params.deterministic row of every timed kernel as well.
#include <cuda_runtime.h>

#include <algorithm>
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

using fctiming::read_ints;

struct Shape {
  long long B, H, S, D;
  bool causal;
  long long Hkv = 0;  // 0: H
};

// Device buffer of n standard normal values stored as t (fixed seed per buffer). The host
// values are kept per (dtype, n, seed): the grid's shapes share their element counts
// (B S = 16384, H D = 2048), and drawing 33M values takes about a second.
void* randn_device(flashcore::DType t, int64_t n, uint64_t seed) {
  static std::map<std::tuple<int, int64_t, uint64_t>, std::vector<uint8_t>> cache;
  std::vector<uint8_t>& h = cache[std::make_tuple(int(t), n, seed)];
  if (h.empty()) {
    h.resize(size_t(n) * flashcore::dtype_size(t));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < n; ++i) flashcore::core::store_from_f32(h.data(), i, t, normal(rng));
  }
  void* d = nullptr;
  CK(cudaMalloc(&d, h.size()));
  CK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
  return d;
}

// Times every kernel of `impls` ("auto": the backend's choice) on one shape.
void run(const Shape& s, flashcore::DType dt, const std::vector<std::string>& impls, bool deterministic, int iters) {
  using namespace flashcore;
  const int64_t hkv = s.Hkv > 0 ? s.Hkv : s.H;
  const int64_t nq = s.B * s.S * s.H * s.D, nk = s.B * s.S * hkv * s.D;
  void* q = randn_device(dt, nq, 1);
  void* k = randn_device(dt, nk, 2);
  void* v = randn_device(dt, nk, 3);
  void* dout = randn_device(dt, nq, 4);
  void *o, *lse, *dq, *dk, *dv;
  const size_t es = dtype_size(dt);
  CK(cudaMalloc(&o, nq * es));
  CK(cudaMalloc(&lse, s.B * s.H * s.S * 4));
  CK(cudaMalloc(&dq, nq * es));
  CK(cudaMalloc(&dk, nk * es));
  CK(cudaMalloc(&dv, nk * es));
  const Tensor tq = Tensor::contiguous(q, dt, {s.B, s.S, s.H, s.D}, Device::cuda);
  const Tensor tk = Tensor::contiguous(k, dt, {s.B, s.S, hkv, s.D}, Device::cuda);
  const Tensor tv = Tensor::contiguous(v, dt, {s.B, s.S, hkv, s.D}, Device::cuda);
  const Tensor to = Tensor::contiguous(o, dt, {s.B, s.S, s.H, s.D}, Device::cuda);
  const Tensor tdo = Tensor::contiguous(dout, dt, {s.B, s.S, s.H, s.D}, Device::cuda);
  Tensor tl = Tensor::contiguous(lse, DType::f32, {s.B, s.H, s.S}, Device::cuda);
  const Tensor tdq = Tensor::contiguous(dq, dt, {s.B, s.S, s.H, s.D}, Device::cuda);
  const Tensor tdk = Tensor::contiguous(dk, dt, {s.B, s.S, hkv, s.D}, Device::cuda);
  const Tensor tdv = Tensor::contiguous(dv, dt, {s.B, s.S, hkv, s.D}, Device::cuda);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  AttentionParams fp;
  fp.causal = s.causal;
  fp.stream = st;
  fp.lse = &tl;
  attention(tq, tk, tv, to, fp);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const double flops = 2.5 * 4.0 * s.B * s.H * double(s.S) * s.S * s.D * (s.causal ? 0.5 : 1.0);
  for (const std::string& impl : impls)
    for (bool det : deterministic ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      AttentionParams p;
      p.causal = s.causal;
      p.stream = st;
      p.deterministic = det;
      p.impl = impl == "auto" ? nullptr : impl.c_str();
      try {
        attention_backward(tq, tk, tv, to, tdo, tl, tdq, tdk, tdv, p);
      } catch (const Error& e) {
        std::printf("{\"tag\":\"bwd\",\"kernel\":\"%s\",\"error\":\"%s\"}\n", impl.c_str(), e.what());
        continue;
      }
      for (int i = 0; i < 5; ++i) attention_backward(tq, tk, tv, to, tdo, tl, tdq, tdk, tdv, p);
      CK(cudaStreamSynchronize(st));
      const double us = fctiming::median_event_us(
          st, a, b, iters, [&] { attention_backward(tq, tk, tv, to, tdo, tl, tdq, tdk, tdv, p); });
      std::printf(
          "{\"tag\":\"bwd\",\"backend\":\"flashcore\",\"kernel\":\"%s\",\"dispatcher\":%s,\"deterministic\":%s,"
          "\"dtype\":\"%s\",\"B\":%lld,\"H\":%lld,\"S\":%lld,\"D\":%lld,\"causal\":%s,\"Hkv\":%lld,\"us\":%.2f,"
          "\"tflops\":%.1f}\n",
          impl.c_str(), impl == "auto" ? "true" : "false", det ? "true" : "false", to_string(dt), s.B, s.H, s.S, s.D,
          s.causal ? "true" : "false", (long long)hkv, us, flops / us / 1e6);
      std::fflush(stdout);
    }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(st);
  for (void* ptr : {q, k, v, dout, o, lse, dq, dk, dv}) cudaFree(ptr);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<flashcore::DType> dts;
  std::vector<long long> hdims = {64, 128}, seqs = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<Shape> given;
  bool all_tiles = false, deterministic = false;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--all-tiles") all_tiles = true;
    else if (arg == "--deterministic") deterministic = true;
    else if (arg == "--iters" && i + 1 < argc) iters = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "bf16" && d != "f16") return 2;
      dts.push_back(d == "bf16" ? flashcore::DType::bf16 : flashcore::DType::f16);
    } else if ((arg == "--hdims" || arg == "--seqs") && i + 1 < argc) {
      std::vector<long long> v;
      const char* c = argv[++i];
      if (!read_ints(c, v) || *c != '\0') return 2;
      (arg == "--hdims" ? hdims : seqs) = v;
    } else if (arg == "--shapes" && i + 1 < argc) {
      for (const char* c = argv[++i]; *c != '\0';) {
        std::vector<long long> v;
        if (!read_ints(c, v) || (v.size() != 5 && v.size() != 6)) return 2;
        given.push_back({v[0], v[1], v[2], v[3], v[4] != 0, v.size() == 6 ? v[5] : 0});
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (dts.empty()) dts = {flashcore::DType::bf16};
  std::vector<Shape> shapes = given;
  if (shapes.empty())
    for (long long D : hdims)
      for (long long S : seqs)
        for (bool c : {false, true}) shapes.push_back({std::max(16384 / S, 1LL), 2048 / D, S, D, c});
  std::vector<flashcore::KernelInfo> ks(512);
  ks.resize(size_t(flashcore::list_kernels(ks.data(), int(ks.size()))));
  for (flashcore::DType dt : dts)
    for (const Shape& s : shapes) {
      std::vector<std::string> impls = {"auto"};
      if (all_tiles) {
        // Each family's keys of the smallest head dim that covers D (a D of 96 on Hopper: the
        // sm80 hd96 rows and the sm90 hd128 one).
        for (const char* family : {"bwd_sm90_", "bwd_sm80_"}) {
          const std::string prefix = std::string(family) + flashcore::to_string(dt) + "_hd";
          auto hd_of = [&](const std::string& key) { return std::atoll(key.c_str() + prefix.size()); };
          long long best = 0;
          for (const flashcore::KernelInfo& k : ks)
            if (k.available && k.key.rfind(prefix, 0) == 0 && hd_of(k.key) >= s.D && (best == 0 || hd_of(k.key) < best))
              best = hd_of(k.key);
          for (const flashcore::KernelInfo& k : ks)
            if (k.available && k.key.rfind(prefix, 0) == 0 && hd_of(k.key) == best) impls.push_back(k.key);
        }
      }
      run(s, dt, impls, deterministic, iters);
    }
  return 0;
}
