// Thin wrappers over the Hopper (sm_90a) PTX of the fwd_sm90 kernels: mbarriers (arrive,
// expect-tx, parity wait), TMA tile loads (cp.async.bulk.tensor completing on an
// mbarrier), the async-proxy fences, wgmma (m64nNk16, fp32 accumulators; A and B from
// shared memory, or A from registers), its fence/commit/wait, shared-memory matrix
// descriptors and setmaxnreg. Names follow the PTX ISA sections (9.7.13.15 mbarrier,
// 9.7.9.25 cp.async.bulk.tensor, 9.7.15 wgmma); nothing here knows about attention.
// Only for translation units compiled for sm_90a (the sm90 instances).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace flashcore::cuda::ptx {

// ---- mbarrier -------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes initialized barriers visible to the other threads and to the async proxy (TMA).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival that also announces `bytes` of transactions (the TMA copies) on this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// `count` arrivals at once (one thread standing for several).
__device__ __forceinline__ void mbar_arrive_n(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// `bytes` more transactions on the current phase, without an arrival.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- stmatrix (9.7.16.5.16) ------------------------------------------------------------
// Four 8 x 8 matrices of 16-bit elements: register j of lane l holds row l / 4, elements
// 2 (l % 4) and + 1 of matrix j (mma.sync's accumulator fragment, packed); lane 8 j + i
// gives the address of row i of matrix j (16 bytes).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// ---- TMA --------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Box of a 4-d tensor map at coordinates (c0 innermost .. c3) into shared memory `dst`;
// completion (the box's bytes, zero-filled where out of bounds) is counted on `bar`.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to shared
// `dst`, counted on `bar` as the tensor loads are (its bytes expected on the phase first,
// before anything that could complete it).
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) of fp32 at shared `src` added
// element-wise to global `dst` (atomic per element, like red.add), one bulk group
// (tma_store_commit / tma_store_wait_read / tma_store_wait track it). The writers of `src`
// fence their stores into the async proxy (fence_proxy_async) and synchronize with the
// issuing thread first.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}

// Box of shared memory `src` into a 4-d tensor map at coordinates (c0 innermost .. c3);
// elements out of the tensor's bounds are not written. Issued by one thread; completion
// is tracked by bulk groups (tma_store_commit, tma_store_wait_read). The threads that
// wrote `src` with ordinary stores fence them into the async proxy first
// (fence_proxy_async) and synchronize with the issuing thread.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until the committed stores have read their shared memory (it may then be reused
// or the CTA may exit); the global writes complete on their own.
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Until the bulk stores are complete (their writes done, not only their reads).
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Global memory written by ordinary stores (another CTA's, published through a counter)
// and read by TMA loads: the writers fence their stores into the async proxy before the
// release, the reader after its acquire.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Two adjacent words (8-byte aligned) by one acquire load: .x the first.
__device__ __forceinline__ uint2 ld_acquire_gpu_v2(const unsigned* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return make_uint2(uint32_t(v), uint32_t(v >> 32));
}
__device__ __forceinline__ void red_release_gpu_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// ---- wgmma ------------------------------------------------------------------------------
// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): start address,
// leading- and stride-dimension byte offsets (all >> 4), 128-byte swizzle (mode 1 in
// bits 62-63). Tiles are 1024-byte aligned, so the base offset (bits 49-51) is 0.
// desc_sw64: the same with the 64-byte swizzle (mode 2; 512-byte atoms of 8 rows of 64
// bytes), fp8's V^T.
__device__ __forceinline__ uint64_t desc_swizzled(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t mode) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(mode) << 62);
}
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return desc_swizzled(addr, lbo, sbo, 1);
}
__device__ __forceinline__ uint64_t desc_sw64(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return desc_swizzled(addr, lbo, sbo, 2);
}
// The descriptor of addr + bytes from that of addr (16-byte multiples; the start field is
// addr >> 4 of an address below 256 KiB, so adding never carries out of it).
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// wgmma_wait<N> that ptxas does not move above the computation of a and b. A plain wait
// is hoisted to the top of its basic block, above independent work meant to overlap the
// wgmma in flight (in the sm90 kernel the whole softmax ran after P V's wait). Here the
// wait starts a new block, behind a branch on a and b: both 0xffffffff, a NaN payload
// that no arithmetic produces (the GPU's NaNs are 0x7fffffff), so the branch is never
// taken. What it guards must have an effect (a nanosleep: ptxas drops an empty branch)
// and must return: with __trap() on that path ptxas serialized every wgmma of the loop.
template <int N>
__device__ __forceinline__ void wgmma_wait_after(float a, float b) {
  if ((__float_as_uint(a) & __float_as_uint(b)) == 0xffffffffu) asm volatile("nanosleep.u32 1;\n" ::: "memory");
  wgmma_wait<N>();
}
// Keeps the compiler from moving accesses of accumulator registers across the async
// wgmma region (the hardware writes them until wgmma_wait).
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}

template <int R>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// D(64 x N, fp32) (+)= A(64 x 16) * B(16 x N). wgmma_ss: A and B from shared memory,
// both K-major (descriptors a, b). wgmma_rs_bt: A from registers (the mma.sync
// m16n8k16 A fragment of each warp's 16 rows), B N-major in shared memory (descriptor b,
// transposed). scale_d = 0: D = A B (the accumulators' old values are ignored);
// wgmma_ss_zero: D = A B with D an output only.
// Accumulator layout: warp w of the warpgroup owns rows 16 w .. 16 w + 15; d[j] is the
// m16n8 accumulator fragment of columns 8 j .. 8 j + 7 (see ptx::mma_16816).
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int scale_d);
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss_zero(float (&d)[N / 8][4], uint64_t a, uint64_t b);
template <int N, typename T>
__device__ __forceinline__ void wgmma_rs_bt(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b, int scale_d);
// wgmma_ss_tt (16-bit): A and B from shared memory, both MN-major (transposed descriptors:
// A stored [K][M], B [K][N], as the backward's dS^T and K tiles are).
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss_tt(float (&d)[N / 8][4], uint64_t a, uint64_t b, int scale_d);
// wgmma_ss_bt (16-bit): A K-major, B MN-major, both from shared memory (B stored [K][N]).
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss_bt(float (&d)[N / 8][4], uint64_t a, uint64_t b, int scale_d);
// T = __nv_fp8_e4m3: the same calls are m64nNk32 (32 bytes of K per call, as for k16 of a
// 16-bit type), and fp8 wgmma takes no transpose: B is always K-major, so P V uses
// wgmma_rs (A from registers, the m16n8k32 8-bit A fragment; B K-major) on V^T.
template <int N, typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b, int scale_d);
template <int N, typename T>
__device__ __forceinline__ void wgmma_rs_zero(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b);

// Four fp32 values -> four e4m3 bytes (round to nearest even, saturating to +-448), x0 in
// the lowest byte: cvt.rn.satfinite.e4m3x2.f32 puts its first source in the upper byte.
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

// (the specializations for each N and type: wgmma_gen.cuh, included at the end)

// ---- named barriers (bar.sync / bar.arrive on ids 1..15; id 0 is __syncthreads) --------
// `threads` counts every thread taking part (syncing and arriving), a multiple of 32.
// bar.arrive does not wait; bar.sync waits until `threads` threads reached the barrier.
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The whole CTA's barrier 0 without .aligned: for threads that reach it from different
// instructions (bar.sync / __syncthreads are barrier.sync.aligned, which must be one and the
// same instruction in every thread of the CTA).
__device__ __forceinline__ void cta_sync_unaligned() { asm volatile("barrier.sync 0;\n" ::: "memory"); }

// ---- register reallocation between warpgroups ------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace flashcore::cuda::ptx

#include "cuda/common/wgmma_gen.cuh"  // generated by common/gen_wgmma.py
