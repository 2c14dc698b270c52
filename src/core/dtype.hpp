// Scalar storage conversions shared by every backend's host code and the reference.
// Portable bit manipulation (no _Float16 / F16C dependence): used when packing operands,
// never inside a micro-kernel's inner loop.
#pragma once

#include <cstdint>
#include <cstring>

#include "flashcore/types.hpp"

namespace flashcore::core {

static inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// IEEE binary16 -> binary32, exact (subnormals, inf, NaN kept). Branch-free (all three
// cases computed, one selected), so loops over it vectorize; the subnormal case is
// man * 2^-24 computed from an integer (never reading an fp32 subnormal, so it stays
// exact when the caller runs with denormals-are-zero).
static inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  const uint32_t normal = sign | ((exp + 112) << 23) | (man << 13);
  const uint32_t infnan = sign | 0x7F800000u | (man << 13);
  const uint32_t sub = sign | f32_bits(float(int32_t(man)) * 5.9604644775390625e-8f);  // man * 2^-24
  const uint32_t m_inf = 0u - uint32_t(exp == 0x1F), m_sub = 0u - uint32_t(exp == 0);  // all-ones masks
  return bits_f32((normal & ~(m_inf | m_sub)) | (infnan & m_inf) | (sub & m_sub));
}

// binary32 -> binary16, round to nearest even, overflow to inf, NaN stays NaN. Branch-free
// (every case computed, then selected by masks), so that loops over it vectorize: the
// output conversion of f16 attention, the packing of fp16 operands. Checked against the
// branching form it replaced on all 2^32 inputs (cda59fb, 2026-11-22).
static inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7FFFFFFFu;
  const uint32_t m_sub = 0u - uint32_t(abs < 0x38800000u);   // subnormal or zero result
  const uint32_t m_big = 0u - uint32_t(abs >= 0x477FF000u);  // rounds to >= 65520 (inf), inf, NaN
  const uint32_t m_nan = 0u - uint32_t(abs > 0x7F800000u);
  const uint32_t normal = (abs + 0x0FFFu + ((abs >> 13) & 1u) - 0x38000000u) >> 13;  // RNE on 13 bits
  // Subnormal: value / 2^-24 (< 1024, exact scaling), rounded to nearest even by the fp32
  // adder; other lanes scale 0.
  const float mag = bits_f32(abs & m_sub) * 16777216.0f;
  const uint32_t sub = uint32_t(int32_t((mag + 8388608.0f) - 8388608.0f));
  const uint32_t special = 0x7C00u | (0x200u & m_nan);
  return uint16_t(sign | (((sub & m_sub) | (normal & ~m_sub)) & ~m_big) | (special & m_big));
}

static inline float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

static inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays (quiet) NaN
  const uint32_t u = f32_bits(f);
  const uint32_t m_nan = 0u - uint32_t((u & 0x7FFFFFFFu) > 0x7F800000u);
  return uint16_t((((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) & ~m_nan) | (((u >> 16) | 0x40u) & m_nan));
}

// OCP fp8 e4m3 (E4M3FN: bias 7, no infinities, S.1111.111 is NaN, max 448) -> binary32,
// exact. e5m2 is the upper byte of a binary16, so its decode is the f16 one.
static inline float e4m3_to_f32(uint8_t x) {
  const uint32_t sign = uint32_t(x & 0x80u) << 24, exp = (x >> 3) & 0xFu, man = x & 7u;
  if (exp == 0xF && man == 7) return bits_f32(sign | 0x7FC00000u);
  if (exp != 0) return bits_f32(sign | ((exp + 120) << 23) | (man << 20));
  const float mag = float(man) * 0.001953125f;  // subnormal: man * 2^-9
  return sign ? -mag : mag;
}
static inline float e5m2_to_f32(uint8_t x) { return f16_to_f32(uint16_t(x) << 8); }

// binary32 -> e4m3, round to nearest even, saturating to +-448 (as cvt.rn.satfinite
// does on the GPU); NaN stays NaN.
static inline uint8_t f32_to_e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return uint8_t(sign | 0x7Fu);
  if (abs >= 0x43E00000u) return uint8_t(sign | 0x7Eu);  // >= 448 (and inf): saturate
  if (abs < 0x3C800000u) {  // below 2^-6: subnormal or zero, value / 2^-9 rounded
    const float r = (bits_f32(abs) * 512.0f + 8388608.0f) - 8388608.0f;
    return uint8_t(sign | uint32_t(r));
  }
  const uint32_t rounded = abs + 0x7FFFFu + ((abs >> 20) & 1u);  // RNE on the 20 dropped bits
  return uint8_t(sign | ((rounded >> 20) - (120u << 3)));
}

static inline float load_as_f32(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::e5m2: return e5m2_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::i32: return float(static_cast<const int32_t*>(base)[i]);
    default: return 0.0f;
  }
}

static inline void store_from_f32(void* base, int64_t i, DType t, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f32_to_f16(v); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(v); break;
    case DType::e4m3: static_cast<uint8_t*>(base)[i] = f32_to_e4m3(v); break;
    default: break;
  }
}

// Row conversions used by packing and epilogues (loops the compiler vectorizes for f32).
void convert_row(const void* src, DType st, int64_t n, float* dst);
void convert_row(const float* src, int64_t n, void* dst, DType dt);

#if defined(__x86_64__)
// The vector widenings of e4m3 rows convert_row takes where the CPU has them (AVX-512 F/BW/VL,
// else AVX2 + F16C), each also callable alone (the tests run every one the CPU has).
bool have_e4m3_avx512();
bool have_e4m3_avx2();
void e4m3_row_avx512(const uint8_t* s, int64_t n, float* d);
void e4m3_row_avx2(const uint8_t* s, int64_t n, float* d);
#endif

}  // namespace flashcore::core
