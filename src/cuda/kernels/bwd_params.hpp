// Host -> device parameters of the backward kernels (bwd_sm80.cuh, bwd_aux.cu): the
// forward's parameters of the same problem (q, k, v, out as o, lse, shapes, varlen, band,
// folded scale) and what the backward adds: dO, the three gradients, and the workspace.
// Plain data, passed by value; filled by src/cuda/bwd_backend.cpp.
#pragma once

#include <cstdint>

#include "cuda/kernels/bwd_sizes.hpp"
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
  // floats), zeroed by bwd_row_stats before the main kernel; `splits` slices, summed in order by the
  // postprocess. acc_ld is the instance's head dim: the main kernel adds whole padded rows
  // (columns past D get exact zeros: K's are zero-filled), so it needs no column test.
  float2* rowstat = nullptr;
  float* dq_acc = nullptr;
  int acc_ld = 0;
  // dq_acc's rows swizzled (bwd_sm90: 16-byte chunk c of workspace row r = (bb H + h) rows_q +
  // row stored at chunk c ^ (r % 8), the layout its shared-memory dQ tile is written in without bank conflicts
  // and added to the workspace by bulk reductions); the postprocess reads them back.
  bool dq_swizzled = false;
  // Columns per panel of a slice: the slice holds its rows' columns [c acc_panel, (c + 1)
  // acc_panel) as a [rows][acc_panel] block of its own, panel after panel (the wide bwd_sm90
  // form: one panel per warpgroup, so that a warpgroup's part of a query block is one bulk
  // reduction). acc_panel = acc_ld: plain rows. The swizzle above is within a panel's row.
  int acc_panel = 0;
  int64_t dq_split = 0;  // floats between slices; 0 when all CTAs add into slice 0
  // Deterministic mode in one slice (bwd_sm90, dq_order > 0): the CTAs of a (sequence, head)
  // add each query block's dQ in a fixed order, CTA by CTA, counted by dq_sem[(b H + h)
  // sem_mblocks + query block] (zeroed before the main kernel). dq_order 1 (no band, while
  // every CTA of a (sequence, KV head) is resident at once): CTA n walks the query blocks
  // cyclically from block n M / N (M query blocks, N key blocks), and a block's adders come in
  // descending n from the last CTA that starts at or before it; each waits on one that reached
  // the block earlier in its walk, and the wrap (CTA N - 1 on CTA 0) needs the residency.
  // 2: CTA n walks its blocks in order, CTA N - 1 - blockIdx.x (the last key block first),
  // and a block's adders come in descending n: a CTA waits only on CTAs launched before it;
  // with a right edge to the band (causal) on one that reached the block earlier in its walk.
  unsigned* dq_sem = nullptr;
  int sem_mblocks = 0;
  int dq_order = 0;
  int splits = 1;
  // The main kernel's grid.x before the head-dim split: key blocks of the longest sequence
  // (atomic mode: one CTA each), or the deterministic splits (each CTA walks key blocks
  // blockIdx.x, + key_ctas, ... and adds into slice blockIdx.x alone).
  int key_ctas = 1;
  // bwd_sm90 (its launcher): whole query blocks' Q and dO come by TMA (the maps could be
  // made: no zero extent); otherwise every block by cp.async.
  bool q_tma = false;
};

}  // namespace flashcore::cuda
