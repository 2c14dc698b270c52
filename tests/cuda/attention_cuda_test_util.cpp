// The bodies of attention_cuda_test_util.hpp's larger helpers.
#include "attention_cuda_test_util.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fctest::cuda_fwd {

using flashcore::AttentionParams;
using flashcore::Error;
using flashcore::Status;

namespace {

// Elements [start, start + n) of dimension `dim` of t, a contiguous copy (logical order).
HostTensor slice_dim(const HostTensor& t, size_t dim, int64_t start, int64_t n) {
  std::vector<int64_t> shape = t.shape();
  const int64_t full = shape[dim];
  shape[dim] = n;
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t outer = t.numel() / (full * inner);
  HostTensor r(t.dtype(), shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) r.set((o * n + j) * inner + i, t.get((o * full + start + j) * inner + i));
  return r;
}

}  // namespace

void run_case(const Case& c) {
  SCOPED_TRACE(c.str());
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t Dv = c.Dv < 0 ? c.D : c.Dv;
  const std::vector<int> order = c.bhsd ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{};
  HostTensor q(c.dtype, {c.B, c.Sq, c.H, c.D}, order, c.pad), k(c.dtype, {c.B, c.Sk, c.Hkv, c.D}, order, c.pad),
      v(c.dtype, {c.B, c.Sk, c.Hkv, Dv}, order, c.pad), o(c.dtype, {c.B, c.Sq, c.H, Dv}, order, c.out_pad >= 0 ? c.out_pad : c.pad);
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  o.poison();
  HostTensor lse(DType::f32, {c.B, c.H, c.Sq});
  lse.poison();
  DevTensor dq(q), dk(k), dv(v), dout(o), dlse(lse);

  AttentionParams p;
  p.causal = c.causal;
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.exact_fp32 = c.exact_fp32;
  p.scale = c.scale;
  p.tile_m = c.tile_m;
  p.tile_n = c.tile_n;
  p.impl = c.impl.empty() ? nullptr : c.impl.c_str();
  if (c.lse) p.lse = &dlse.view();
  flashcore::PhaseTimes times;
  ASSERT_NO_THROW(flashcore::attention(dq.view(), dk.view(), dv.view(), dout.view(), p, &times));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.download(o);
  dlse.download(lse);
  EXPECT_TRUE(o.padding_untouched()) << "kernel wrote outside the output view";

  AttentionParams rp = p;
  rp.stream = nullptr;
  rp.tile_m = rp.tile_n = 0;
  rp.impl = nullptr;
  // f32: the exact FFMA kernel when asked for, or when the head dims / strides are not
  // multiples of 4 elements (16-byte rows); TF32 otherwise.
  const bool exact = c.dtype == DType::f32 &&
                     (c.exact_fp32 || c.impl == kSimtKey || c.D % 4 != 0 || Dv % 4 != 0 || c.pad % 4 != 0);
  if (c.dtype == DType::f32) {
    EXPECT_EQ(times.kernel.rfind(exact ? kSimtKey : "fwd_sm80_tf32_", 0), 0u) << "kernel " << times.kernel;
  }
  if (c.expect_hcols) {
    EXPECT_NE(times.kernel.find("+hcols"), std::string::npos) << "kernel " << times.kernel;
  }
  if (c.expect_hpad) {
    EXPECT_NE(times.kernel.find("+hpad"), std::string::npos) << "kernel " << times.kernel;
  }
  if (!c.expect_kernel.empty()) {
    EXPECT_EQ(times.kernel.rfind(c.expect_kernel, 0), 0u) << "kernel " << times.kernel;
    if (c.exact_kernel) {
      EXPECT_EQ(times.kernel, c.expect_kernel);
    }
  }
  // Against the reference: every head, or (sample_heads) the first and last KV head's.
  const int64_t G = c.H / c.Hkv;
  std::vector<int64_t> kv_heads;
  if (c.sample_heads && c.Hkv > 2) kv_heads = {0, c.Hkv - 1};
  auto check = [&](const HostTensor& qs, const HostTensor& ks, const HostTensor& vs, const HostTensor& os,
                   const HostTensor& ls, int64_t h) {
    HostTensor ref(DType::f32, {c.B, c.Sq, h, Dv}), ref_lse(DType::f32, {c.B, h, c.Sq});
    rp.lse = c.lse ? &ref_lse.view() : nullptr;
    flashcore::reference::attention(fctest::to_f32(qs).view(), fctest::to_f32(ks).view(),
                                    fctest::to_f32(vs).view(), ref.view(), rp);
    EXPECT_TRUE(fctest::close(os, ref, out_tol(c.dtype, c.Sk, exact))) << "kernel " << times.kernel;
    if (c.lse) {
      EXPECT_TRUE(fctest::lse_close(ls, ref_lse, lse_tol(c.dtype, exact))) << "kernel " << times.kernel;
    }
  };
  if (kv_heads.empty()) check(q, k, v, o, lse, c.H);
  for (int64_t kh : kv_heads) {
    SCOPED_TRACE("heads " + std::to_string(kh * G) + ".." + std::to_string(kh * G + G - 1));
    check(slice_dim(q, 2, kh * G, G), slice_dim(k, 2, kh, 1), slice_dim(v, 2, kh, 1), slice_dim(o, 2, kh * G, G),
          slice_dim(lse, 1, kh * G, G), G);
  }
}

const std::vector<int32_t> kVarlenQ = {0, 5, 135, 199, 199}, kVarlenK = {0, 7, 207, 208, 250};
void varlen_case(DType dt, int64_t D, const std::string& impl, int64_t H, const std::vector<int32_t>& cq,
                 const std::vector<int32_t>& ck, const std::string& expect, int64_t extra_q, bool graph) {
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  SCOPED_TRACE(impl);
  const int64_t nb = int64_t(cq.size()) - 1, tq = cq.back() + extra_q, tk = ck.back(), Hkv = 2;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    // e4m3 inputs write bf16.
    HostTensor q(dt, {1, tq, H, D}), k(dt, {1, tk, Hkv, D}), v(dt, {1, tk, Hkv, D}),
        o(dt == DType::e4m3 ? DType::bf16 : dt, {1, tq, H, D});
    HostTensor lse(DType::f32, {1, H, tq});
    q.fill_uniform(rng, -1, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    o.poison();
    lse.poison();
    DevTensor dq(q), dk(k), dv(v), dout(o), dlse(lse);
    int32_t *dcq = nullptr, *dck = nullptr;
    ASSERT_EQ(cudaMalloc(&dcq, cq.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dck, ck.size() * 4), cudaSuccess);
    cudaMemcpy(dcq, cq.data(), cq.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dck, ck.data(), ck.size() * 4, cudaMemcpyHostToDevice);
    AttentionParams p;
    p.causal = causal;
    p.lse = &dlse.view();
    p.cu_seqlens_q = dcq;
    p.cu_seqlens_k = dck;
    p.varlen_batch = nb;
    if (!impl.empty()) p.impl = impl.c_str();
    flashcore::PhaseTimes t;
    if (graph) {
      for (size_t i = 1; i < cq.size(); ++i) {
        p.max_seqlen_q = std::max<int64_t>(p.max_seqlen_q, cq[i] - cq[i - 1]);
        p.max_seqlen_k = std::max<int64_t>(p.max_seqlen_k, ck[i] - ck[i - 1]);
      }
      p.max_seqlen_k = std::min<int64_t>(p.max_seqlen_k + 3, tk);
      fctest::run_captured([&](cudaStream_t st) {
        p.stream = st;
        EXPECT_NO_THROW(flashcore::attention(dq.view(), dk.view(), dv.view(), dout.view(), p, &t));
        p.stream = nullptr;
      });
    } else {
      ASSERT_NO_THROW(flashcore::attention(dq.view(), dk.view(), dv.view(), dout.view(), p, &t));
    }
    if (!impl.empty() || !expect.empty()) {
      EXPECT_EQ(t.kernel, expect.empty() ? impl : expect);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.download(o);
    dlse.download(lse);
    HostTensor ref(DType::f32, {1, tq, H, D}), ref_lse(DType::f32, {1, H, tq});
    AttentionParams rp = p;
    rp.impl = nullptr;
    rp.lse = &ref_lse.view();
    rp.cu_seqlens_q = cq.data();
    rp.cu_seqlens_k = ck.data();
    flashcore::reference::attention(fctest::to_f32(q).view(), fctest::to_f32(k).view(), fctest::to_f32(v).view(),
                                    ref.view(), rp);  // e4m3: the codes decoded exactly
    // Rows past the last sequence: still poisoned (NaN), then left out of the comparison.
    int64_t touched = 0;
    for (int64_t i = cq.back() * H * D; i < tq * H * D; ++i) {
      touched += !std::isnan(o.get(i));
      o.set(i, 0.0);
      ref.set(i, 0.0);
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = cq.back(); r < tq; ++r) {
        touched += !std::isnan(lse.get(h * tq + r));
        lse.set(h * tq + r, 0.0);
        ref_lse.set(h * tq + r, 0.0);
      }
    EXPECT_EQ(touched, 0) << "rows past the last sequence were written";
    EXPECT_TRUE(fctest::close(o, ref, out_tol(dt, 200)));
    EXPECT_TRUE(fctest::lse_close(lse, ref_lse, lse_tol(dt)));
    cudaFree(dcq);
    cudaFree(dck);
  }
}

void expect_refused(const flashcore::Tensor& q, const flashcore::Tensor& k, const flashcore::Tensor& v,
                    DevTensor& out, const HostTensor& host_out, const AttentionParams& p, Status code,
                    const std::string& names) {
  try {
    flashcore::attention(q, k, v, out.view(), p);
    ADD_FAILURE() << "accepted; expected an error naming " << names;
  } catch (const Error& e) {
    EXPECT_EQ(int(e.code()), int(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostTensor back(host_out.dtype(), host_out.shape());
  out.download(back);
  EXPECT_EQ(std::memcmp(back.raw(), host_out.raw(), host_out.bytes()), 0) << "output was written";
}

}  // namespace fctest::cuda_fwd
