// Where attention's keys and values live. Every K and V read of the CPU attention pipeline
// goes through a KvSource: it is the one place that knows their layout. Today that is the
// caller's tensor, element (b, s, h, e) at data + b*sb + s*ss + h*sh + e, and with varlen
// (cu_k) the sequences concatenated along s of batch 0. A paged KV cache replaces this type
// with a block-table lookup; nothing else in the pipeline computes a K/V address.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "cpu/pipelines/pack.hpp"

namespace flashcore::cpu {

class KvSource {
 public:
  // One operand (p.k or p.v) of a checked attention problem.
  KvSource(const core::Operand4& t, DType dtype, const int32_t* cu_k, int64_t sk)
      : data_(t.data), sb_(t.sb), ss_(t.ss), sh_(t.sh), dtype_(dtype),
        es_(int64_t(dtype_size(dtype))), cu_(cu_k), sk_(sk) {}

  // The keys of sequence b (varlen: its own length; else the problem's Sk).
  int64_t seq_len(int64_t b) const { return cu_ != nullptr ? int64_t(cu_[b + 1] - cu_[b]) : sk_; }

  // The rows of sequence b for kv head h, key s at .row(s). Each is one strided run (what
  // the packers and the in-place reads take).
  Rows head(int64_t b, int64_t h) const {
    const int64_t first = cu_ != nullptr ? sh_ * h + ss_ * int64_t(cu_[b]) : sb_ * b + sh_ * h;
    return Rows{at(data_, first, es_), ss_, dtype_, es_};
  }

  // The bytes that the first n keys of one head's rows span (what in-place reads keep in
  // cache).
  int64_t span_bytes(int64_t n) const { return ss_ * es_ * n; }

  // Key s of sequence b, kv head h.
  const void* row(int64_t b, int64_t s, int64_t h) const { return head(b, h).row(s); }

 private:
  const void* data_;
  int64_t sb_, ss_, sh_;
  DType dtype_;
  int64_t es_;
  const int32_t* cu_;
  int64_t sk_;
};

}  // namespace flashcore::cpu
