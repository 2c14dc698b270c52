// C ABI over the C++ API: converts structs, catches every exception, keeps the message.
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"
#include "flashcore/flashcore.hpp"

namespace {

thread_local std::string g_last_error;

// A C caller may put any int into an enum field; loading such a value as the C++ enum
// type is undefined behaviour, so read the code as the int it is (the checks refuse
// unknown codes by name).
template <class E>
int code_of(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized on the supported ABIs");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

flashcore::Tensor to_cpp(const fc_tensor& t) {
  flashcore::Tensor r;
  r.data = t.data;
  r.dtype = static_cast<flashcore::DType>(code_of(t.dtype));
  r.device = static_cast<flashcore::Device>(code_of(t.device));
  r.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    r.shape[i] = t.shape[i];
    r.strides[i] = t.strides[i];
  }
  return r;
}

template <class F>
fc_status guarded(F&& f) {
  try {
    f();
    g_last_error.clear();
    return FC_OK;
  } catch (const flashcore::Error& e) {
    g_last_error = e.what();
    return static_cast<fc_status>(e.code());
  } catch (const std::bad_alloc&) {
    g_last_error = "out of memory";
    return FC_INTERNAL_ERROR;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return FC_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = "unknown error";
    return FC_INTERNAL_ERROR;
  }
}

// Null struct pointers are refused with the argument's name, like every other bad input.
bool null_arg(const void* p, const char* name, fc_status* st) {
  if (p != nullptr) return false;
  g_last_error = std::string(name) + ": is a null pointer";
  *st = FC_INVALID_ARGUMENT;
  return true;
}

// The tensors fc_attention_params points to, converted; AttentionParams points into these.
struct ParamTensors {
  flashcore::Tensor lse, alibi_slopes, sinks, dsinks;
};

flashcore::AttentionParams to_cpp(const fc_attention_params* p, ParamTensors* t) {
  flashcore::AttentionParams r;
  if (p == nullptr) return r;
  if (p->magic != FC_ATTENTION_PARAMS_MAGIC)
    throw flashcore::Error(flashcore::Status::invalid_argument,
                           "params: not set up by fc_attention_params_init (magic " +
                               std::to_string(p->magic) + "); call it before setting fields");
  r.scale = p->scale;
  r.causal = p->causal != 0;
  r.window_left = p->window_left;
  r.window_right = p->window_right;
  r.strategy = static_cast<flashcore::Strategy>(code_of(p->strategy));
  r.exp2 = static_cast<flashcore::Exp2Mode>(code_of(p->exp2));
  if (p->lse != nullptr) {
    t->lse = to_cpp(*p->lse);
    r.lse = &t->lse;
  }
  r.cu_seqlens_q = p->cu_seqlens_q;
  r.cu_seqlens_k = p->cu_seqlens_k;
  r.varlen_batch = p->varlen_batch;
  r.max_seqlen_q = p->max_seqlen_q;
  r.max_seqlen_k = p->max_seqlen_k;
  r.threads = p->threads;
  r.impl = p->impl;
  r.stream = p->stream;
  r.exact_fp32 = p->exact_fp32 != 0;
  r.tile_m = p->tile_m;
  r.tile_n = p->tile_n;
  r.q_descale = p->q_descale == 0.0f ? 1.0f : p->q_descale;
  r.k_descale = p->k_descale == 0.0f ? 1.0f : p->k_descale;
  r.v_descale = p->v_descale == 0.0f ? 1.0f : p->v_descale;
  r.q_descale_heads = p->q_descale_heads;
  r.k_descale_heads = p->k_descale_heads;
  r.v_descale_heads = p->v_descale_heads;
  r.deterministic = p->deterministic != 0;
  r.softcap = p->softcap;
  if (p->alibi_slopes != nullptr) r.alibi_slopes = &(t->alibi_slopes = to_cpp(*p->alibi_slopes));
  if (p->sinks != nullptr) r.sinks = &(t->sinks = to_cpp(*p->sinks));
  if (p->dsinks != nullptr) r.dsinks = &(t->dsinks = to_cpp(*p->dsinks));
  return r;
}

// Enum codes as ints (code_of): passing an out-of-range fc_strategy on by value would load it.
flashcore::SoftmaxVParams softmax_params(float scale, int strategy, int exp2, int threads) {
  flashcore::SoftmaxVParams p;
  p.scale = scale;
  p.strategy = static_cast<flashcore::Strategy>(strategy);
  p.exp2 = static_cast<flashcore::Exp2Mode>(exp2);
  p.threads = threads;
  return p;
}

}  // namespace

struct fc_packed {
  flashcore::PackedOperands p;
};

namespace {

// Packs through `make` into a new fc_packed written to *out only on success.
template <class F>
fc_status pack_into(fc_packed** out, F&& make) {
  fc_status st = FC_OK;
  if (null_arg(out, "packed", &st)) return st;
  return guarded([&] { *out = new fc_packed{make()}; });
}

// fc_attention_backward and its reference: `run` is the C++ function (same arguments).
template <class F>
fc_status backward_call(F run, const fc_tensor* q, const fc_tensor* k, const fc_tensor* v, const fc_tensor* out,
                        const fc_tensor* dout, const fc_tensor* lse, const fc_tensor* dq, const fc_tensor* dk,
                        const fc_tensor* dv, const fc_attention_params* params) {
  fc_status st = FC_OK;
  if (null_arg(q, "q", &st) || null_arg(k, "k", &st) || null_arg(v, "v", &st) || null_arg(out, "out", &st) ||
      null_arg(dout, "dout", &st) || null_arg(lse, "lse", &st) || null_arg(dq, "dq", &st) ||
      null_arg(dk, "dk", &st) || null_arg(dv, "dv", &st))
    return st;
  return guarded([&] {
    ParamTensors pt;
    run(to_cpp(*q), to_cpp(*k), to_cpp(*v), to_cpp(*out), to_cpp(*dout), to_cpp(*lse), to_cpp(*dq), to_cpp(*dk),
        to_cpp(*dv), to_cpp(params, &pt));
  });
}

}  // namespace

extern "C" {

void fc_attention_params_init(fc_attention_params* p) {
  if (p == nullptr) return;
  *p = fc_attention_params{};
  p->magic = FC_ATTENTION_PARAMS_MAGIC;
  p->window_left = -1;
  p->window_right = -1;
  p->q_descale = p->k_descale = p->v_descale = 1.0f;
}

fc_status fc_attention(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                       const fc_tensor* out, const fc_attention_params* params) {
  fc_status st = FC_OK;
  if (null_arg(q, "q", &st) || null_arg(k, "k", &st) || null_arg(v, "v", &st) ||
      null_arg(out, "out", &st))
    return st;
  return guarded([&] {
    ParamTensors pt;
    flashcore::attention(to_cpp(*q), to_cpp(*k), to_cpp(*v), to_cpp(*out), to_cpp(params, &pt));
  });
}

fc_status fc_attention_reference(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                                 const fc_tensor* out, const fc_attention_params* params) {
  fc_status st = FC_OK;
  if (null_arg(q, "q", &st) || null_arg(k, "k", &st) || null_arg(v, "v", &st) ||
      null_arg(out, "out", &st))
    return st;
  return guarded([&] {
    ParamTensors pt;
    flashcore::reference::attention(to_cpp(*q), to_cpp(*k), to_cpp(*v), to_cpp(*out), to_cpp(params, &pt));
  });
}

fc_status fc_attention_backward(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v, const fc_tensor* out,
                                const fc_tensor* dout, const fc_tensor* lse, const fc_tensor* dq,
                                const fc_tensor* dk, const fc_tensor* dv, const fc_attention_params* params) {
  return backward_call(flashcore::attention_backward, q, k, v, out, dout, lse, dq, dk, dv, params);
}

fc_status fc_attention_backward_reference(const fc_tensor* q, const fc_tensor* k, const fc_tensor* v,
                                          const fc_tensor* out, const fc_tensor* dout, const fc_tensor* lse,
                                          const fc_tensor* dq, const fc_tensor* dk, const fc_tensor* dv,
                                          const fc_attention_params* params) {
  return backward_call(flashcore::reference::attention_backward, q, k, v, out, dout, lse, dq, dk, dv, params);
}

fc_status fc_attention_with_kvcache(const fc_tensor* q, const fc_tensor* k_cache, const fc_tensor* v_cache,
                                    const fc_tensor* cache_seqlens, const fc_tensor* block_table,
                                    const fc_tensor* k_new, const fc_tensor* v_new, fc_kv_layout layout,
                                    const fc_tensor* out, const fc_attention_params* params) {
  fc_status st = FC_OK;
  if (null_arg(q, "q", &st) || null_arg(k_cache, "k_cache", &st) || null_arg(v_cache, "v_cache", &st) ||
      null_arg(cache_seqlens, "cache_seqlens", &st) || null_arg(out, "out", &st))
    return st;
  return guarded([&] {
    ParamTensors pt;
    flashcore::Tensor table, kn, vn;
    flashcore::KvCacheOptions cache;
    if (block_table != nullptr) cache.block_table = &(table = to_cpp(*block_table));
    if (k_new != nullptr) cache.k_new = &(kn = to_cpp(*k_new));
    if (v_new != nullptr) cache.v_new = &(vn = to_cpp(*v_new));
    cache.layout = static_cast<flashcore::KvLayout>(code_of(layout));
    flashcore::attention_with_kvcache(to_cpp(*q), to_cpp(*k_cache), to_cpp(*v_cache), to_cpp(*cache_seqlens),
                                      to_cpp(*out), cache, to_cpp(params, &pt));
  });
}

fc_status fc_merge_states(const fc_tensor* out_parts, const fc_tensor* lse_parts, int64_t n,
                          const fc_tensor* out, const fc_tensor* lse, int threads, void* stream) {
  fc_status st = FC_OK;
  if (null_arg(out_parts, "out_parts", &st) || null_arg(lse_parts, "lse_parts", &st) || null_arg(out, "out", &st) ||
      null_arg(lse, "lse", &st))
    return st;
  return guarded([&] {
    std::vector<flashcore::Tensor> outs, lses;
    for (int64_t i = 0; i < n; ++i) {
      outs.push_back(to_cpp(out_parts[i]));
      lses.push_back(to_cpp(lse_parts[i]));
    }
    flashcore::MergeStatesParams p;
    p.threads = threads;
    p.stream = stream;
    flashcore::merge_states(outs.data(), lses.data(), n, to_cpp(*out), to_cpp(*lse), p);
  });
}

fc_status fc_softmax_v(const fc_tensor* s, const fc_tensor* v, const fc_tensor* out, float scale,
                       fc_strategy strategy, fc_exp2_mode exp2, int threads) {
  fc_status st = FC_OK;
  if (null_arg(s, "s", &st) || null_arg(v, "v", &st) || null_arg(out, "out", &st)) return st;
  return guarded([&] {
    flashcore::softmax_v(to_cpp(*s), to_cpp(*v), to_cpp(*out), softmax_params(scale, code_of(strategy), code_of(exp2), threads));
  });
}

fc_status fc_gemm_chain(const fc_tensor* a, const fc_tensor* b, const fc_tensor* c,
                        const fc_tensor* out, int threads) {
  fc_status st = FC_OK;
  if (null_arg(a, "a", &st) || null_arg(b, "b", &st) || null_arg(c, "c", &st) ||
      null_arg(out, "out", &st))
    return st;
  return guarded([&] {
    flashcore::GemmChainParams p;
    p.threads = threads;
    flashcore::gemm_chain(to_cpp(*a), to_cpp(*b), to_cpp(*c), to_cpp(*out), p);
  });
}

fc_status fc_pack_gemm_chain(const fc_tensor* b, const fc_tensor* c, const char* impl, int threads,
                             fc_packed** packed) {
  fc_status st = FC_OK;
  if (null_arg(b, "b", &st) || null_arg(c, "c", &st)) return st;
  return pack_into(packed, [&] {
    flashcore::GemmChainParams p;
    p.threads = threads;
    p.impl = impl;
    return flashcore::pack_gemm_chain(to_cpp(*b), to_cpp(*c), p);
  });
}

fc_status fc_gemm_chain_packed(const fc_tensor* a, const fc_packed* packed, const fc_tensor* out,
                               int threads) {
  fc_status st = FC_OK;
  if (null_arg(a, "a", &st) || null_arg(packed, "packed", &st) || null_arg(out, "out", &st)) return st;
  return guarded([&] {
    flashcore::GemmChainParams p;
    p.threads = threads;
    flashcore::gemm_chain(to_cpp(*a), packed->p, to_cpp(*out), p);
  });
}

fc_status fc_pack_softmax_v(const fc_tensor* v, const char* impl, int threads, fc_packed** packed) {
  fc_status st = FC_OK;
  if (null_arg(v, "v", &st)) return st;
  return pack_into(packed, [&] {
    flashcore::SoftmaxVParams p;
    p.threads = threads;
    p.impl = impl;
    return flashcore::pack_softmax_v(to_cpp(*v), p);
  });
}

fc_status fc_softmax_v_packed(const fc_tensor* s, const fc_packed* packed, const fc_tensor* out,
                              float scale, fc_strategy strategy, fc_exp2_mode exp2, int threads) {
  fc_status st = FC_OK;
  if (null_arg(s, "s", &st) || null_arg(packed, "packed", &st) || null_arg(out, "out", &st)) return st;
  return guarded([&] {
    flashcore::softmax_v(to_cpp(*s), packed->p, to_cpp(*out), softmax_params(scale, code_of(strategy), code_of(exp2), threads));
  });
}

const char* fc_packed_kernel(const fc_packed* packed) { return packed ? packed->p.kernel() : ""; }
void fc_packed_free(fc_packed* packed) { delete packed; }

const char* fc_last_error(void) { return g_last_error.c_str(); }
const char* fc_version(void) { return flashcore::version(); }

}  // extern "C"
