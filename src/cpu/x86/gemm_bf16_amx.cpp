// AMX bf16 GEMM micro-kernel (tdpbf16ps): C[32 x 32] fp32 (=|+=) A B with bf16 operands.
//
// Operands (ukernel.hpp, list entry `rows, kpairs`):
//   A  rows:   A(k, i) at a[i * as + k]: two A tiles of 16 rows x 32 bf16 (64 bytes each),
//              row stride as * 2 bytes (as >= kc);
//   B  kpairs: B(k, j) at b[(k / 2) * 64 + 2 * j + k % 2]: a B tile is 16 pair rows x 16
//              columns (64 bytes), the two column halves 64 bytes apart, row stride 128.
// C is four 16 x 16 fp32 tiles (tmm0..3) held for the whole k loop; per k step of 32 the
// kernel loads 2 A tiles (tmm4, tmm5) and 2 B tiles (tmm6, tmm7) and issues 4 tdpbf16ps,
// each 16 x 16 x 32 multiply-adds: 4 KiB loaded per 32 Ki multiply-adds.
//
// Tile configuration: every AMX kernel here uses one palette (all eight tiles 16 rows x
// 64 bytes), which the caller has loaded on its thread through prepare_gemm(amx_bf16)
// (amx_configure_tiles below) before a run of calls.
// Called only when dispatch found AMX-BF16 and AMX-TILE in cpuid and Linux granted the
// tile-data permission (dispatch.cpp). No STL and no shared inline templates here.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

constexpr int kTileRows = 16;   // rows of every tile
constexpr int kTileBytes = 64;  // bytes per tile row: 16 fp32 or 32 bf16 (16 k pairs)
constexpr int kMr = 32, kNr = 32, kKStep = 32;

// The LDTILECFG operand (Intel SDM vol. 1, 3.2 "Tile configuration"): palette 1, then the
// bytes per row of tiles 0..15 (16-bit each) from byte 16 and their rows from byte 48.
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

constexpr TileConfig make_config() {
  TileConfig c{};
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = kTileBytes;
    c.rows[t] = kTileRows;
  }
  return c;
}
// A constant object, so the 64 bytes LDTILECFG reads exist in memory (GCC 12's
// _tile_loadconfig names only 8 of them as its asm operand: the rest of a stack copy may
// never be stored).
constexpr TileConfig kConfig = make_config();


// Three schedules of the same 2 x 2 block, listed as separate kernels so one run measures
// them side by side (docs/results/cpu-x86-2026-11-22.md, 2026-11-22, e446ba5: GEMM-only, 1 thread,
// aligned operands, plain 1197, il 1208, ilpf 1075 GFLOP/s; `auto` uses plain):
//   plain      all four tile loads of a k step, then its four tdpbf16ps;
//   il         loads interleaved with the products (A0 B0, C00, B1, C01, A1, C10, C11), so a
//              load into a tile register waits only for the product that last read it, not
//              for the whole previous step (tile registers are not known to be renamed);
//   ilpf       il, and the cache lines of the next k step's A and B prefetched into L1 at
//              the start of each step (the operands of one call stream from L2: 32 KiB at
//              kc = 256, the stage-2 P rows and V panel).
// and a fourth, the stream form of the plain kernel (gemm_streams.inc):
//   t1         il with B's tiles loaded by TILELOADDT1, the load that hints the data will
//              not be reused: for a B panel that one row block reads once (stage 2 with a
//              single block of MR query rows, the GEMM-only row), so the V lines streaming
//              from L2 do not push the A strip out of L1. Probe (2026-11-27, c07e6f5, 1 thread,
//              M 32, L 512, d 256, one call per panel): 57 % -> 66-68 % of the tile peak;
//              where a second row block reads the same panel (stage 1's resident Q panel,
//              attention's 64-row blocks) the hint makes it come back from L2 (2026-11-27,
//              2c6ea53).
template <bool kInterleave, bool kPrefetch, bool kStreamB = false>
__attribute__((always_inline)) inline void gemm(int64_t kc, const void* a_, int64_t as,
                                                const void* b_, void* c_, int64_t ldc,
                                                int accumulate) {
  const char* a = static_cast<const char*>(a_);
  const char* b = static_cast<const char*>(b_);
  char* c = static_cast<char*>(c_);
  const int64_t a_ld = as * 2, c_ld = ldc * 4;          // row strides in bytes
  constexpr int64_t b_ld = 2 * kNr * 2;                 // one pair row of the panel
  char* c10 = c + kTileRows * c_ld;
  if (accumulate) {
    _tile_loadd(0, c, c_ld);
    _tile_loadd(1, c + kTileBytes, c_ld);
    _tile_loadd(2, c10, c_ld);
    _tile_loadd(3, c10 + kTileBytes, c_ld);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const char* a1 = a + kTileRows * a_ld;
  for (int64_t k = 0; k < kc; k += kKStep) {
    // k elements of A rows: 2 bytes each; k pair rows of B: b_ld bytes per 2 k.
    const int64_t ao = k * 2, bo = k / 2 * b_ld;
    if (kPrefetch && k + kKStep < kc) {
      const char* an = a + ao + kKStep * 2;
      const char* bn = b + bo + kKStep / 2 * b_ld;
      for (int r = 0; r < kMr; ++r) _mm_prefetch(an + r * a_ld, _MM_HINT_T0);
      for (int r = 0; r < kKStep / 2; ++r) {
        _mm_prefetch(bn + r * b_ld, _MM_HINT_T0);
        _mm_prefetch(bn + r * b_ld + kTileBytes, _MM_HINT_T0);
      }
    }
    if (kInterleave) {
      _tile_loadd(4, a + ao, a_ld);
      if (kStreamB)
        _tile_stream_loadd(6, b + bo, b_ld);
      else
        _tile_loadd(6, b + bo, b_ld);
      _tile_dpbf16ps(0, 4, 6);
      if (kStreamB)
        _tile_stream_loadd(7, b + bo + kTileBytes, b_ld);
      else
        _tile_loadd(7, b + bo + kTileBytes, b_ld);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a1 + ao, a_ld);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_loadd(4, a + ao, a_ld);
      _tile_loadd(5, a1 + ao, a_ld);
      _tile_loadd(6, b + bo, b_ld);
      _tile_loadd(7, b + bo + kTileBytes, b_ld);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, c_ld);
  _tile_stored(1, c + kTileBytes, c_ld);
  _tile_stored(2, c10, c_ld);
  _tile_stored(3, c10 + kTileBytes, c_ld);
  // The tile stores are asm statements without a memory operand: make the caller's later
  // reads of C see them.
  __asm__ volatile("" ::: "memory");
  static_assert(kMr == 2 * kTileRows && kNr == 2 * kTileRows, "2 x 2 tiles of 16 x 16");
}

}  // namespace

// The tile configuration is per thread and anyone may change it between two of our runs:
// other AMX code loads its own palette or releases the tiles (TILERELEASE, as oneDNN does
// after its kernels), after which a tile instruction faults (#UD). So this reads the live
// configuration (STTILECFG: 64 bytes, zeros when released) and loads ours only when it
// differs (LDTILECFG also zeroes all eight tiles). A thread-local "configured" flag, the
// first version, crashed the benchmark once its AMX peak loop had released the tiles. It
// ran at every kernel call until c3fcc88 (2026-11-22); on the Sapphire Rapids host that check cost
// the GEMM-only loop (32 x 256 x 512, calls of 8 k steps) 1335 -> 1183 GFLOP/s, so it now
// runs once per pipeline stage (prepare_gemm), before the calls.
void amx_configure_tiles() {
  TileConfig now;
  __asm__ volatile("sttilecfg %0" : "=m"(now));
  if (std::memcmp(&now, &kConfig, sizeof now) != 0)
    __asm__ volatile("ldtilecfg %0" ::"m"(kConfig));
}

void bf16_32x32_amx(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                    int accumulate) {
  gemm<false, false>(kc, a, as, b, c, ldc, accumulate);
}
// Panel form (gemm_panels.inc, GemmPanel in ukernel.hpp), kc <= 64: B's k steps stay in
// tmm4..7 (k 0..31: columns 0..15, 16..31; k 32..63: the same) for the whole row range;
// per 16 rows two A tiles (tmm2, tmm3), two C tiles (tmm0, tmm1), 2 or 4 products. At head
// dim 64 the 2 x 2 kernel spends 8 tile loads and 4 stores per 8 products; this, 2 loads
// and 2 stores per 4. Stage-1 probe (K rows 1 KiB apart, one 64-query block, 1 thread,
// 2026-11-26, f933091): 663 -> 1076-1115 GFLOP/s, the column max of each 16-row block included.
// The column max is this TU's only vector code (AVX-512F, which AMX CPUs have).
void bf16_32x32_amx_panel(int64_t kc, const void* a_, int64_t as, int64_t rows, const void* b_, float* c,
                          int64_t ldc, float* mx) {
  const char* a = static_cast<const char*>(a_);
  const char* b = static_cast<const char*>(b_);
  const int64_t a_ld = as * 2, c_ld = ldc * 4;
  constexpr int64_t b_ld = 2 * kNr * 2;
  const bool two = kc > kKStep;
  _tile_loadd(4, b, b_ld);
  _tile_loadd(5, b + kTileBytes, b_ld);
  if (two) {
    _tile_loadd(6, b + kKStep / 2 * b_ld, b_ld);
    _tile_loadd(7, b + kKStep / 2 * b_ld + kTileBytes, b_ld);
  }
  __m512 m0 = _mm512_set1_ps(-__builtin_inff()), m1 = m0;
  for (int64_t i = 0; i < rows; i += kTileRows) {
    const char* ai = a + i * a_ld;
    char* ci = reinterpret_cast<char*>(c + i * ldc);
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, ai, a_ld);
    _tile_dpbf16ps(0, 2, 4);
    _tile_dpbf16ps(1, 2, 5);
    if (two) {
      _tile_loadd(3, ai + kKStep * 2, a_ld);
      _tile_dpbf16ps(0, 3, 6);
      _tile_dpbf16ps(1, 3, 7);
    }
    _tile_stored(0, ci, c_ld);
    _tile_stored(1, ci + kTileBytes, c_ld);
    __asm__ volatile("" ::: "memory");
    if (mx != nullptr)
      for (int r = 0; r < kTileRows; ++r) {
        const float* row = c + (i + r) * ldc;
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(row + 16));
      }
  }
  if (mx != nullptr) {
    _mm512_storeu_ps(mx, _mm512_max_ps(_mm512_loadu_ps(mx), m0));
    _mm512_storeu_ps(mx + 16, _mm512_max_ps(_mm512_loadu_ps(mx + 16), m1));
  }
}

void bf16_32x32_il_amx(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                       int64_t ldc, int accumulate) {
  gemm<true, false>(kc, a, as, b, c, ldc, accumulate);
}
void bf16_32x32_ilpf_amx(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                         int64_t ldc, int accumulate) {
  gemm<true, true>(kc, a, as, b, c, ldc, accumulate);
}
void bf16_32x32_t1_amx(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                       int64_t ldc, int accumulate) {
  gemm<true, false, true>(kc, a, as, b, c, ldc, accumulate);
}

}  // namespace flashcore::cpu::ukernels
