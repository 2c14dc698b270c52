// GEMM-only rows, one per micro-kernel of the kernel list (seed 000's "GEMM-only" row: the
// P V product with pre-packed operands, no softmax). The ceiling a fused pipeline can
// reach with that kernel, as % of the measured peak of the kernel's ISA.
//
// Shape: C[M x d] += P[L keys x M] V[L x d], d = --head-dim (256), L = --seq-k (512:
// the packed V, L x d fp32 = 512 KiB, stays in this CPU's 1 MiB L2), in key tiles of
// 256 as the pipelines run it (a kernel's stream form, which stage 2 runs on one row
// block: in chunks of gemm_stream_chunk, the C tile kept across them); M = MR (the
// suite's rows), or --seq-q rounded up to MR with `--op gemm-ukernel`: row blocks of MR
// innermost, so each V panel's key tile stays in L1 across them as in the pipelines'
// stage 2. With N threads each thread runs its own copy. A timed call runs the product
// `reps` times back to back (each run rewrites C), at least ~64 MFLOP per thread: the
// AMX row's single product takes ~3 us, and the parallel region and clock around one
// call cost ~0.4 us of it (c07e6f5, 2026-11-27).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "bench.hpp"
#include "cases.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "peak.hpp"
#include "timing.hpp"

namespace fcbench {
namespace {

constexpr int64_t kKeyTile = 256;

const flashcore::cpu::GemmUkernel* find_kernel(const std::string& key) {
  for (int i = 0; i < flashcore::cpu::gemm_ukernel_count(); ++i)
    if (key == flashcore::cpu::gemm_ukernel(i).key) return &flashcore::cpu::gemm_ukernel(i);
  return nullptr;
}

// A copy of an array's bytes starting on a cache line, as the pipelines' packed operands
// do (pack.hpp): a HostArray's std::vector storage is only 16-byte aligned (large
// ones sit 16 bytes past a page), so every 64-byte row of an AMX tile or zmm load would
// span two cache lines. Until 412dcca (2026-11-22) the GEMM-only rows timed such
// operands, the AMX kernel at about half its speed on aligned data (docs/results/cpu-pipelines-2026-11-29.md).
struct Aligned {
  std::unique_ptr<unsigned char[]> raw;
  unsigned char* p = nullptr;
  explicit Aligned(const HostArray& h) : raw(new unsigned char[h.nbytes() + 64]) {
    p = raw.get() + (64 - reinterpret_cast<uintptr_t>(raw.get()) % 64) % 64;
    std::copy(h.bytes.begin(), h.bytes.end(), p);
  }
};

// One thread's operands: A = P as [L][MR] (or [MR][L] for row-major A kernels), B = V as
// d/NR panels of [L][NR], each in the kernel's layout (ukernel.hpp), C; the kernel reads
// and writes the aligned copies (C is copied back for the check).
struct Operands {
  HostArray a, b, c;
  std::unique_ptr<Aligned> pa, pb, pc;
};

}  // namespace

void run_gemm_ukernel(Result& r, uint64_t seed) {
  const Config& cfg = r.cfg;
  const flashcore::cpu::GemmUkernel* k = find_kernel(cfg.impl);
  if (k == nullptr) throw std::runtime_error("no micro-kernel named '" + cfg.impl + "' in this build");
  if (!flashcore::cpu::isa_available(k->isa)) {
    r.skipped = true;
    r.error = std::string("skipped: this CPU lacks ") + flashcore::cpu::isa_name(k->isa);
    return;
  }
  const int64_t mr = k->mr, nr = k->nr, d = cfg.head_dim, npanels = (d + nr - 1) / nr;
  // Row blocks of MR: --seq-q rows rounded up (the suite's rows: one block).
  const int64_t nblk = (std::max<int64_t>(cfg.seq_q, 1) + mr - 1) / mr, rows = nblk * mr;
  const int64_t kt = flashcore::cpu::is_gemm_stream_form(*k) ? flashcore::cpu::gemm_stream_chunk(*k) : kKeyTile;
  const int64_t kc = (kt + k->k_align - 1) / k->k_align * k->k_align;
  const int64_t l = (cfg.seq_k + kc - 1) / kc * kc;  // whole key tiles
  const int64_t ldc = npanels * nr;
  Rng rng(seed);
  std::vector<Operands> ops(static_cast<size_t>(cfg.threads));
  for (Operands& o : ops) {
    o.a = random_array(k->ab, nblk * l * mr, 0.0f, 1.0f, rng);  // probabilities are >= 0
    o.b = random_array(k->ab, npanels * l * nr, -1.0f, 1.0f, rng);
    o.c = empty_array(k->acc, rows * ldc);
    o.pa = std::make_unique<Aligned>(o.a);
    o.pb = std::make_unique<Aligned>(o.b);
    o.pc = std::make_unique<Aligned>(o.c);
  }
  namespace cpu = flashcore::cpu;
  const int64_t as = k->a_layout == cpu::Layout::rows ? l : mr;  // A's leading dimension
  auto one = [&](Operands& o) {
    cpu::prepare_gemm(k->isa);
    const int64_t ea = int64_t(flashcore::dtype_size(k->ab));
    const unsigned char* a = o.pa->p;
    const unsigned char* b = o.pb->p;
    unsigned char* c = o.pc->p;
    const int64_t ec = int64_t(flashcore::dtype_size(k->acc));
    for (int64_t k0 = 0; k0 < l; k0 += kc)
      for (int64_t p = 0; p < npanels; ++p)
        for (int64_t rb = 0; rb < nblk; ++rb)
          k->fn(kc, a + (rb * l * mr + cpu::pack_index(k->a_layout, k0, 0, as)) * ea, as,
                b + (p * l * nr + cpu::pack_index(k->b_layout, k0, 0, nr)) * ea,
                c + (rb * mr * ldc + p * nr) * ec, ldc, k0 > 0);
  };
  const double flops1 = 2.0 * double(rows * l * d);  // one product, one thread
  const int reps = int(std::max(1.0, std::ceil(64e6 / flops1)));
  auto call = [&] {
#pragma omp parallel num_threads(cfg.threads)
    for (int rep = 0; rep < reps; ++rep) one(ops[size_t(omp_get_thread_num())]);
  };

  // Check thread 0's C against the same product in double.
  call();
  if (cfg.check) {
    Operands& o = ops[0];
    std::copy(o.pc->p, o.pc->p + o.c.nbytes(), o.c.bytes.begin());
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < d; ++j) {
        double ref = 0;
        for (int64_t kk = 0; kk < l; ++kk)
          ref += double(o.a.at((i / mr) * l * mr + cpu::pack_index(k->a_layout, kk, i % mr, as))) *
                 double(o.b.at((j / nr) * l * nr + cpu::pack_index(k->b_layout, kk, j % nr, nr)));
        const double diff = double(o.c.at(i * ldc + j)) - ref;
        num += diff * diff;
        den += ref * ref;
      }
    r.rel_err = std::sqrt(num / den);
    r.tol = tolerance(cfg);
    r.check_ok = !std::isnan(r.rel_err) && r.rel_err <= r.tol;
  }
  const Stats st = time_calls(call, cfg.iters);
  r.p50_us = st.p50_us;
  r.p90_us = st.p90_us;
  r.iters = st.iters;
  r.kernel = k->key;
  r.strategy_ran = "gemm-only";
  r.cfg.seq_k = l;
  r.cfg.seq_q = rows;
  const double flops = flops1 * reps * cfg.threads;
  const std::string isa = flashcore::cpu::isa_name(k->isa);
  r.gflops = flops / (r.p50_us * 1e-6) * 1e-9;
  if (const Peak* pk = peak_for_isa(isa, cfg.threads)) {
    r.peak_name = pk->name;
    r.peak_gflops = pk->gflops;
    r.pct_peak = 100.0 * r.gflops / pk->gflops;
  }
  r.note = "kc=" + std::to_string(kc) + ", " + std::to_string(reps) + " runs per call" +
           (cfg.threads > 1 ? ", one copy per thread" : "");
  // Paired (peak.hpp): this host's speed moves within minutes; 21 pairs for every row.
  r.pct_peak_paired = paired_pct(isa, cfg.threads, flops, r.p50_us * 1e-6, call, 21);
}

}  // namespace fcbench
