// Softcap and ALiBi over the forward's score tiles (score_mod.hpp). Portable C++ written for
// auto-vectorization over the tile's query rows, compiled per x86-64 level up to v4 (AVX-512)
// (core/clones.hpp); one loop per combination of variants, chosen once per tile, so no
// per-element branch.
#include "cpu/pipelines/score_mod.hpp"

#include <algorithm>
#include <cmath>

#include "core/clones.hpp"

namespace flashcore::cpu {
namespace {

template <bool kCap, bool kAlibi>
inline void mod_tile(float* t, int64_t kc, int64_t mq, int64_t j0, const TileMod& m) {
  // Rows in chunks: each chunk's distance origin (diag - j0) as exact floats (positions below
  // 2^24 of each other), the key's offset in the tile added per entry.
  constexpr int64_t kChunk = 64;
  float rel[kChunk];
  const float cap = m.mod.softcap, inv = m.mod.inv_softcap, scale = m.scale;
  for (int64_t i0 = 0; i0 < mq; i0 += kChunk) {
    const int64_t n = std::min(kChunk, mq - i0);
    const float* slope = kAlibi ? m.slope + i0 : nullptr;
    if (kAlibi)
      for (int64_t i = 0; i < n; ++i) rel[i] = float(m.diag[i0 + i] - j0);
    for (int64_t k = 0; k < kc; ++k) {
      float* r = t + k * mq + i0;
      const float kf = float(k);
      for (int64_t i = 0; i < n; ++i) {
        float s = scale * r[i];
        if (kCap) s = core::softcap_score(s, cap, inv);
        if (kAlibi) s = core::alibi_score(s, slope[i], std::fabs(rel[i] - kf));
        r[i] = s;
      }
    }
  }
}

}  // namespace

FC_PORTABLE_CLONES_V4 void mod_scores(float* t, int64_t kc, int64_t mq, int64_t j0, const TileMod& m) {
  const bool cap = m.mod.softcap > 0.0f, alibi = m.mod.alibi;
  if (cap && alibi)
    mod_tile<true, true>(t, kc, mq, j0, m);
  else if (cap)
    mod_tile<true, false>(t, kc, mq, j0, m);
  else if (alibi)
    mod_tile<false, true>(t, kc, mq, j0, m);
  else
    mod_tile<false, false>(t, kc, mq, j0, m);
}

}  // namespace flashcore::cpu
