// attention_with_kvcache on the CPU: the new keys and values written into the cache (in
// place, at each sequence's length), then attention over the cache by the one attention
// pipeline (attention.cpp), its K/V read through KvSource (a contiguous cache) or
// PagedKvSource (a paged one) with the updated lengths. The caller's cache_seqlens is read,
// never written. An fp8 (e4m3) cache is read as it is (the packers and row reads convert
// e4m3 as any storage dtype); its dequantization factors act outside the pipeline: K's on
// the scores (the per-tensor factor in the scale, the per-head ones in a scaled fp32 copy of
// q, that call then computing in fp32), V's on the output rows (O = v_descale P V).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/kv_source.hpp"
#include "cpu/pipelines/pipelines.hpp"

namespace flashcore::cpu {
namespace {

// k_new / v_new row (b, i, h) into cache slot seqlens_k[b] + i of kv head h (the checks made
// sure every slot lies in the cache, and that no two rows share a slot).
template <class Src>
void append(const core::KvCacheProblem& p, int nthreads) {
  const core::AttentionProblem& a = p.attn;
  const Src kc(a, a.k), vc(a, a.v);
  const int64_t es = int64_t(dtype_size(a.kv_dtype)), rows = a.batch * p.s_new * a.kv_heads;
#pragma omp parallel for num_threads(nthreads)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (p.s_new * a.kv_heads), i = r / a.kv_heads % p.s_new, h = r % a.kv_heads;
    const int64_t s = int64_t(a.seqlens_k[b]) + i;
    // (the cache is the call's output here: its rows are written through the read view)
    std::memcpy(const_cast<void*>(kc.row(b, s, h)), at(p.k_new.data, b * p.k_new.sb + i * p.k_new.ss + h * p.k_new.sh, es),
                size_t(a.d * es));
    std::memcpy(const_cast<void*>(vc.row(b, s, h)), at(p.v_new.data, b * p.v_new.sb + i * p.v_new.ss + h * p.v_new.sh, es),
                size_t(a.dv * es));
  }
}

// An fp8 cache's per-head K factors as an fp32 copy of q [B, Sq, H, D] (contiguous) with row
// (b, h) times k_descale_heads[b Hkv + h / group]: the call then runs in fp32 (a 16-bit copy
// would round each scaled element again, 2^-9 relative: lse off by 2e-2 at scores ~10).
std::vector<float> scaled_q(const core::AttentionProblem& a, core::Operand4& q) {
  const int64_t es = int64_t(dtype_size(a.dtype)), rows = a.batch * a.sq * a.heads;
  std::vector<float> buf(size_t(rows * a.d));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (a.sq * a.heads), s = r / a.heads % a.sq, h = r % a.heads;
    const float f = a.k_descale_heads[b * a.kv_heads + h / a.group()];
    float* row = buf.data() + r * a.d;
    core::convert_row(at(a.q.data, b * a.q.sb + s * a.q.ss + h * a.q.sh, es), a.dtype, a.d, row);
    for (int64_t e = 0; e < a.d; ++e) row[e] *= f;
  }
  q = {buf.data(), a.sq * a.heads * a.d, a.heads * a.d, a.d};
  return buf;
}

// An fp8 cache's V factors on the output rows: o(b, s, h) = src(b, s, h) times v_descale
// (and v_descale_heads[b Hkv + h / group]); src is out itself or the fp32 rows [B, Sq, H, Dv]
// of an fp32 run.
void scale_out(const core::AttentionProblem& a, const float* src, int nthreads) {
  const int64_t es = int64_t(dtype_size(a.out_dtype)), rows = a.batch * a.sq * a.heads;
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> row(size_t(a.dv));  // (one per thread)
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (a.sq * a.heads), s = r / a.heads % a.sq, h = r % a.heads;
      const float f =
          a.v_descale * (a.v_descale_heads != nullptr ? a.v_descale_heads[b * a.kv_heads + h / a.group()] : 1.0f);
      void* o = static_cast<char*>(a.o) + (b * a.o_sb + s * a.o_ss + h * a.o_sh) * es;
      if (src != nullptr)
        std::copy(src + r * a.dv, src + (r + 1) * a.dv, row.begin());
      else
        core::convert_row(o, a.out_dtype, a.dv, row.data());
      for (float& x : row) x *= f;
      core::convert_row(row.data(), a.dv, o, a.out_dtype);
    }
  }
}

}  // namespace

void attention_with_kvcache(const core::KvCacheProblem& p, PhaseTimes* times) {
  const core::AttentionProblem& a = p.attn;
  if (a.batch == 0) return;
  if (p.s_new > 0 && a.kv_heads > 0) {
    const int nthreads = int(std::min<int64_t>(resolve_threads(a.threads), a.batch * p.s_new));
    if (a.block_table != nullptr)
      append<PagedKvSource>(p, nthreads);
    else
      append<KvSource>(p, nthreads);
  }
  if (a.sq == 0 || a.heads == 0 || a.dv == 0) return;
  // The lengths the attention sees: the cache's own plus the appended keys.
  std::vector<int32_t> lens(static_cast<size_t>(a.batch));
  for (int64_t b = 0; b < a.batch; ++b) lens[size_t(b)] = int32_t(a.seqlens_k[b] + p.s_new);
  core::AttentionProblem ap = a;
  ap.seqlens_k = lens.data();
  ap.sk = *std::max_element(lens.begin(), lens.end());
  if (a.kv_dtype == DType::e4m3) {
    ap.scale = a.scale * a.k_descale;
    ap.k_descale = ap.v_descale = 1.0f;
    ap.k_descale_heads = ap.v_descale_heads = nullptr;
    std::vector<float> q, o;
    if (a.k_descale_heads != nullptr) {  // per-head K factors: an fp32 run on a scaled q
      q = scaled_q(a, ap.q);
      o.resize(size_t(a.batch * a.sq * a.heads * a.dv));
      ap.dtype = ap.out_dtype = DType::f32;
      ap.o = o.data();
      ap.o_sb = a.sq * a.heads * a.dv, ap.o_ss = a.heads * a.dv, ap.o_sh = a.dv;
    }
    attention(ap, times);
    if (!o.empty() || a.v_descale != 1.0f || a.v_descale_heads != nullptr)
      scale_out(a, o.empty() ? nullptr : o.data(), resolve_threads(a.threads));
    return;
  }
  attention(ap, times);
}

}  // namespace flashcore::cpu
