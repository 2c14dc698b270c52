// The shapes of one CPU pipeline call: the micro-kernel's tile and operand layouts, the
// query block and key tile, and the k chunk of one micro-kernel call (Geometry), derived
// from the chosen kernels and the cache sizes.
#pragma once

#include <cstdint>

#include "cpu/dispatch/dispatch.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu {

// online: the running reference max moves only when a tile's max passes it by more than
// this (in log2 units, so P <= 2^8 until then), FlashAttention-4's conditional rescaling.
// O, l and m stay consistent (all relative to the same reference), so the result is the
// same softmax; what it saves is the O and l rescale of nearly every tile (random scores
// raise some row's max in almost every 256-key tile).
// Measured: docs/results/cpu-pipelines-2026-11-29.md.
inline constexpr float kRescaleSlack = 8.0f;

struct Geometry {
  const GemmUkernel* gk;
  const VecOps* vec;
  int64_t mr, nr, mq;   // kernel tile and query block
  int64_t kc;           // key tile (multiple of mr and k_align)
  int64_t kb;           // k chunk of one micro-kernel call (multiple of k_align)
  int64_t key_align;    // keys are padded to this
  int64_t es;           // element size of P (and of the packed operands)
  DType pt;             // dtype of P as exp2_pack writes it
  Layout pa = Layout::kmajor;  // the kernel's A layout: K blocks, P, gemm_chain's B^T blocks
  Layout pb = Layout::kmajor;  // the kernel's B layout: Q panels, V panels, gemm_chain's C
  const char* key;      // what ran, for PhaseTimes
  const GemmPanel* panel = nullptr;  // the kernel's panel form (stage 1 at small k), or null
  const GemmUkernel* tail = nullptr;  // its tail kernel (a row range's last rows), or null
  const GemmUkernel* stream = nullptr;  // its stream form (stage 2 with one row block), or null
  GemmFn c32 = nullptr, tail_c32 = nullptr;  // their fp32-C forms (acc-f16 kernels), or null
  // online: how far (log2 units of exp2's argument) a tile's max may pass the running
  // reference max before O and l are rescaled to it (see softmax_block); 0 for kernels
  // that accumulate in fp16, whose <= 256-term sums must keep P <= 1.
  float rescale_slack = kRescaleSlack;
};

// Keys (softmax_v's L, gemm_chain's K2) are padded to this: whole MR blocks of P (the
// second GEMM's A operand) and whole k steps of the kernel.
inline int64_t key_align_of(const GemmUkernel& k) { return lcm(k.mr, k.k_align); }

// The per-core L2 size the OS reports (0 if unknown: no cap from it).
int64_t l2_bytes();

// The GEMM path's geometry for `rows` query rows (needs_stage1: blocks are also stage-1
// panels of NR queries). stream_bytes: what every query block reads of the other operands
// (attention: the packed K and V of its group; 0 where blocks read nothing large).
// row_bytes: the block buffers' bytes per query row (attention: its scores and P rows of a
// key tile, its O row and packed Q row); 0 for no cap from the cache size.
Geometry make_geometry(const CpuConfig& cfg, int64_t rows, bool needs_stage1, int64_t stream_bytes = 0,
                       int64_t row_bytes = 0);

// The geometry of stage 2 (P V) and of P when attention runs a kernel pair: the query
// block and key tile of `g`, the P V kernel's tile, layouts, operand dtype and vector ops.
Geometry stage2_geometry(const Geometry& g, const CpuConfig& cfg);

// The rows a query block with `valid` rows computes: whole stage-1 panels (g's NR) rounded
// up to whole stage-2 row blocks (g2's MR); at most g.mq. The last block of a sequence
// that is not a multiple of g.mq computes only these (12x2, S512: 516 rows instead of
// 576), with the same leading dimensions as a whole block's buffers would have.
int64_t live_rows(const Geometry& g, const Geometry& g2, int64_t valid);

// The decode path's block: `rows` query rows in the lanes of the row ops, no padding; K/V
// rows read in place (no key padding), P in fp32 (what the row ops read).
Geometry make_rows_geometry(const CpuConfig& cfg, int64_t rows);

}  // namespace flashcore::cpu
