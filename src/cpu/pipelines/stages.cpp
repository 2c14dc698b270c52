#include "cpu/pipelines/stages.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.hpp"

namespace flashcore::cpu {
namespace {

// One micro-kernel call into an fp32 C tile. A kernel that accumulates in fp16 (acc f16:
// seed 000's noepi kernels, chosen only through `impl`) writes an fp16 tile, k chunk by k
// chunk of at most kKeyTile, and each chunk is added into the fp32 tile (by the kernel's
// fp32-C form where it has one, gemm_c32.inc): fp16 sums stay within 256 products (no
// overflow while |A B| terms stay under 255), fp32 across chunks.
// k: the kernel when not g's own (its tail kernel: same NR, dtypes and layouts).
void gemm_call(const Geometry& g, int64_t kc, const char* a, int64_t as, const char* b, float* c,
               int64_t ldc, int accumulate, const GemmUkernel* k = nullptr) {
  if (k == nullptr) k = g.gk;
  if (k->acc == DType::f32) {
    k->fn(kc, a, as, b, c, ldc, accumulate);
    return;
  }
  const int64_t step = round_up(kKeyTile, k->k_align);
  // The kernel's fp32-C form where it has one: each chunk's sums added straight into C.
  if (const GemmFn c32 = k == g.gk ? g.c32 : g.tail_c32) {
    for (int64_t k0 = 0; k0 < kc; k0 += step)
      c32(std::min(step, kc - k0), a + pack_index(g.pa, k0, 0, as) * g.es, as,
          b + pack_index(g.pb, k0, 0, g.nr) * g.es, c, ldc, accumulate || k0 > 0);
    return;
  }
  thread_local std::vector<uint16_t> tile;
  tile.resize(static_cast<size_t>(k->mr * g.nr));
  for (int64_t k0 = 0; k0 < kc; k0 += step) {
    k->fn(std::min(step, kc - k0), a + pack_index(g.pa, k0, 0, as) * g.es, as,
          b + pack_index(g.pb, k0, 0, g.nr) * g.es, tile.data(), g.nr, 0);
    g.vec->add_f16_tile(k->mr, g.nr, tile.data(), c, ldc, accumulate || k0 > 0);
  }
}

// The k chunk for a range of k rows: at most kb (g.kb), the chunks of equal size (a
// multiple of k_align), so that no short tail chunk pays a C-tile load and store for a few
// k steps (gemm_chain's 264-key tile was 128 + 128 + 8 with kb = 128).
int64_t chunk_for(const Geometry& g, int64_t k, int64_t kb = 0) {
  if (kb == 0) kb = g.kb;
  const int64_t n = (k + kb - 1) / kb;
  return std::max<int64_t>(1, round_up((k + n - 1) / n, g.gk->k_align));
}

}  // namespace

void stage1(const Geometry& g, int64_t kp, int64_t kc, const char* x, int64_t xbs, int64_t xs,
            const char* ypanels, float* t, int64_t ldt, float* mx, Prefetch* pf, uint16_t* f16_out,
            int64_t ldo) {
  const int64_t done = kp == 0 ? 0 : g.mq / g.nr * g.nr;  // kp = 0 (gemm_chain K1 = 0): T = 0
  if (done < g.mq)
    for (int64_t k = 0; k < kc; ++k) std::fill(t + k * ldt + done, t + k * ldt + g.mq, 0.0f);
  if (kp == 0) return;
  prepare_gemm(g.gk->isa);
  // The kernel's panel form where the whole k range fits it and the X blocks are one run of
  // rows (block r + 1 right after block r): each Y panel stays in the unit for the whole
  // tile. Measured: docs/results/cpu-pipelines-2026-11-29.md.
  if (g.panel != nullptr && kp <= g.panel->max_k && g.pa == Layout::rows && xbs == g.mr * xs &&
      kc % 16 == 0) {
    for (int64_t q = 0; q < g.mq / g.nr; ++q) {
      g.panel->fn(kp, x, xs, kc, ypanels + q * kp * g.nr * g.es, t + q * g.nr, ldt,
                  mx != nullptr ? mx + q * g.nr : nullptr);
      if (pf != nullptr) pf->step();
    }
    return;
  }
  if (f16_out != nullptr) {
    thread_local std::vector<uint16_t> tile;
    tile.resize(static_cast<size_t>(g.mr * g.nr));
    for (int64_t q = 0; q < g.mq / g.nr; ++q)
      for (int64_t r = 0; r < kc / g.mr; ++r) {
        g.gk->fn(kp, x + r * xbs * g.es, xs, ypanels + q * kp * g.nr * g.es, tile.data(), g.nr, 0);
        g.vec->f16_tile_as(g.mr, g.nr, tile.data(), f16_out + pack_index(g.pa, r * g.mr, q * g.nr, ldo),
                           ldo, g.pa);
        if (pf != nullptr) pf->step();
      }
    return;
  }
  const int64_t kb = chunk_for(g, kp);
  for (int64_t k0 = 0; k0 < kp; k0 += kb) {
    const int64_t kl = std::min(kb, kp - k0);
    const bool last = k0 + kl == kp;
    for (int64_t q = 0; q < g.mq / g.nr; ++q)
      for (int64_t r = 0; r < kc / g.mr; ++r) {
        float* c = t + r * g.mr * ldt + q * g.nr;
        gemm_call(g, kl, x + (r * xbs + pack_index(g.pa, k0, 0, xs)) * g.es, xs,
                  ypanels + (q * kp * g.nr + pack_index(g.pb, k0, 0, g.nr)) * g.es, c, ldt, k0 > 0);
        if (pf != nullptr) pf->step();
        if (mx != nullptr && last) g.vec->col_max(g.mr, g.nr, c, ldt, mx + q * g.nr);
      }
  }
}

void stage2(const Geometry& g, int64_t kc, const char* p, int64_t ldp, const char* vpanels,
            int64_t rp, int64_t j0, int64_t dvp, float* o, Prefetch* pf) {
  const bool once = g.stream != nullptr && g.mq <= g.mr;
  const int64_t kb = once ? chunk_for(g, kc, gemm_stream_chunk(*g.stream)) : chunk_for(g, kc);
  prepare_gemm(g.gk->isa);
  for (int64_t k0 = 0; k0 < kc; k0 += kb) {
    const int64_t kl = std::min(kb, kc - k0);
    // Many panels (gemm_chain's N = 256, D = 256): row blocks outer, so that a block's
    // strip of P (MR columns of kc rows, one strided piece per row) stays in L1 while the
    // contiguous panels stream past it; with the panels outer it came back from L2 once
    // per panel. At 2-4 panels (D64, D128) the panels-outer order stays. Measured:
    // docs/results/cpu-pipelines-2026-11-29.md.
    const bool rows_outer = dvp / g.nr >= 8;
    const int64_t nc = dvp / g.nr, ni = (g.mq + g.mr - 1) / g.mr;
    for (int64_t u = 0; u < nc * ni; ++u) {
      const int64_t c = rows_outer ? u % nc : u / ni, i0 = (rows_outer ? u / nc : u % ni) * g.mr;
      const bool tail = g.tail != nullptr && g.mq - i0 <= g.tail->mr;
      gemm_call(g, kl, p + pack_index(g.pa, k0, i0, ldp) * g.es, ldp,
                vpanels + (c * rp * g.nr + pack_index(g.pb, j0 + k0, 0, g.nr)) * g.es,
                o + i0 * dvp + c * g.nr, dvp, 1, tail ? g.tail : once ? g.stream : nullptr);
      if (pf != nullptr) pf->step();
    }
  }
}

template <class R>
void rows_pv(const Geometry& g, const RowOps& ops, int64_t kc, const float* P, int64_t ldp,
             int64_t mq, const R& v, int64_t j0, int64_t dv, float* O, int64_t ldo,
             bool finite_only) {
  thread_local std::vector<float> vconv;
  for (int64_t k0 = 0; k0 < kc; k0 += g.kc) {
    const int64_t n = std::min(g.kc, kc - k0);
    const float* vr = nullptr;  // converted rows, stride dv
    if (finite_only) {  // a converted copy (fp32 rows too), non-finite elements zeroed
      vconv.resize(static_cast<size_t>(n * dv));
      for (int64_t k = 0; k < n; ++k) core::convert_row(v.row(j0 + k0 + k), v.dtype, dv, vconv.data() + k * dv);
      for (float& x : vconv)
        if (!std::isfinite(x)) x = 0.0f;
      vr = vconv.data();
    } else if (const RowOps::Axpy16 axpy16 = ops.axpy16(v.dtype); axpy16 != nullptr || v.dtype == DType::f32) {
      // fp32 and 16-bit rows read in place (16-bit ones widened in registers), a strided run
      // (a page's rows) per call
      for (int64_t k = k0, m = 0; k < k0 + n; k += m) {
        m = v.run_length(j0 + k, k0 + n - k);
        if (axpy16 != nullptr)
          axpy16(m, mq, P + k * ldp, ldp, static_cast<const uint16_t*>(v.row(j0 + k)), v.stride, dv, O, ldo);
        else
          ops.axpy(m, mq, P + k * ldp, ldp, static_cast<const float*>(v.row(j0 + k)), v.stride, dv, O, ldo);
      }
      continue;
    } else {
      vr = f32_rows(v, j0 + k0, n, dv, vconv);
    }
    ops.axpy(n, mq, P + k0 * ldp, ldp, vr, dv, dv, O, ldo);
  }
}

template void rows_pv<Rows>(const Geometry&, const RowOps&, int64_t, const float*, int64_t, int64_t,
                            const Rows&, int64_t, int64_t, float*, int64_t, bool);
template void rows_pv<PagedRows>(const Geometry&, const RowOps&, int64_t, const float*, int64_t, int64_t,
                                 const PagedRows&, int64_t, int64_t, float*, int64_t, bool);

}  // namespace flashcore::cpu
