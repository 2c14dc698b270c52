// Portable micro-kernels: C++ on GCC/Clang generic vectors, compiled with the baseline
// flags. The accumulator block lives in vector registers (MR x NR / 4 of them: 16 SSE
// registers for 4x16, 12 for 6x8); the k loop is a rank-1 update per step, as in seed 000.
#include <cstdint>
#include <cstring>

#include "core/clones.hpp"
#include "cpu/ukernels/ukernel.hpp"
#include "cpu/ukernels/vecops_portable.hpp"

namespace flashcore::cpu::ukernels {
namespace {

// C[MR x NR] on GCC/Clang generic vectors of 4 floats, lowered to whatever the baseline
// ISA has (SSE2 on x86-64, NEON on AArch64, scalar code elsewhere). Written as scalar
// loops (acc[i][j] += a[i] * b[j]), GCC vectorized the 4x8 tile with two extra shuffles
// and eight register copies per k step: llvm-mca -mcpu=cascadelake models that loop at
// 82% of the mul+add peak, this one at 99% (4x8, 6x8, 4x16 alike).
typedef float v4f __attribute__((vector_size(16)));

template <int MR, int NR>
void gemm_f32(int64_t kc, const void* a_, int64_t a_stride, const void* b_, void* c_, int64_t ldc,
              int accumulate) {
  constexpr int NV = NR / 4;
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  float* c = static_cast<float*>(c_);
  v4f acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = v4f{0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t k = 0; k < kc; ++k) {
    const float* ak = a + k * a_stride;
    v4f bk[NV];
    for (int j = 0; j < NV; ++j) std::memcpy(&bk[j], b + (k * NV + j) * 4, 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const v4f ai = v4f{ak[i], ak[i], ak[i], ak[i]};
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] += ai * bk[j];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) {
      v4f t = acc[i][j];
      if (accumulate) {
        v4f old;
        std::memcpy(&old, c + i * ldc + 4 * j, 16);
        t += old;
      }
      std::memcpy(c + i * ldc + 4 * j, &t, 16);
    }
}

// bf16 operands in the pair layouts of the x86 bf16 kernels (ukernel.hpp), fp32 sums: the
// same tiles and layouts as bf16_12x2_avx512bf16 (kpairs A) and bf16_32x32_amx (rows A),
// so the pipelines' packing for those layouts is tested on every machine. Scalar reference
// loops, not tuned: never in the automatic choice, reached through `impl` only.
template <int MR, int NR, Layout AL>
void gemm_bf16(int64_t kc, const void* a_, int64_t as, const void* b_, void* c_, int64_t ldc,
               int accumulate) {
  const uint16_t* a = static_cast<const uint16_t*>(a_);
  const uint16_t* b = static_cast<const uint16_t*>(b_);
  float* c = static_cast<float*>(c_);
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i) {
      const float ai = portable::from_bf16_bits(a[pack_index(AL, k, i, as)]);
      for (int j = 0; j < NR; ++j)
        acc[i][j] += ai * portable::from_bf16_bits(b[pack_index(Layout::kpairs, k, j, NR)]);
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

}  // namespace

void bf16_12x32_pairs_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                              int64_t ldc, int accumulate) {
  gemm_bf16<12, 32, Layout::kpairs>(kc, a, as, b, c, ldc, accumulate);
}
void bf16_32x32_rows_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                             int64_t ldc, int accumulate) {
  gemm_bf16<32, 32, Layout::rows>(kc, a, as, b, c, ldc, accumulate);
}

// Its panel form (gemm_panels.inc): 16-row blocks against the one B panel, each block's
// column max folded in.
void bf16_32x32_rows_generic_panel(int64_t kc, const void* a, int64_t as, int64_t rows, const void* b,
                                   float* c, int64_t ldc, float* mx) {
  for (int64_t i = 0; i < rows; i += 16) {
    float* ci = c + i * ldc;
    gemm_bf16<16, 32, Layout::rows>(kc, static_cast<const uint16_t*>(a) + i * as, as, b, ci, ldc, 0);
    if (mx != nullptr) portable::col_max(16, 32, ci, ldc, mx);
  }
}

FC_PORTABLE_CLONES void f32_4x16_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                      int accumulate) {
  gemm_f32<4, 16>(kc, a, as, b, c, ldc, accumulate);
}
FC_PORTABLE_CLONES void f32_4x8_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                     int accumulate) {
  gemm_f32<4, 8>(kc, a, as, b, c, ldc, accumulate);
}
FC_PORTABLE_CLONES void f32_6x8_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                     int accumulate) {
  gemm_f32<6, 8>(kc, a, as, b, c, ldc, accumulate);
}

// The vector ops through cloned entry points (the portable bodies inline into each clone).
namespace {
FC_PORTABLE_CLONES void col_max(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx) {
  portable::col_max(kc, mq, t, ldt, mx);
}
FC_PORTABLE_CLONES void exp2_pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                                  const float* cm, void* dst, int64_t ldd, DType dst_type,
                                  Layout layout, Exp2Mode mode, float* sum) {
  portable::exp2_pack(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, mode, sum);
}
FC_PORTABLE_CLONES void pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, void* dst, int64_t ldd,
                             DType dst_type, Layout layout) {
  portable::pack(kc, mq, t, ldt, dst, ldd, dst_type, layout);
}
FC_PORTABLE_CLONES void scale_rows(int64_t mq, int64_t n, float* o, int64_t ld, const float* alpha) {
  portable::scale_rows(mq, n, o, ld, alpha);
}
FC_PORTABLE_CLONES void add_f16_tile(int64_t mr, int64_t nr, const uint16_t* tile, float* c, int64_t ldc,
                                     int accumulate) {
  portable::add_f16_tile(mr, nr, tile, c, ldc, accumulate);
}
FC_PORTABLE_CLONES void f16_tile_as(int64_t mr, int64_t nr, const uint16_t* tile, uint16_t* dst,
                                    int64_t ld, Layout layout) {
  portable::f16_tile_as(mr, nr, tile, dst, ld, layout);
}
FC_PORTABLE_CLONES void store_row(const float* row, int64_t n, float scale, void* dst, DType dt) {
  portable::store_row(row, n, scale, dst, dt);
}
}  // namespace

const VecOps vecops_generic = {"vecops_generic", Isa::generic, col_max, exp2_pack, pack, scale_rows, add_f16_tile,
                               f16_tile_as, store_row, nullptr, nullptr};

}  // namespace flashcore::cpu::ukernels
