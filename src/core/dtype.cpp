#include "core/dtype.hpp"

#include "core/clones.hpp"

namespace flashcore::core {

// Widening rows of K/V/Q to fp32 is on the decode path's critical path (the row ops
// convert every f16/bf16 key and value row they read): the portable clones, so the
// x86-64-v3 clone converts 8 lanes at a time.
FC_PORTABLE_CLONES void convert_row(const void* src, DType st, int64_t n, float* dst) {
  switch (st) {
    case DType::f32: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      break;
    }
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(src, i, st);
  }
}

// And back (the output rows of attention and softmax_v): branch-free f32_to_f16 / f32_to_bf16,
// so the x86-64-v3 clone converts 8 lanes at a time too.
FC_PORTABLE_CLONES void convert_row(const float* src, int64_t n, void* dst, DType dt) {
  switch (dt) {
    case DType::f32: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      break;
    }
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      break;
    }
    case DType::bf16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) store_from_f32(dst, i, dt, src[i]);
  }
}

}  // namespace flashcore::core
