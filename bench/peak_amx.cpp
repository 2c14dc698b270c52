// The AMX bf16 ceiling (tdpbf16ps): the peak of the bf16_*_amx micro-kernels. Four
// accumulator tiles (16 x 16 fp32) fed by two A and two B tiles loaded once, as in the
// kernels' 2 x 2 block, so the loop is the tile unit alone: 4 x 16 x 16 x 32 multiply-adds
// per iteration. Compiled with -mamx-tile -mamx-bf16; called only after the run-time check
// (cpuid and Linux's tile-data permission, peak.cpp via flashcore's dispatch). No STL and
// no shared inline templates here.
#include <immintrin.h>

#include <cstdint>

namespace fcbench {

double peak_loop_amx_bf16(long reps);

namespace {
struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
constexpr TileConfig make_config() {
  TileConfig c{};
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}
constexpr TileConfig kConfig = make_config();
}  // namespace

double peak_loop_amx_bf16(long reps) {
  alignas(64) uint16_t ab[16 * 32];  // bf16 values near 1/64: sums stay finite
  for (int i = 0; i < 16 * 32; ++i) ab[i] = 0x3C80;
  alignas(64) float out[16 * 16];
  __asm__ volatile("ldtilecfg %0" ::"m"(kConfig));
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (long r = 0; r < reps; ++r) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  __asm__ volatile("" ::: "memory");
  volatile float sink = out[0];
  (void)sink;
  _tile_release();
  return 2.0 * 4 * 16 * 16 * 32 * double(reps);
}

}  // namespace fcbench
