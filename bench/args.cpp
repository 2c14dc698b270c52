#include "args.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>

namespace fcbench {
namespace {

bool one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (v == a) return true;
  return false;
}

bool parse_int(const char* s, int64_t lo, int64_t& out) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < lo) return false;
  out = v;
  return true;
}

}  // namespace

void print_usage(const char* argv0) {
  std::printf(
      "usage: %s [--op attention|attention-backward|decode|softmax-v|gemm-chain|gemm-ukernel]\n"
      "  [--pass fwd|bwd|fwd+bwd] [--backend cpu|cuda]\n"
      "  [--impl NAME|auto|naive] [--strategy auto|two-pass|three-pass|online]\n"
      "  [--dtype f32|f16|bf16|e4m3] [--exp exact|fast]\n"
      "  [--batch B] [--heads H] [--kv-heads Hkv] [--seq-q Sq] [--seq-k Sk] [--head-dim D]\n"
      "  [--causal] [--softcap C] [--alibi] [--sinks] [--threads N] [--iters N] [--check] [--json]\n"
      "  [--tile BMxBN] [--list] [--suite NAME] [--seed N] [--vs-naive] [--peaks]\n"
      "  [--prepacked] [--vs-unpacked] [--paired N] [--page-size N] [--pages-in-order] [--vs-contiguous]\n"
      "  [--kv-dtype e4m3]\n"
      "\n"
      "No arguments: the default suite (a table, < 1 minute on 2 cores).\n"
      "Shapes: attention as named (Q [B,Sq,H,D], K/V [B,Sk,Hkv,D]); softmax-v O[M,d] =\n"
      "softmax(S[M,L]) V[L,d] with M = B*H*Sq, L = Sk, d = D; gemm-chain E[M,N] =\n"
      "(A[M,K1] B[K1,K2]) C[K2,N] with M = B*H*Sq, K2 = Sk, K1 = N = D; gemm-ukernel: the\n"
      "GEMM-only row of one micro-kernel (--impl KEY), C[MR,d] += P[MR,L] V[L,d], L = Sk, d = D.\n"
      "Defaults: attention B1 H8 S1024 D128; softmax-v M12 L32768 d256; gemm-chain M256\n"
      "K1=N=256 K2=8192; Hkv = H, Sk = Sq; threads = online cores (pinned); iters adaptive\n"
      "(~0.3 s of calls, at least 5). Inputs are random with a fresh seed (--seed N repeats).\n"
      "--impl naive: the bench's naive fp32 attention (the portable kernels' baseline);\n"
      "--vs-naive times it alongside the chosen kernel, calls interleaved, and prints the ratio.\n"
      "--prepacked (softmax-v, gemm-chain): V, or B and C, packed once before the timed calls\n"
      "(pack_softmax_v / pack_gemm_chain), which then time the packed call only; --vs-unpacked\n"
      "adds the unpacked call, calls interleaved, as a second row with the ratio.\n"
      "--op attention-backward (= --pass bwd): dq, dk, dv from the forward's out and lse (made\n"
      "once, not timed); --pass fwd+bwd times a forward with lse and its backward per call.\n"
      "Backward GFLOP/s count 2.5x the forward's flops, fwd+bwd 3.5x (FlashAttention's count).\n"
      "--op decode: attention_with_kvcache, Sq queries (default 1) per sequence against Sk keys\n"
      "(default 4096) in a KV cache, paged with --page-size N (each sequence's pages in a random\n"
      "order; in table order with --pages-in-order) or contiguous (0, the default); reported in GB/s (K/V read + q + out) and %% of the\n"
      "measured memory read bandwidth. --vs-contiguous (with --page-size N > 0): the same keys in\n"
      "a contiguous cache timed alongside, calls interleaved, as a second row with the ratio\n"
      "(CUDA: 16-bit caches, one call per sample).\n"
      "--kv-dtype e4m3 (decode, CPU and CUDA): an fp8 cache (K and V rounded to e4m3 first, so that\n"
      "--check's reference sees the same values; descales 1), its bytes counted as 1 each.\n"
      "--tile forces the CUDA kernel's query x key tile (AttentionParams.tile_m/tile_n).\n"
      "Score variants (attention, both passes): --softcap C (scaled scores -> C tanh(s / C)),\n"
      "--alibi (slopes [H], the ALiBi paper's 2^(-8 (h+1) / H)), --sinks (a random logit per\n"
      "head in [-1, 1)); --check compares them with the fp64 reference too.\n"
      "--paired N (CPU): also N pairs of (the ISA's peak loop, calls), for a %% of peak against\n"
      "the speed of the moment (GEMM-only rows: always, 21 pairs).\n"
      "--list prints the kernel keys; --peaks the measured FMA ceilings and memory read bandwidth.\n"
      "Exit status: 0 ok, 1 a row failed or missed its --check tolerance, 2 bad arguments.\n"
      "Suites: %s\n",
      argv0, suite_names());
}

bool parse_args(int argc, char** argv, Options& opt, std::string& err) {
  if (argc <= 1) {
    opt.suite = "default";
    return true;
  }
  Config& c = opt.cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    // Flags without a value.
    if (a == "--causal") { c.causal = true; continue; }
    if (a == "--alibi") { c.alibi = true; continue; }
    if (a == "--sinks") { c.sinks = true; continue; }
    if (a == "--check") { c.check = true; continue; }
    if (a == "--json") { opt.json = true; continue; }
    if (a == "--list") { opt.list = true; continue; }
    if (a == "--peaks") { opt.peaks = true; continue; }
    if (a == "--vs-naive") { c.vs_naive = true; continue; }
    if (a == "--prepacked") { c.prepacked = true; continue; }
    if (a == "--vs-unpacked") { c.prepacked = c.vs_unpacked = true; continue; }
    if (a == "--vs-contiguous") { c.vs_contiguous = true; continue; }
    if (a == "--pages-in-order") { c.pages_in_order = true; continue; }
    if (a == "--help" || a == "-h") { opt.help = true; continue; }
    // Flags with a value.
    if (!one_of(a, {"--op", "--backend", "--impl", "--strategy", "--dtype", "--exp", "--batch",
                    "--heads", "--kv-heads", "--seq-q", "--seq-k", "--head-dim", "--threads",
                    "--iters", "--suite", "--seed", "--tile", "--paired", "--pass", "--page-size", "--kv-dtype",
                    "--softcap"})) {
      err = "unknown flag " + a;
      return false;
    }
    if (i + 1 >= argc) { err = a + ": missing value"; return false; }
    const std::string v = argv[++i];
    auto choice = [&](std::string& field, std::initializer_list<const char*> allowed) {
      if (!one_of(v, allowed)) { err = a + ": unknown value '" + v + "'"; return false; }
      field = v;
      return true;
    };
    auto number = [&](auto& field, int64_t lo) {
      int64_t n = 0;
      if (!parse_int(v.c_str(), lo, n)) {
        err = a + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'";
        return false;
      }
      field = static_cast<std::remove_reference_t<decltype(field)>>(n);
      return true;
    };
    bool ok = true;
    if (a == "--op") ok = choice(c.op, {"attention", "attention-backward", "decode", "softmax-v", "gemm-chain", "gemm-ukernel"});
    else if (a == "--pass") ok = choice(c.pass, {"fwd", "bwd", "fwd+bwd"});
    else if (a == "--backend") ok = choice(c.backend, {"cpu", "cuda"});
    else if (a == "--impl") c.impl = v;
    else if (a == "--strategy") ok = choice(c.strategy, {"auto", "two-pass", "three-pass", "online"});
    else if (a == "--dtype") ok = choice(c.dtype, {"f32", "f16", "bf16", "e4m3"});
    else if (a == "--exp") ok = choice(c.exp, {"exact", "fast"});
    else if (a == "--batch") ok = number(c.batch, 0);
    else if (a == "--heads") ok = number(c.heads, 1);
    else if (a == "--kv-heads") ok = number(c.kv_heads, 1);
    else if (a == "--seq-q") ok = number(c.seq_q, 0);
    else if (a == "--seq-k") ok = number(c.seq_k, 0);
    else if (a == "--head-dim") ok = number(c.head_dim, 1);
    else if (a == "--threads") ok = number(c.threads, 1);
    else if (a == "--iters") ok = number(c.iters, 1);
    else if (a == "--paired") ok = number(c.paired, 1);
    else if (a == "--page-size") ok = number(c.page_size, 0);
    else if (a == "--kv-dtype") {
      std::string kv;
      ok = choice(kv, {"e4m3"});
      c.fp8_cache = ok;
    }
    else if (a == "--suite") opt.suite = v;
    else if (a == "--softcap") {
      char* end = nullptr;
      c.softcap = std::strtof(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(c.softcap > 0.0f) || c.softcap > 1e30f) {
        err = "--softcap: expected a number > 0, got '" + v + "'";
        return false;
      }
    }
    else if (a == "--seed") { ok = number(opt.seed, 0); opt.seed_given = ok; }
    else if (a == "--tile") {
      int bm = 0, bn = 0;
      char tail = 0;
      if (std::sscanf(v.c_str(), "%dx%d%c", &bm, &bn, &tail) != 2 || bm <= 0 || bn <= 0) {
        err = "--tile: expected BMxBN (e.g. 128x64), got '" + v + "'";
        return false;
      }
      c.tile_m = bm;
      c.tile_n = bn;
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace fcbench
