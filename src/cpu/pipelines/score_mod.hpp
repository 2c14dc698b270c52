// The score variants on the CPU forward's score tiles (score_mod.cpp): softcap and ALiBi on a
// key-major tile of raw scores, through core/variants/score.hpp's hooks.
#pragma once

#include <cstdint>

#include "core/variants/score.hpp"

namespace flashcore::cpu {

// What a block's rows need: the call's transform and scale, and per row its ALiBi slope and
// its diagonal (query position + Sk - Sq, the key at distance 0); both null without ALiBi.
struct TileMod {
  core::ScoreMod mod;
  float scale = 1.0f;
  const float* slope = nullptr;
  const int64_t* diag = nullptr;
};

// Tile T[kc][mq] (row stride mq) of raw scores q.k for keys [j0, j0 + kc): each entry becomes
// mod(scale * q.k) (natural-log domain, the softmax's scale then 1). Masking comes after.
void mod_scores(float* t, int64_t kc, int64_t mq, int64_t j0, const TileMod& m);

}  // namespace flashcore::cpu
