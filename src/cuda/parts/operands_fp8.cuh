// The fp8 (e4m3) storage type's MmaOps for the Hopper kernel (fwd_sm90): P V k-steps of 32
// keys (wgmma m64nNk32), P (already scaled by 2^kFp8PLog2 by the softmax) packed to e4m3
// from the S accumulators without shuffles in the key order of parts/fp8.hpp. sm_90a
// translation units only.
#pragma once

#include <cstdint>

#include "cuda/common/ptx_sm90.cuh"
#include "cuda/parts/fp8.hpp"
#include "cuda/parts/operands.cuh"

namespace flashcore::cuda {

template <>
struct MmaOps<__nv_fp8_e4m3> {
  static constexpr int kPVKeys = 32;  // keys per P V k-step
  // A operand of P V k-step pk (keys 32 pk .. 32 pk + 31) from the softmax output s: the
  // 8-column fragments 4 pk .. 4 pk + 3; register r holds row g (r even) or g + 8 (r odd),
  // fragments 4 pk + (r / 2) * 2 and the next, two keys each (fp8.hpp's order).
  template <int kNF>
  __device__ __forceinline__ static void p_operand(uint32_t (&a)[4], const float (&s)[kNF][4], int pk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int f = 4 * pk + (r / 2) * 2, h = (r % 2) * 2;
      a[r] = ptx::pack4_e4m3(s[f][h], s[f][h + 1], s[f + 1][h], s[f + 1][h + 1]);
    }
  }
};

}  // namespace flashcore::cuda
