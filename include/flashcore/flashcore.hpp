// flashcore: fused attention kernels behind one C++ API.
//
// Three operations, and attention's backward (docs/backward.md); worked examples: README.md's
// C++ example, examples/downstream:
//
//   attention   O = softmax(scale * Q K^T + mask) V       (attention_backward: dQ, dK, dV)
//   softmax_v   O = softmax(scale * S) V            (S given: fp32, or int32 with a scale)
//   gemm_chain  E = (A B) C                          (A B never materialized)
//
// Conventions, checked by the library and by tests/api:
//  * Tensors are strided views. attention takes Q [B, Sq, H, D], K [B, Sk, Hkv, D],
//    V [B, Sk, Hkv, Dv] and writes O [B, Sq, H, Dv]: shape is always given in that
//    logical order, strides (in elements) say the memory order, so BSHD and BHSD
//    layouts both work. The last dim must be contiguous (stride 1).
//  * GQA/MQA: H % Hkv == 0; query head h reads KV head h / (H / Hkv).
//  * Masks: `causal` and a local window (window_left, window_right), -1 = unbounded.
//    When Sq != Sk both align to the bottom-right corner (as FlashAttention >= 2.1):
//    query i may see key j iff  j <= i + (Sk - Sq) + window_right  (causal sets
//    window_right = 0) and  j >= i + (Sk - Sq) - window_left.
//  * A fully masked query row gives O = 0 and lse = -inf (the sink with sinks), never NaN.
//  * lse (optional) is fp32 [B, H, Sq], natural log: lse = log(sum_j exp(scale * q.k_j)) (of
//    the transformed scores, and with the sink, under the score variants).
//  * Score variants (AttentionParams::softcap, alibi_slopes, sinks; docs/variants.md): a
//    logit softcap, ALiBi biases and attention sinks, with every mask, GQA, varlen and lse.
//  * scale defaults to 1/sqrt(D) (attention) or 1 (softmax_v). exp is computed as exp2
//    with scale*log2(e) folded in; Exp2Mode::exact is within 2 ulp of fp32 exp2 (where a
//    kernel stores P in 16 bits, the correctly rounded 16-bit value up to ties within
//    2.7e-6: x86's exp2_p16),
//    Exp2Mode::fast is a cheap approximation (relative error <= 1.8e-3 on x86 and the
//    portable kernels, ~5.4e-3 with FEXPA alone on SVE: see src/core/exp2.hpp and
//    src/cpu/sve/vecops_sve.cpp; on the fp8
//    GPU kernels, when no lse is asked for, half of P's exponentials by the piecewise-linear
//    chord between powers of two, relative error <= 3.2 %, below the e4m3 rounding that P
//    gets anyway; with lse, the exact path). Other CUDA kernels use MUFU.EX2 in both modes;
//    with a softcap c, the 16-bit and TF32 kernels take its tanh from tanh.approx.f32 under
//    fast (relative error ~2^-10.7: up to c times that in the score; one MUFU operation
//    instead of two), the exact form (~2.4e-7) otherwise. The backward pass is exact in both.
//  * Storage dtypes f32, f16, bf16 (fp8 on GPUs that have it); accumulation is fp32.
//    The output has the dtype of Q (attention), V (softmax_v) or A (gemm_chain), except
//    fp8 attention (CUDA, Hopper: e4m3 q/k/v with AttentionParams' descales), which writes
//    f16 or bf16; the fp64 reference also takes e4m3 CPU tensors (and f32 out).
//  * Errors: every function throws flashcore::Error, whose message names the bad
//    argument and its value, before any kernel runs; the output is then untouched.
//  * A problem with a zero-sized dimension (B = 0, Sq = 0, ...) is a no-op (Dv = 0 with an
//    lse output is refused: lse alone is not computed).
//  * Outputs (out, lse) may not overlap any input array (tensors, cu_seqlens, per-head
//    descales) nor themselves (a zero stride, or strides that make two indices share an
//    element): refused by name. Two calls running at once that share an output race, as
//    any two writers of one buffer do; nothing in the library orders them.
//  * Non-finite values: a key a query row does not see (masked by causal or a window) never
//    reaches that row, whatever K and V hold there (NaN or Inf in stale cache slots, say).
//    A row that sees a NaN or Inf score, or a value row holding NaN/Inf, gets NaN/Inf
//    outputs as the fp64 reference does, and such a row's lse is NaN (lse = -inf is kept
//    for fully masked rows). Finite scores give their softmax however large they are, while
//    they fit fp32: kernels form scale * q.k and the ALiBi bias in fp32, where a value past
//    FLT_MAX is an Inf (the fp64 reference keeps it finite). The CUDA attention_with_kvcache
//    does not keep the first of these yet: a NaN / Inf in V at a key a window or the causal
//    mask hides from some rows of a tile can reach those rows (docs/cuda.md, "Semantics").
//  * Subnormal 16-bit inputs may be read as zero: the bf16 dot products of AMX and
//    AVX512-BF16 do so in hardware, as do the SVE fp16 kernels (FPCR.FZ16). A subnormal
//    q or k element times an Inf then gives a NaN score (the fp64 reference: +-Inf).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "flashcore/types.hpp"

#pragma GCC visibility push(default)
namespace flashcore {

struct AttentionParams {
  float scale = 0.0f;         // 0 = default 1/sqrt(D)
  bool causal = false;        // bottom-right aligned when Sq != Sk
  int64_t window_left = -1;   // -1 = unbounded
  int64_t window_right = -1;  // -1 = unbounded (causal forces 0)
  Strategy strategy = Strategy::automatic;
  Exp2Mode exp2 = Exp2Mode::exact;
  Tensor* lse = nullptr;      // optional fp32 [B, H, Sq] output
  // Variable-length batches (FlashAttention varlen convention): when given, Q/K/V/O have
  // B = 1 and hold the sequences back to back along the sequence dim; cu_seqlens_q/k are
  // int32 arrays of length batch + 1 on the tensors' device (prefix sums), and lse is
  // [1, H, total_q]. `varlen_batch` is the number of sequences. Rows past cu_seqlens_q's
  // last entry belong to no sequence and are not written (out and lse).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t varlen_batch = 0;
  // Varlen, the longest sequences of q and k/v (both or neither; 0 = neither). Without them
  // a CUDA call copies cu_seqlens to the host and checks them, which synchronizes the
  // stream (no CUDA-graph capture); with them it reads cu_seqlens on the device only and
  // trusts them and these bounds: a sequence longer than its bound is left partly
  // uncomputed. CPU tensors' host arrays are always checked, the bounds against them.
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  // CPU threads; 0 = OMP_NUM_THREADS / all cores; at most 4 per CPU of the machine (a larger
  // request is refused; a larger OMP_NUM_THREADS is capped there).
  int threads = 0;
  // Force a kernel by key (see list_kernels); nullptr = auto. A 16-bit CPU micro-kernel
  // (bf16_*, f16_*) forced on f32 tensors computes at its own precision: the operands are
  // rounded to bf16 / f16 on packing (what the key's dtype says), the accumulation stays fp32.
  const char* impl = nullptr;
  void* stream = nullptr;      // cudaStream_t for CUDA tensors; nullptr = default stream
  bool exact_fp32 = false;     // CUDA fp32 storage: FFMA instead of TF32 tensor cores
  // CUDA tuning: force the query x key tile of the fused kernel (both 0 = the table's
  // choice for this GPU and head dim); a shape this build has no instance of is refused.
  int tile_m = 0, tile_n = 0;
  // fp8 (e4m3) q/k/v: per-tensor dequantization factors, the real values being the stored
  // ones times these (scores = scale * q_descale * k_descale * Q K^T, O = v_descale * P V).
  // Finite and > 0; for other dtypes they must stay 1, except k's and v's (and their
  // per-head arrays below) for an fp8 KV cache (attention_with_kvcache).
  float q_descale = 1.0f, k_descale = 1.0f, v_descale = 1.0f;
  // fp8 per-head factors (optional; FlashAttention-3's descale tensors): float arrays of
  // B x Hkv on the tensors' device, entry b * Hkv + h for batch entry b (varlen: sequence
  // b) and KV head h; a query head takes its KV head's entry. Each given array multiplies
  // into the per-tensor factor above (scores = scale * q_descale * q_descale_heads[..] *
  // k_descale * k_descale_heads[..] * Q K^T, O = v_descale * v_descale_heads[..] * P V).
  // nullptr = none; fp8 only; 4-byte aligned. The values (finite, > 0) are not read on the
  // host, so they are not checked.
  const float* q_descale_heads = nullptr;
  const float* k_descale_heads = nullptr;
  const float* v_descale_heads = nullptr;
  // attention_backward only: dq/dk/dv bit-identical across runs *and* thread counts (the
  // CPU backend then splits the work by the shape alone, never by the thread count). Without
  // it a CPU result is still bit-identical from run to run at one thread count. CUDA: no
  // result depends on the order of atomic additions then (the bits follow the shape and the
  // device's SM count); by default dq's sums are atomic and may differ in the last bits.
  bool deterministic = false;
  // Score variants (docs/variants.md): each off by default, combinable with every mask, GQA,
  // varlen and lse, forward and backward. CPU backends; on CUDA tensors (f32, f16, bf16) the
  // forward runs them on the sm80-family kernels on every GPU (Hopper too: the sm90 kernels
  // do not take them, and a forced sm90 key with one set is refused, naming it); e4m3 inputs
  // and the CUDA backward refuse them (Status::unsupported, naming it). docs/cuda.md says
  // what they cost on Hopper.
  // softcap > 0: each scaled score s = scale * q.k becomes softcap * tanh(s / softcap)
  // (Gemma 2; FlashAttention's softcap: the scale first), before ALiBi; 0 = off.
  float softcap = 0.0f;
  // ALiBi: fp32 slopes [H] or [B, H] (varlen: B = the sequences) on the tensors' device. Query
  // i of head h subtracts slope * |i + Sk - Sq - j| from its score with key j (bottom-right
  // aligned like the masks; per sequence with varlen). nullptr = none.
  const Tensor* alibi_slopes = nullptr;
  // Attention sinks (gpt-oss): fp32 [H] on the tensors' device, a logit per head that joins
  // every row's softmax denominator without a value: O_i = sum_j e^(s_ij) v_j / (e^(sink_h) +
  // sum_j e^(s_ij)); lse includes it; a fully masked row gives O = 0 and lse = sink_h.
  // nullptr = none. (Slopes and sinks are read by the kernels, not checked: a NaN gives NaN
  // rows; a sink of -inf is no sink.)
  const Tensor* sinks = nullptr;
  // attention_backward only, with sinks: fp32 [H] output, the gradient of the sinks,
  // dsinks_h = -sum over the head's rows (all batch entries) of exp(sink_h - lse_i) * D_i
  // (D_i = dout_i . out_i). nullptr = not computed. attention does not read it.
  Tensor* dsinks = nullptr;
};

struct SoftmaxVParams {
  float scale = 1.0f;  // O = softmax(scale * S) V; for int32 S this is the dequant scale too
  Strategy strategy = Strategy::automatic;
  Exp2Mode exp2 = Exp2Mode::exact;
  int threads = 0;
  const char* impl = nullptr;
};

struct GemmChainParams {
  int threads = 0;
  const char* impl = nullptr;
};

// Per-phase time of the CPU pipelines (seconds, summed over threads), filled when given.
struct PhaseTimes {
  double pack = 0, max_find = 0, exp_pack = 0, gemm = 0, normalize = 0;
  std::string kernel;    // the GEMM micro-kernel key that ran
  std::string strategy;  // the strategy that ran (after `automatic` was resolved)
};

// attention: q [B,Sq,H,D], k [B,Sk,Hkv,D], v [B,Sk,Hkv,Dv], out [B,Sq,H,Dv].
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const AttentionParams& params = {}, PhaseTimes* times = nullptr);

// attention_backward: the gradients of attention's O with respect to q, k and v, given the
// forward's inputs, its output `out` [B,Sq,H,Dv], its lse [B,H,Sq] (fp32, natural log, as
// AttentionParams::lse receives it; varlen: [1,H,total_q]) and dout = dL/dO [B,Sq,H,Dv].
// Writes dq [B,Sq,H,D], dk [B,Sk,Hkv,D], dv [B,Sk,Hkv,Dv] (overwritten, in q's dtype; may be
// strided views with a contiguous last dim). FlashAttention-2's math with fp32 sums:
//   D_i = sum_d dout_id out_id;  P_ij = exp(scale q_i.k_j - lse_i) (0 where masked);
//   dv_j = sum_i P_ij dout_i;  dS_ij = P_ij (dout_i.v_j - D_i);
//   dq_i = scale sum_j dS_ij k_j;  dk_j = scale sum_i dS_ij q_i
// (GQA: dk/dv of a KV head sum over its query heads). A row whose lse is -inf (fully
// masked) contributes nothing: its dq row is 0, never NaN. Keys no query sees get dk = dv =
// 0; so do rows outside every varlen sequence.
// params: the forward's scale, causal, windows, varlen (cu_seqlens_*, varlen_batch,
// max_seqlen_*), score variants (softcap: dS times 1 - tanh^2; ALiBi slopes are constants;
// sinks, with their gradient in params.dsinks when given), exp2 mode, threads, impl (a CPU
// GEMM micro-kernel key; it must sum in fp32) and `deterministic`; params.lse must be null
// (lse is an argument here), the fp8 descales stay 1 (f32/f16/bf16 only), strategy / tile /
// exact_fp32 are not read.
// Every input (q, k, v, out, dout, lse, cu_seqlens, slopes, sinks) must not overlap any
// output; dq, dk, dv and dsinks must not overlap each other or themselves (every element its
// own address).
// Workspace: the CPU backend manages it; none is passed in. Per thread (kept by the thread
// for its next call, grow-only, like the forward's buffers): one query head's Q and dO
// packed twice each, its fp32 dQ, one key range's K and V packed and its fp32 dK and dV, at
// most about (5 Sq + 6 Sk) * max(D, Dv) * 4 bytes (Sq, Sk of one sequence; 16-bit kernels
// less); and per call, when a (batch, KV head) is split over n key ranges (fewer of them than
// threads, or deterministic mode: docs/backward.md), n fp32 copies of dq (n * B * Sq * H * D
// * 4 bytes, capped at 256 MiB), summed in range order and freed before the call returns.
// CUDA tensors (f16 / bf16; f32 is Status::unsupported there; head dims multiples of 8 up to
// 256, 16-byte aligned rows of q, k, v, out and dout): the workspace comes from the library's
// per-device stream-ordered pool and goes back in stream order: nb H rows_q (8 + 4 hd) bytes
// (nb = B, or 1 for varlen; rows_q = Sq or the packed rows; hd = D rounded up to 64, 96, 128
// or 256), the dq sums times the number of dq slices in deterministic mode on the sm80
// family (one per CTA along the keys, at most 1 GiB of them; on Hopper's rows one slice and a
// 4-byte counter per 64 query rows and head; docs/cuda.md). Varlen cu_seqlens as for attention
// (copied to the host unless max_seqlen_q/k are given). Runs asynchronously on params.stream.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const AttentionParams& params = {});

// ---- Serving: attention over a KV cache, and merging attention states.

// The order of a KV cache's middle dims: NHD [.., rows, Hkv, D] (q/k/v's own order, the
// default) or HND [.., Hkv, rows, D].
enum class KvLayout : int { nhd = 0, hnd = 1 };

// attention_with_kvcache's optional parts.
struct KvCacheOptions {
  const Tensor* block_table = nullptr;  // int32 [B, max_pages]: the cache is paged
  const Tensor* k_new = nullptr;        // [B, S_new, Hkv, D], appended in place (with v_new)
  const Tensor* v_new = nullptr;        // [B, S_new, Hkv, Dv]
  KvLayout layout = KvLayout::nhd;      // of k_cache and v_cache
  // CUDA tensors: copy cache_seqlens and block_table to the host (synchronizing the stream;
  // not capturable in a CUDA graph) and check their contents as on the CPU, refusing bad
  // values by name before anything runs. CPU tensors are always checked.
  bool check_contents = false;
};

// attention_with_kvcache: attention of q [B, Sq, H, D] over each sequence's keys in a KV
// cache, FlashAttention's flash_attn_with_kvcache contract; writes out [B, Sq, H, Dv] (and
// params.lse [B, H, Sq]).
//  * The cache, k_cache / v_cache (q's dtype, or both e4m3: an fp8 cache, below), is either contiguous, [B, S_max, Hkv, D] (Dv
//    for v), or paged: [num_pages, page_size, Hkv, D] with cache.block_table, an int32
//    [B, max_pages] whose row b lists sequence b's pages in order (key s is row
//    s % page_size of page block_table[b, s / page_size]). page_size is a multiple of 8;
//    only the entries a sequence uses are read (the rest may hold anything, -1 say). With
//    cache.layout = hnd the caches are [B, Hkv, S_max, D] / [num_pages, Hkv, page_size, D].
//    Any strides with a contiguous last dim; k_cache and v_cache may be views of one
//    tensor (FlashInfer's [pages, 2, ...] or [2, pages, ...]).
//  * cache_seqlens: int32 [B], the keys each sequence has in the cache (>= 0).
//  * cache.k_new / v_new [B, S_new, Hkv, D / Dv] (both or neither): written into the cache
//    in place at slots cache_seqlens[b] .. cache_seqlens[b] + S_new - 1 of each sequence
//    (its pages from the block table) before the attention, which then sees
//    cache_seqlens[b] + S_new keys. cache_seqlens itself is not updated (as in
//    FlashAttention): the caller adds S_new for the next call.
//  * Masks as attention's, with Sk = each sequence's keys: causal is bottom-right aligned,
//    so the Sq queries are the last Sq positions and each sees the whole cache before it.
//    Windows, GQA/MQA, scale, lse, exp2 mode, strategy, threads and impl as attention's;
//    varlen (cu_seqlens_*) is refused.
//  * An fp8 cache: k_cache, v_cache, k_new and v_new e4m3 under f32, f16 or bf16 q (CUDA:
//    f16 or bf16 q, D and Dv multiples of 16 up to 128; out and lse as usual); the real keys
//    and values are the stored ones times params.k_descale / v_descale and, when given,
//    k_descale_heads / v_descale_heads (float [B][Hkv] on the cache's device, entry
//    b * Hkv + h): scores = scale * k_descale * k_descale_heads[..] * q.k,
//    O = v_descale * v_descale_heads[..] * P V. q_descale (and its per-head array) must stay
//    1; other caches keep every descale 1. The cache is read as stored (no dequantized copy):
//    on the CPU per-head K factors scale an fp32 copy of q (the call then computes in fp32)
//    and V's factors scale out's rows after the attention; on CUDA each key tile's K is
//    widened to q's type in registers and its V in shared memory, and the factors fold into
//    the scores' scale and out's rows.
//  * Checked before anything is read or written: a cache_seqlens entry < 0, a sequence
//    whose keys (with S_new) pass S_max or need more pages than max_pages, a block_table
//    entry it uses outside 0 .. num_pages - 1, and two new keys written to one cache slot
//    (pages shared by sequences that both append) are refused by name; every output (out,
//    lse, and the caches when appending) is then untouched.
//  * CPU tensors, or CUDA tensors (f16 / bf16, D and Dv multiples of 8 up to 256, 16-byte
//    aligned rows; no score variants): there cache_seqlens and block_table stay on the
//    device and are not checked (no host sync; a call can be captured in a CUDA graph).
//    Lengths are clamped to the cache and a page id outside it reads as zero rows (an append
//    to it is dropped): bad values give unspecified outputs, never accesses outside the
//    caches; cache.check_contents checks them as the CPU path does (a copy to the host).
void attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const Tensor& cache_seqlens, const Tensor& out,
                            const KvCacheOptions& cache = {}, const AttentionParams& params = {},
                            PhaseTimes* times = nullptr);

struct MergeStatesParams {
  int threads = 0;         // CPU threads; 0 = OMP_NUM_THREADS / all cores
  void* stream = nullptr;  // cudaStream_t for CUDA tensors; nullptr = default stream
};

// merge_states: two attention states over disjoint key sets, (out_a, lse_a) and (out_b,
// lse_b), each normalized over its own keys, merged into the state over their union:
//   lse = log(exp(lse_a) + exp(lse_b)),  out = w_a out_a + w_b out_b,  w_x = exp(lse_x - lse),
// computed as w_x = exp(lse_x - m) / sum with m = max(lse_a, lse_b), in fp32.
// Shapes are attention's: out_* [B, S, H, D] (f32, f16 or bf16; both parts one dtype), lse_*
// fp32 [B, H, S]; out [B, S, H, D] (f32, f16 or bf16), lse [B, H, S]; any strides with a
// contiguous last dim.
//  * A part with lse = -inf (it saw no key) contributes nothing and its out is not read;
//    every part -inf gives out = 0 and lse = -inf; a NaN lse gives a NaN row (out and lse);
//    parts at lse = +inf share the weight.
//  * fp32 lse values carry about 7 digits: where |lse| is huge (scores ~1e20, say) log(l)
//    is lost beside the max and the weights follow. The pipelines' own split over keys
//    merges exact (max, sum) pairs instead; merge_states is what callers holding only lse
//    (split-KV across calls, cascade attention, context parallelism) can merge.
//  * In place: out may be exactly out_a's (or out_b's) view (same data, dtype, shape and
//    strides), and lse lse_a's; any other overlap of an output with an input or with the
//    other output is refused by name, as are bad shapes, dtypes and devices, before
//    anything is written.
//  * CPU tensors (rows over params.threads) and CUDA tensors (one warp per row on
//    params.stream, at most 48 parts per call: more is Status::unsupported).
void merge_states(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b,
                  const Tensor& out, const Tensor& lse, const MergeStatesParams& params = {});
// The n-way form (n >= 1): out_parts[i] / lse_parts[i] as above, merged in one pass (the
// same as merging them pair by pair, up to rounding). In place: out may be exactly one part's
// view and lse one lse part's.
void merge_states(const Tensor* out_parts, const Tensor* lse_parts, int64_t n, const Tensor& out,
                  const Tensor& lse, const MergeStatesParams& params = {});

// softmax_v: s [M,L] (f32, or i32 scaled by params.scale), v [L,d], out [M,d] (dtype of v).
void softmax_v(const Tensor& s, const Tensor& v, const Tensor& out,
               const SoftmaxVParams& params = {}, PhaseTimes* times = nullptr);

// gemm_chain: a [M,K1], b [K1,K2], c [K2,N], out [M,N]; all one dtype.
void gemm_chain(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out,
                const GemmChainParams& params = {}, PhaseTimes* times = nullptr);

// Pre-packed operands (CPU). gemm_chain's B and C, or softmax_v's V, packed once into the
// layout of one GEMM micro-kernel, for many calls with fresh A / S (as oneDNN and MKL pack
// weights). The unpacked calls above pack the same way on every call (gemm_chain tile by
// tile, softmax_v V whole when M > 64); the packed calls skip that and read the packed
// operands, which for the shapes is most of the memory traffic of a call.
// The object records what it was packed for: the op, the storage dtype, the logical
// shapes and the micro-kernel key (the layout follows from the kernel). A call whose
// arguments do not match it (another op, dtype, shape or kernel, or params.impl naming
// another kernel, or the portable kernels forced after packing) is refused before any
// kernel runs, naming the argument. Packing copies: the source tensors may change or be
// freed afterwards. The packed data is read-only, so one object may serve several calls
// at once, from any threads; copies share it (the buffer lives until the last copy goes).
class PackedOperands {
 public:
  struct State;  // library-internal
  PackedOperands() = default;  // empty: refused by every call
  explicit PackedOperands(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  bool empty() const { return state_ == nullptr; }
  const char* op() const;      // "gemm_chain" or "softmax_v" ("" when empty)
  DType dtype() const;         // storage dtype of the tensors that were packed
  const char* kernel() const;  // the micro-kernel key the layout is for ("" when empty)
  // The logical shape packed: gemm_chain {K1, K2, N}; softmax_v {L, d, 0}.
  int64_t dim(int i) const;
  size_t bytes() const;        // size of the packed buffer
  std::string describe() const;  // e.g. "gemm_chain f32 K1=256 K2=8192 N=256 for f32_12x2_pf_avx512"
  const State* state() const { return state_.get(); }

 private:
  std::shared_ptr<const State> state_;
};

// b [K1,K2], c [K2,N] -> packed for gemm_chain(a, packed, out). params.impl picks the
// kernel (nullptr = automatic, as the unpacked call); params.threads packs in parallel.
PackedOperands pack_gemm_chain(const Tensor& b, const Tensor& c, const GemmChainParams& params = {});
// a [M,K1], out [M,N]; a and out of the packed dtype.
void gemm_chain(const Tensor& a, const PackedOperands& packed, const Tensor& out,
                const GemmChainParams& params = {}, PhaseTimes* times = nullptr);

// v [L,d] -> packed for softmax_v(s, packed, out). The packed call always runs the GEMM
// micro-kernel (also for M <= 64, where the unpacked call reads V in place by the row ops).
PackedOperands pack_softmax_v(const Tensor& v, const SoftmaxVParams& params = {});
// s [M,L] (f32 or i32), out [M,d] of the packed dtype.
void softmax_v(const Tensor& s, const PackedOperands& packed, const Tensor& out,
               const SoftmaxVParams& params = {}, PhaseTimes* times = nullptr);

// fp64 reference implementations: the truth for tests and benchmarks. Same arguments
// and checks as above, CPU tensors only, slow (O(Sq*Sk*D) with no blocking).
namespace reference {
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const AttentionParams& params = {});
// The exact gradients in fp64 (O, lse and P recomputed from q, k and v in fp64: `out` and
// `lse` are checked as attention_backward checks them, but not read).
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const AttentionParams& params = {});
void softmax_v(const Tensor& s, const Tensor& v, const Tensor& out,
               const SoftmaxVParams& params = {});
void gemm_chain(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out);
}  // namespace reference

// Kernels this build has and this machine can run, for --impl and the tests.
struct KernelInfo {
  std::string key;      // e.g. "f32_4x16_generic", "fwd_sm80_f16_hd128"
  std::string isa;      // "generic", "avx512f", "sve", "sm80", ...
  bool available;       // the machine can run it now
};
int list_kernels(KernelInfo* out, int capacity);  // returns the count (fills up to capacity)

// Forces the portable kernels (like ggml's use_ref) for every later call when true;
// the FLASHCORE_FORCE_GENERIC=1 environment variable sets it at start-up.
void set_force_generic(bool on);
bool force_generic();

const char* version();

}  // namespace flashcore
#pragma GCC visibility pop
