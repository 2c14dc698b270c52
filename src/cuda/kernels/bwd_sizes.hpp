// Shared memory and CTAs per SM of the backward's instances, as plain constexpr functions
// (no CUDA types): the kernels' traits assert against them, and the policy (policy.hpp, built
// without CUDA for its tests) sizes the rows with them.
#pragma once

namespace flashcore::cuda {

// Dynamic shared memory of a bwd_sm80 instance (BwdSm80Traits::kSmem; the registry sizes its
// rows with it): K and V tiles of block_n rows, `stages` Q and dO tiles of block_m rows (rows
// of the head dim padded to 128 bytes: common/swizzle.cuh) and their row stats (float2),
// dS^T (block_n rows of block_m elements and 16 bytes), and 48 bytes of loop state.
constexpr int bwd_sm80_smem(int head_dim, int block_m, int block_n, int stages, int elem_bytes) {
  const int row = (head_dim * elem_bytes + 127) / 128 * 128, ds_row = block_m * elem_bytes + 16;
  return 2 * block_n * row + stages * block_m * (2 * row + 8) + block_n * ds_row + 48;
}

// Whether a bwd_sm90 instance takes the wide form (kernels/bwd_sm90_wide.cuh): above 128
// columns one warpgroup cannot hold dK and dV of its 64 keys in registers (at 256, 256 of a
// thread's registers for them alone), so two warpgroups split the head dim of one 64-key block.
constexpr bool bwd_sm90_wide(int head_dim) { return head_dim > 128; }

// Dynamic shared memory of a bwd_sm90 instance (BwdSm90Traits::kSmem): K and V tiles of block_n
// rows, `stages` Q and dO tiles of block_m rows (rows of the head dim in 128-byte column blocks)
// and their row stats, dS^T (block_n rows of block_m elements), the pending dQ tile's
// destination and order state (64 bytes), and 1024 bytes for aligning the base to the 128-byte swizzle's atom. The
// narrow form adds the query block's dQ tile (block_m rows of head_dim floats); the wide form
// adds a P^T tile instead and writes dQ over the block's own Q / dO stage. Both end with one
// mbarrier per stage (its Q / dO tiles' TMA loads).
constexpr int bwd_sm90_smem(int head_dim, int block_m, int block_n, int stages, int elem_bytes) {
  const int row = head_dim * elem_bytes;
  const int extra = bwd_sm90_wide(head_dim) ? block_n * block_m * elem_bytes : block_m * head_dim * 4;
  return 2 * block_n * row + stages * block_m * (2 * row + 8) + block_n * block_m * elem_bytes + extra + 64 +
         8 * stages + 1024;
}

// CTAs per SM a bwd_sm90 instance's registers are budgeted for (its __launch_bounds__; the
// backend's deterministic split count assumes it): one for two warpgroups (block_n 128: dK, dV,
// S^T and dP^T of 64 keys take ~220 of a thread's registers at hd128; the wide form), two for
// one (block_n 64), so that one CTA's exponentials, stores and reductions overlap the other's
// MMAs.
constexpr int bwd_sm90_ctas_per_sm(int head_dim, int block_n) {
  return block_n > 64 || bwd_sm90_wide(head_dim) ? 1 : 2;
}

}  // namespace flashcore::cuda
