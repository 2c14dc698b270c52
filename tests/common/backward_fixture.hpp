// The attention backward's test cases and their host data, shared by the CPU and CUDA
// backward tests: a case (shape, mask, layout, varlen), its parameters, its inputs with the
// forward's out and lse (the library's CPU forward in the storage dtype, as a training step
// has them) and the fp64 gradients of the f32-widened inputs; gradient buffers in the case's
// layout, every byte NaN; and the checks every run's gradients get.
#pragma once

#include <cstdint>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {

struct BwdCase {
  const char* name;
  int64_t b, sq, sk, h, hkv, d, dv;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  bool bhsd = false;  // memory order [B, H, S, D] for every tensor and gradient
  int64_t pad = 0;    // extra elements after every row of D
  float scale = 0.0f;
  // varlen: B = 1, sq / sk are the packed rows; the prefix sums (one more than sequences)
  std::vector<int32_t> cu_q = {}, cu_k = {};
  bool max_seqlen = false;  // varlen: pass the longest lengths (max_seqlen_q / k) as well
  // Score variants: softcap (0 = off), ALiBi slopes (0 none, 1 [H], 2 [B, H]), sinks [H]
  // (random values drawn by BwdData; BwdData::params() points to them).
  float softcap = 0.0f;
  int alibi = 0;
  bool sinks = false;
};

// The memory order of a case's tensors (outermost first).
std::vector<int> bwd_order(bool bhsd);

// The case's parameters; varlen cu_seqlens from the case (host) unless given (device).
flashcore::AttentionParams bwd_params(const BwdCase& c, const int32_t* cu_q = nullptr, const int32_t* cu_k = nullptr);

struct BwdData {
  BwdCase c;
  DType dtype;
  HostTensor q, k, v, dout, out, lse, ref_dq, ref_dk, ref_dv;
  HostTensor slopes, sinks, ref_dsinks;  // the case's score variants (empty when off)

  BwdData(const BwdCase& cs, DType dt, Rng& rng);

  // bwd_params(c) with the score variants' arrays (host) of this data.
  flashcore::AttentionParams params() const;

  struct Grads {
    HostTensor dq, dk, dv;
    HostTensor dsinks;  // [H] with sinks (pass it as params.dsinks), else empty
  };
  // Gradient buffers in the case's layout (pad: other padding than the case's), poisoned.
  Grads grads(int64_t pad = -1) const;
  // One run's gradients: within tol of the reference, nothing written outside the views,
  // dq exactly 0 on fully masked rows (lse = -inf or, with a sink, no key seen); dsinks too.
  void check(const Grads& g, double tol) const;
};

// The gradients' bytes, padding included (for bitwise comparisons).
std::vector<uint8_t> bytes_of(const BwdData::Grads& g);

// attention_backward(t[0..8] = q, k, v, out, dout, lse, dq, dk, dv; p) must throw
// flashcore::Error(code) whose message starts with `arg` (the argument it names).
void expect_refused(const std::vector<flashcore::Tensor>& t, const flashcore::AttentionParams& p, const char* arg,
                    flashcore::Status code);

}  // namespace fctest
