#include "cpu/pipelines/geometry.hpp"

#include <unistd.h>

#include <algorithm>

namespace flashcore::cpu {
namespace {

constexpr int64_t kTargetQueryBlock = 64;
// ... except that the kernels with row-major A tiles (AMX, Layout::rows) take blocks of
// kRowsQueryBlock rows when the operands each block streams (attention: one group's packed
// K and V) exceed kRowsStreamBytes: every block then reads them from beyond L2, which the
// tile unit, at its peak only from L1, feels more than the FMA kernels.
// Measured, for this file's choices: docs/results/cpu-pipelines-2026-11-29.md.
constexpr int64_t kRowsQueryBlock = 256;
constexpr int64_t kRowsStreamBytes = int64_t(1) << 20;
// The B panel chunk a micro-kernel call keeps in L1 takes what L1D leaves beside this
// many bytes (the A strip streaming past, C, the stack), and at least this many: half of a
// 32 KiB L1D, 32 KiB of Sapphire Rapids' 48 (l1_panel_bytes).
constexpr int64_t kL1ReserveBytes = 16 << 10;

// L1D less kL1ReserveBytes, at least kL1ReserveBytes (the L1D size unknown: that). On a
// 48 KiB L1D, gemm_chain's stage 1 then runs fp32 K1 = 256 in one call per C tile.
int64_t l1_panel_bytes() {
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  static const int64_t b =
      std::max<int64_t>(kL1ReserveBytes, std::max<long>(0, sysconf(_SC_LEVEL1_DCACHE_SIZE)) - kL1ReserveBytes);
  return b;
#else
  return kL1ReserveBytes;
#endif
}

// The fields of g that follow its GEMM kernel: tile, operand dtype and layouts, vector ops,
// k chunk and the online strategy's rescale slack.
void set_kernel(Geometry& g, const GemmUkernel* gk, const VecOps* vec) {
  g.gk = gk;
  g.vec = vec;
  g.mr = gk->mr;
  g.nr = gk->nr;
  g.es = int64_t(dtype_size(gk->ab));
  g.pt = gk->ab;
  g.pa = gk->a_layout;
  g.pb = gk->b_layout;
  g.key = gk->key;
  g.panel = gemm_panel(*gk);
  g.tail = gemm_tail(*gk);
  g.stream = gemm_stream(*gk);
  g.c32 = gemm_c32(*gk);
  g.tail_c32 = g.tail != nullptr ? gemm_c32(*g.tail) : nullptr;
  g.rescale_slack = gk->acc == DType::f32 ? kRescaleSlack : 0.0f;
  // A B panel chunk of kb x NR operands fills at most l1_panel_bytes().
  g.kb = std::max<int64_t>(gk->k_align, l1_panel_bytes() / (g.nr * g.es) / gk->k_align * gk->k_align);
}

}  // namespace

int64_t l2_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  static const int64_t b = std::max<long>(0, sysconf(_SC_LEVEL2_CACHE_SIZE));
  return b;
#else
  return 0;
#endif
}

Geometry make_geometry(const CpuConfig& cfg, int64_t rows, bool needs_stage1, int64_t stream_bytes,
                       int64_t row_bytes) {
  Geometry g;
  set_kernel(g, cfg.gemm, cfg.vec);
  // Query blocks: whole stage-1 panels (NR queries) and whole stage-2 A blocks (MR query
  // rows, of the P V kernel when attention runs a pair, CpuConfig::gemm2).
  const GemmUkernel* gk2 = cfg.gemm2 != nullptr ? cfg.gemm2 : cfg.gemm;
  const int64_t unit = needs_stage1 ? lcm(lcm(g.mr, g.nr), gk2->mr) : g.mr;
  const bool streams = g.gk->a_layout == Layout::rows && stream_bytes > kRowsStreamBytes;
  g.mq = std::min(round_up(std::max<int64_t>(rows, 1), unit),
                  round_up(streams ? kRowsQueryBlock : kTargetQueryBlock, unit));
  // Default blocks take at most half of L2 in block buffers (a 512 KiB L2 halves the AVX2
  // 6x2 kernel's blocks; a 2 MiB L2 caps none of the measured kernels'); the streaming
  // blocks of AMX are left as they are.
  if (row_bytes > 0 && l2_bytes() > 0 && !streams)
    g.mq = std::min(g.mq, std::max(unit, l2_bytes() / 2 / row_bytes / unit * unit));
  g.key_align = lcm(key_align_of(*g.gk), gk2->k_align);  // K blocks of MR keys; P V's k steps
  g.kc = round_up(kKeyTile, g.key_align);
  return g;
}

// The geometry of stage 2 (P V) and of P when attention runs a kernel pair: the query
// block and key tile of `g`, the P V kernel's tile, layouts, operand dtype and vector ops.
Geometry stage2_geometry(const Geometry& g, const CpuConfig& cfg) {
  if (cfg.gemm2 == nullptr) return g;
  Geometry g2 = g;
  set_kernel(g2, cfg.gemm2, cfg.vec2);
  return g2;
}

int64_t live_rows(const Geometry& g, const Geometry& g2, int64_t valid) {
  return std::min(g.mq, round_up(round_up(std::max<int64_t>(valid, 1), g.nr), g2.mr));
}

Geometry make_rows_geometry(const CpuConfig& cfg, int64_t rows) {
  Geometry g;
  g.gk = cfg.gemm;
  g.vec = cfg.vec;
  g.mr = g.nr = 1;
  g.mq = std::max<int64_t>(rows, 1);
  g.kc = kKeyTile;
  g.kb = kKeyTile;
  g.key_align = 1;
  g.es = 4;
  g.pt = DType::f32;
  g.key = cfg.rows->key;
  return g;
}

}  // namespace flashcore::cpu
