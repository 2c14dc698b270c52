// The resolved attention_backward problem: what the API hands a backend after every check.
// Plain data (no ownership); strides in elements; the last dim of every operand contiguous.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/problem.hpp"

namespace flashcore::core {

// A gradient output: element (b, s, h, d) at data + b*sb + s*ss + h*sh + d.
struct GradOut {
  void* data = nullptr;
  int64_t sb = 0, ss = 0, sh = 0;
};

// Zeros every element of a [nb, ns, nh, d] gradient view of dtype t (rows are contiguous).
inline void zero_grad(const GradOut& g, DType t, int64_t nb, int64_t ns, int64_t nh, int64_t d) {
  const size_t es = dtype_size(t);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t h = 0; h < nh; ++h)
        std::memset(static_cast<char*>(g.data) + (b * g.sb + s * g.ss + h * g.sh) * int64_t(es), 0, size_t(d) * es);
}

// Sequence b of a problem: its first q and k/v rows, its lengths and its batch index in the
// tensors (varlen: the sequences lie along s of batch entry 0).
struct Sequence {
  int64_t q_off, k_off, sq, sk, bb;
};
inline Sequence sequence(const AttentionProblem& p, int64_t b) {
  if (p.cu_q == nullptr) return {0, 0, p.sq, p.sk, b};
  return {p.cu_q[b], p.cu_k[b], int64_t(p.cu_q[b + 1]) - p.cu_q[b], int64_t(p.cu_k[b + 1]) - p.cu_k[b], 0};
}

struct AttentionBackwardProblem {
  // The forward problem: q, k, v, o (the forward's output, read here), lse (read here; never
  // null), shapes, masks, varlen, scale, exp2 mode, threads, impl. lse is [B][H][Sq]
  // (varlen: [1][H][total_q]) at lse + b*lse_sb + h*lse_sh + s.
  AttentionProblem fwd;
  Operand4 dout;             // dL/dO, like o
  GradOut dq, dk, dv;        // like q, k, v; every element written
  // Rows along the s dim of the tensors: q/o rows and k/v rows (varlen: the packed rows,
  // which may exceed the last cu_seqlens entry; otherwise fwd.sq and fwd.sk).
  int64_t rows_q = 0, rows_k = 0;
  bool deterministic = false;
  float* dsinks = nullptr;   // [H] (contiguous): the sinks' gradient, or null (not asked for)
};

}  // namespace flashcore::core
