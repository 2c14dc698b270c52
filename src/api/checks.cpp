// Argument checks: every public entry point goes through these before any kernel runs.
// Each failure names the argument and the offending value; nothing is written on failure.
#include "api/checks.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "api/check_helpers.hpp"
#include "core/cu_seqlens.hpp"
#include "core/errors.hpp"
#include "core/threads.hpp"
#include "cpu/pipelines/packed.hpp"

namespace flashcore::api {
// The helpers below are shared with the backward's checks (check_helpers.hpp).
namespace detail {

// Shapes and strides beyond this are refused so that byte extents cannot overflow int64.
constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int64_t kMaxWindow = 2 * kMaxDim;

std::string shape_str(const Tensor& t) {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < t.rank && i < kMaxRank; ++i) s << (i ? ", " : "") << t.shape[i];
  s << ']';
  return s.str();
}

[[noreturn]] void bad(const char* name, const std::string& what) {
  throw_error(Status::invalid_argument, std::string(name) + ": " + what);
}

bool valid_dtype(DType d) { return int(d) >= 0 && int(d) <= int(DType::i32); }

void check_tensor(const Tensor& t, const char* name, int rank, const char* layout) {
  if (t.rank != rank)
    bad(name, "expected rank " + std::to_string(rank) + " " + layout + ", got rank " +
                  std::to_string(t.rank));
  if (!valid_dtype(t.dtype)) bad(name, "unknown dtype code " + std::to_string(int(t.dtype)));
  if (int(t.device) != 0 && int(t.device) != 1)
    bad(name, "unknown device code " + std::to_string(int(t.device)));
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0 || t.shape[i] > kMaxDim)
      bad(name, "shape " + shape_str(t) + " has an invalid size in dim " + std::to_string(i));
    if (t.strides[i] < 0 || t.strides[i] > kMaxDim)
      bad(name, "stride " + std::to_string(t.strides[i]) + " in dim " + std::to_string(i) +
                    " is negative or too large");
  }
  if (t.shape[rank - 1] > 1 && t.strides[rank - 1] != 1)
    bad(name, "the last dim must be contiguous (stride 1), got stride " +
                  std::to_string(t.strides[rank - 1]));
  // Byte extent must fit in int64 (each term < 2^40 * 2^40 is still too much: check).
  __int128 span = 0;
  for (int i = 0; i < rank; ++i)
    if (t.shape[i] > 0) span += __int128(t.shape[i] - 1) * t.strides[i];
  if (span > (__int128(1) << 56)) bad(name, "shape " + shape_str(t) + " with these strides spans too much memory");
  // Element count: each dim is <= 2^40, so the product of four can overflow int64 (and
  // Tensor::numel with it) even when zero strides keep the span small. Refuse it here.
  __int128 count = 1;
  for (int i = 0; i < rank; ++i) {
    count *= t.shape[i];
    if (count > (__int128(1) << 56))
      bad(name, "shape " + shape_str(t) + " has more elements than flashcore can index");
  }
  if (count > 0 && t.data == nullptr) bad(name, "data is a null pointer");
}

// [first byte, one past last byte) of a non-empty view (Extent: check_helpers.hpp).
Extent extent(const Tensor& t) {
  int64_t span = 0;
  for (int i = 0; i < t.rank; ++i) span += (t.shape[i] - 1) * t.strides[i];
  const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data);
  return {lo, lo + uintptr_t((span + 1) * int64_t(dtype_size(t.dtype)))};
}

void check_no_alias(const Tensor& out, const char* out_name, const Tensor& in, const char* in_name) {
  if (out.numel() == 0 || in.numel() == 0) return;
  const Extent a = extent(out), b = extent(in);
  if (a.lo < b.hi && b.lo < a.hi)
    bad(out_name, std::string("overlaps ") + in_name + " in memory (outputs may not alias inputs)");
}

// An input array given by pointer and length (cu_seqlens, per-head descales) against an
// output view: the kernels read such arrays while they write the outputs, so an overlap
// would change what they read mid-run.
void check_no_alias(const Tensor& out, const char* out_name, const void* in, int64_t in_bytes,
                    const char* in_name) {
  if (out.numel() == 0 || in == nullptr || in_bytes <= 0) return;
  const Extent a = extent(out);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(in), hi = lo + uintptr_t(in_bytes);
  if (a.lo < hi && lo < a.hi)
    bad(out_name, std::string("overlaps ") + in_name + " in memory (outputs may not alias inputs)");
}

// An output whose elements overlap each other (a zero stride, or strides too small for the
// dims inside them) would be written by several threads or CTAs at once. Sufficient test:
// with the dims of size > 1 ordered by stride, each stride must pass the extent of the
// dims inside it. (A few exotic interleaved views that do not overlap fail it too; they are
// refused with the same message.)
bool distinct_elements(std::vector<std::pair<int64_t, int64_t>> dims) {
  std::sort(dims.begin(), dims.end());
  int64_t inner = 0;  // offset of the last element of the dims so far
  for (const auto& [stride, size] : dims) {
    if (size <= 1) continue;
    if (stride <= inner) return false;
    inner += (size - 1) * stride;
  }
  return true;
}

void check_no_self_overlap(const Tensor& t, const char* name) {
  if (t.numel() <= 1) return;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int i = 0; i < t.rank; ++i) dims.emplace_back(t.strides[i], t.shape[i]);
  if (!distinct_elements(std::move(dims)))
    bad(name, "shape " + shape_str(t) + " with strides " + [&] {
          std::ostringstream s;
          s << '[';
          for (int i = 0; i < t.rank; ++i) s << (i ? ", " : "") << t.strides[i];
          s << ']';
          return s.str();
        }() + " makes elements overlap (outputs need one element per index)");
}

void check_same_device(const Tensor& t, const char* name, Device d) {
  if (t.device != d)
    bad(name, std::string("is on ") + (t.device == Device::cuda ? "cuda" : "cpu") +
                  " but the other operands are on " + (d == Device::cuda ? "cuda" : "cpu"));
}

void check_dim(const Tensor& t, const char* name, int dim, const char* dim_name, int64_t expect,
               const char* from) {
  if (t.shape[dim] != expect)
    bad(name, std::string("dim ") + std::to_string(dim) + " (" + dim_name + ") is " +
                  std::to_string(t.shape[dim]) + " but " + from + " says " + std::to_string(expect) +
                  "; shape " + shape_str(t));
}

void check_storage_dtype(DType d, const char* name, Device dev) {
  const bool gpu8 = dev == Device::cuda && (d == DType::e4m3 || d == DType::e5m2);
  if (d == DType::f32 || d == DType::f16 || d == DType::bf16 || gpu8) return;
  throw_error(Status::unsupported, std::string(name) + ": dtype " + to_string(d) +
                                       " is not supported here (use f32, f16 or bf16)");
}

// CPU threads: 0 (automatic) up to core::max_threads() (core/threads.hpp says why).
void check_threads(int threads) {
  if (threads < 0) bad("params.threads", "must be >= 0, got " + std::to_string(threads));
  if (threads > core::max_threads())
    bad("params.threads", "must be <= " + std::to_string(core::max_threads()) + " (" +
                              std::to_string(core::kThreadsPerCpu) + " per CPU of this machine), got " +
                              std::to_string(threads));
}

void check_strategy(Strategy s, Exp2Mode e, int threads) {
  if (int(s) < 0 || int(s) > int(Strategy::online))
    bad("params.strategy", "unknown strategy code " + std::to_string(int(s)));
  if (int(e) != 0 && int(e) != 1) bad("params.exp2", "unknown exp2 mode code " + std::to_string(int(e)));
  check_threads(threads);
}

// A per-head fp32 array of the score variants (ALiBi slopes, sinks, dsinks): rank 1 [H], or
// with `batched` also rank 2 [nb, H]; on `dev`. Returns the row stride (0 for [H]).
int64_t check_head_array(const Tensor& t, const char* name, int64_t nb, int64_t heads, bool batched, Device dev) {
  if (t.rank != 1 && !(batched && t.rank == 2))
    bad(name, std::string("expected rank 1 [H]") + (batched ? " or rank 2 [B, H]" : "") + ", got rank " +
                  std::to_string(t.rank));
  check_tensor(t, name, t.rank, batched ? "[B, H]" : "[H]");
  check_same_device(t, name, dev);
  if (t.dtype != DType::f32) bad(name, std::string("dtype ") + to_string(t.dtype) + " is not f32");
  if (t.rank == 2) check_dim(t, name, 0, "B", nb, "q (varlen: the sequences)");
  check_dim(t, name, t.rank - 1, "H", heads, "q");
  return t.rank == 2 ? t.strides[0] : 0;
}

}  // namespace detail
using namespace detail;

namespace {

// The score variants (AttentionParams::softcap, alibi_slopes, sinks) into the problem, with
// the outputs kept apart from the arrays the kernels read.
void check_variants(const AttentionParams& p, const Tensor& out, int64_t nb, int64_t heads, Device dev,
                    core::AttentionProblem& pr) {
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f)
    bad("params.softcap", "must be finite and >= 0 (0 = off), got " + std::to_string(p.softcap));
  pr.softcap = p.softcap;
  for (const bool slopes : {true, false}) {
    const Tensor* t = slopes ? p.alibi_slopes : p.sinks;
    const char* name = slopes ? "params.alibi_slopes" : "params.sinks";
    if (t == nullptr) continue;
    const int64_t sb = check_head_array(*t, name, nb, heads, /*batched=*/slopes, dev);
    check_no_alias(out, "out", *t, name);
    if (p.lse != nullptr) check_no_alias(*p.lse, "params.lse", *t, name);
    if (slopes) {
      pr.alibi = static_cast<const float*>(t->data);
      pr.alibi_sb = sb;
    } else {
      pr.sinks = static_cast<const float*>(t->data);
    }
  }
  // (an empty [0] array, H = 0, is as good as none: nothing reads it)
  if (heads == 0) pr.alibi = pr.sinks = nullptr;
}

}  // namespace

core::AttentionProblem check_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const AttentionParams& p, bool reference,
                                       const KvNames& kv) {
  const char* kn = kv.k;
  const char* vn = kv.v;
  check_tensor(q, "q", 4, "[B, Sq, H, D]");
  check_tensor(k, kn, 4, kv.paged ? "[pages, page_size, Hkv, D]" : "[B, Sk, Hkv, D]");
  check_tensor(v, vn, 4, kv.paged ? "[pages, page_size, Hkv, Dv]" : "[B, Sk, Hkv, Dv]");
  check_tensor(out, "out", 4, "[B, Sq, H, Dv]");
  check_same_device(k, kn, q.device);
  check_same_device(v, vn, q.device);
  check_same_device(out, "out", q.device);
  check_storage_dtype(q.dtype, "q", reference ? Device::cuda : q.device);
  const bool fp8 = q.dtype == DType::e4m3 || q.dtype == DType::e5m2;
  // An fp8 KV cache under 16-bit or fp32 q (attention_with_kvcache): k and v both e4m3.
  const bool fp8_cache = kv.fp8_cache_ok && !fp8 && k.dtype == DType::e4m3;
  if (fp8_cache) {
    if (v.dtype != DType::e4m3)
      bad(vn, std::string("dtype ") + to_string(v.dtype) + " differs from " + kn + "'s e4m3 (an fp8 cache: both e4m3)");
  } else {
    if (k.dtype != q.dtype)
      bad(kn, std::string("dtype ") + to_string(k.dtype) + " differs from q's " + to_string(q.dtype) +
                  (kv.fp8_cache_ok && !fp8 ? " (or e4m3: an fp8 cache)" : ""));
    if (v.dtype != q.dtype)
      bad(vn, std::string("dtype ") + to_string(v.dtype) + " differs from q's " + to_string(q.dtype));
  }
  if (!fp8 && out.dtype != q.dtype)
    bad("out", std::string("dtype ") + to_string(out.dtype) + " differs from q's " + to_string(q.dtype));
  if (fp8 && out.dtype != DType::bf16 && out.dtype != DType::f16 && !(reference && out.dtype == DType::f32))
    bad("out", "fp8 attention writes bf16 or f16, got " + std::string(to_string(out.dtype)));
  const std::pair<float, const char*> descales[] = {
      {p.q_descale, "params.q_descale"}, {p.k_descale, "params.k_descale"}, {p.v_descale, "params.v_descale"}};
  for (const auto& [value, name] : descales) {
    if (!std::isfinite(value) || value <= 0.0f) bad(name, "must be finite and > 0, got " + std::to_string(value));
    const bool applies = fp8 || (fp8_cache && name != descales[0].second);  // an fp8 cache: k's and v's
    if (!applies && value != 1.0f)
      bad(name, "applies to fp8 (e4m3) inputs only and must be 1 for " + std::string(to_string(q.dtype)) +
                    (fp8_cache ? " q" : "") + ", got " + std::to_string(value));
  }
  const std::pair<const float*, const char*> head_descales[] = {{p.q_descale_heads, "params.q_descale_heads"},
                                                                {p.k_descale_heads, "params.k_descale_heads"},
                                                                {p.v_descale_heads, "params.v_descale_heads"}};
  for (const auto& [ptr, name] : head_descales) {
    if (ptr == nullptr) continue;
    if (!fp8 && !(fp8_cache && ptr != p.q_descale_heads))
      bad(name, "per-head descales apply to fp8 (e4m3) inputs only, got " + std::string(to_string(q.dtype)) +
                    " inputs");
    if (reinterpret_cast<uintptr_t>(ptr) % alignof(float) != 0) bad(name, "must be 4-byte aligned (a float array)");
  }

  const int64_t B = q.shape[0], Sq = q.shape[1], H = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[1], Hkv = k.shape[2], Dv = v.shape[3];
  if (!kv.paged) {
    check_dim(k, kn, 0, "B", B, "q");
    check_dim(v, vn, 0, "B", B, "q");
  } else {
    check_dim(v, vn, 0, "pages", k.shape[0], kn);
  }
  check_dim(out, "out", 0, "B", B, "q");
  check_dim(k, kn, 3, "D", D, "q");
  check_dim(v, vn, 1, kv.paged ? "page_size" : "Sk", Sk, kn);
  check_dim(v, vn, 2, "Hkv", Hkv, kn);
  check_dim(out, "out", 1, "Sq", Sq, "q");
  check_dim(out, "out", 2, "H", H, "q");
  check_dim(out, "out", 3, "Dv", Dv, vn);
  if (D < 1) bad("q", "head dim D must be >= 1, got 0");
  if (H > 0 && (Hkv < 1 || H % Hkv != 0))
    bad(kn, "kv heads Hkv = " + std::to_string(Hkv) + " must divide the query heads H = " +
                 std::to_string(H) + " (GQA/MQA)");
  check_no_alias(out, "out", q, "q");
  check_no_alias(out, "out", k, kn);
  check_no_alias(out, "out", v, vn);
  check_no_self_overlap(out, "out");

  if (!std::isfinite(p.scale)) bad("params.scale", "must be finite, got " + std::to_string(p.scale));
  if (p.window_left < -1) bad("params.window_left", "must be >= -1 (-1 = unbounded), got " + std::to_string(p.window_left));
  if (p.window_right < -1) bad("params.window_right", "must be >= -1 (-1 = unbounded), got " + std::to_string(p.window_right));
  check_strategy(p.strategy, p.exp2, p.threads);

  core::AttentionProblem pr;
  pr.dtype = q.dtype;
  pr.kv_dtype = k.dtype;
  pr.out_dtype = out.dtype;
  pr.q_descale = p.q_descale;
  pr.k_descale = p.k_descale;
  pr.v_descale = p.v_descale;
  pr.q_descale_heads = p.q_descale_heads;
  pr.k_descale_heads = p.k_descale_heads;
  pr.v_descale_heads = p.v_descale_heads;
  pr.device = q.device;
  pr.q = {q.data, q.strides[0], q.strides[1], q.strides[2]};
  pr.k = {k.data, k.strides[0], k.strides[1], k.strides[2]};
  pr.v = {v.data, v.strides[0], v.strides[1], v.strides[2]};
  pr.o = out.data;
  pr.o_sb = out.strides[0]; pr.o_ss = out.strides[1]; pr.o_sh = out.strides[2];
  pr.batch = B; pr.sq = Sq; pr.sk = Sk; pr.heads = H; pr.kv_heads = Hkv; pr.d = D; pr.dv = Dv;
  pr.scale = p.scale != 0.0f ? p.scale : float(1.0 / std::sqrt(double(D)));
  pr.causal = p.causal;
  // A window wider than Sq + Sk (<= 2^41) sees every key, so clamping to that changes
  // nothing, and keeps the mask arithmetic (i + Sk - Sq + window) from overflowing when
  // a caller writes "unbounded" as INT64_MAX.
  pr.window_left = std::min(p.window_left, kMaxWindow);
  pr.window_right = std::min(p.window_right, kMaxWindow);
  pr.strategy = p.strategy;
  pr.exp2 = p.exp2;
  pr.threads = p.threads;
  pr.impl = p.impl;
  pr.stream = p.stream;
  pr.exact_fp32 = p.exact_fp32;
  if (p.tile_m < 0 || p.tile_n < 0 || (p.tile_m == 0) != (p.tile_n == 0))
    bad("params.tile_m", "tile_m/tile_n must both be 0 (automatic) or both > 0, got " +
                             std::to_string(p.tile_m) + "x" + std::to_string(p.tile_n));
  if (p.tile_m != 0 && q.device != Device::cuda)
    bad("params.tile_m", "forces a CUDA kernel's tile (" + std::to_string(p.tile_m) + "x" +
                             std::to_string(p.tile_n) + ") but the tensors are on the CPU; leave it 0");
  pr.tile_m = p.tile_m;
  pr.tile_n = p.tile_n;

  const bool varlen = p.cu_seqlens_q != nullptr || p.cu_seqlens_k != nullptr;
  if (varlen) {
    if (p.cu_seqlens_q == nullptr) bad("params.cu_seqlens_q", "is null but cu_seqlens_k is given");
    if (p.cu_seqlens_k == nullptr) bad("params.cu_seqlens_k", "is null but cu_seqlens_q is given");
    if (p.varlen_batch < 1 || p.varlen_batch > kMaxDim)
      bad("params.varlen_batch", "must be in 1 .. 2^40 with cu_seqlens, got " + std::to_string(p.varlen_batch));
    if (B != 1) bad("q", "varlen input must have B = 1 (sequences packed along dim 1), got B = " + std::to_string(B));
    pr.cu_q = p.cu_seqlens_q;
    pr.cu_k = p.cu_seqlens_k;
    pr.batch = p.varlen_batch;
    // The caller's bounds of the longest sequences: both or neither, 1 .. the packed rows.
    if ((p.max_seqlen_q != 0) != (p.max_seqlen_k != 0))
      bad(p.max_seqlen_q != 0 ? "params.max_seqlen_k" : "params.max_seqlen_q",
          "max_seqlen_q and max_seqlen_k must be given together (or both 0)");
    if (p.max_seqlen_q != 0 && (p.max_seqlen_q < 1 || p.max_seqlen_q > Sq))
      bad("params.max_seqlen_q", "must be in 1 .. " + std::to_string(Sq) + " (q's rows), got " + std::to_string(p.max_seqlen_q));
    if (p.max_seqlen_k != 0 && (p.max_seqlen_k < 1 || p.max_seqlen_k > Sk))
      bad("params.max_seqlen_k", "must be in 1 .. " + std::to_string(Sk) + " (k's rows), got " + std::to_string(p.max_seqlen_k));
    pr.max_sq = p.max_seqlen_q;
    pr.max_sk = p.max_seqlen_k;
    if (q.device == Device::cpu) {
      // Host arrays: check them now (and the bounds against them). Device arrays are
      // checked by the CUDA backend (copied to the host) before its launch, unless the
      // bounds are given.
      int64_t max_q = 0, max_k = 0;
      core::check_cu_seqlens(p.cu_seqlens_q, p.varlen_batch, Sq, "params.cu_seqlens_q", &max_q);
      core::check_cu_seqlens(p.cu_seqlens_k, p.varlen_batch, Sk, "params.cu_seqlens_k", &max_k);
      if (p.max_seqlen_q != 0 && (max_q > p.max_seqlen_q || max_k > p.max_seqlen_k))
        bad(max_q > p.max_seqlen_q ? "params.max_seqlen_q" : "params.max_seqlen_k",
            "is below the longest sequence (" + std::to_string(max_q > p.max_seqlen_q ? max_q : max_k) + ")");
      pr.sq = max_q;
      pr.sk = max_k;
    }
  } else if (p.varlen_batch != 0) {
    bad("params.varlen_batch", "is set but cu_seqlens_q/k are null");
  } else if (p.max_seqlen_q != 0 || p.max_seqlen_k != 0) {
    bad(p.max_seqlen_q != 0 ? "params.max_seqlen_q" : "params.max_seqlen_k", "is set but cu_seqlens_q/k are null");
  }

  if (p.lse != nullptr) {
    const Tensor& l = *p.lse;
    check_tensor(l, "params.lse", 3, "[B, H, Sq]");
    check_same_device(l, "params.lse", q.device);
    if (l.dtype != DType::f32) bad("params.lse", std::string("must be f32, got ") + to_string(l.dtype));
    check_dim(l, "params.lse", 0, "B", B, "q");
    check_dim(l, "params.lse", 1, "H", H, "q");
    check_dim(l, "params.lse", 2, "Sq", Sq, "q");
    check_no_alias(l, "params.lse", q, "q");
    check_no_alias(l, "params.lse", k, kn);
    check_no_alias(l, "params.lse", v, vn);
    check_no_alias(l, "params.lse", out, "out");
    check_no_self_overlap(l, "params.lse");
    // lse does not depend on V, but no backend computes it without a value dim: refused
    // rather than left unwritten.
    if (Dv == 0 && l.numel() > 0)
      bad(vn, "Dv = 0 with params.lse given: lse alone is not computed (give Dv >= 1 or no lse)");
    pr.lse = static_cast<float*>(l.data);
    pr.lse_sb = l.strides[0];
    pr.lse_sh = l.strides[1];
  }

  // The arrays the kernels read by pointer may not overlap an output either: cu_seqlens
  // (batch + 1 int32) and the per-head descales (B x Hkv floats).
  const int64_t nb = varlen ? p.varlen_batch : B;
  struct Array { const void* ptr; int64_t bytes; const char* name; };
  const Array arrays[] = {{p.cu_seqlens_q, 4 * (nb + 1), "params.cu_seqlens_q"},
                          {p.cu_seqlens_k, 4 * (nb + 1), "params.cu_seqlens_k"},
                          {p.q_descale_heads, 4 * nb * Hkv, "params.q_descale_heads"},
                          {p.k_descale_heads, 4 * nb * Hkv, "params.k_descale_heads"},
                          {p.v_descale_heads, 4 * nb * Hkv, "params.v_descale_heads"}};
  for (const Array& a : arrays) {
    check_no_alias(out, "out", a.ptr, a.bytes, a.name);
    if (p.lse != nullptr) check_no_alias(*p.lse, "params.lse", a.ptr, a.bytes, a.name);
  }
  check_variants(p, out, nb, H, q.device, pr);
  return pr;
}

namespace {

// The operand that softmax_v / gemm_chain take either as tensors or pre-packed: its dtype
// and logical dims, and the tensors when given (null when packed). `name` is the argument
// that messages blame for a mismatch with it ("v", "b"/"c", or "packed").
struct Operands {
  const char* name;
  DType dtype;
  int64_t dims[3];
  const Tensor* t0 = nullptr;
  const Tensor* t1 = nullptr;
};

// A packed object for op `op` that a call may use (cpu::packed_state checks it).
Operands packed_operands(const PackedOperands& packed, PackedOperands::State::Op op,
                         const char* impl) {
  const PackedOperands::State& st = cpu::packed_state(packed, op, impl);
  return Operands{"packed", st.dtype, {st.dims[0], st.dims[1], st.dims[2]}};
}

// The unpacked v [L, d] (tensor checks done by the caller).
core::SoftmaxVProblem check_softmax_v_with(const Tensor& s, const Operands& v, const Tensor& out,
                                           const SoftmaxVParams& p) {
  if (s.rank != 2) bad("s", "expected rank 2 [M, L], got rank " + std::to_string(s.rank));
  // Scores may be row- or column-major (seed 000 keeps them column-major).
  Tensor s_rowmajor = s;
  const bool colmajor = s.shape[1] > 1 && s.strides[1] != 1 && s.strides[0] == 1;
  if (colmajor) std::swap(s_rowmajor.strides[0], s_rowmajor.strides[1]);
  check_tensor(s_rowmajor, "s", 2, "[M, L]");
  if (v.t0) check_tensor(*v.t0, "v", 2, "[L, d]");
  check_tensor(out, "out", 2, "[M, d]");
  if (s.device != Device::cpu) throw_error(Status::unsupported, "s: softmax_v runs on the CPU backend only");
  if (v.t0) check_same_device(*v.t0, "v", s.device);
  check_same_device(out, "out", s.device);
  if (s.dtype != DType::f32 && s.dtype != DType::i32)
    throw_error(Status::unsupported, std::string("s: scores must be f32 or i32, got ") + to_string(s.dtype));
  check_storage_dtype(v.dtype, v.name, Device::cpu);
  if (out.dtype != v.dtype)
    bad("out", std::string("dtype ") + to_string(out.dtype) + " differs from " + v.name + "'s " + to_string(v.dtype));
  if (v.t0) check_dim(*v.t0, "v", 0, "L", s.shape[1], "s");
  else check_dim(s, "s", 1, "L", v.dims[0], v.name);
  check_dim(out, "out", 0, "M", s.shape[0], "s");
  check_dim(out, "out", 1, "d", v.dims[1], v.name);
  check_no_alias(out, "out", s, "s");
  if (v.t0) check_no_alias(out, "out", *v.t0, "v");
  if (!std::isfinite(p.scale)) bad("params.scale", "must be finite, got " + std::to_string(p.scale));
  check_strategy(p.strategy, p.exp2, p.threads);
  core::SoftmaxVProblem pr;
  pr.s = s.data; pr.s_dtype = s.dtype; pr.s_sm = s.strides[0]; pr.s_sl = s.strides[1];
  if (v.t0) { pr.v = v.t0->data; pr.v_sl = v.t0->strides[0]; }
  pr.dtype = v.dtype;
  pr.o = out.data; pr.o_sm = out.strides[0];
  pr.m = s.shape[0]; pr.l = v.dims[0]; pr.d = v.dims[1];
  pr.scale = p.scale; pr.strategy = p.strategy; pr.exp2 = p.exp2; pr.threads = p.threads;
  pr.impl = p.impl;
  return pr;
}

// b [K1, K2] and c [K2, N] as tensors: their own checks (pack_gemm_chain's whole check).
void check_chain_bc(const Tensor& b, const Tensor& c, const GemmChainParams& p) {
  check_tensor(b, "b", 2, "[K1, K2]");
  check_tensor(c, "c", 2, "[K2, N]");
  if (b.device != Device::cpu) throw_error(Status::unsupported, "b: gemm_chain runs on the CPU backend only");
  check_same_device(c, "c", b.device);
  check_storage_dtype(b.dtype, "b", Device::cpu);
  if (c.dtype != b.dtype) bad("c", std::string("dtype ") + to_string(c.dtype) + " differs from b's " + to_string(b.dtype));
  check_dim(c, "c", 0, "K2", b.shape[1], "b");
  check_threads(p.threads);
}

// b and c as the Operands of a call (read only after check_chain_bc).
Operands chain_tensors(const Tensor& b, const Tensor& c) {
  return Operands{"b", b.dtype, {b.shape[0], b.shape[1], c.shape[1]}, &b, &c};
}

core::GemmChainProblem check_gemm_chain_with(const Tensor& a, const Operands& bc, const Tensor& out,
                                             const GemmChainParams& p) {
  check_tensor(a, "a", 2, "[M, K1]");
  check_tensor(out, "out", 2, "[M, N]");
  if (a.device != Device::cpu) throw_error(Status::unsupported, "a: gemm_chain runs on the CPU backend only");
  check_same_device(out, "out", a.device);
  check_storage_dtype(a.dtype, "a", Device::cpu);
  if (bc.t0) check_chain_bc(*bc.t0, *bc.t1, p);
  if (bc.dtype != a.dtype)
    bad(bc.name, std::string("dtype ") + to_string(bc.dtype) + " differs from a's " + to_string(a.dtype));
  if (out.dtype != a.dtype)
    bad("out", std::string("dtype ") + to_string(out.dtype) + " differs from a's " + to_string(a.dtype));
  if (bc.t0) check_dim(*bc.t0, "b", 0, "K1", a.shape[1], "a");
  else check_dim(a, "a", 1, "K1", bc.dims[0], bc.name);
  check_dim(out, "out", 0, "M", a.shape[0], "a");
  check_dim(out, "out", 1, "N", bc.dims[2], bc.t0 ? "c" : bc.name);
  check_no_alias(out, "out", a, "a");
  if (bc.t0) check_no_alias(out, "out", *bc.t0, "b");
  if (bc.t1) check_no_alias(out, "out", *bc.t1, "c");
  check_threads(p.threads);
  core::GemmChainProblem pr;
  pr.dtype = a.dtype;
  pr.a = a.data; pr.a_sm = a.strides[0];
  if (bc.t0) { pr.b = bc.t0->data; pr.b_sk = bc.t0->strides[0]; }
  if (bc.t1) { pr.c = bc.t1->data; pr.c_sk = bc.t1->strides[0]; }
  pr.e = out.data; pr.e_sm = out.strides[0];
  pr.m = a.shape[0]; pr.k1 = bc.dims[0]; pr.k2 = bc.dims[1]; pr.n = bc.dims[2];
  pr.threads = p.threads; pr.impl = p.impl;
  return pr;
}

}  // namespace

core::SoftmaxVProblem check_softmax_v(const Tensor& s, const Tensor& v, const Tensor& out,
                                      const SoftmaxVParams& p) {
  return check_softmax_v_with(s, Operands{"v", v.dtype, {v.shape[0], v.shape[1], 0}, &v}, out, p);
}

core::SoftmaxVProblem check_softmax_v(const Tensor& s, const PackedOperands& v, const Tensor& out,
                                      const SoftmaxVParams& p) {
  return check_softmax_v_with(s, packed_operands(v, PackedOperands::State::Op::softmax_v, p.impl),
                              out, p);
}

core::SoftmaxVProblem check_pack_softmax_v(const Tensor& v, const SoftmaxVParams& p) {
  check_tensor(v, "v", 2, "[L, d]");
  if (v.device != Device::cpu) throw_error(Status::unsupported, "v: softmax_v runs on the CPU backend only");
  check_storage_dtype(v.dtype, "v", Device::cpu);
  check_threads(p.threads);
  core::SoftmaxVProblem pr;
  pr.v = v.data; pr.v_sl = v.strides[0]; pr.dtype = v.dtype;
  pr.l = v.shape[0]; pr.d = v.shape[1];
  pr.threads = p.threads; pr.impl = p.impl;
  return pr;
}

core::GemmChainProblem check_gemm_chain(const Tensor& a, const Tensor& b, const Tensor& c,
                                        const Tensor& out, const GemmChainParams& p) {
  return check_gemm_chain_with(a, chain_tensors(b, c), out, p);
}

core::GemmChainProblem check_gemm_chain(const Tensor& a, const PackedOperands& bc, const Tensor& out,
                                        const GemmChainParams& p) {
  return check_gemm_chain_with(a, packed_operands(bc, PackedOperands::State::Op::gemm_chain, p.impl),
                               out, p);
}

core::GemmChainProblem check_pack_gemm_chain(const Tensor& b, const Tensor& c,
                                             const GemmChainParams& p) {
  check_chain_bc(b, c, p);
  const Operands bc = chain_tensors(b, c);
  core::GemmChainProblem pr;
  pr.dtype = bc.dtype;
  pr.b = b.data; pr.b_sk = b.strides[0];
  pr.c = c.data; pr.c_sk = c.strides[0];
  pr.k1 = bc.dims[0]; pr.k2 = bc.dims[1]; pr.n = bc.dims[2];
  pr.threads = p.threads; pr.impl = p.impl;
  return pr;
}

}  // namespace flashcore::api
