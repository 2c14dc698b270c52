// softmax_v on the CPU: O = softmax(scale * S) V for given scores S, through the same
// strategies as attention (softmax_block) with the scores read instead of computed.
#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "core/exp2.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/geometry.hpp"
#include "cpu/pipelines/pack.hpp"
#include "cpu/pipelines/packed.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "cpu/pipelines/stages.hpp"
#include "cpu/pipelines/strategies.hpp"

namespace flashcore::cpu {
namespace {

// V packed for the GEMM path: [dvp / NR] panels of [lp][NR] (the kernel's B layout and
// operand dtype), keys padded to lp, columns to dvp; zeros in the padding.
struct VLayout {
  int64_t lp, dvp;
  size_t bytes;
};
VLayout v_layout(const GemmUkernel& k, int64_t l, int64_t d) {
  VLayout v;
  v.lp = round_up(std::max<int64_t>(l, 1), key_align_of(k));
  v.dvp = round_up(d, k.nr);
  v.bytes = size_t(v.lp * v.dvp) * dtype_size(k.ab);
  return v;
}

// Packs V into `dst` (v_layout), the key blocks split over the threads.
void pack_v(const core::SoftmaxVProblem& p, const GemmUkernel& k, const VLayout& lay, char* dst,
            int nthreads) {
  const Rows vrows{p.v, p.v_sl, p.dtype};
  const int64_t nblk = lay.lp / k.mr;
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> rowbuf(static_cast<size_t>(lay.dvp + 64));
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t b0 = nblk * id / nt, b1 = nblk * (id + 1) / nt;
    pack_panels(vrows, p.l, p.d, lay.lp, k.nr, b0 * k.mr, b1 * k.mr, dst, k.ab, k.b_layout,
                rowbuf.data());
  }
}

}  // namespace

// Few rows (M <= kDecodeBlockRows: one block) take the row ops: P V by axpy straight from
// V's rows, so V is read once and never packed (packing V, 32 MiB at L = 32768, d = 256,
// took more time than the GEMM: docs/results/cpu-pipelines-2026-11-29.md).
// More rows pack V once per call and share it across the row blocks of every thread. A
// pre-packed V always takes the GEMM path (seed 000's pipeline: its V is packed before the
// timed calls).
void softmax_v(const core::SoftmaxVProblem& p, const PackedOperands::State* packed,
               PhaseTimes* times) {
  const CpuConfig cfg = select_kernels(p.dtype, packed ? packed->kernel->key : p.impl);
  const bool rows_mode = packed == nullptr && p.m <= kDecodeBlockRows && !gemm_forced(p.impl);
  const Geometry g = rows_mode ? make_rows_geometry(cfg, p.m) : make_geometry(cfg, p.m, false);
  const Strategy strategy = resolve(p.strategy, p.m, p.l, p.d, p.dtype);
  const int nthreads = resolve_threads(p.threads);
  const float c = p.scale * core::kLog2e;
  const VLayout vl = v_layout(*g.gk, p.l, p.d);
  const int64_t lp = rows_mode ? round_up(std::max<int64_t>(p.l, 1), g.key_align) : vl.lp;
  const int64_t dvp = round_up(p.d, g.nr);
  const bool timed = times != nullptr;
  std::vector<Phases> phases(static_cast<size_t>(nthreads));
  const char* vpack = packed ? packed->data : nullptr;
  if (!rows_mode && !packed) {  // pack into this thread's reused buffer, then as if pre-packed
    Lap lap(timed);
    char* buf = pack_slot(0, vl.bytes);
    pack_v(p, *g.gk, vl, buf, nthreads);
    vpack = buf;
    lap.to(phases[0].pack);
  }
  const int64_t ses = int64_t(dtype_size(p.s_dtype));
  const int64_t oes = int64_t(dtype_size(p.dtype));
  const int64_t nblocks = (p.m + g.mq - 1) / g.mq;
  // Fewer row blocks than threads (the seeds' M = 12): split the keys of each block into
  // parts run by different threads and merged as attention's split-KV does.
  const int64_t ktiles = (lp + g.kc - 1) / g.kc;
  const int64_t nsplit = nblocks < nthreads ? std::min<int64_t>((nthreads + nblocks - 1) / nblocks, ktiles) : 1;
  std::vector<float> split_o(static_cast<size_t>(nsplit > 1 ? nblocks * nsplit * g.mq * p.d : 0));
  std::vector<float> split_ml(static_cast<size_t>(nsplit > 1 ? nblocks * nsplit * g.mq * 2 : 0));
  auto block_out = [&](int64_t qb) {
    const int64_t i0 = qb * g.mq;
    return BlockOut{static_cast<char*>(p.o) + i0 * p.o_sm * oes, p.o_sm, p.dtype, std::min(g.mq, p.m - i0), p.d,
                    nullptr, g.mq};
  };
#pragma omp parallel for schedule(dynamic) num_threads(nthreads)
  for (int64_t it2 = 0; it2 < nblocks * nsplit; ++it2) {
    const int64_t qb = it2 / nsplit, part = it2 % nsplit;
    Phases& ph = phases[size_t(omp_get_thread_num())];
    const int64_t i0 = qb * g.mq, rows = std::min(g.mq, p.m - i0);
    // Scores tile: T[k][i] = S[i0 + i][j0 + k] (as float; the scale is folded into c).
    // Row by row: each score row is read in order and written down a column of T (in L1);
    // key by key, the first version, read the block's rows in step, one element of each
    // per key, at a sixth of the call (docs/results/cpu-pipelines-2026-11-29.md).
    auto scores = [&](int64_t j0, int64_t kc, float* t, float*, bool negate, Phases& phx, Lap& lapx) {
      const int64_t kv = std::max<int64_t>(0, std::min(kc, p.l - j0));  // keys before L
      // Rows [0, rdone) x keys [0, kdone) by the transposes below, the rest by the
      // element loop after them.
      int64_t rdone = 0, kdone = 0;
#if defined(__SSE2__)
      // Contiguous score rows, 4 valid rows at a time: 4 x 4 register transposes, one 16-byte
      // store per 4 queries of a key (the element-wise column writes took a fifth of the
      // call with V pre-packed).
      if (p.s_sl == 1) {
        rdone = rows / 4 * 4;
        kdone = kv / 4 * 4;
        for (int64_t i = 0; i < rdone; i += 4) {
          const int64_t base = (i0 + i) * p.s_sm + j0;
          auto row4 = [&](int64_t q, int64_t k) {
            if (p.s_dtype == DType::i32)
              return _mm_cvtepi32_ps(_mm_loadu_si128(
                  reinterpret_cast<const __m128i*>(static_cast<const int32_t*>(p.s) + base + q * p.s_sm + k)));
            return _mm_loadu_ps(static_cast<const float*>(p.s) + base + q * p.s_sm + k);
          };
          for (int64_t k = 0; k < kdone; k += 4) {
            __m128 r0 = row4(0, k), r1 = row4(1, k), r2 = row4(2, k), r3 = row4(3, k);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps(t + k * g.mq + i, r0);
            _mm_storeu_ps(t + (k + 1) * g.mq + i, r1);
            _mm_storeu_ps(t + (k + 2) * g.mq + i, r2);
            _mm_storeu_ps(t + (k + 3) * g.mq + i, r3);
          }
        }
      }
#endif
      for (int64_t i = 0; i < g.mq; ++i) {
        float* col = t + i;
        if (i >= rows) {
          for (int64_t k = 0; k < kv; ++k) col[k * g.mq] = 0.0f;
          continue;
        }
        const int64_t k0 = i < rdone ? kdone : 0;
        const int64_t base = (i0 + i) * p.s_sm + j0 * p.s_sl;
        if (p.s_dtype == DType::i32) {
          const int32_t* src = static_cast<const int32_t*>(p.s) + base;
          for (int64_t k = k0; k < kv; ++k) col[k * g.mq] = float(src[k * p.s_sl]);
        } else {
          const float* src = static_cast<const float*>(p.s) + base;
          for (int64_t k = k0; k < kv; ++k) col[k * g.mq] = src[k * p.s_sl];
        }
      }
      if (negate) negate_scores(t, kv * g.mq);
      for (int64_t k = kv; k < kc; ++k) std::fill(t + k * g.mq, t + (k + 1) * g.mq, kNegInf);
      lapx.to(phx.max_find);
      return false;
    };
    (void)ses;
    BlockOut out = block_out(qb);
    int64_t key_lo = 0, key_hi = p.l;
    if (nsplit > 1) {  // this part's key tiles (tile-aligned: no key is seen by two parts)
      key_lo = std::min(p.l, ktiles * part / nsplit * g.kc);
      key_hi = std::min(p.l, ktiles * (part + 1) / nsplit * g.kc);
      if (key_hi <= key_lo) key_lo = key_hi = 0;
      out = BlockOut{split_o.data() + it2 * g.mq * p.d, p.d, DType::f32, rows, p.d, nullptr, g.mq};
      out.ml = split_ml.data() + it2 * g.mq * 2;
    }
    auto pv = [&](int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) {
      if (rows_mode)
        rows_pv(g, *cfg.rows, kc, reinterpret_cast<const float*>(P), g.mq, g.mq, Rows{p.v, p.v_sl, p.dtype},
                j0, p.d, O, dvp);
      else
        stage2(g, kc, P, ldp, vpack, lp, j0, dvp, O);
    };
    softmax_block(g, strategy, p.exp2, c, p.scale, scores, key_lo, key_hi, pv, lp, dvp, out, timed, ph);
  }
  if (nsplit > 1) {
    Lap lap(timed);
    merge_splits(nblocks, nsplit, g.mq, p.d, split_o, split_ml, block_out, nthreads);
    lap.to(phases[0].normalize);
  }
  report(times, phases, g.key, strategy);
}

std::shared_ptr<const PackedOperands::State> pack_softmax_v(const core::SoftmaxVProblem& p) {
  const GemmUkernel& k = *select_kernels(p.dtype, p.impl).gemm;
  const VLayout lay = v_layout(k, p.l, p.d);
  auto st = std::make_shared<PackedOperands::State>(PackedOperands::State::Op::softmax_v, p.dtype,
                                                    &k, p.l, p.d, 0, lay.bytes);
  pack_v(p, k, lay, st->data, resolve_threads(p.threads));
  return st;
}

}  // namespace flashcore::cpu
