// flashcore_wgmma_mufu: how fast the attention kernels' GEMM shapes (fp8, and bf16's hd128
// tile) run on the tensor cores, alone and beside a softmax-like stream of FFMA / MUFU.EX2 /
// FADD / e4m3 packs, on sm_90a. A measurement tool for kernel work (docs/results/cuda-sm90-fp8-2026-11-22.md,
// 2026-11-27, 7e6b148), not a test: one CTA per SM (132), consumer warpgroups with 240 registers
// (setmaxnreg, as the sm90 forward kernel) that loop over S = Q K^T (SS wgmma, K-major, 128-byte
// swizzle) and O += P V (RS wgmma, V^T with the 64-byte swizzle), optionally taking turns
// (named barriers, the kernels' ping-pong) and optionally running, after S retires and
// while P V is in flight, the softmax's per-score work on S (MODE 0: FFMA, ex2, FADD and
// the e4m3 pack; 1: FMUL in place of ex2; 2: ex2 only; 3, 5, 4: 1/4, 3/8, 1/2 of the
// exponentials by exp2_poly on the FMA pipe; 6: without the row sums' FADDs; 7, 8, 9: all,
// 1/2, 1/4 of them by ptx::exp2_chord, two ALU instructions); a third warpgroup can stream
// `copy` KB per iteration from an L2-resident buffer into the operands' shared memory
// (cp.async.bulk, the TMA loads' traffic). Prints cycles per iteration (clock64 on every
// SM, averaged), the tensor cores' share of their nominal 8192 fp8 FLOP per clock and SM,
// and the cycles of one softmax pass. Operand contents are pseudo-random bytes. The bf16
// rows (MODE 10-12) put the softcap's per-score forms before the softmax on the 16-bit
// kernels' hd128 tile (docs/results/cuda-variants-2026-12-02.md).
//   flashcore_wgmma_mufu            (any H100 / H200; about a second)
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdint>
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/wgmma_gen.cuh"
using namespace flashcore::cuda;
using E4 = __nv_fp8_e4m3;
using BF = __nv_bfloat16;

// 2^x on the FMA pipe for x <= ~8 (FlashAttention-4's trick, as tried in the kernel
// on 2026-11-26): x clamped at -126, rounded to an integer r by the 1.5 * 2^23 shift, 2^(x - r) by a
// cubic (relative error <= 8e-4, far below e4m3's), r added to the exponent field by one IMAD.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -126.f);
  const float xm = __fadd_rn(x, 12582912.f);
  const float f = __fsub_rn(x, __fsub_rn(xm, 12582912.f));  // [-0.5, 0.5]
  float p = fmaf(f, 0.05550411f, 0.2402265f);
  p = fmaf(p, f, 0.6931472f);
  p = fmaf(p, f, 1.f);
  return __int_as_float(__float_as_int(xm) * 0x800000 + __float_as_int(p));
}

// The softcapped score's forms ahead of the softmax's FFMA (parts/score_mod.cuh), for the
// 16-bit rows (MODE 10-12): 10 exact, u = -1 / (2^y + 1) (FMUL, MUFU.EX2, FADD, MUFU.RCP);
// 11 Exp2Mode::fast's tanh.approx.f32 (FMUL, MUFU.TANH); 12 a probe, not a kernel's form:
// tanh.approx.f16x2 on two scores per MUFU operation (with their packing and unpacking).
template <int MODE>
__device__ __forceinline__ void softcap4(float& a, float& b, float& c, float& d) {
  if constexpr (MODE == 10) {
    a = ptx::rcp_fast(-(ptx::exp2_fast(a * 0.031f) + 1.f));
    b = ptx::rcp_fast(-(ptx::exp2_fast(b * 0.031f) + 1.f));
    c = ptx::rcp_fast(-(ptx::exp2_fast(c * 0.031f) + 1.f));
    d = ptx::rcp_fast(-(ptx::exp2_fast(d * 0.031f) + 1.f));
  } else if constexpr (MODE == 11) {
    a = ptx::tanh_fast(a * 0.031f);
    b = ptx::tanh_fast(b * 0.031f);
    c = ptx::tanh_fast(c * 0.031f);
    d = ptx::tanh_fast(d * 0.031f);
  } else if constexpr (MODE == 12) {
    uint32_t x = ptx::pack2<__half>(a * 0.031f, b * 0.031f), y = ptx::pack2<__half>(c * 0.031f, d * 0.031f);
    asm("tanh.approx.f16x2 %0, %0;" : "+r"(x));
    asm("tanh.approx.f16x2 %0, %0;" : "+r"(y));
    const float2 u = ptx::unpack2<__half>(x), v = ptx::unpack2<__half>(y);
    a = u.x; b = u.y; c = v.x; d = v.y;
  }
}

// T: the operands' type (e4m3, or bf16 for the 16-bit kernels' tiles); NQK / KQK: S's N and
// k-steps (32 bytes each); NPV / KPV: P V's N (the head dim; 136: and 8 columns of row sums)
// and k-steps (32 bytes of keys each: 32 e4m3 or 16 bf16 keys); NWG consumer warpgroups; PP:
// ping-pong turns; PV_SS: P from shared memory instead of registers (e4m3); SMX: the
// softmax's work (MODE above) between the GEMMs. The 16-bit P V reads V as the kernels do
// (MN-major, 128-byte swizzle) and packs P to two 16-bit pairs per four scores.
template <class T, int NQK, int KQK, int NPV, int KPV, int NWG, bool PP, bool PV_SS, bool SMX, int MODE>
__global__ void __launch_bounds__(128 * NWG + 128, 1) bench(int iters, unsigned long long* out, const uint8_t* src, int copy_kb) {
  constexpr bool kWide = sizeof(T) == 2;
  static_assert(!(kWide && PV_SS), "P from shared memory: e4m3 only");
  static_assert(kWide || MODE < 10, "the softcap forms: 16-bit tiles");
  // P's packing: four e4m3, or two pairs of 16-bit values, into the next P V's operand.
  auto pack = [](uint32_t (&b)[8], int i, float p0, float p1, float p2, float p3) {
    if constexpr (kWide) {
      b[(2 * i) % 8] ^= ptx::pack2<T>(p0, p1);
      b[(2 * i + 1) % 8] ^= ptx::pack2<T>(p2, p3);
    } else {
      b[i % 8] ^= ptx::pack4_e4m3(p0, p1, p2, p3);
    }
  };
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = (ptx::smem_addr(smem) + 1023u) & ~1023u;
  // Pseudo-random operand bytes (bit 6 and 3 cleared: finite e4m3 of moderate size).
  for (int i = threadIdx.x; i < 160 * 1024 / 4; i += blockDim.x) {
    uint32_t x = i * 2654435761u + blockIdx.x;
    x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
    reinterpret_cast<uint32_t*>(smem + (base - ptx::smem_addr(smem)))[i] = x & 0xB7B7B7B7u;
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const uint32_t cbar = base + 200 * 1024 - 2048;
  if (threadIdx.x == 0) { ptx::mbar_init(cbar, 1); ptx::mbar_init_fence(); }
  __syncthreads();
  if (wg == NWG) ptx::setmaxnreg_dec<24>();
  else ptx::setmaxnreg_inc<NWG == 2 ? 240 : 256>();
  if (wg == NWG) {  // one thread streams copy_kb KB per iteration into S's K operand (contents do not matter)
    if (copy_kb > 0) {
      for (int it = 0; it < iters; ++it) {
        if (threadIdx.x == 128 * NWG) {
          ptx::mbar_arrive_expect_tx(cbar, copy_kb * 1024);
          for (int c = 0; c < copy_kb / 16; ++c) {
            const uint8_t* g = src + ((size_t(it) * copy_kb + c * 16) * 1024) % (size_t(8) << 20);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(base + 32768 + (c % 4) * 16384), "l"(g), "r"(16384), "r"(cbar) : "memory");
          }
          ptx::mbar_wait(cbar, it & 1);
        }
        __syncwarp();
      }
    }
    return;
  }
  const uint32_t sQ = base, sK = base + 32768, sV = base + 32768 + 65536;
  float s[NQK / 8][4];
  float acc[NPV / 8][4];
  for (int i = 0; i < NQK / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
  for (int i = 0; i < NPV / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  uint32_t pa[4] = {0x38383838u ^ threadIdx.x, 0x30303030u, 0x34343434u, 0x3c3c3c3cu};
  uint32_t pb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float lsum = 0.f, mrow = 1.0f;
  unsigned long long smx_cyc = 0;
  if (PP && wg == NWG - 1 && NWG > 1) ptx::named_bar_arrive(1, 256);
  __syncwarp();
  const unsigned long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    if (PP && NWG > 1) ptx::named_bar_sync(1 + wg, 256);
    if constexpr (KQK > 0) {
      const uint64_t da0 = ptx::desc_sw128(sQ, 16, 1024), db0 = ptx::desc_sw128(sK, 16, 1024);
      ptx::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < KQK; ++ks) {
        const uint32_t cb = ks / 4, kb = (ks % 4) * 32;
        ptx::wgmma_ss<NQK, T>(s, ptx::desc_add(da0, cb * 64 * 128 + kb), ptx::desc_add(db0, cb * NQK * 128 + kb), 1);
      }
      ptx::wgmma_commit();
    }
    if constexpr (KPV > 0 && kWide) {
      const uint64_t dv0 = ptx::desc_sw128(sV, KPV * 16 * 128, 1024);
      ptx::wgmma_fence();
#pragma unroll
      for (int pk = 0; pk < KPV; ++pk) ptx::wgmma_rs_bt<NPV, T>(acc, pa, ptx::desc_add(dv0, pk * 16 * 128), 1);
      ptx::wgmma_commit();
    } else if constexpr (KPV > 0) {
      const uint64_t dv0 = ptx::desc_sw64(sV, 16, 512);
      ptx::wgmma_fence();
#pragma unroll
      for (int pk = 0; pk < KPV; ++pk) {
        const uint32_t cb = pk / 2, kb = (pk % 2) * 32;
        if constexpr (PV_SS)
          ptx::wgmma_ss<NPV, T>(acc, ptx::desc_add(ptx::desc_sw64(sQ, 16, 512), pk * 2048), ptx::desc_add(dv0, cb * NPV * 64 + kb), 1);
        else
          ptx::wgmma_rs<NPV, T>(acc, pa, ptx::desc_add(dv0, cb * NPV * 64 + kb), 1);
      }
      ptx::wgmma_commit();
    }
    if (PP && NWG > 1) ptx::named_bar_arrive(1 + (wg + 1) % NWG, 256);
    if constexpr (SMX) {
      // S retired (P V, when there is one, still in flight).
      if constexpr (KPV > 0) ptx::wgmma_wait<1>();
      else ptx::wgmma_wait<0>();
      ptx::fence_regs(s);
      uint32_t c0;
      asm volatile("mov.u32 %0, %%clock;" : "=r"(c0));
      float sum0 = 0.f, sum1 = 0.f;
      auto ex = [&](float x) { return MODE == 1 ? x * 1.0001f : ptx::exp2_fast(x); };
#pragma unroll
      for (int i = 0; i < NQK / 8; ++i) {
        float p0, p1, p2, p3;
        // MODE 3 / 4 / 5: a quarter / half / three eighths of the fragments' exponentials on
        // the FMA pipe (exp2_poly), the rest on MUFU.
        const bool poly = (MODE == 3 && i % 4 == 0) || (MODE == 4 && i % 2 == 0) ||
                          (MODE == 5 && (i % 8 == 0 || i % 8 == 3 || i % 8 == 5));
        const bool lin = MODE == 7 || (MODE == 8 && i % 2 == 0) || (MODE == 9 && i % 4 == 0);
        if (lin) {
          p0 = ptx::exp2_chord(fmaf(s[i][0], 0.0001f, ptx::kChordShift - mrow));
          p1 = ptx::exp2_chord(fmaf(s[i][1], 0.0001f, ptx::kChordShift - mrow));
          p2 = ptx::exp2_chord(fmaf(s[i][2], 0.0001f, ptx::kChordShift - mrow));
          p3 = ptx::exp2_chord(fmaf(s[i][3], 0.0001f, ptx::kChordShift - mrow));
          sum0 += p0 + p1;
          sum1 += p2 + p3;
          pack(pb, i, p0, p1, p2, p3);
          continue;
        }
        if (poly) {
          p0 = exp2_poly(fmaf(s[i][0], 0.0001f, -mrow));
          p1 = exp2_poly(fmaf(s[i][1], 0.0001f, -mrow));
          p2 = exp2_poly(fmaf(s[i][2], 0.0001f, -mrow));
          p3 = exp2_poly(fmaf(s[i][3], 0.0001f, -mrow));
          sum0 += p0 + p1;
          sum1 += p2 + p3;
          pack(pb, i, p0, p1, p2, p3);
          continue;
        }
        if constexpr (MODE == 2) {
          p0 = ex(s[i][0]); p1 = ex(s[i][1]); p2 = ex(s[i][2]); p3 = ex(s[i][3]);
          sum0 = fmaxf(sum0, __int_as_float(__float_as_int(p0) ^ __float_as_int(p1) ^ __float_as_int(p2) ^ __float_as_int(p3)));
        } else if constexpr (MODE >= 10) {  // the cap, then the softmax's FFMA (factor, row offset - max)
          p0 = s[i][0]; p1 = s[i][1]; p2 = s[i][2]; p3 = s[i][3];
          softcap4<MODE>(p0, p1, p2, p3);
          p0 = ex(fmaf(p0, 86.5f, 43.2f - mrow));
          p1 = ex(fmaf(p1, 86.5f, 43.2f - mrow));
          p2 = ex(fmaf(p2, 86.5f, 43.2f - mrow));
          p3 = ex(fmaf(p3, 86.5f, 43.2f - mrow));
          sum0 += p0 + p1;
          sum1 += p2 + p3;
          pack(pb, i, p0, p1, p2, p3);
        } else {
          p0 = ex(fmaf(s[i][0], 0.0001f, -mrow));
          p1 = ex(fmaf(s[i][1], 0.0001f, -mrow));
          p2 = ex(fmaf(s[i][2], 0.0001f, -mrow));
          p3 = ex(fmaf(s[i][3], 0.0001f, -mrow));
          if constexpr (MODE != 6) {
            sum0 += p0 + p1;
            sum1 += p2 + p3;
          }
          pack(pb, i, p0, p1, p2, p3);
        }
      }
      lsum += sum0 + sum1;
      uint32_t c1;
      asm volatile("mov.u32 %0, %%clock;" : "=r"(c1));
      smx_cyc += c1 - c0;
      ptx::wgmma_wait_after<0>(lsum, MODE == 2 ? sum1 : __int_as_float(pb[7] ^ pb[3]));  // after the last pack
    } else {
      ptx::wgmma_wait<0>();
    }
    ptx::fence_regs(s);
    ptx::fence_regs(acc);
  }
  const unsigned long long t1 = clock64();
  if (PP && NWG > 1 && wg == 0) ptx::named_bar_sync(1, 256);
  float z = 0.f;
  for (int i = 0; i < NQK / 8; ++i) z += s[i][0];
  for (int i = 0; i < NPV / 8; ++i) z += acc[i][0];
  for (int i = 0; i < 8; ++i) z += float(pb[i] & 1);
  if (threadIdx.x % 128 == 0) out[blockIdx.x * 4 + wg] = (t1 - t0) + (z + lsum == 12345.f ? 1 : 0);
  if (threadIdx.x % 128 == 0) out[132 * 4 + blockIdx.x * 4 + wg] = smx_cyc;
}

template <int NQK, int KQK, int NPV, int KPV, int NWG, bool PP, bool PV_SS = false, bool SMX = false, int MODE = 0,
          class T = E4>
void run(const char* name, int copy_kb = 0, int iters = 2000) {
  static uint8_t* src = nullptr;
  if (!src) { cudaMalloc(&src, 8 << 20); cudaMemset(src, 0x33, 8 << 20); }
  auto k = bench<T, NQK, KQK, NPV, KPV, NWG, PP, PV_SS, SMX, MODE>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  unsigned long long* d;
  cudaMalloc(&d, 2 * 132 * 4 * 8);
  k<<<132, 128 * NWG + 128, 200 * 1024>>>(50, d, src, copy_kb);
  k<<<132, 128 * NWG + 128, 200 * 1024>>>(iters, d, src, copy_kb);
  cudaError_t e = cudaDeviceSynchronize();
  unsigned long long h[2 * 132 * 4];
  cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  double cyc = 0;
  for (int b = 0; b < 132; ++b) cyc += double(h[b * 4]) / 132;
  const double per_it = cyc / iters;
  double smx = 0;
  for (int b = 0; b < 132; ++b) smx += double(h[132 * 4 + b * 4]) / 132 / iters;
  // Per k-step: 32 e4m3 or 16 bf16 elements; the tensor cores' nominal rate per clock and SM:
  // 8192 (e4m3) or 4096 (bf16) FLOP.
  const double kk = 32.0 / sizeof(T), peak = 8192.0 / sizeof(T);
  const double flop = NWG * (64.0 * NQK * kk * 2 * KQK + 64.0 * NPV * kk * 2 * KPV);
  printf("%-36s copy %2d KB %s cycles/iter %8.1f  ideal %7.1f  (%.1f %% of %.0f)  softmax %6.1f\n", name, copy_kb,
         e ? cudaGetErrorString(e) : "", per_it, flop / peak, 100.0 * flop / per_it / peak, peak, smx);
  fflush(stdout);
  cudaFree(d);
}

int main() {
  // GEMMs alone: S and P V of the hd128 128x192 tile (per consumer: 4 k-steps of m64n192k32
  // and 6 of m64n128k32), the hd256 128x128 one, and a 256-key hd128 tile.
  run<192, 4, 128, 6, 1, false>("hd128 gemms, 1 WG");
  run<192, 4, 128, 6, 2, true>("hd128 gemms, 2 WG ping-pong");
  run<256, 4, 128, 8, 2, true>("hd128 n256 gemms, 2 WG pp");
  run<128, 8, 256, 4, 2, true>("hd256 gemms, 2 WG pp");
  // With the softmax's work (96 scores per thread at hd128, 64 at hd256).
  run<192, 4, 128, 0, 1, false, false, true>("hd128 S + softmax, 1 WG");
  run<192, 4, 128, 6, 1, false, false, true>("hd128 step + softmax, 1 WG");
  run<192, 4, 128, 6, 2, true, false, true>("hd128 step + softmax, pp");
  run<192, 4, 128, 6, 2, false, false, true>("hd128 step + softmax, no pp");
  run<192, 4, 128, 6, 2, true, false, true, 1>("hd128 step + softmax no ex2, pp");
  run<192, 4, 128, 6, 2, true, false, true, 2>("hd128 step + ex2 only, pp");
  run<192, 4, 128, 6, 2, true, false, true, 3>("hd128 step + softmax 1/4 poly, pp");
  run<192, 4, 128, 6, 2, true, false, true, 5>("hd128 step + softmax 3/8 poly, pp");
  run<192, 4, 128, 6, 2, true, false, true, 4>("hd128 step + softmax 1/2 poly, pp");
  run<192, 4, 128, 0, 1, false, false, true, 4>("hd128 S + softmax 1/2 poly, 1 WG");
  run<192, 4, 128, 6, 2, true, false, true, 6>("hd128 step + softmax no row sums, pp");
  run<192, 4, 128, 6, 2, true, false, true, 7>("hd128 step + softmax all lin, pp");
  run<192, 4, 128, 6, 2, true, false, true, 8>("hd128 step + softmax 1/2 lin, pp");
  run<192, 4, 128, 6, 2, true, false, true, 9>("hd128 step + softmax 1/4 lin, pp");
  run<192, 4, 128, 0, 1, false, false, true, 7>("hd128 S + softmax all lin, 1 WG");
  run<128, 8, 256, 4, 2, true, false, true, 8>("hd256 step + softmax 1/2 lin, pp");
  // Row sums on the tensor cores: P V at N = 136 (V^T and a block of ones).
  run<192, 4, 136, 6, 2, true>("hd128 gemms, P V n136, pp");
  run<192, 4, 136, 6, 2, true, false, true>("hd128 step n136 + softmax, pp");
  run<192, 4, 136, 6, 2, true, false, true, 6>("hd128 step n136 + softmax no row sums, pp");
  run<192, 4, 128, 6, 2, true, true, true>("hd128 step (P V SS) + softmax, pp");
  run<192, 4, 128, 0, 2, true, false, true>("hd128 S only + softmax, pp");
  run<256, 4, 128, 8, 2, true, false, true>("hd128 n256 step + softmax, pp");
  run<128, 8, 256, 4, 2, true, false, true>("hd256 step + softmax, pp");
  // With TMA-like traffic into the operands' shared memory.
  run<192, 4, 128, 6, 2, true, false, true>("hd128 step + softmax, pp", 48);
  run<192, 4, 128, 6, 2, true, false, true>("hd128 step + softmax, pp", 96);
  run<128, 8, 256, 4, 2, true, false, true>("hd256 step + softmax, pp", 64);
  // The bf16 hd128 128x128 tile of the softcap rows (fwd_sm90_bf16_hd128_128x128_s2_p_sv; per
  // consumer 8 k-steps of m64n128k16 for S and for P V, 64 scores per thread): the GEMMs
  // alone, with the plain softmax's speculative step, and with the softcap's two forms before
  // it (and the f16x2 tanh probe).
  run<128, 8, 128, 8, 2, true, false, false, 0, BF>("bf16 hd128 gemms, pp");
  run<128, 8, 128, 8, 2, true, false, true, 0, BF>("bf16 hd128 step + softmax, pp");
  run<128, 8, 128, 8, 2, true, false, true, 11, BF>("bf16 hd128 step + cap fast, pp");
  run<128, 8, 128, 8, 2, true, false, true, 10, BF>("bf16 hd128 step + cap exact, pp");
  run<128, 8, 128, 8, 2, true, false, true, 12, BF>("bf16 hd128 step + cap f16x2, pp");
  return 0;
}
