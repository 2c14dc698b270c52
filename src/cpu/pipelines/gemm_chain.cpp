// gemm_chain on the CPU: E = (A B) C through the two GEMM stages, A B never leaving the
// caches, and its pre-packed form (pack_gemm_chain).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/geometry.hpp"
#include "cpu/pipelines/pack.hpp"
#include "cpu/pipelines/packed.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "cpu/pipelines/stages.hpp"

namespace flashcore::cpu {
namespace {

// A group of query blocks shares each packed K2 tile of B and C; groups are
// this many blocks or more, so that the packing (B and C once per group) stays small next
// to the GEMMs.
constexpr int64_t kChainMinGroupBlocks = 8;
// gemm_chain: query blocks of at most this many rows (rounded up to NR), and the K2 tile:
// as many keys as make a row of this many bytes of the kernel's operand dtype (rounded up
// to MR), 120 fp32 keys, 240 fp16/bf16: B and C tiles of 120 KiB and a 62 KiB
// intermediate (fp32) leave room in a 1 MiB L2 for both blocks' A panels and partial E.
// 16-bit operands take the same bytes, twice the keys: the fp16 kernels add each call's
// fp16 tile into fp32 and the AMX kernel stores its C tiles, once per key tile.
// Measured, for this file's choices: docs/results/cpu-pipelines-2026-11-29.md.
constexpr int64_t kChainQueryBlock = 128;
constexpr int64_t kChainKeyTileBytes = 480;

// E = (A B) C, per query block of mq rows and per key tile of kc columns of B / rows of C:
//   stage 1  T[kc][mq] = (B tile)^T x A^T panels   (keys are the kernel's rows, queries its
//            columns: mq is a multiple of NR only)
//   stage 2  E[mq][N] += T^T x C tile panels        (queries are the kernel's rows: T's
//            query columns are padded with zeros to a multiple of MR, mq2, and only the
//            padded rows of E are computed in vain: M = 256 with 12x2 is two blocks of 128
//            computing 132 rows each in stage 2, where blocks of lcm(MR, NR) = 96 made
//            both stages compute 288)
// The B tile of an unpacked call is copied, not re-blocked: row k of B's columns [j0, j0+kc)
// becomes row k of one wide panel ([K1][ldb] k-major), and stage 1 reads key block r at
// column r*MR of it with A stride ldb (ukernel.hpp allows any A stride): whole rows copied
// with vector moves instead of 48-byte pieces scattered into [K1][MR] blocks. Pre-packed B
// tiles are such blocks (chain_layout).
//
// B and C in one kernel's layout, K2 tile by K2 tile (ktiles of kc keys; the last one
// ends at k2p, padded with zeros): per tile t, B's columns [t*kc, t*kc+kc) as one
// [k1p][kc] panel in the kernel's A layout (btile bytes), and C's rows of the tile as
// np / NR panels of [tile length][NR] in its B layout (ctile bytes). A pre-packed
// object holds tile after tile, each its B panel then its C panels: one run of bytes
// that the call prefetches into L2 during the tile before (Prefetch below); the unpacked
// call packs each tile into its thread's buffers just before the tile's GEMMs (it stays
// in L2).
struct ChainLayout {
  int64_t k1p, k2p, np, kc, ktiles;
  int64_t xw;  // B tile: columns per packed panel (kc: one panel; MR: key blocks, see below)
  size_t btile, ctile;
  size_t b_offset(int64_t t) const { return size_t(t) * (btile + ctile); }
  size_t c_offset(int64_t t) const { return b_offset(t) + btile; }
};
// Pre-packed B tiles of the fp32 k-major kernels are [K1][MR] key blocks instead of one
// wide panel: stage 1 then reads each block as one contiguous run, not MR elements of rows
// kc apart. The pre-packed tiles come from memory at every call (16 MiB at K2 = 8192),
// where the contiguous blocks ran the fp32 kernels faster. Not for fp16 (half the bytes:
// no gain), nor for unpacked calls, whose per-call packing into blocks costs more than the
// wide copy with no gain at the L2-resident tiles.
ChainLayout chain_layout(const GemmUkernel& k, int64_t k1, int64_t k2, int64_t n, bool prepacked) {
  ChainLayout c;
  const size_t es = dtype_size(k.ab);
  c.kc = round_up(kChainKeyTileBytes / int64_t(es), key_align_of(k));
  c.k1p = round_up(k1, k.k_align);
  c.k2p = round_up(std::max<int64_t>(k2, 1), key_align_of(k));
  c.np = round_up(n, k.nr);
  c.ktiles = k2 == 0 ? 0 : (c.k2p + c.kc - 1) / c.kc;  // K2 = 0: nothing to pack (E = 0)
  c.xw = prepacked && k.a_layout == Layout::kmajor && es == 4 ? k.mr : c.kc;
  c.btile = size_t(c.k1p * c.kc) * es;
  c.ctile = size_t(c.kc * c.np) * es;
  return c;
}

// Packs K2 tile t of B and C (chain_layout) into btile / ctile; rowbuf holds
// max(kc, np) + 64 floats.
void pack_chain_tile(const core::GemmChainProblem& p, const GemmUkernel& k, const ChainLayout& lay,
                     int64_t t, char* btile, char* ctile, float* rowbuf) {
  const int64_t es = int64_t(dtype_size(p.dtype));
  const int64_t j0 = t * lay.kc;
  const int64_t kc = std::min(lay.kc, lay.k2p - j0);  // multiple of MR
  const int64_t cols = std::min(lay.kc, p.k2 - j0);   // >= 1: j0 < k2p - key_align < k2
  // B's columns [j0, j0+cols) as one panel; columns past them are zero.
  const Rows bt{at(p.b, j0, es), p.b_sk, p.dtype};
  pack_panels(bt, p.k1, cols, lay.k1p, lay.xw, 0, lay.k1p, btile, k.ab, k.a_layout, rowbuf);
  const Rows ct{at(p.c, j0 * p.c_sk, es), p.c_sk, p.dtype};
  pack_panels(ct, cols, p.n, kc, k.nr, 0, kc, ctile, k.ab, k.b_layout, rowbuf);
}

}  // namespace

void gemm_chain(const core::GemmChainProblem& p, const PackedOperands::State* packed,
                PhaseTimes* times) {
  const CpuConfig cfg = select_kernels(p.dtype, packed ? packed->kernel->key : p.impl);
  Geometry g = make_geometry(cfg, p.m, true);
  const int nthreads = resolve_threads(p.threads);
  const ChainLayout lay = chain_layout(*g.gk, p.k1, p.k2, p.n, packed != nullptr);
  const int64_t k1p = lay.k1p, k2p = lay.k2p, np = lay.np;
  const bool timed = times != nullptr;
  std::vector<Phases> phases(static_cast<size_t>(nthreads));
  const int64_t oes0 = int64_t(dtype_size(p.dtype));
  if (p.k2 == 0) {
    // Empty inner dimension: E = 0. (The packed buffers are reused between calls and
    // hold old data, and B has no columns to pack into the one padded key block.)
    const std::vector<float> zero(static_cast<size_t>(p.n), 0.0f);
    for (int64_t i = 0; i < p.m; ++i)
      core::convert_row(zero.data(), p.n, static_cast<char*>(p.e) + i * p.e_sm * oes0, p.dtype);
    report(times, phases, g.key, Strategy::three_pass);
    if (times) times->strategy = "fused";
    return;
  }
  // Query blocks: as few as blocks of at most kChainQueryBlock rows allow, of equal size,
  // rounded up to NR (stage 1); stage 2 runs mq rows (its last row block on the tail kernel
  // where it fits, else on mq2 = mq rounded up to MR rows: T's and E's padding).
  g.kc = lay.kc;
  const int64_t nblocks0 = (p.m + kChainQueryBlock - 1) / kChainQueryBlock;
  g.mq = round_up((p.m + nblocks0 - 1) / nblocks0, g.nr);
  const int64_t mq2 = round_up(g.mq, g.mr);
  // K2 tiles outside the query blocks: a work item is (group of query blocks, range of K2
  // tiles). Per tile it packs that tile of B and of C (stage-2 panels, [kc][NR]) into its
  // thread's buffers, then runs every block of its group on them, so B and C are read from
  // memory once per group instead of once per block.
  const int64_t oes = int64_t(dtype_size(p.dtype));
  const int64_t nblocks = (p.m + g.mq - 1) / g.mq;
  // Groups: one per thread when each gets kChainMinGroupBlocks blocks or more, else fewer.
  const int64_t ngroups =
      std::clamp<int64_t>(nblocks / kChainMinGroupBlocks, 1,
                          std::max<int64_t>(1, std::min<int64_t>(nthreads, nblocks)));
  const int64_t per_group = (nblocks + ngroups - 1) / ngroups;
  // Split over K2 when the groups alone would leave threads idle or unevenly loaded
  // (M = 256 on 2 threads is one group of two blocks): every group then runs on nsplit
  // threads, each for 1/nsplit of the K2 tiles into its own partial E, summed at the end.
  // ngroups * nsplit is a multiple of the thread count.
  const int64_t ktiles = lay.ktiles;
  const int64_t nsplit = std::min<int64_t>(nthreads / gcd(ngroups, nthreads), ktiles);
  std::vector<float> partial(static_cast<size_t>(nsplit > 1 ? nblocks * nsplit * mq2 * np : 0));
  // The B tile in the kernel's A layout (see above): one panel of ldb columns, key block r
  // at column r MR, or (pre-packed fp32, chain_layout) blocks of k1p x MR, ldb = MR.
  const int64_t ldb = block_ld(g.pa, k1p, lay.xw);
  const int64_t xbs = lay.xw == g.mr ? k1p * g.mr : pack_index(g.pa, 0, g.mr, ldb);
  // An acc-f16 kernel whose stage 1 is one call per C tile (one k chunk of stage1, one
  // fp16 chunk of gemm_call) writes its fp16 tiles into P itself (stage1's f16_out).
  const bool f16_direct = g.gk->acc == DType::f16 && g.gk->ab == DType::f16 && k1p > 0 &&
                          k1p <= std::min(g.kb, round_up(kKeyTile, g.gk->k_align)) &&
                          (g.pa != Layout::kpairs || g.mr % 2 == 0);
#pragma omp parallel for schedule(dynamic) num_threads(nthreads)
  for (int64_t item = 0; item < ngroups * nsplit; ++item) {
    const int64_t grp = item / nsplit, split = item % nsplit;
    const int64_t qb0 = std::min(nblocks, grp * per_group), qb1 = std::min(nblocks, qb0 + per_group);
    const int64_t jt0 = ktiles * split / nsplit, jt1 = ktiles * (split + 1) / nsplit;
    Phases& ph = phases[size_t(omp_get_thread_num())];
    Lap lap(timed);
    const int64_t nb = qb1 - qb0;
    Arena& arena = thread_arena();
    arena.reset(static_cast<size_t>(nb * g.mq * k1p * g.es + nb * mq2 * np * 4 +
                                    g.kc * mq2 * (4 + g.es) + 4 * 64));
    char* apack = arena.take<char>(nb * g.mq * k1p * g.es);
    float* T = arena.take<float>(g.kc * mq2);
    char* P = arena.take<char>(g.kc * mq2 * g.es);
    float* Eown = nsplit > 1 ? nullptr : arena.take<float>(nb * mq2 * np);
    auto E = [&](int64_t qb) {
      return nsplit > 1 ? partial.data() + (qb * nsplit + split) * mq2 * np
                        : Eown + (qb - qb0) * mq2 * np;
    };
    // Stage 1 writes T's (or P's) first mq columns; the padding columns up to mq2 stay zero.
    std::fill(T, T + g.kc * mq2, 0.0f);
    if (f16_direct) std::memset(P, 0, size_t(g.kc * mq2 * g.es));
    std::vector<float> rowbuf(static_cast<size_t>(std::max({k1p, g.kc, np}) + 64));
    for (int64_t qb = qb0; qb < qb1; ++qb) {
      std::fill(E(qb), E(qb) + mq2 * np, 0.0f);
      const int64_t i0 = qb * g.mq;
      const Rows arows{at(p.a, i0 * p.a_sm, oes), p.a_sm, p.dtype};
      pack_transposed(arows, std::min(g.mq, p.m - i0), p.k1, k1p, g.nr, 0, g.mq / g.nr,
                      apack + (qb - qb0) * g.mq * k1p * g.es, g.gk->ab, g.pb, rowbuf.data());
    }
    char* const bbuf = packed ? nullptr : pack_slot(0, lay.btile);
    char* const cbuf = packed ? nullptr : pack_slot(1, lay.ctile);
    lap.to(ph.pack);
    for (int64_t t = jt0; t < jt1; ++t) {
      const int64_t kc = std::min(g.kc, k2p - t * g.kc);  // multiple of MR
      const char* btile = packed ? packed->data + lay.b_offset(t) : bbuf;
      const char* ctile = packed ? packed->data + lay.c_offset(t) : cbuf;
      if (!packed) {
        pack_chain_tile(p, *g.gk, lay, t, bbuf, cbuf, rowbuf.data());
        lap.to(ph.pack);
      }
      // A pre-packed call prefetches the next tile over this tile's micro-kernel calls.
      Prefetch pf;
      if (packed != nullptr && t + 1 < jt1) {
        // (chunk_for: ceil(k / kb) chunks of k)
        const int64_t calls = nb * (ceil_div(k1p, g.kb) * (g.mq / g.nr) * (kc / g.mr) +
                                    ceil_div(kc, g.kb) * (mq2 / g.mr) * (np / g.nr));
        pf.p = packed->data + lay.b_offset(t + 1);
        pf.end = pf.p + lay.btile + lay.ctile;
        pf.lines = ceil_div(int64_t(lay.btile + lay.ctile) / 64, calls);
      }
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        // Intermediate tile (A B)^T[kc][mq2], consumed at once by the second GEMM: T itself
        // for fp32 k-major kernels, the kernel's fp16 tiles straight into P (f16_direct),
        // else T converted into the kernel's dtype and layout (leading dimension ldp).
        const char* pt = reinterpret_cast<const char*>(T);
        const int64_t ldp = g.pa == Layout::rows ? g.kc : mq2;
        stage1(g, k1p, kc, btile, xbs, ldb, apack + (qb - qb0) * g.mq * k1p * g.es, T, mq2, nullptr,
               &pf, f16_direct ? reinterpret_cast<uint16_t*>(P) : nullptr, ldp);
        lap.to(ph.gemm);
        if (f16_direct) {
          pt = P;
        } else if (g.gk->ab != DType::f32 || g.pa != Layout::kmajor) {
          if (g.pa == Layout::kmajor) {
            for (int64_t k = 0; k < kc; ++k)
              store_row(T + k * mq2, mq2, P + k * mq2 * g.es, 1, g.gk->ab);
          } else {
            g.vec->pack(kc, mq2, T, mq2, P, ldp, g.gk->ab, g.pa);
          }
          pt = P;
          lap.to(ph.exp_pack);
        }
        stage2(g, kc, pt, ldp, ctile, kc, 0, np, E(qb), &pf);
        lap.to(ph.gemm);
      }
    }
    if (nsplit == 1)
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        const int64_t i0 = qb * g.mq;
        for (int64_t i = 0; i < std::min(g.mq, p.m - i0); ++i)
          core::convert_row(E(qb) + i * np, p.n,
                            static_cast<char*>(p.e) + (i0 + i) * p.e_sm * oes, p.dtype);
      }
    lap.to(ph.normalize);
  }
  if (nsplit > 1) {
    Lap lap(timed);
#pragma omp parallel for num_threads(nthreads)
    for (int64_t r = 0; r < p.m; ++r) {
      const int64_t qb = r / g.mq, i = r % g.mq;
      float* e0 = partial.data() + (qb * nsplit * mq2 + i) * np;
      for (int64_t sp = 1; sp < nsplit; ++sp) {
        const float* e = e0 + sp * mq2 * np;
        for (int64_t j = 0; j < p.n; ++j) e0[j] += e[j];
      }
      core::convert_row(e0, p.n, static_cast<char*>(p.e) + r * p.e_sm * oes, p.dtype);
    }
    lap.to(phases[0].normalize);
  }
  report(times, phases, g.key, Strategy::three_pass);
  if (times) times->strategy = "fused";
}

std::shared_ptr<const PackedOperands::State> pack_gemm_chain(const core::GemmChainProblem& p) {
  const GemmUkernel& k = *select_kernels(p.dtype, p.impl).gemm;
  const ChainLayout lay = chain_layout(k, p.k1, p.k2, p.n, true);
  auto st = std::make_shared<PackedOperands::State>(PackedOperands::State::Op::gemm_chain, p.dtype,
                                                    &k, p.k1, p.k2, p.n,
                                                    size_t(lay.ktiles) * (lay.btile + lay.ctile));
  char* const base = st->data;
#pragma omp parallel num_threads(resolve_threads(p.threads))
  {
    std::vector<float> rowbuf(static_cast<size_t>(std::max(lay.kc, lay.np) + 64));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < lay.ktiles; ++t)
      pack_chain_tile(p, k, lay, t, base + lay.b_offset(t), base + lay.c_offset(t), rowbuf.data());
  }
  return st;
}

}  // namespace flashcore::cpu
