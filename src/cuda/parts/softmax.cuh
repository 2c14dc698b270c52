// Online softmax on mma.sync accumulator fragments (FlashAttention-2's running max with
// rescale). Each lane owns 2 rows per 16-row fragment (g and g+8, g = lane/4) and, per
// 8-key fragment, 2 columns; a row is spread over the 4 lanes of a quad, so row maxima
// need two xor-shuffles. Row sums stay per-lane until the epilogue (one reduction, not
// one per tile). The softmax scale is folded into the exponent: with e = scale * log2 e
// (> 0), exp(scale * s) = 2^(s e), the running max m' is kept in that log2 domain and
// P = 2^(fma(s, e, -m')) costs one FFMA and one MUFU per score. Masked scores are -inf,
// whose 2^ is exactly 0.
//
// Lazy rescaling: the max in use moves only when a tile's row max passes it by more than
// kSlack (log2 units), so P may reach 2^kSlack and O is rescaled (kDF * 4 FMULs per row
// fragment) a few times per row instead of on most tiles (with 16 rows per warp, some row's
// max moves on nearly every tile of a long sequence). Exact: O and l share the max in use,
// which O / l and lse = m + log2 l take as it is; only P's range grows.
//
// Large scores: m' is s e rounded to fp32, so the row's own maximum gets P = 2^(s e - m'),
// the rounding error of m' (a constant of the row: it cancels in O / l and in lse = m' +
// log2 l, and the KV-split merge uses m' as it is). Past |m'| ~ 2^24 that error passes the
// P operand's range (fp8's 448 first, then f16's, then exp2's: 2^128 at |m'| ~ 2^31), and
// the row came out as inf, NaN or fully masked. An exact form needs s - sh (a raw shift)
// before the product with e, one more instruction per score, and the state to carry it:
// the key loops have neither the registers nor the instructions to spare. So update marks a
// row whose max in use reaches kExactFrom (scaled logits past ~7e5: no ordinary input) by
// setting its l to NaN, as a NaN score does, and once the item's output is written every
// row with l NaN is computed again, exactly, by a plain loop over its keys
// (parts/exact_rows.cuh): slow, and only for such rows. Ordinary rows pay a compare and a
// select per row where update runs.
#pragma once

#include <cmath>

#include "cuda/common/ptx.cuh"

namespace flashcore::cuda {

// The lazy-rescale slack for 16-bit P (fp8 has its own, kFp8Slack in parts/fp8.hpp).
constexpr int kSoftmaxSlack = 8;
// Rows whose max in use reaches this (log2 domain) are computed again exactly (above). Below
// it the rounding error of m' is at most 2^-4: P of the row's max within 2^+-0.05 of its
// bound, fp8's 2^2 * 2^6 * 2^0.05 < 448.
constexpr float kExactFrom = 0x1p20f;

// One row's step of the lazy rule (OnlineSoftmax::update; the keys-as-M loop of
// kernels/sm80/keys_as_m.cuh runs it per column): mx is the tile's row max times e. The max
// in use m moves only past the slack (-inf + kSlack is -inf: a row's first visible key
// always moves it); corr gets the factor that rescales the old O row. Returns the exponent
// base: m, or 0 for a row with no visible key yet (m = -inf), so that 2^(-inf - (-inf))
// never makes a NaN (its P and corr are then 0).
template <int kSlack = kSoftmaxSlack>
__device__ __forceinline__ float softmax_move_max(float& m, float mx, float& corr) {
  mx = mx > m + float(kSlack) ? mx : m;
  const float base = mx == -INFINITY ? 0.f : mx;
  corr = ptx::exp2_fast(m - base);
  m = mx;
  return base;
}

// A row's running sum after a tile whose P sum to `sum` against `base`: NaN once the max in
// use reaches kExactFrom (the row is computed again, above).
__device__ __forceinline__ float softmax_next_l(float l, float corr, float sum, float base) {
  return fabsf(base) < kExactFrom ? l * corr + sum : NAN;
}

template <int kRows /* 2 * fragments per warp */>
struct OnlineSoftmax {
  float m[kRows];    // running max of s e (log2 domain); -inf until a visible key is seen
  float l[kRows];    // running sum of 2^(s' - m), this lane's columns only; NaN: see above
  float mlo[kRows];  // after finish: the low part of the row's max (0 but for recomputed rows)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
    }
  }

  // s[r/2][nf][..]: the tile's raw scores, rows r = 2*mi + half; e > 0. Overwrites s
  // with P = 2^(s e - m_new) and returns in corr[] the factor that rescales the old O rows.
  // kPLog2 != 0: P and l come out scaled by 2^kPLog2 (folded into the exponent, free), which
  // O / l does not see; lse then needs m - kPLog2 (the fp8 path: P stored as e4m3(2^kPLog2 P)).
  // P <= 2^(kPLog2 + kSlack): 256 for both the 16-bit types and fp8. A row whose max in use
  // reaches kExactFrom gets l = NaN (it is computed again after the epilogue).
  // kRowOff: row r's scores are s e + ro[r] (log2 units; the score variants' ALiBi rows,
  // parts/score_mod.cuh), the offset taken once per row instead of once per score; it may
  // differ between the quad's lanes (each lane's max takes its own before the shuffles).
  template <int kMI, int kNF, int kPLog2 = 0, int kSlack = kSoftmaxSlack, bool kRowOff = false>
  __device__ __forceinline__ void update(float (&s)[kMI][kNF][4], float e, float (&corr)[kRows],
                                         const float* ro = nullptr) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 2 * mi + half;
        float mx = -INFINITY;
#pragma unroll
        for (int nf = 0; nf < kNF; ++nf) mx = fmaxf(mx, fmaxf(s[mi][nf][2 * half], s[mi][nf][2 * half + 1]));
        if constexpr (kRowOff) mx = fmaf(mx, e, ro[r]);  // before the quad's max: ro may differ by lane
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = softmax_move_max<kSlack>(m[r], kRowOff ? mx : mx * e, corr[r]);
        const float pbase = base - float(kPLog2), nb = kRowOff ? ro[r] - pbase : -pbase;
        float sum = 0.f;
#pragma unroll
        for (int nf = 0; nf < kNF; ++nf) {
          const float p0 = ptx::exp2_fast(fmaf(s[mi][nf][2 * half], e, nb));
          const float p1 = ptx::exp2_fast(fmaf(s[mi][nf][2 * half + 1], e, nb));
          s[mi][nf][2 * half] = p0;
          s[mi][nf][2 * half + 1] = p1;
          sum += p0 + p1;
        }
        l[r] = softmax_next_l(l[r], corr[r], sum, base);
      }
    }
  }

  // The speculative form of update, for one row fragment (kMI = 1) of a tile after the
  // rows' first: P = 2^(s e - m) against the max in use, handed out kChunk fragments at a
  // time to emit(p, c) (p holds fragments [c kChunk, c kChunk + kChunk) of the tile; the
  // caller packs them into a P operand), s left as it is. Accepted, for the whole warp,
  // when every lane's partial row sums are at most 2^(kPLog2 + kSlack): then so is every
  // P, so s e - m <= kSlack (up to the rounding at the bound), update would have kept the
  // max, and the P and l computed here are update's (same FFMA, same MUFU, same sum order;
  // corr = 1; kChord: half of them by the chord, speculate below); l is updated and true
  // returned. Otherwise (a max moved past the slack, a
  // row with no visible key yet: m = -inf gives inf or NaN, NaN scores) nothing is
  // changed and the caller runs update.
  // What it saves is update's max pass: one FMNMX per score and the quad shuffles.
  // kRowOff, ro: as update's.
  template <int kNF, int kChunk, int kPLog2 = 0, int kSlack = kSoftmaxSlack, bool kChord = false,
            bool kRowOff = false, typename Emit>
  __device__ __forceinline__ bool try_update(const float (&s)[1][kNF][4], float e, Emit&& emit,
                                             const float* ro = nullptr) {
    static_assert(kNF % kChunk == 0, "whole chunks");
    static_assert(!kChord || kPLog2 > 0, "the chord exponentials are for fp8's P");
    float sum0 = 0.f, sum1 = 0.f;
    speculate<kNF, kChunk, kPLog2, kChord, kRowOff>(s, e, emit, sum0, sum1, ro);
    constexpr float kBound = float(1 << (kPLog2 + kSlack));
    const bool ok = sum0 <= kBound && sum1 <= kBound;  // false for NaN
    if (!__all_sync(0xffffffffu, ok)) return false;
    l[0] += sum0;
    l[1] += sum1;
    return true;
  }

  // try_update's exponentials and partial row sums. kChord (fp8 kernels' second compiled
  // form, which the launcher takes for Exp2Mode::fast without lse: FwdParams::exp_chord):
  // every other fragment's by ptx::exp2_chord on the ALU instead of MUFU.EX2
  // (H200, e4m3 hd128 grid, against the exact form: 1.00-1.07x, S4096 1.07x, S16384 1.06x;
  // all fragments by the chord gained less; docs/results/cuda-sm90-fp8-2026-11-22.md,
  // 2026-11-27, c41386a). The sums then carry the chord's error, so lse would too: the backend
  // takes this only without lse.
  template <int kNF, int kChunk, int kPLog2, bool kChord, bool kRowOff, typename Emit>
  __device__ __forceinline__ void speculate(const float (&s)[1][kNF][4], float e, Emit& emit, float& sum0,
                                            float& sum1, const float* ro) {
    float pb0 = m[0] - float(kPLog2), pb1 = m[1] - float(kPLog2);
    if constexpr (kRowOff) {
      pb0 -= ro[0];
      pb1 -= ro[1];
    }
    const float cb0 = ptx::kChordShift - pb0, cb1 = ptx::kChordShift - pb1;
#pragma unroll
    for (int c = 0; c < kNF / kChunk; ++c) {
      float p[kNF][4];  // only this chunk's fragments are set (and live)
#pragma unroll
      for (int nf = c * kChunk; nf < c * kChunk + kChunk; ++nf) {
        if (kChord && nf % 2 == 0) {
          p[nf][0] = ptx::exp2_chord(fmaf(s[0][nf][0], e, cb0));
          p[nf][1] = ptx::exp2_chord(fmaf(s[0][nf][1], e, cb0));
          p[nf][2] = ptx::exp2_chord(fmaf(s[0][nf][2], e, cb1));
          p[nf][3] = ptx::exp2_chord(fmaf(s[0][nf][3], e, cb1));
        } else {
          p[nf][0] = ptx::exp2_fast(fmaf(s[0][nf][0], e, -pb0));
          p[nf][1] = ptx::exp2_fast(fmaf(s[0][nf][1], e, -pb0));
          p[nf][2] = ptx::exp2_fast(fmaf(s[0][nf][2], e, -pb1));
          p[nf][3] = ptx::exp2_fast(fmaf(s[0][nf][3], e, -pb1));
        }
        sum0 += p[nf][0] + p[nf][1];
        sum1 += p[nf][2] + p[nf][3];
      }
      emit(p, c);
    }
  }

  // For the epilogue: full row sums (quad reduction); m less plog2 (the fp8 kernels' P
  // scale, which l carries and lse must not), mlo 0.
  __device__ __forceinline__ void finish(int plog2 = 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      m[r] -= float(plog2);
      mlo[r] = 0.f;
    }
  }
};

// O *= corr per row (corr from OnlineSoftmax::update), skipped when no row of the warp
// moved its max (after the first tiles it rarely does: kDF * 4 FMULs per row fragment).
template <int kMI, int kDF>
__device__ __forceinline__ void rescale_rows(float (&acc)[kMI][kDF][4], const float (&corr)[2 * kMI]) {
  bool moved = false;
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) moved |= corr[r] != 1.f;
  if (!__any_sync(0xffffffffu, moved)) return;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int df = 0; df < kDF; ++df) {
      acc[mi][df][0] *= corr[2 * mi];
      acc[mi][df][1] *= corr[2 * mi];
      acc[mi][df][2] *= corr[2 * mi + 1];
      acc[mi][df][3] *= corr[2 * mi + 1];
    }
}

// Rows with no finite score (no visible key, or only -inf scores: l = 0) write O = 0; their
// accumulators may hold 0 * Inf from V. Runs only where a row of the warp has l = 0.
template <int kMI, int kDF>
__device__ __forceinline__ void zero_empty_rows(float (&acc)[kMI][kDF][4], const float (&l)[2 * kMI]) {
  bool empty = false;
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) empty |= l[r] == 0.f;
  if (!__any_sync(0xffffffffu, empty)) return;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int df = 0; df < kDF; ++df)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (l[2 * mi + i / 2] == 0.f) acc[mi][df][i] = 0.f;
}

}  // namespace flashcore::cuda
