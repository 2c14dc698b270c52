// flashcore._core: the thin layer between Python arrays and the C++ API.
//
// Arrays come in through nanobind's ndarray (DLPack or the buffer protocol), so numpy,
// torch, cupy and jax arrays are read in place; the Python package (flashcore/_api.py)
// allocates outputs in the caller's framework and passes them here. This file only
// turns arrays into flashcore::Tensor views, checks what the library cannot see (which
// argument is not an array, mixed devices, unsupported dtypes), releases the GIL and
// calls the library. No kernel code, no framework headers.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "flashcore/flashcore.hpp"

namespace nb = nanobind;
namespace fc = flashcore;
using namespace nb::literals;

namespace {

// DLPack device types that we map onto the library's two devices.
constexpr int32_t kDlCpu = nb::device::cpu::value;
constexpr int32_t kDlCuda = nb::device::cuda::value;
constexpr int32_t kDlCudaHost = nb::device::cuda_host::value;
constexpr int32_t kDlCudaManaged = nb::device::cuda_managed::value;

[[noreturn]] void raise_type(const std::string& m) { throw nb::type_error(m.c_str()); }
[[noreturn]] void raise_value(const std::string& m) { throw nb::value_error(m.c_str()); }

std::string py_type_name(nb::handle h) { return nb::type_name(h.type()).c_str(); }

// One imported array: the view handed to the library and the import that keeps the
// memory alive until the call returns (inputs are imported read-only, outputs writable).
struct Arg {
  fc::Tensor t;
  nb::ndarray<nb::ro> in;
  nb::ndarray<> out;
  int32_t dl_device = kDlCpu;
  int32_t dl_id = 0;
};

bool is_none(nb::handle h) { return !h.is_valid() || h.is_none(); }

// threads and impl, shared by every op's params; `keep` owns the impl string for the call.
template <class Params>
void set_threads_impl(Params& p, int threads, nb::handle impl_, std::string& keep) {
  if (threads < 0) raise_value("threads: must be >= 0, got " + std::to_string(threads));
  p.threads = threads;
  if (!is_none(impl_)) {
    keep = nb::cast<std::string>(impl_);
    p.impl = keep.c_str();
  }
}

// numpy cannot export ml_dtypes.bfloat16 through DLPack or the buffer protocol; read
// such an array through a uint16 view of the same memory and call it bf16.
bool is_numpy_bf16(nb::handle h) {
  if (!nb::hasattr(h, "dtype") || !nb::hasattr(h, "view")) return false;
  nb::object dt = h.attr("dtype");
  if (!nb::hasattr(dt, "name")) return false;
  return nb::str(dt.attr("name")).equal(nb::str("bfloat16"));
}

fc::DType map_dtype(nb::dlpack::dtype d, const char* name) {
  using C = nb::dlpack::dtype_code;
  const auto code = C(d.code);
  if (d.lanes == 1) {
    if (code == C::Float && d.bits == 32) return fc::DType::f32;
    if (code == C::Float && d.bits == 16) return fc::DType::f16;
    if (code == C::Bfloat && d.bits == 16) return fc::DType::bf16;
    if (code == C::Int && d.bits == 32) return fc::DType::i32;
    if (code == C::Float8_E4M3FN && d.bits == 8) return fc::DType::e4m3;
    if (code == C::Float8_E5M2 && d.bits == 8) return fc::DType::e5m2;
  }
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string kind = d.code < 7 ? codes[d.code] : "code " + std::to_string(d.code);
  raise_type(std::string(name) + ": dtype " + kind + std::to_string(d.bits) +
             " is not supported (float32, float16, bfloat16; int32 where stated)");
}

bool try_import(nb::handle h, Arg& a, bool writable) {
  return writable ? nb::try_cast<nb::ndarray<>>(h, a.out, /*convert=*/false)
                  : nb::try_cast<nb::ndarray<nb::ro>>(h, a.in, /*convert=*/false);
}

// Exporters give arbitrary strides (often 0) for empty arrays: use contiguous ones.
void contiguous_if_empty(fc::Tensor& t) {
  int64_t numel = 1;
  for (int i = 0; i < t.rank; ++i) numel *= t.shape[i];
  if (t.rank == 0 || numel != 0) return;
  int64_t stride = 1;
  for (int i = t.rank; i-- > 0;) {
    t.strides[i] = stride;
    stride *= t.shape[i] > 0 ? t.shape[i] : 1;
  }
}

template <typename Array>
void fill_view(const Array& x, Arg& a, bool bf16, const char* name) {
  const size_t nd = x.ndim();
  if (nd > size_t(fc::kMaxRank))
    raise_value(std::string(name) + ": rank " + std::to_string(nd) + " is too high (at most " +
                std::to_string(fc::kMaxRank) + ")");
  a.t.data = const_cast<void*>(static_cast<const void*>(x.data()));
  a.t.dtype = bf16 ? fc::DType::bf16 : map_dtype(x.dtype(), name);
  a.t.rank = int(nd);
  for (size_t i = 0; i < nd; ++i) {
    a.t.shape[i] = int64_t(x.shape(i));
    a.t.strides[i] = x.stride(i);
  }
  contiguous_if_empty(a.t);
  a.dl_device = x.device_type();
  a.dl_id = x.device_id();
}

// A view the Python package describes itself (flashcore/_api.py `_torch_view`, for torch
// tensors): the tuple (data pointer, fc::DType code, device index or -1 for the CPU,
// shape, strides in elements). torch's __dlpack__ is Python code that costs ~5.6 us per
// tensor on the H200 host (a fifth of a CUDA call's host time with four arrays); reading
// these fields costs ~1 us. The caller keeps the tensor alive for the call.
bool import_raw(nb::handle h, Arg& a, const char* name) {
  if (!nb::isinstance<nb::tuple>(h)) return false;
  nb::tuple t = nb::borrow<nb::tuple>(h);
  if (t.size() != 5) raise_type(std::string(name) + ": expected an array, got a tuple");
  const int code = nb::cast<int>(t[1]);
  if (code < 0 || code > int(fc::DType::i32)) raise_type(std::string(name) + ": unknown dtype code " + std::to_string(code));
  nb::tuple shape = nb::borrow<nb::tuple>(t[3]), strides = nb::borrow<nb::tuple>(t[4]);
  const size_t nd = shape.size();
  if (nd > size_t(fc::kMaxRank))
    raise_value(std::string(name) + ": rank " + std::to_string(nd) + " is too high (at most " +
                std::to_string(fc::kMaxRank) + ")");
  if (strides.size() != nd) raise_value(std::string(name) + ": strides do not match the shape");
  a.t.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(t[0]));
  a.t.dtype = fc::DType(code);
  a.t.rank = int(nd);
  for (size_t i = 0; i < nd; ++i) {
    a.t.shape[i] = nb::cast<int64_t>(shape[i]);
    a.t.strides[i] = nb::cast<int64_t>(strides[i]);
  }
  contiguous_if_empty(a.t);
  const int dev = nb::cast<int>(t[2]);
  a.t.device = dev < 0 ? fc::Device::cpu : fc::Device::cuda;
  a.dl_device = dev < 0 ? kDlCpu : kDlCuda;
  a.dl_id = dev < 0 ? 0 : dev;
  return true;
}

// Imports `h` (any DLPack / buffer-protocol array, or import_raw's tuple) as a view named
// `name`.
Arg import_array(nb::handle h, const char* name, bool writable) {
  Arg a;
  if (import_raw(h, a, name)) return a;
  bool ok = try_import(h, a, writable);
  bool bf16 = false;
  if (!ok && is_numpy_bf16(h)) {
    nb::object view = h.attr("view")("uint16");
    ok = bf16 = try_import(view, a, writable);
  }
  if (!ok) {
    if (writable && nb::hasattr(h, "__dlpack__"))
      raise_value(std::string(name) + ": cannot write to this " + py_type_name(h) +
                  " (read-only?); pass a writable array");
    raise_type(std::string(name) + ": expected an array with __dlpack__ or the buffer protocol "
               "(numpy, torch, cupy, jax), got " + py_type_name(h));
  }
  if (writable)
    fill_view(a.out, a, bf16, name);
  else
    fill_view(a.in, a, bf16, name);
  if (a.dl_device == kDlCpu || a.dl_device == kDlCudaHost) {
    a.t.device = fc::Device::cpu;
    a.dl_device = kDlCpu;
    a.dl_id = 0;
  } else if (a.dl_device == kDlCuda || a.dl_device == kDlCudaManaged) {
    a.t.device = fc::Device::cuda;
    a.dl_device = kDlCuda;
  } else {
    raise_value(std::string(name) + ": DLPack device type " + std::to_string(a.dl_device) +
                " is not supported (cpu or cuda)");
  }
  return a;
}

std::string device_str(const Arg& a) {
  return a.dl_device == kDlCuda ? "cuda:" + std::to_string(a.dl_id) : std::string("cpu");
}

void same_device(const Arg& a, const char* name, const Arg& ref, const char* ref_name) {
  if (a.dl_device != ref.dl_device || a.dl_id != ref.dl_id)
    raise_value(std::string(name) + ": is on " + device_str(a) + " but " + ref_name + " is on " +
                device_str(ref) + "; move all arrays to one device");
}

void need_dtype(const Arg& a, const char* name, fc::DType want, const char* ref_name) {
  if (a.t.dtype != want)
    raise_type(std::string(name) + ": dtype " + fc::to_string(a.t.dtype) + " differs from " +
               ref_name + " (" + fc::to_string(want) + ")");
}

void float_storage(const Arg& a, const char* name) {
  const fc::DType d = a.t.dtype;
  const bool fp8 = (d == fc::DType::e4m3 || d == fc::DType::e5m2) && a.t.device == fc::Device::cuda;
  if (d != fc::DType::f32 && d != fc::DType::f16 && d != fc::DType::bf16 && !fp8)
    raise_type(std::string(name) + ": dtype " + fc::to_string(d) +
               " is not supported (float32, float16 or bfloat16)");
}

fc::Strategy to_strategy(int s) {
  if (s < 0 || s > int(fc::Strategy::online)) raise_value("strategy: unknown code " + std::to_string(s));
  return fc::Strategy(s);
}
fc::Exp2Mode to_exp(int e) {
  if (e != 0 && e != 1) raise_value("exp: unknown code " + std::to_string(e));
  return fc::Exp2Mode(e);
}

// The options of attention and attention_backward as one object (flashcore._core.AttentionParams),
// built by the Python package in one place (_api._params): AttentionParams' fields with the
// Python API's spelling; arrays (cu_seqlens, per-head descales, ALiBi slopes, sinks, and the
// backward's dsinks output) as the caller's arrays, imported for the call. Defaults are the
// library's.
struct PyParams {
  double scale = 0.0;  // 0 = 1/sqrt(D)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  int strategy = 0, exp = 0;  // fc::Strategy, fc::Exp2Mode codes
  nb::object cu_seqlens_q = nb::none(), cu_seqlens_k = nb::none();
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  int threads = 0;
  nb::object impl = nb::none();
  uintptr_t stream = 0;
  bool exact_fp32 = false;
  double q_descale = 1.0, k_descale = 1.0, v_descale = 1.0;
  nb::object q_descale_heads = nb::none(), k_descale_heads = nb::none(), v_descale_heads = nb::none();
  bool deterministic = false;
  double softcap = 0.0;
  nb::object alibi_slopes = nb::none(), sinks = nb::none(), dsinks = nb::none();
};

// q, k, v and the options, imported and checked as far as the library cannot (which
// argument is not an array, mixed devices, dtypes); the library's own checks (shapes,
// strides, aliasing, cu_seqlens contents) run inside the call. `p` refers to the imports.
// What the call names k and v, and whether it writes them (attention_with_kvcache's caches
// when it appends).
struct KvNames {
  const char* k = "k";
  const char* v = "v";
  bool writable = false;
  bool cache = false;  // attention_with_kvcache: k and v may be an fp8 (e4m3) cache under q's dtype
  int hkv_dim = 2;     // the dim of k that counts the KV heads (an HND cache: 1)
};

struct AttentionInputs {
  Arg q, k, v, cu_q, cu_k, qdh, kdh, vdh, slopes, sinks, dsinks;
  std::string impl;
  int hkv_dim = 2;  // the dim of k that counts the KV heads
  fc::AttentionParams p;

  AttentionInputs(nb::handle q_, nb::handle k_, nb::handle v_, const PyParams& o, const KvNames& kv = {}) {
    q = import_array(q_, "q", false);
    k = import_array(k_, kv.k, kv.writable);
    v = import_array(v_, kv.v, kv.writable);
    same_device(k, kv.k, q, "q");
    same_device(v, kv.v, q, "q");
    float_storage(q, "q");
    if (!(kv.cache && k.t.dtype == fc::DType::e4m3)) {  // (an fp8 cache: the library checks v's dtype)
      need_dtype(k, kv.k, q.t.dtype, "q");
      need_dtype(v, kv.v, q.t.dtype, "q");
    }
    hkv_dim = kv.hkv_dim;
    const bool has_cq = !is_none(o.cu_seqlens_q), has_ck = !is_none(o.cu_seqlens_k);
    if (has_cq != has_ck)
      raise_value(has_cq ? "cu_seqlens_k: must be given together with cu_seqlens_q"
                         : "cu_seqlens_q: must be given together with cu_seqlens_k");
    if (has_cq) {
      cu_q = import_cu(o.cu_seqlens_q, "cu_seqlens_q");
      cu_k = import_cu(o.cu_seqlens_k, "cu_seqlens_k");
      if (cu_q.t.shape[0] != cu_k.t.shape[0])
        raise_value("cu_seqlens_k: has " + std::to_string(cu_k.t.shape[0]) +
                    " entries but cu_seqlens_q has " + std::to_string(cu_q.t.shape[0]));
      p.cu_seqlens_q = static_cast<const int32_t*>(cu_q.t.data);
      p.cu_seqlens_k = static_cast<const int32_t*>(cu_k.t.data);
      p.varlen_batch = cu_q.t.shape[0] - 1;
    }
    p.max_seqlen_q = o.max_seqlen_q;  // the library checks them (named errors)
    p.max_seqlen_k = o.max_seqlen_k;
    p.scale = float(o.scale);
    p.causal = o.causal;
    p.window_left = o.window_left;
    p.window_right = o.window_right;
    p.strategy = to_strategy(o.strategy);
    p.exp2 = to_exp(o.exp);
    set_threads_impl(p, o.threads, o.impl, impl);
    p.stream = reinterpret_cast<void*>(o.stream);
    p.exact_fp32 = o.exact_fp32;
    p.q_descale = float(o.q_descale);  // fp8 only; the library checks them (named errors)
    p.k_descale = float(o.k_descale);
    p.v_descale = float(o.v_descale);
    p.q_descale_heads = import_head_descale(o.q_descale_heads, qdh, "q_descale");
    p.k_descale_heads = import_head_descale(o.k_descale_heads, kdh, "k_descale");
    p.v_descale_heads = import_head_descale(o.v_descale_heads, vdh, "v_descale");
    p.deterministic = o.deterministic;
    p.softcap = float(o.softcap);  // the library checks it and the arrays' shapes (named errors)
    p.alibi_slopes = import_variant(o.alibi_slopes, slopes, "alibi_slopes", false);
    p.sinks = import_variant(o.sinks, sinks, "sinks", false);
    p.dsinks = import_variant(o.dsinks, dsinks, "dsinks", true);
  }
  AttentionInputs(const AttentionInputs&) = delete;

  // A score variant's array (slopes, sinks; dsinks written) on q's device, as its view.
  fc::Tensor* import_variant(nb::handle h, Arg& a, const char* name, bool writable) {
    if (is_none(h)) return nullptr;
    a = import_array(h, name, writable);
    same_device(a, name, q, "q");
    return &a.t;
  }

  // An array on q's device of q's dtype (what the forward writes and the backward reads);
  // `lse`: float32.
  Arg like_q(nb::handle h, const char* name, bool writable) const {
    Arg a = import_array(h, name, writable);
    same_device(a, name, q, "q");
    if (std::strcmp(name, "lse") == 0) {
      if (a.t.dtype != fc::DType::f32)
        raise_type(std::string("lse: must be float32, got ") + fc::to_string(a.t.dtype));
    } else if (q.t.dtype != fc::DType::e4m3 && q.t.dtype != fc::DType::e5m2) {  // (fp8 writes bf16 / f16)
      need_dtype(a, name, q.t.dtype, "q");
    }
    return a;
  }

  // A per-head descale (fp8): a float32 [B, Hkv] array, contiguous, on q's device (B: the
  // sequences when varlen); its values are checked by no one (documented in the API).
  const float* import_head_descale(nb::handle h, Arg& a, const char* name) {
    if (is_none(h)) return nullptr;
    a = import_array(h, name, false);
    same_device(a, name, q, "q");
    if (a.t.dtype != fc::DType::f32)
      raise_type(std::string(name) + ": a per-head descale array must be float32, got " + fc::to_string(a.t.dtype));
    const int64_t b = p.varlen_batch > 0 ? p.varlen_batch : q.t.shape[0], hkv = k.t.rank == 4 ? k.t.shape[hkv_dim] : -1;
    if (a.t.rank != 2 || (hkv >= 0 && (a.t.shape[0] != b || a.t.shape[1] != hkv)))
      raise_value(std::string(name) + ": a per-head descale array must have shape [B, Hkv] = [" + std::to_string(b) +
                  ", " + std::to_string(hkv) + "]");
    if (a.t.strides[1] != 1 || (a.t.shape[0] > 1 && a.t.strides[0] != a.t.shape[1]))
      raise_value(std::string(name) + ": a per-head descale array must be contiguous");
    return static_cast<const float*>(a.t.data);
  }

  Arg import_cu(nb::handle h, const char* name) {
    Arg a = import_array(h, name, false);
    same_device(a, name, q, "q");
    if (a.t.dtype != fc::DType::i32)
      raise_type(std::string(name) + ": must be int32, got " + fc::to_string(a.t.dtype));
    if (a.t.rank != 1 || a.t.shape[0] < 2)
      raise_value(std::string(name) + ": expected a 1-d array of batch + 1 >= 2 prefix sums");
    if (a.t.strides[0] != 1) raise_value(std::string(name) + ": must be contiguous");
    return a;
  }
};

// The forward's call: the inputs, out (writable) and optional lse (writable).
struct AttentionCall {
  AttentionInputs in;
  Arg out, lse;

  AttentionCall(nb::handle q, nb::handle k, nb::handle v, nb::handle out_, nb::handle lse_, const PyParams& o,
                const KvNames& kv = {})
      : in(q, k, v, o, kv) {
    out = in.like_q(out_, "out", true);
    if (!is_none(lse_)) {
      lse = in.like_q(lse_, "lse", true);
      in.p.lse = &lse.t;
    }
  }

  void run(fc::PhaseTimes* times = nullptr) {
    nb::gil_scoped_release nogil;
    const auto t0 = std::chrono::steady_clock::now();
    fc::attention(in.q.t, in.k.t, in.v.t, out.t, in.p, times);
    last_call_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - t0).count();
  }

  // Time of the last fc::attention call made by `attention` on this thread, for the
  // overhead measurement (Python time of a call minus the C++ time of the same call).
  static thread_local int64_t last_call_ns;
};
thread_local int64_t AttentionCall::last_call_ns = 0;

void attention(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, const PyParams& params) {
  AttentionCall(q, k, v, out, lse, params).run();
}

// attention_with_kvcache: q, the caches (written when k_new / v_new are given: imported
// writable then), cache_seqlens and the optional block table and new rows read, out and the
// optional lse written; layout 0 = NHD, 1 = HND (flashcore.hpp's KvLayout).
void attention_with_kvcache(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle seqlens_,
                            nb::handle table_, nb::handle k_new_, nb::handle v_new_, nb::handle out, nb::handle lse,
                            int layout, const PyParams& params, bool check_contents) {
  const bool append = !is_none(k_new_) || !is_none(v_new_);
  AttentionCall c(q, k_cache, v_cache, out, lse, params, KvNames{"k_cache", "v_cache", append, true, layout == 1 ? 1 : 2});
  fc::KvCacheOptions opt;
  const Arg seqlens = import_array(seqlens_, "cache_seqlens", false);
  same_device(seqlens, "cache_seqlens", c.in.q, "q");
  Arg table, kn, vn;
  if (!is_none(table_)) {
    table = import_array(table_, "block_table", false);
    same_device(table, "block_table", c.in.q, "q");
    opt.block_table = &table.t;
  }
  // The new rows in the cache's dtype (q's, or e4m3 for an fp8 cache).
  const auto new_rows = [&](nb::handle h, const char* name) {
    Arg a = import_array(h, name, false);
    same_device(a, name, c.in.q, "q");
    need_dtype(a, name, c.in.k.t.dtype, "k_cache");
    return a;
  };
  if (!is_none(k_new_)) {
    kn = new_rows(k_new_, "k_new");
    opt.k_new = &kn.t;
  }
  if (!is_none(v_new_)) {
    vn = new_rows(v_new_, "v_new");
    opt.v_new = &vn.t;
  }
  if (layout != 0 && layout != 1) raise_value("kv_layout: unknown code " + std::to_string(layout));
  opt.layout = fc::KvLayout(layout);
  opt.check_contents = check_contents;
  nb::gil_scoped_release nogil;
  fc::attention_with_kvcache(c.in.q.t, c.in.k.t, c.in.v.t, seqlens.t, c.out.t, opt, c.in.p);
}

// The C++ side of the overhead measurement: the same call as `attention`, imported once
// and then run `iters` times in C++. Returns (each call's time in ns, the micro-kernel and
// the strategy that ran, from one more call with PhaseTimes).
nb::tuple attention_loop(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                         const PyParams& params, int iters) {
  if (iters < 1) raise_value("iters: must be >= 1, got " + std::to_string(iters));
  AttentionCall c(q, k, v, out, lse, params);
  std::vector<double> ns(size_t(iters), 0.0);
  for (int i = 0; i < iters; ++i) {
    c.run();
    ns[size_t(i)] = double(AttentionCall::last_call_ns);
  }
  fc::PhaseTimes times;
  c.run(&times);
  return nb::make_tuple(ns, times.kernel, times.strategy);
}

// attention_backward (and, with `reference`, the fp64 reference of it, for tests):
// q, k, v, out, dout, lse read, dq, dk, dv written.
void attention_backward(nb::handle q, nb::handle k, nb::handle v, nb::handle out_, nb::handle dout_,
                        nb::handle lse_, nb::handle dq_, nb::handle dk_, nb::handle dv_, const PyParams& params,
                        bool reference) {
  AttentionInputs in(q, k, v, params);
  const Arg out = in.like_q(out_, "out", false), dout = in.like_q(dout_, "dout", false),
            lse = in.like_q(lse_, "lse", false), dq = in.like_q(dq_, "dq", true), dk = in.like_q(dk_, "dk", true),
            dv = in.like_q(dv_, "dv", true);
  nb::gil_scoped_release nogil;
  if (reference)
    fc::reference::attention_backward(in.q.t, in.k.t, in.v.t, out.t, dout.t, lse.t, dq.t, dk.t, dv.t, in.p);
  else
    fc::attention_backward(in.q.t, in.k.t, in.v.t, out.t, dout.t, lse.t, dq.t, dk.t, dv.t, in.p);
}

// merge_states' options (flashcore._core.MergeStatesParams: MergeStatesParams' fields; the
// Python package sets stream for CUDA arrays, as for attention).
struct PyMergeParams {
  int threads = 0;
  uintptr_t stream = 0;
};

// merge_states: the parts (lists of arrays), out and lse written. `pair`: the two-part form
// (messages name out_a / out_b, lse_a / lse_b).
void merge_states(const nb::list& out_parts, const nb::list& lse_parts, nb::handle out_, nb::handle lse_, bool pair,
                  const PyMergeParams& o) {
  const size_t n = out_parts.size();
  if (lse_parts.size() != n)
    raise_value("lse_parts: has " + std::to_string(lse_parts.size()) + " parts but out_parts has " + std::to_string(n));
  Arg out = import_array(out_, "out", true), lse = import_array(lse_, "lse", true);
  same_device(lse, "lse", out, "out");
  std::vector<Arg> os(n), ls(n);
  std::vector<fc::Tensor> ot(n), lt(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string on = pair ? (i == 0 ? "out_a" : "out_b") : "out_parts[" + std::to_string(i) + "]";
    const std::string ln = pair ? (i == 0 ? "lse_a" : "lse_b") : "lse_parts[" + std::to_string(i) + "]";
    os[i] = import_array(out_parts[i], on.c_str(), false);
    ls[i] = import_array(lse_parts[i], ln.c_str(), false);
    same_device(os[i], on.c_str(), out, "out");
    same_device(ls[i], ln.c_str(), out, "out");
    ot[i] = os[i].t;
    lt[i] = ls[i].t;
  }
  if (o.threads < 0) raise_value("threads: must be >= 0, got " + std::to_string(o.threads));
  fc::MergeStatesParams p;
  p.threads = o.threads;
  p.stream = reinterpret_cast<void*>(o.stream);
  nb::gil_scoped_release nogil;
  if (pair && n == 2)
    fc::merge_states(ot[0], lt[0], ot[1], lt[1], out.t, lse.t, p);
  else
    fc::merge_states(ot.data(), lt.data(), int64_t(n), out.t, lse.t, p);
}

void softmax_v(nb::handle s_, nb::handle v_, nb::handle out_, double scale, int strategy, int exp,
               int threads, nb::handle impl_) {
  Arg s = import_array(s_, "s", false);
  Arg v = import_array(v_, "v", false);
  Arg out = import_array(out_, "out", true);
  same_device(v, "v", s, "s");
  same_device(out, "out", s, "s");
  if (s.t.dtype != fc::DType::f32 && s.t.dtype != fc::DType::i32)
    raise_type(std::string("s: dtype ") + fc::to_string(s.t.dtype) +
               " is not supported (float32 scores, or int32 with a scale)");
  float_storage(v, "v");
  need_dtype(out, "out", v.t.dtype, "v");
  fc::SoftmaxVParams p;
  p.scale = float(scale);
  p.strategy = to_strategy(strategy);
  p.exp2 = to_exp(exp);
  std::string impl;
  set_threads_impl(p, threads, impl_, impl);
  nb::gil_scoped_release nogil;
  fc::softmax_v(s.t, v.t, out.t, p);
}

void gemm_chain(nb::handle a_, nb::handle b_, nb::handle c_, nb::handle out_, int threads,
                nb::handle impl_) {
  Arg a = import_array(a_, "a", false);
  Arg b = import_array(b_, "b", false);
  Arg c = import_array(c_, "c", false);
  Arg out = import_array(out_, "out", true);
  same_device(b, "b", a, "a");
  same_device(c, "c", a, "a");
  same_device(out, "out", a, "a");
  float_storage(a, "a");
  need_dtype(b, "b", a.t.dtype, "a");
  need_dtype(c, "c", a.t.dtype, "a");
  need_dtype(out, "out", a.t.dtype, "a");
  fc::GemmChainParams p;
  std::string impl;
  set_threads_impl(p, threads, impl_, impl);
  nb::gil_scoped_release nogil;
  fc::gemm_chain(a.t, b.t, c.t, out.t, p);
}

nb::list list_kernels() {
  const int n = fc::list_kernels(nullptr, 0);
  std::vector<fc::KernelInfo> all(size_t(n > 0 ? n : 0));
  fc::list_kernels(all.data(), n);
  nb::list l;
  for (const fc::KernelInfo& k : all)
    l.append(nb::make_tuple(k.key, k.isa, k.available));
  return l;
}

bool built_with_cuda() {
#if defined(FC_BUILD_CUDA)
  return true;
#else
  // The extension links flashcore_static without its build definitions; ask the library.
  for (const auto& t : list_kernels()) {
    const std::string isa = nb::cast<std::string>(nb::cast<nb::tuple>(t)[1]);
    if (isa.rfind("sm", 0) == 0) return true;
  }
  return false;
#endif
}

// flashcore::Error -> Python: invalid_argument is ValueError (TypeError when it is about
// a dtype), unsupported is NotImplementedError (TypeError for dtypes), the rest
// RuntimeError. The library's message names the argument; its C++ spelling
// "params.x" becomes the Python keyword "x".
void translate(const std::exception_ptr& e, void*) {
  try {
    std::rethrow_exception(e);
  } catch (const fc::Error& err) {
    std::string msg = err.what();
    if (msg.rfind("params.", 0) == 0) msg.erase(0, 7);
    const bool about_dtype = msg.find("dtype") != std::string::npos;
    PyObject* type = PyExc_RuntimeError;
    switch (err.code()) {
      case fc::Status::invalid_argument: type = about_dtype ? PyExc_TypeError : PyExc_ValueError; break;
      case fc::Status::unsupported: type = about_dtype ? PyExc_TypeError : PyExc_NotImplementedError; break;
      default: break;
    }
    PyErr_SetString(type, msg.c_str());
  }
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "flashcore C++ bindings (internal; use the flashcore package)";
  nb::register_exception_translator(translate);

  const auto kNone = nb::for_setter(nb::arg("value").none());  // array / str fields take None
  nb::class_<PyParams>(m, "AttentionParams",
                       "Options of attention / attention_backward (flashcore.hpp's AttentionParams; built by "
                       "flashcore._api._params)")
      .def(nb::init<>())
      .def_rw("scale", &PyParams::scale)
      .def_rw("causal", &PyParams::causal)
      .def_rw("window_left", &PyParams::window_left)
      .def_rw("window_right", &PyParams::window_right)
      .def_rw("strategy", &PyParams::strategy)
      .def_rw("exp", &PyParams::exp)
      .def_rw("cu_seqlens_q", &PyParams::cu_seqlens_q, kNone)
      .def_rw("cu_seqlens_k", &PyParams::cu_seqlens_k, kNone)
      .def_rw("max_seqlen_q", &PyParams::max_seqlen_q)
      .def_rw("max_seqlen_k", &PyParams::max_seqlen_k)
      .def_rw("threads", &PyParams::threads)
      .def_rw("impl", &PyParams::impl, kNone)
      .def_rw("stream", &PyParams::stream)
      .def_rw("exact_fp32", &PyParams::exact_fp32)
      .def_rw("q_descale", &PyParams::q_descale)
      .def_rw("k_descale", &PyParams::k_descale)
      .def_rw("v_descale", &PyParams::v_descale)
      .def_rw("q_descale_heads", &PyParams::q_descale_heads, kNone)
      .def_rw("k_descale_heads", &PyParams::k_descale_heads, kNone)
      .def_rw("v_descale_heads", &PyParams::v_descale_heads, kNone)
      .def_rw("deterministic", &PyParams::deterministic)
      .def_rw("softcap", &PyParams::softcap)
      .def_rw("alibi_slopes", &PyParams::alibi_slopes, kNone)
      .def_rw("sinks", &PyParams::sinks, kNone)
      .def_rw("dsinks", &PyParams::dsinks, kNone);
  m.def("attention", &attention, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "params"_a);
  m.def("attention_with_kvcache", &attention_with_kvcache, "q"_a, "k_cache"_a, "v_cache"_a, "cache_seqlens"_a,
        "block_table"_a.none(), "k_new"_a.none(), "v_new"_a.none(), "out"_a, "lse"_a.none(), "layout"_a, "params"_a,
        "check_contents"_a = false);
  m.def("attention_loop", &attention_loop, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "params"_a, "iters"_a);
  m.def("attention_backward", &attention_backward, "q"_a, "k"_a, "v"_a, "out"_a, "dout"_a, "lse"_a, "dq"_a, "dk"_a,
        "dv"_a, "params"_a, "reference"_a = false);
  m.def("last_call_ns", [] { return AttentionCall::last_call_ns; },
        "Nanoseconds the last attention() spent in the C++ call (this thread).");
  nb::class_<PyMergeParams>(m, "MergeStatesParams", "Options of merge_states (flashcore.hpp's MergeStatesParams)")
      .def(nb::init<>())
      .def_rw("threads", &PyMergeParams::threads)
      .def_rw("stream", &PyMergeParams::stream);
  m.def("merge_states", &merge_states, "out_parts"_a, "lse_parts"_a, "out"_a, "lse"_a, "pair"_a, "params"_a);
  m.def("softmax_v", &softmax_v, "s"_a, "v"_a, "out"_a, "scale"_a, "strategy"_a, "exp"_a,
        "threads"_a, "impl"_a.none());
  m.def("gemm_chain", &gemm_chain, "a"_a, "b"_a, "c"_a, "out"_a, "threads"_a, "impl"_a.none());
  m.def("list_kernels", &list_kernels);
  m.def("built_with_cuda", &built_with_cuda);
  m.def("set_force_generic", &fc::set_force_generic, "on"_a);
  m.def("force_generic", &fc::force_generic);
  m.def("version", &fc::version);
}
