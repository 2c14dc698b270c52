// Rows that the key loop's softmax could not take exactly, computed again once the item's
// output is written, and written again: those with l = NaN, which a NaN score leaves and
// update sets where a row's max in use reached kExactFrom (parts/softmax.cuh). A plain loop
// over the row's visible keys by the row's quad (each lane its own columns of O):
// u_j = q . k_j in fp32, u* the u_j whose c u_j is largest (c: the scale in the log2 domain,
// descales folded in, any sign), P_j = 2^(c (u_j - u*)) (u_j - u* is exact near the max,
// whatever the scores' size), O = sum P_j v_j, l = sum P_j, and the row's max c u* as m + mlo
// (rounded product and its remainder, exact). A NaN score makes the row NaN (O, l, so lse);
// a row whose scores are all -inf after scaling gets l = 0 (O = 0, lse = -inf). Two passes
// over the keys, slow (no tensor cores, one row per quad), and only for such rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/parts/score_mod.cuh"

namespace flashcore::cuda {

// One row's inputs: Q's row, and the visible keys [kb, ke) of the item (or KV split).
template <typename T>
struct ExactRow {
  const T* q;
  int kb, ke;
};

// The keys' rows: K's and V's row of the sequence's key 0 at the item's KV head, their
// strides, D and Dv; c as above; v_scale multiplies O (fp8: v_descale). The recompute reads
// key j's rows through k_row(j) / v_row(j), which a KV cache's form (kvc_sm80.cuh's
// CacheExactKv: rows in pages) gives too.
template <typename T>
struct ExactKv {
  const T *k0, *v0;
  int64_t k_ss, v_ss;
  int d, dv;
  float c, v_scale;
  __device__ __forceinline__ const T* k_row(int j) const { return k0 + j * k_ss; }
  __device__ __forceinline__ const T* v_row(int j) const { return v0 + j * v_ss; }
};

// u = q . k in fp32, in order (k of q's type, or of an fp8 cache's).
template <typename TQ, typename TK>
__device__ __forceinline__ float row_dot(const TQ* q, const TK* k, int d) {
  float u = 0.f;
#pragma unroll 1
  for (int i = 0; i < d; ++i) u = fmaf(float(q[i]), float(k[i]), u);
  return u;
}

// The row's O (this lane's columns: o[df][e] is column 8 df + 2 t + e, the mma accumulator
// layout's) and its m, mlo, l, for scores that are a function of q . k and the key: z(u, j)
// the score in the log2 domain as hi + lo, dz(u, j, u', j') = z(u, j) - z(u', j') formed so
// that it is exact near the max where it can be. u* the u_j of the largest score (dz > 0),
// the row's max z(u*, j*) as m + mlo, P_j = 2^dz(u_j, j, u*, j*). Each lane of the row's
// quad computes the scores whole (no shuffles: the quads of a warp may diverge here, and
// ptxas gave the kernels' key loops spills for shuffles under a partial mask).
template <typename T, int kDF, class Z, class Dz, class Kv = ExactKv<T>>
__device__ __forceinline__ void recompute_row_z(float (&o)[kDF][2], float& m, float& mlo, float& l,
                                                const ExactRow<T>& row, const Kv& kv, int lane, const Z& z,
                                                const Dz& dz) {
  const int t = lane % 4;
  float best = 0.f;
  int bj = 0;
  bool have = false, nan = false;
#pragma unroll 1
  for (int j = row.kb; j < row.ke; ++j) {
    const float u = row_dot(row.q, kv.k_row(j), kv.d);
    if (isnan(u)) nan = true;
    else if (!have || dz(u, j, best, bj) > 0.f) best = u, bj = j, have = true;
  }
  const float2 top = have ? z(best, bj) : make_float2(-INFINITY, 0.f);
#pragma unroll
  for (int df = 0; df < kDF; ++df)
#pragma unroll
    for (int e = 0; e < 2; ++e) o[df][e] = nan ? NAN : 0.f;
  mlo = 0.f;
  if (nan || top.x == -INFINITY) {  // NaN row; or no finite score: O = 0, lse = -inf
    l = nan ? NAN : 0.f;
    m = -INFINITY;
    return;
  }
  float sum = 0.f;
#pragma unroll 1
  for (int j = row.kb; j < row.ke; ++j) {
    const float p = exp2f(dz(row_dot(row.q, kv.k_row(j), kv.d), j, best, bj));
    sum += p;
    const auto* vj = kv.v_row(j);  // (q's type, or an fp8 cache's)
#pragma unroll
    for (int df = 0; df < kDF; ++df) {
      const int col = df * 8 + 2 * t;
      if (col < kv.dv) {
        o[df][0] = fmaf(p, float(vj[col]), o[df][0]);
        if (col + 1 < kv.dv) o[df][1] = fmaf(p, float(vj[col + 1]), o[df][1]);
      }
    }
  }
#pragma unroll
  for (int df = 0; df < kDF; ++df)
#pragma unroll
    for (int e = 0; e < 2; ++e) o[df][e] *= kv.v_scale;
  l = sum;
  m = top.x;
  mlo = top.y;
}

// The plain scores: z = c u as the rounded product and its remainder (m + mlo = c u*
// exactly), dz = c (u - u'), exact near the max whatever the scores' size.
template <typename T, int kDF, class Kv = ExactKv<T>>
__device__ __forceinline__ void recompute_row(float (&o)[kDF][2], float& m, float& mlo, float& l,
                                              const ExactRow<T>& row, const Kv& kv, int lane) {
  const float c = kv.c;
  recompute_row_z<T, kDF>(
      o, m, mlo, l, row, kv, lane,
      [c](float u, int) {
        const float hi = c * u;
        return make_float2(hi, fmaf(c, u, -hi));
      },
      [c](float u, int, float u1, int) { return c * (u - u1); });
}

// The score variants' kernels: the transformed scores (parts/score_mod.cuh's exact form; the
// ALiBi distance of key j is |dist0 - j|, dist0 = i + Sk - Sq), and where sink is not null the
// sink joined to the row (O scaled, l = 1, m = lse log2 e).
template <typename T, int kDF, class Kv = ExactKv<T>>
__device__ __forceinline__ void recompute_row_variants(float (&o)[kDF][2], float& m, float& mlo, float& l,
                                                       const ExactRow<T>& row, const Kv& kv, int lane,
                                                       const FwdParams& p, float slope2, int dist0, const float* sink) {
  auto z = [&](float u, int j) { return transform_score_exact2(u, p, slope2, fabsf(float(dist0 - j))); };
  recompute_row_z<T, kDF>(o, m, mlo, l, row, kv, lane, z, [&](float u, int j, float u1, int j1) {
    return p.softcap_out > 0.f ? z(u, j).x - z(u1, j1).x  // bounded scores
                               : kv.c * (u - u1) - slope2 * (fabsf(float(dist0 - j)) - fabsf(float(dist0 - j1)));
  });
  if (sink != nullptr) {
    float lse;
    const float f = join_sink_log2(m, l, *sink, lse);
#pragma unroll
    for (int df = 0; df < kDF; ++df) o[df][0] *= f, o[df][1] *= f;
    m = lse * kLog2eF;
    mlo = 0.f;
    l = 1.f;
  }
}

}  // namespace flashcore::cuda
