/* flashcore C ABI: the same operations as flashcore.hpp, with status codes.
 * No exception crosses this boundary; on failure fc_last_error() returns the message
 * (thread-local, valid until the next call on this thread). Conventions are those of
 * flashcore.hpp: shapes in logical order, strides in elements, last dim contiguous,
 * GQA by H % Hkv == 0, causal/window aligned bottom-right when Sq != Sk, fully masked
 * rows give O = 0 and lse = -inf. */
#ifndef FLASHCORE_H
#define FLASHCORE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef enum { FC_F32 = 0, FC_F16 = 1, FC_BF16 = 2, FC_E4M3 = 3, FC_E5M2 = 4, FC_I32 = 5 } fc_dtype;
typedef enum { FC_CPU = 0, FC_CUDA = 1 } fc_device;
typedef enum { FC_AUTO = 0, FC_TWO_PASS = 1, FC_THREE_PASS = 2, FC_ONLINE = 3 } fc_strategy;
typedef enum { FC_EXP_EXACT = 0, FC_EXP_FAST = 1 } fc_exp2_mode;
typedef enum {
  FC_OK = 0,
  FC_INVALID_ARGUMENT = 1,
  FC_UNSUPPORTED = 2,
  FC_DEVICE_ERROR = 3,
  FC_INTERNAL_ERROR = 4
} fc_status;

typedef struct {
  void* data;
  fc_dtype dtype;
  fc_device device;
  int rank;
  int64_t shape[4];
  int64_t strides[4]; /* elements */
} fc_tensor;

/* fc_attention_params_init writes this into params.magic; a struct without it (say, one
 * zero-filled by memset, which would mean a (0, 0) window) is refused with
 * FC_INVALID_ARGUMENT, so every field a call reads was set on purpose. */
#define FC_ATTENTION_PARAMS_MAGIC 0x31414346u /* "FCA1" */

typedef struct {
  uint32_t magic; /* FC_ATTENTION_PARAMS_MAGIC, written by fc_attention_params_init */
  float scale; /* 0 = 1/sqrt(D) */
  int causal;
  int64_t window_left, window_right; /* -1 = unbounded */
  fc_strategy strategy;
  fc_exp2_mode exp2;
  const fc_tensor* lse; /* optional fp32 [B,H,Sq] */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t varlen_batch;
  int threads;
  const char* impl;
  void* stream;
  int exact_fp32;
  int tile_m, tile_n; /* CUDA tuning: forced tile shape, 0 = automatic */
  /* fp8 (e4m3) q/k/v, or k/v of an fp8 KV cache (fc_attention_with_kvcache, CPU):
   * per-tensor dequantization factors (real = stored * descale); 0 = 1 (no descale), as
   * set by fc_attention_params_init */
  float q_descale, k_descale, v_descale;
  /* fp8 per-head factors: B x Hkv floats on the tensors' device (entry b * Hkv + h), each
   * multiplied into its per-tensor factor; NULL = none (AttentionParams in flashcore.hpp) */
  const float* q_descale_heads;
  const float* k_descale_heads;
  const float* v_descale_heads;
  /* varlen: the longest q and k/v sequences, both or neither (0); given, a CUDA call does
   * not copy cu_seqlens to the host (AttentionParams::max_seqlen_q in flashcore.hpp) */
  int64_t max_seqlen_q, max_seqlen_k;
  /* fc_attention_backward only: bit-identical gradients across runs and thread counts
   * (AttentionParams::deterministic in flashcore.hpp); 0 = off */
  int deterministic;
  /* score variants (AttentionParams in flashcore.hpp): softcap > 0 (0 = off); ALiBi slopes,
   * fp32 [H] or [B, H]; sinks, fp32 [H]; NULL = none. CPU tensors (CUDA: FC_UNSUPPORTED) */
  float softcap;
  const fc_tensor* alibi_slopes;
  const fc_tensor* sinks;
  /* fc_attention_backward only, with sinks: fp32 [H] output, the sinks' gradient; NULL = none */
  const fc_tensor* dsinks;
} fc_attention_params;

/* Fills defaults: scale 0 (=1/sqrt(D)), no mask, windows -1, automatic strategy, exact exp,
 * no score variant, and the magic. A NULL params pointer in a call means these defaults too. */
void fc_attention_params_init(fc_attention_params* p);

fc_status fc_attention(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                       const fc_tensor* out, const fc_attention_params* params);
fc_status fc_softmax_v(const fc_tensor* s, const fc_tensor* v, const fc_tensor* out, float scale,
                       fc_strategy strategy, fc_exp2_mode exp2, int threads);
fc_status fc_gemm_chain(const fc_tensor* a, const fc_tensor* b, const fc_tensor* c,
                        const fc_tensor* out, int threads);
/* Pre-packed operands (flashcore.hpp, PackedOperands): B and C of gemm_chain, or V of
 * softmax_v, packed once into one micro-kernel's layout for many calls with fresh A / S.
 * impl: a kernel key, or NULL for the automatic choice. On success *packed receives a new
 * object (free it with fc_packed_free); on failure *packed is not written. The packed calls
 * refuse an object packed for another op, dtype, shape or kernel, naming the argument. */
typedef struct fc_packed fc_packed;
fc_status fc_pack_gemm_chain(const fc_tensor* b, const fc_tensor* c, const char* impl, int threads,
                             fc_packed** packed);
fc_status fc_gemm_chain_packed(const fc_tensor* a, const fc_packed* packed, const fc_tensor* out,
                               int threads);
fc_status fc_pack_softmax_v(const fc_tensor* v, const char* impl, int threads, fc_packed** packed);
fc_status fc_softmax_v_packed(const fc_tensor* s, const fc_packed* packed, const fc_tensor* out,
                              float scale, fc_strategy strategy, fc_exp2_mode exp2, int threads);
/* The kernel key the object was packed for ("" for NULL); valid while the object lives. */
const char* fc_packed_kernel(const fc_packed* packed);
void fc_packed_free(fc_packed* packed); /* NULL is a no-op */

/* Gradients of fc_attention (flashcore.hpp, attention_backward): from the forward's q, k, v,
 * its out and lse (fp32 [B,H,Sq]) and dout = dL/dout, writes dq, dk, dv (q's dtype; strided
 * views allowed). params->lse must be NULL; the workspace is the library's (per call). */
fc_status fc_attention_backward(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                                const fc_tensor* out, const fc_tensor* dout, const fc_tensor* lse,
                                const fc_tensor* dq, const fc_tensor* dk, const fc_tensor* dv,
                                const fc_attention_params* params);

/* Attention over a KV cache (flashcore.hpp, attention_with_kvcache): q [B,Sq,H,D]; k_cache /
 * v_cache contiguous [B,S_max,Hkv,D] or, with block_table (int32 [B,max_pages]), paged
 * [num_pages,page_size,Hkv,D] (FC_KV_HND: dims 1 and 2 swapped); cache_seqlens int32 [B].
 * k_new / v_new [B,S_new,Hkv,D] (both or NULL) are written into the caches at each sequence's
 * cache_seqlens before the attention, which then sees cache_seqlens[b] + S_new keys;
 * cache_seqlens is not updated. block_table, k_new, v_new may be NULL; params->lse as
 * fc_attention's (varlen fields must stay unset). */
typedef enum { FC_KV_NHD = 0, FC_KV_HND = 1 } fc_kv_layout;
fc_status fc_attention_with_kvcache(const fc_tensor* q, const fc_tensor* k_cache, const fc_tensor* v_cache,
                                    const fc_tensor* cache_seqlens, const fc_tensor* block_table,
                                    const fc_tensor* k_new, const fc_tensor* v_new, fc_kv_layout layout,
                                    const fc_tensor* out, const fc_attention_params* params);

/* Merges n >= 1 attention states (flashcore.hpp, merge_states): out_parts[i] [B,S,H,D]
 * (f32/f16/bf16, one dtype) with lse_parts[i] fp32 [B,H,S] into out [B,S,H,D] and lse
 * [B,H,S]. out (lse) may be exactly one part's view: merged in place. threads: CPU threads,
 * 0 = all cores; stream: the cudaStream_t of CUDA tensors (NULL = default stream). */
fc_status fc_merge_states(const fc_tensor* out_parts, const fc_tensor* lse_parts, int64_t n,
                          const fc_tensor* out, const fc_tensor* lse, int threads, void* stream);

/* fp64 references of fc_attention and fc_attention_backward (CPU tensors). */
fc_status fc_attention_reference(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                                 const fc_tensor* out, const fc_attention_params* params);
fc_status fc_attention_backward_reference(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                                          const fc_tensor* out, const fc_tensor* dout,
                                          const fc_tensor* lse, const fc_tensor* dq,
                                          const fc_tensor* dk, const fc_tensor* dv,
                                          const fc_attention_params* params);

/* Message of the last failed call on this thread ("" after a success). */
const char* fc_last_error(void);
const char* fc_version(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* FLASHCORE_H */
