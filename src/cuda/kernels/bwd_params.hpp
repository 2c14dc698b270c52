// Host -> device parameters of the backward kernels (bwd_sm80.cuh, bwd_aux.cu): the
// forward's parameters of the same problem (q, k, v, out as o, lse, shapes, varlen, band,
// folded scale) and what the backward adds: dO, the three gradients, and the workspace.
// Plain data, passed by value; filled by src/cuda/bwd_backend.cpp.
#pragma once

#include <cstdint>

#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {

struct BwdParams {
  FwdParams f;  // f.o: the forward's output O (read); f.lse: its lse (read, never null)
  const void* dout = nullptr;
  int64_t do_sb = 0, do_ss = 0, do_sh = 0;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t dq_sb = 0, dq_ss = 0, dq_sh = 0;
  int64_t dk_sb = 0, dk_ss = 0, dk_sh = 0;
  int64_t dv_sb = 0, dv_ss = 0, dv_sh = 0;
  float scale = 1.f;  // the softmax scale (natural): dQ and dK are scale * (dS K), (dS^T Q)
  int kv_heads = 0;
  // Entries of the tensors' batch dim (B; 1 for varlen) and rows of their sequence dim
  // (Sq, Sk; varlen: the packed tensors' rows, which may run past the last sequence).
  int nb = 0, rows_q = 0, rows_k = 0;
  // Workspace (fp32). rowstat: per query row (bwd_row_stats) {lse log2 e, or +inf where lse
  // is -inf (P = 0 there, never NaN); D = rowsum(dO * O)} at [(bb H + h) rows_q + row]. dq_acc: the
  // unscaled dQ sums at [split][(bb H + h) rows_q + row][acc_ld] (split stride dq_split
  // floats), zeroed before the main kernel; `splits` slices, summed in order by the
  // postprocess. acc_ld is the instance's head dim: the main kernel adds whole padded rows
  // (columns past D get exact zeros: K's are zero-filled), so it needs no column test.
  float2* rowstat = nullptr;
  float* dq_acc = nullptr;
  int acc_ld = 0;
  int64_t dq_split = 0;  // floats between slices; 0 when all CTAs add into slice 0
  int splits = 1;
  // The main kernel's grid.x before the head-dim split: key blocks of the longest sequence
  // (atomic mode: one CTA each), or the deterministic splits (each CTA walks key blocks
  // blockIdx.x, + key_ctas, ... and adds into slice blockIdx.x alone).
  int key_ctas = 1;
};

// Dynamic shared memory of a bwd_sm80 instance (BwdSm80Traits::kSmem; the registry sizes its
// rows with it): K and V tiles of block_n rows, `stages` Q and dO tiles of block_m rows (rows
// of the head dim padded to 128 bytes: common/swizzle.cuh) and their row stats (float2),
// dS^T (block_n rows of block_m elements and 16 bytes), and 48 bytes of loop state.
constexpr int bwd_sm80_smem(int head_dim, int block_m, int block_n, int stages, int elem_bytes) {
  const int row = (head_dim * elem_bytes + 127) / 128 * 128, ds_row = block_m * elem_bytes + 16;
  return 2 * block_n * row + stages * block_m * (2 * row + 8) + block_n * ds_row + 48;
}

// Dynamic shared memory of a bwd_sm90 instance (BwdSm90Traits::kSmem): K and V tiles of block_n
// rows, `stages` Q and dO tiles of block_m rows (rows of the head dim in 128-byte column blocks),
// dS^T (block_n rows of block_m elements), the row stats, and 1024 bytes for aligning the base
// to the 128-byte swizzle's atom.
constexpr int bwd_sm90_smem(int head_dim, int block_m, int block_n, int stages, int elem_bytes) {
  const int row = head_dim * elem_bytes;
  return 2 * block_n * row + stages * block_m * (2 * row + 8) + block_n * block_m * elem_bytes + 1024;
}

// CTAs per SM a bwd_sm90 instance's registers are budgeted for (its __launch_bounds__; the
// backend's deterministic split count assumes it): one for two warpgroups (block_n 128: dK, dV,
// S^T and dP^T of 64 keys take ~220 of a thread's registers at hd128), two for one (block_n
// 64), so that one CTA's exponentials, stores and reductions overlap the other's MMAs.
constexpr int bwd_sm90_ctas_per_sm(int block_n) { return block_n > 64 ? 1 : 2; }

}  // namespace flashcore::cuda
