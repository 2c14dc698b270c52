// Thin wrappers over the sm80 PTX the forward kernels use: cp.async (global -> shared,
// 16 bytes, zero-filling predicated-off rows), ldmatrix, 32-bit shared loads, mma.sync
// m16n8k16 (f16/bf16) and m16n8k8 (tf32) with fp32 accumulation, fp32 -> tf32 rounding,
// ex2.approx and register packing. Names follow the PTX ISA sections
// (9.7.9.25 ldmatrix, 9.7.13 mma, 9.7.8.22 cp.async); nothing here knows about attention.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace flashcore::cuda::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; when `valid` is false the 16 destination bytes are zero-filled and
// nothing is read (src-size 0), so tails beyond Sq/Sk/D never reach the tensor cores as garbage.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 8-byte async copy (cp.async.ca: 4, 8 or 16 bytes, through L1), zero-filled when !valid.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices; lane i gives the row address of matrix i/8, row i%8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// One 32-bit shared-memory load.
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t r;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(r) : "r"(addr));
  return r;
}

// One 128-bit shared-memory load (addr 16-byte aligned).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 r;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(addr));
  return r;
}

// One 64-bit shared-memory load (addr 8-byte aligned).
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 r;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "r"(addr));
  return r;
}

// Shared-memory stores (addr aligned to their size).
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void sts64(uint32_t addr, uint2 v) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Shared-memory atomic or.
__device__ __forceinline__ void atom_or_shared(uint32_t addr, uint32_t v) {
  asm volatile("red.shared.or.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulators. Fragment ownership (lane l,
// g = l/4, t = l%4): a = {(g,2t..), (g+8,2t..), (g,2t+8..), (g+8,2t+8..)},
// b = {(k=2t.., n=g), (k=2t+8.., n=g)}, d = {(g,2t), (g,2t+1), (g+8,2t), (g+8,2t+1)}.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A(16x8, row) * B(8x8, col) + D on TF32 operands, fp32 accumulators. Fragments
// (g = l/4, t = l%4): a = {(g,t), (g+8,t), (g,t+4), (g+8,t+4)}, b = {(k=t, n=g), (k=t+4, n=g)},
// d as in m16n8k16. Each a/b register is one fp32 element in TF32 format (tf32_rna).
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp32 -> TF32 (10-bit mantissa), round to nearest, ties away from zero.
__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// Two floats -> one register of two 16-bit values (low half = x), round to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float x, float y) {
  __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float x, float y) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}

// pack2's inverse: the two 16-bit values of v (x in the low half) as floats.
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t v);
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

// pack2 as a function object: of a type known at compile time (PackAs), or of f16 / bf16
// chosen at run time (Pack16: the fp8 kernels' output, one copy of their epilogue for both).
template <typename T>
struct PackAs {
  __device__ __forceinline__ uint32_t operator()(float x, float y) const { return pack2<T>(x, y); }
};
struct Pack16 {
  bool bf16;
  __device__ __forceinline__ uint32_t operator()(float x, float y) const {
    return bf16 ? pack2<__nv_bfloat16>(x, y) : pack2<__half>(x, y);
  }
};

// Stores two adjacent output elements (p 4-byte aligned): one 32-bit store of the
// packed pair for 16-bit storage, two for fp32.
template <typename T>
__device__ __forceinline__ void store2(T* p, float x, float y) {
  *reinterpret_cast<uint32_t*>(p) = pack2<T>(x, y);
}
template <>
__device__ __forceinline__ void store2<float>(float* p, float x, float y) {
  p[0] = x;
  p[1] = y;
}

// Hides where x came from (no instruction): what code computes from it is computed there,
// not ahead (in registers held over a loop).
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// threadIdx.x and blockIdx read again where they are used (special-register reads, which
// the compiler does not merge with earlier ones: nothing held over a loop).
__device__ __forceinline__ int tid_x() {
  int v;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ int3 ctaid() {
  int3 v;
  asm volatile("mov.u32 %0, %%ctaid.x;\n\tmov.u32 %1, %%ctaid.y;\n\tmov.u32 %2, %%ctaid.z;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z));
  return v;
}

// 2^x with the MUFU unit (ex2.approx.ftz: ~2 ulp over the range softmax uses, 2^-inf = 0).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x with the MUFU unit (rcp.approx.ftz: ~1 ulp).
__device__ __forceinline__ float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) with the MUFU unit (tanh.approx.f32: one operation, maximum relative error about
// 2^-10.7; saturates to +-1, NaN stays NaN), for softcap under Exp2Mode::fast.
__device__ __forceinline__ float tanh_fast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 2^(t - kChordShift) by its piecewise-linear chord between the powers of two, for the fp8
// kernels' P under Exp2Mode::fast (parts/softmax.cuh). t = x + kChordShift (the caller
// folds the shift into its FFMA): t then holds round(128 x) in its low mantissa bits (ulp
// 2^-7 for |x| < 2^15), which one integer multiply-add moves into the exponent field of
// the result, 2^floor(x) (1 + frac(x)) less a centring constant: relative error within
// 3.2 % of 2^x (e4m3, which stores P, rounds by up to 6.25 %), from two ALU instructions
// instead of one MUFU.EX2. x is clamped at -126 (2^-126 stands for anything smaller, 0 in
// e4m3); a NaN t gives 2^-126 (a row of NaN scores still fails the speculative softmax's
// test through the exponentials it takes on MUFU, but a NaN key that falls on a chord
// fragment is dropped where the exact form would spread it).
constexpr float kChordShift = 98304.f;  // 1.5 * 2^16
__device__ __forceinline__ float exp2_chord(float t) {
  t = fmaxf(t, kChordShift - 126.f);
  return __int_as_float(__float_as_int(t) * 65536 + int((127u << 23) - (0x47C00000u << 16) - 0x5AC00u));
}

}  // namespace flashcore::cuda::ptx
