// The element-wise steps of the CPU backward between its GEMMs (bwd_ops.cpp): portable C++
// written for auto-vectorization, compiled per x86-64 ISA level (core/clones.hpp).
#pragma once

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cpu::bwd {

// Scores into probabilities, in place: row i of s ([m][n], row stride ld) becomes
// P[i][j] = exp2(c * s[i][j] - sub[i]) for lo[i] <= j < hi[i] and exactly 0 elsewhere.
void probs(float* s, int64_t ld, int64_t m, int64_t n, float c, const float* sub, const int64_t* lo,
           const int64_t* hi, Exp2Mode mode);

// dS = P * (dP - d[i]) row by row, in place of dP (both [m][n], row stride ld).
void dscores(const float* p, float* dp, int64_t ld, int64_t m, int64_t n, const float* d);

// One GEMM operand from an fp32 matrix: element (k, i), k < kk, i < mm, is src[k * lds + i]
// (or src[i * lds + k] when `transposed`), stored as dt at dst[pack_index(lay, k, i, ld)]
// (ukernel.hpp). kpairs takes an even kk.
void pack_operand(const float* src, int64_t lds, bool transposed, int64_t kk, int64_t mm, void* dst,
                  int64_t ld, DType dt, Layout lay);

// sum_j a[j] * b[j] in fp32.
float dot(const float* a, const float* b, int64_t n);

// dst[j] = scale * src[j] stored as dt (round to nearest even), j < n.
void store_scaled(const float* src, int64_t n, float scale, void* dst, DType dt);

}  // namespace flashcore::cpu::bwd
