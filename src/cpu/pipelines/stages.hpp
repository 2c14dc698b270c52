// The two GEMM stages every CPU pipeline runs over a query block and a key tile
// (stage 1: scores, stage 2: P V), and P V by the row ops for the decode path.
#pragma once

#include <cstdint>

#include "cpu/pipelines/geometry.hpp"
#include "cpu/pipelines/pack.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu {

// A run of bytes brought into L2 by software prefetches, `lines` cache lines after each
// micro-kernel call of the stages it is given to (gemm_chain: the next K2 tile of a
// pre-packed B and C, during this tile's GEMMs). The pre-packed tiles come from memory at
// every call (16 MiB at K2 = 8192), and the hardware prefetchers left the kernels waiting
// for them. Measured: docs/results/cpu-pipelines-2026-11-29.md.
struct Prefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  int64_t lines = 0;
  void step() {
    for (int64_t i = 0; i < lines && p < end; ++i, p += 64) __builtin_prefetch(p, 0, 2);
  }
};

// Both stages keep one B panel resident in L1 while the A operand streams past it
// (B-stationary): per k step a kernel reads NR elements of B but only MR of A, so B is the
// stream worth keeping. The k range is cut into chunks of kb (g.kb) rows so that a B panel
// chunk (kb x NR) takes at most l1_panel_bytes() of L1D. It measured equal to the
// A-stationary order within the noise and is kept for the smaller L1 footprint
// (docs/results/cpu-pipelines-2026-11-29.md).
//
// Operand addresses use the kernel's layouts (ukernel.hpp): k offsets are multiples of
// k_align (even for kpairs), so a chunk starts on a whole pair row.
//
// stage 1: T[kc][mq] (row stride ldt) = X blocks x Y panels ([kp][nr] in layout pb). Key
// block r (mr keys) of X starts at element r * xbs of x and is read with A stride xs, in
// layout pa: separate [kp][mr] blocks (xbs = kp * mr, xs = mr for k-major), or one wide
// panel of ld columns read in place (xbs = pack_index(pa, 0, mr, ld), xs = ld).
// Columns past the last whole panel (a trimmed block, live_rows) are set to 0.
// f16_out, when given (an acc-f16 kernel, kp within one call: gemm_call's step): T is not
// written; each C tile goes from the kernel's fp16 tile straight into the second GEMM's A
// operand, f16_out in the kernel's A layout (leading dimension ldo), by vec->f16_tile_as.
// The same fp16 values as T's fp32 converted back, without the T pass and the fp16 tile's
// widening.
// mx, when given: the column max of T over the whole panels folded into mx[0, done) block
// by block, each right after its last k chunk while it is in L1 (col_max over the finished
// tile read it back from L2).
// Measured (f16_out, mx): docs/results/cpu-pipelines-2026-11-29.md.
void stage1(const Geometry& g, int64_t kp, int64_t kc, const char* x, int64_t xbs, int64_t xs,
            const char* ypanels, float* t, int64_t ldt, float* mx = nullptr,
            Prefetch* pf = nullptr, uint16_t* f16_out = nullptr, int64_t ldo = 0);

// stage 2: O[mq][dvp] += P^T x V panels (rows [j0, j0+kc) of each [rp][nr] panel). P holds
// kc keys x mq queries in layout pa with leading dimension ldp (see softmax_block). When mq
// is not a multiple of MR, the last row block reads P and writes O up to the next multiple
// (padding the caller provides), or runs g's tail kernel if its rows fit that.
// One row block (mq <= MR) reads each V panel once: the kernel's stream form, where it has
// one, runs each panel's k range in chunks of gemm_stream_chunk (its A strip stays in L1).
void stage2(const Geometry& g, int64_t kc, const char* p, int64_t ldp, const char* vpanels,
            int64_t rp, int64_t j0, int64_t dvp, float* o, Prefetch* pf = nullptr);

// O[mq][ldo] (rows [0, mq)) += P[kc][ldp]^T (columns [0, mq)) x rows [j0, j0+kc) of V,
// by the row ops, key tile by key tile. finite_only: V's NaN / Inf elements read as 0 (the
// caller adds them where a row sees them: attention's masked keys). V: Rows or PagedRows.
template <class R>
void rows_pv(const Geometry& g, const RowOps& ops, int64_t kc, const float* P, int64_t ldp,
             int64_t mq, const R& v, int64_t j0, int64_t dv, float* O, int64_t ldo,
             bool finite_only = false);

}  // namespace flashcore::cpu
