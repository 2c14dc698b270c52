// Resolved problems: what the API hands a backend after every check has passed.
// Plain data (no ownership); strides in elements; the last dim of every operand is
// contiguous. The CPU pipelines and the CUDA kernels read the same structs.
#pragma once

#include <cstdint>

#include "core/variants/mask.hpp"
#include "core/variants/score.hpp"
#include "flashcore/types.hpp"

namespace flashcore::core {

// One operand of attention: element (b, s, h, d) at data + b*sb + s*ss + h*sh + d.
struct Operand4 {
  const void* data = nullptr;
  int64_t sb = 0, ss = 0, sh = 0;
};

struct AttentionProblem {
  DType dtype = DType::f32;      // storage of q, k, v (and o, except for fp8 q/k/v)
  DType out_dtype = DType::f32;  // storage of o (f16/bf16 for fp8 inputs, else dtype)
  // storage of k and v: dtype, or e4m3 for an fp8 KV cache under 16-bit / fp32 q
  // (attention_with_kvcache; k_descale / v_descale and their per-head arrays then dequantize
  // it)
  DType kv_dtype = DType::f32;
  float q_descale = 1.0f, k_descale = 1.0f, v_descale = 1.0f;  // fp8 dequantization
  // fp8 per-head factors (AttentionParams::*_descale_heads): [batch][kv_heads] or null
  const float* q_descale_heads = nullptr;
  const float* k_descale_heads = nullptr;
  const float* v_descale_heads = nullptr;
  Device device = Device::cpu;
  Operand4 q, k, v;
  void* o = nullptr;
  int64_t o_sb = 0, o_ss = 0, o_sh = 0;
  float* lse = nullptr;          // optional: element (b, h, s) at lse + b*lse_sb + h*lse_sh + s
  int64_t lse_sb = 0, lse_sh = 0;
  int64_t batch = 0, sq = 0, sk = 0, heads = 0, kv_heads = 0, d = 0, dv = 0;
  // varlen: when set, batch = number of sequences and sequence b spans
  // [cu_q[b], cu_q[b+1]) along the s dim of q/o (and cu_k for k/v); sq/sk are the max lengths.
  const int32_t* cu_q = nullptr;
  const int32_t* cu_k = nullptr;
  // varlen on CUDA: the caller's bounds of the longest sequences (0: the CUDA backend copies
  // cu_q/cu_k to the host); sq/sk stay the packed tensors' rows there.
  int64_t max_sq = 0, max_sk = 0;
  float scale = 1.0f;            // softmax scale (natural exp domain)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  Strategy strategy = Strategy::automatic;
  Exp2Mode exp2 = Exp2Mode::exact;
  int threads = 0;
  const char* impl = nullptr;
  void* stream = nullptr;
  bool exact_fp32 = false;
  int tile_m = 0, tile_n = 0;  // CUDA: forced tile shape (0 = table)
  // A KV cache (attention_with_kvcache): sequence b has seqlens_k[b] keys (sk is then the
  // longest). With block_table the cache is paged: key s of sequence b
  // is row s % page_size of page block_table[b * block_table_sb + s / page_size], and k / v
  // give the page as their batch stride (sb), the row within a page as ss.
  const int32_t* seqlens_k = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_sb = 0, page_size = 0;
  // Score variants (core/variants/score.hpp; AttentionParams): softcap (0 = off); ALiBi
  // slopes, the slope of (batch entry or sequence b, head h) at alibi[b * alibi_sb + h]
  // (alibi_sb = 0 for slopes [H]), or null; sinks [H] or null.
  float softcap = 0.0f;
  const float* alibi = nullptr;
  int64_t alibi_sb = 0;
  const float* sinks = nullptr;

  int64_t group() const { return heads / kv_heads; }
  ScoreMod score_mod() const { return make_score_mod(softcap, alibi != nullptr); }
  float slope(int64_t b, int64_t h) const { return alibi != nullptr ? alibi[b * alibi_sb + h] : 0.0f; }
  // A score variant set: softcap, ALiBi or sinks.
  bool variants() const { return softcap > 0.0f || alibi != nullptr || sinks != nullptr; }
  // A local window (either side bounded); a band mask (causal or a window) limits which keys
  // a query sees.
  bool windowed() const { return window_left >= 0 || window_right >= 0; }
  bool banded() const { return causal || windowed(); }
};

// attention_with_kvcache: attention over a KV cache (attn.k / attn.v, attn.seqlens_k the
// lengths before the append, attn.sk the longest of them; CUDA tensors, whose lengths are
// not read on the host: cache_rows - s_new) after the new keys k_new / v_new
// [B, s_new, Hkv, D] are written in place at each sequence's seqlens_k[b] ..
// seqlens_k[b] + s_new - 1. cache_rows: the keys a sequence's cache holds (S_max, or
// max_pages * page_size); num_pages: the paged cache's pages.
struct KvCacheProblem {
  AttentionProblem attn;
  Operand4 k_new, v_new;
  int64_t s_new = 0;
  int64_t cache_rows = 0, num_pages = 0;
};

// merge_states: n parts (O [B, S, H, D] in part_dtype, lse [B, H, S] fp32) merged into one.
struct StatePart {
  Operand4 o;
  const float* lse = nullptr;
  int64_t lse_sb = 0, lse_sh = 0;
};
struct MergeProblem {
  DType part_dtype = DType::f32, out_dtype = DType::f32;
  Device device = Device::cpu;
  const StatePart* parts = nullptr;
  int64_t n = 0;
  void* o = nullptr;
  int64_t o_sb = 0, o_ss = 0, o_sh = 0;
  float* lse = nullptr;
  int64_t lse_sb = 0, lse_sh = 0;
  int64_t batch = 0, s = 0, heads = 0, d = 0;
  int threads = 0;
  void* stream = nullptr;
};

// softmax_v: O[M, d] = softmax(scale * S[M, L]) V[L, d]; S element (m, l) at
// s + m*s_sm + l*s_sl (either stride may be 1: row- or column-major scores).
struct SoftmaxVProblem {
  const void* s = nullptr;
  DType s_dtype = DType::f32;    // f32 or i32
  int64_t s_sm = 0, s_sl = 0;
  const void* v = nullptr;
  int64_t v_sl = 0;
  DType dtype = DType::f32;      // storage of v and o
  void* o = nullptr;
  int64_t o_sm = 0;
  int64_t m = 0, l = 0, d = 0;
  float scale = 1.0f;
  Strategy strategy = Strategy::automatic;
  Exp2Mode exp2 = Exp2Mode::exact;
  int threads = 0;
  const char* impl = nullptr;
};

// gemm_chain: E[M, N] = (A[M, K1] B[K1, K2]) C[K2, N], row strides given.
struct GemmChainProblem {
  DType dtype = DType::f32;
  const void* a = nullptr; int64_t a_sm = 0;
  const void* b = nullptr; int64_t b_sk = 0;
  const void* c = nullptr; int64_t c_sk = 0;
  void* e = nullptr; int64_t e_sm = 0;
  int64_t m = 0, k1 = 0, k2 = 0, n = 0;
  int threads = 0;
  const char* impl = nullptr;
};

}  // namespace flashcore::core
