// Portable bodies of the softmax vector ops (see VecOps in ukernel.hpp), written as
// loops over the query axis so that any ISA's compiler flags vectorize them. Each ISA
// TU includes this file and builds its own table; every function is `static`, so the
// copies compiled with different flags never meet in the linker.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"
#include "core/exp2.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::portable {

[[maybe_unused]] static void col_max(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* row = t + k * ldt;
    for (int64_t i = 0; i < mq; ++i) mx[i] = row[i] > mx[i] ? row[i] : mx[i];
  }
}

static inline uint16_t to_half_bits(float f) {
  // Round-to-nearest-even fp32 -> fp16 for values in [0, 1] (softmax probabilities);
  // values under the fp16 subnormal range flush to zero, like FZ16.
  uint32_t u; std::memcpy(&u, &f, 4);
  if (u < 0x38800000u) return 0;
  const uint32_t r = u + 0x0FFFu + ((u >> 13) & 1u);
  return uint16_t((r - 0x38000000u) >> 13);
}
static inline float from_half_bits(uint16_t h) {
  const uint32_t u = h == 0 ? 0u : ((uint32_t(h) << 13) + 0x38000000u);
  float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t to_bf16_bits(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float from_bf16_bits(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f;
}

// kMode: 0 exp2_exact, 1 exp2_fast, 2 the value itself (pack: no exponential, no sums).
template <int kMode>
static inline float value_of(float t, float c, const float* cm, int64_t i) {
  if constexpr (kMode == 2) return t;  // cm may be null
  else if constexpr (kMode == 1) return core::exp2_fast(c * t - cm[i]);
  else return core::exp2_exact(c * t - cm[i]);
}

template <int kMode>
static void exp2_pack_t(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                        const float* cm, void* dst, int64_t ldd, DType dst_type, float* sum) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* row = t + k * ldt;
    if (dst_type == DType::f32) {
      float* d = static_cast<float*>(dst) + k * ldd;
      for (int64_t i = 0; i < mq; ++i) {
        const float p = value_of<kMode>(row[i], c, cm, i);
        d[i] = p;
        if constexpr (kMode != 2) sum[i] += p;
      }
    } else if (dst_type == DType::f16) {
      uint16_t* d = static_cast<uint16_t*>(dst) + k * ldd;
      for (int64_t i = 0; i < mq; ++i) {
        const float p = value_of<kMode>(row[i], c, cm, i);
        const uint16_t h = kMode == 2 ? core::f32_to_f16(p) : to_half_bits(p);
        d[i] = h;
        if constexpr (kMode != 2) sum[i] += from_half_bits(h);  // sum what the GEMM will see
      }
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst) + k * ldd;
      for (int64_t i = 0; i < mq; ++i) {
        const uint16_t h = to_bf16_bits(value_of<kMode>(row[i], c, cm, i));
        d[i] = h;
        if constexpr (kMode != 2) sum[i] += from_bf16_bits(h);
      }
    }
  }
}

// The same values stored element by element at pack_index(layout, k, i, ldd) (the kpairs
// and rows layouts of the bf16 kernels' A operand); kpairs with an odd kc zeroes the
// partner of the last key.
template <int kMode>
static void exp2_pack_indexed(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                              const float* cm, void* dst, int64_t ldd, DType dst_type,
                              Layout layout, float* sum) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* row = t + k * ldt;
    for (int64_t i = 0; i < mq; ++i) {
      const float p = value_of<kMode>(row[i], c, cm, i);
      const int64_t at = pack_index(layout, k, i, ldd);
      if (dst_type == DType::f32) {
        static_cast<float*>(dst)[at] = p;
        if constexpr (kMode != 2) sum[i] += p;
      } else if (dst_type == DType::f16) {
        const uint16_t h = kMode == 2 ? core::f32_to_f16(p) : to_half_bits(p);
        static_cast<uint16_t*>(dst)[at] = h;
        if constexpr (kMode != 2) sum[i] += from_half_bits(h);
      } else {
        const uint16_t h = to_bf16_bits(p);
        static_cast<uint16_t*>(dst)[at] = h;
        if constexpr (kMode != 2) sum[i] += from_bf16_bits(h);
      }
    }
  }
  if (layout == Layout::kpairs && kc % 2 == 1)
    for (int64_t i = 0; i < mq; ++i) {
      const int64_t at = pack_index(layout, kc, i, ldd);
      if (dst_type == DType::f32) static_cast<float*>(dst)[at] = 0.0f;
      else static_cast<uint16_t*>(dst)[at] = 0;
    }
}

[[maybe_unused]] static void exp2_pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
                      void* dst, int64_t ldd, DType dst_type, Layout layout, Exp2Mode mode,
                      float* sum) {
  const bool fast = mode == Exp2Mode::fast;
  if (layout != Layout::kmajor) {
    if (fast)
      exp2_pack_indexed<1>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, sum);
    else
      exp2_pack_indexed<0>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, sum);
  } else if (fast) {
    exp2_pack_t<1>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, sum);
  } else {
    exp2_pack_t<0>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, sum);
  }
}

[[maybe_unused]] static void pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, void* dst,
                                  int64_t ldd, DType dst_type, Layout layout) {
  if (layout != Layout::kmajor)
    exp2_pack_indexed<2>(kc, mq, t, ldt, 0.0f, nullptr, dst, ldd, dst_type, layout, nullptr);
  else
    exp2_pack_t<2>(kc, mq, t, ldt, 0.0f, nullptr, dst, ldd, dst_type, nullptr);
}

[[maybe_unused]] static void add_f16_tile(int64_t mr, int64_t nr, const uint16_t* tile, float* c, int64_t ldc,
                         int accumulate) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      const float v = core::f16_to_f32(tile[i * nr + j]);  // any fp16 value
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + v : v;
    }
}

[[maybe_unused]] static void f16_tile_as(int64_t mr, int64_t nr, const uint16_t* tile, uint16_t* dst,
                                         int64_t ld, Layout layout) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) dst[pack_index(layout, i, j, ld)] = tile[i * nr + j];
}

static void store_row(const float* row, int64_t n, float scale, void* dst, DType dt) {
  switch (dt) {
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t j = 0; j < n; ++j) d[j] = core::f32_to_f16(row[j] * scale);
      break;
    }
    case DType::bf16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t j = 0; j < n; ++j) d[j] = core::f32_to_bf16(row[j] * scale);
      break;
    }
    default:
      for (int64_t j = 0; j < n; ++j) core::store_from_f32(dst, j, dt, row[j] * scale);
  }
}

[[maybe_unused]] static void scale_rows(int64_t mq, int64_t n, float* o, int64_t ld, const float* alpha) {
  for (int64_t i = 0; i < mq; ++i) {
    const float a = alpha[i];
    float* row = o + i * ld;
    for (int64_t j = 0; j < n; ++j) row[j] *= a;
  }
}

}  // namespace flashcore::cpu::portable
