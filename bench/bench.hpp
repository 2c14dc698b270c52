// flashcore-bench: the types shared by its parts.
//   args.cpp    command line -> Options (one Config, or a suite name)
//   suites.cpp  named lists of Configs (the default suite of BENCH.md)
//   ops.cpp     per-op setup: random inputs, the library call, the reference check
//   naive.cpp   the naive fp32 attention baseline (lives only here)
//   timing.cpp  steady-clock timing, p50/p90, thread pinning
//   peak.cpp    measured FMA ceilings per ISA (peak_<isa>.cpp hold the ISA loops)
//   report.cpp  the table and the JSON lines
//   ukernels.cpp     GEMM-only rows per micro-kernel (--suite ukernels)
//   cuda_runner.cpp  --backend cuda (device buffers, CUDA events / graphs)
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fcbench {

// One configuration to measure. Shape fields follow BENCH.md's mapping per op.
struct Config {
  std::string op = "attention";     // attention | attention-backward | decode | softmax-v | gemm-chain (| gemm-ukernel)
  std::string pass = "fwd";         // attention: fwd | fwd+bwd (one forward and its backward per call);
                                    // attention-backward is pass bwd
  std::string backend = "cpu";      // cpu | cuda
  std::string impl = "auto";        // kernel key, "auto", or "naive" (bench-only baseline)
  std::string strategy = "auto";    // auto | two-pass | three-pass | online
  std::string dtype = "f32";        // f32 | f16 | bf16 | e4m3
  std::string exp = "exact";        // exact | fast
  int64_t batch = -1, heads = -1, kv_heads = -1, seq_q = -1, seq_k = -1, head_dim = -1;
  bool causal = false;
  float softcap = 0.0f;             // attention: --softcap C (0 = off)
  bool alibi = false, sinks = false;  // attention: --alibi (slopes [H], 2^(-8 (h+1) / H)), --sinks
  int threads = 0;                  // 0 = every online core
  int iters = 0;                    // 0 = adaptive (~0.3 s, at least 5)
  bool check = false;
  int tile_m = 0, tile_n = 0;       // --tile BMxBN: CUDA tile override (0 = the table's)
  bool vs_naive = false;            // attention f32: time the naive baseline alongside
  bool prepacked = false;           // softmax-v / gemm-chain: V (B, C) packed once, outside the timed calls
  bool vs_unpacked = false;         // with prepacked: time the unpacked call alongside
  bool portable = false;            // force the portable kernels for this row (suites)
  int paired = 0;                   // --paired N: N pairs of (peak loop, calls) for a paired % of peak (peak.hpp)
  int64_t page_size = 0;            // decode: the KV cache's page size (0: a contiguous cache)
  bool fp8_cache = false;           // decode: the cache in e4m3 (--kv-dtype e4m3), K / V rounded to it
  bool pages_in_order = false;      // decode, paged: page ids in table order, not shuffled
  bool vs_contiguous = false;       // decode, paged: time the contiguous cache's call alongside
  std::string label;                // suite row name (empty for a single run)
};

// Fills unset shape fields with the op's defaults and derived values (Hkv = H, Sk = Sq).
void apply_defaults(Config& c);

struct Phases {
  bool present = false;
  double pack_us = 0, max_us = 0, exp_us = 0, gemm_us = 0, norm_us = 0;
};

struct Result {
  Config cfg;
  std::string error;                // non-empty: the configuration did not run
  bool skipped = false;             // with error: not run because this CPU lacks the ISA
  std::string strategy_ran;         // after `auto` was resolved by the library
  std::string kernel;               // micro-kernel / CUDA kernel key that ran
  std::string peak_name;
  double peak_gflops = NAN;
  int iters = 0;
  double p50_us = NAN, p90_us = NAN, gflops = NAN, pct_peak = NAN;
  double pct_peak_paired = NAN;     // peak.hpp paired_pct: GEMM-only rows, or --paired N
  double rel_err = NAN, tol = NAN;
  bool check_ok = true;
  std::string check_subset;         // what part of the output the reference covered
  Phases phases;
  double speedup_vs_naive = NAN;    // vs_naive: median over interleaved pairs of naive/ours
  double speedup_vs_unpacked = NAN; // vs_unpacked: the same, unpacked/packed
  double speedup_vs_contiguous = NAN;  // vs_contiguous: the same, contiguous/paged
  // Decode rows (attention and decode, Sq <= kDecodeSq): bytes of Q+K+V+O once / p50, and %
  // of the memory read bandwidth measured at the same thread count (BENCH.md: decode in GB/s).
  double gbps = NAN, mem_gbps = NAN, pct_mem = NAN;
  std::string note;
  uint64_t seed = 0;
};

// ---- ops.cpp
// BENCH.md's FLOP formulas; attention's backward counts 2.5x its forward (FlashAttention's
// convention: 5 GEMMs to the forward's 2), a forward + backward call 3.5x.
double flop_count(const Config& c);
constexpr int64_t kDecodeSq = 16;             // attention rows judged in GB/s up to this Sq
double decode_bytes(const Config& c);         // Q+K+V+O bytes, or 0 for a non-decode row
// One row, or two with vs_naive (the row, then its naive baseline timed alongside).
std::vector<Result> run_config(const Config& c, uint64_t seed);

// ---- ukernels.cpp: op "gemm-ukernel" (--suite ukernels), impl = a GEMM micro-kernel key.
void run_gemm_ukernel(Result& r, uint64_t seed);

// ---- cuda_runner.cpp (a stub in ops.cpp when built without CUDA): the row, and with
// vs_contiguous on a paged decode the contiguous cache's row timed in pairs with it.
std::vector<Result> run_cuda(const Config& c, uint64_t seed);

// ---- naive.cpp: O = softmax(scale Q K^T) V, fp32, BSHD, one query row at a time, for
// the first `units_run` (batch, head) pairs (batch-major) and query rows [row0, sq).
void naive_attention(const float* q, const float* k, const float* v, float* o, int64_t batch,
                     int64_t heads, int64_t kv_heads, int64_t sq, int64_t sk, int64_t d,
                     int64_t units_run, int64_t row0, bool causal, int threads);

// ---- suites.cpp
bool suite_configs(const std::string& name, std::vector<Config>& out, std::string& err);
const char* suite_names();

// ---- report.cpp
void print_table(const std::vector<Result>& rows, bool show_header_info);
void print_json(const Result& r);
double tolerance(const Config& c);            // BENCH.md's rel_err bounds

}  // namespace fcbench
