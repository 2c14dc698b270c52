// The element-wise steps of the CPU backward between its GEMMs (bwd_ops.cpp): portable C++
// written for auto-vectorization, compiled per x86-64 ISA level (core/clones.hpp).
#pragma once

#include <cstdint>

#include "core/variants/score.hpp"
#include "cpu/ukernels/ukernel.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cpu::bwd {

// Scores into probabilities, in place: row i of s ([m][n], row stride ld) becomes
// P[i][j] = exp2(c * s[i][j] - sub[i]) for lo[i] <= j < hi[i] and exactly 0 elsewhere.
void probs(float* s, int64_t ld, int64_t m, int64_t n, float c, const float* sub, const int64_t* lo,
           const int64_t* hi, Exp2Mode mode);

// probs with softcap / ALiBi (core/variants/score.hpp): z = mod(scale * s[i][j]) with ALiBi's
// distance |q0 + i - j| and slope `slope`, then P[i][j] = exp2(log2(e) z - sub[i]) in
// [lo[i], hi[i]) and 0 elsewhere. With a softcap, dz[i][j] (row stride ld) receives
// dz/d(scale s) = 1 - tanh^2 in [lo[i], hi[i]) and 0 elsewhere (dz unused otherwise).
struct ProbsMod {
  core::ScoreMod mod;
  float scale = 1.0f, slope = 0.0f;
  int64_t q0 = 0;
  float* dz = nullptr;
};
void probs_mod(float* s, int64_t ld, int64_t m, int64_t n, const float* sub, const int64_t* lo, const int64_t* hi,
               Exp2Mode mode, const ProbsMod& pm);

// dS = P * (dP - d[i]) row by row, in place of dP (both [m][n], row stride ld); times dz[i][j]
// (row stride ld) when dz is given (the softcap's derivative).
void dscores(const float* p, float* dp, int64_t ld, int64_t m, int64_t n, const float* d, const float* dz = nullptr);

// One GEMM operand from an fp32 matrix: element (k, i), k < kk, i < mm, is src[k * lds + i]
// (or src[i * lds + k] when `transposed`), stored as dt at dst[pack_index(lay, k, i, ld)]
// (ukernel.hpp). kpairs takes an even kk.
void pack_operand(const float* src, int64_t lds, bool transposed, int64_t kk, int64_t mm, void* dst,
                  int64_t ld, DType dt, Layout lay);

// sum_j a[j] * b[j] in fp32.
float dot(const float* a, const float* b, int64_t n);

}  // namespace flashcore::cpu::bwd
