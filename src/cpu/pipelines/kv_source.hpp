// Where attention's keys and values live. Every K and V read of the CPU attention pipeline
// goes through a KV source: it is the one place that knows their layout. The pipeline is a
// template over the two sources (attention.cpp), so the hot loops call no virtual function:
//   KvSource       the caller's tensor, element (b, s, h, e) at data + b*sb + s*ss + h*sh + e;
//                  with varlen (cu_k) the sequences concatenated along s of batch 0; with a
//                  KV cache's lengths (seqlens_k) sequence b's first seqlens_k[b] rows;
//   PagedKvSource  a paged KV cache: key s of sequence b is row s % page_size of page
//                  block_table[b][s / page_size], element e of kv head h at
//                  data + page*sb + row*ss + h*sh + e (NHD pages, or HND with the strides
//                  the API swapped into this order).
// Both give a sequence's length, its rows for one kv head (`head`: Rows or PagedRows, what
// the packers, the row ops and the in-place reads take) and single rows.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "cpu/pipelines/pack.hpp"

namespace flashcore::cpu {

// One operand (p.k or p.v) of a checked problem: its data, strides and storage dtype (q's,
// or e4m3 for an fp8 KV cache: the packers and row reads convert any dtype).
struct KvOperand {
  KvOperand(const core::AttentionProblem& p, const core::Operand4& t)
      : data(t.data), sb(t.sb), ss(t.ss), sh(t.sh), dtype(p.kv_dtype), es(int64_t(dtype_size(p.kv_dtype))) {}
  const void* data;
  int64_t sb, ss, sh;
  DType dtype;
  int64_t es;
};

class KvSource {
 public:
  using RowSource = Rows;
  // One head's rows are one strided run (stage 1 may read K in place).
  static constexpr bool kStrided = true;

  // One operand (p.k or p.v) of a checked attention problem.
  KvSource(const core::AttentionProblem& p, const core::Operand4& t)
      : t_(p, t), cu_(p.cu_k), lens_(p.seqlens_k), sk_(p.sk) {}

  // The keys of sequence b (varlen: its own length; a cache: its length; else the problem's Sk).
  int64_t seq_len(int64_t b) const {
    return cu_ != nullptr ? int64_t(cu_[b + 1] - cu_[b]) : lens_ != nullptr ? int64_t(lens_[b]) : sk_;
  }

  // The rows of sequence b for kv head h, key s at .row(s). Each is one strided run (what
  // the packers and the in-place reads take).
  Rows head(int64_t b, int64_t h) const {
    const int64_t first = cu_ != nullptr ? t_.sh * h + t_.ss * int64_t(cu_[b]) : t_.sb * b + t_.sh * h;
    return Rows{at(t_.data, first, t_.es), t_.ss, t_.dtype, t_.es};
  }

  // The bytes that the first n keys of one head's rows span (what in-place reads keep in
  // cache).
  int64_t span_bytes(int64_t n) const { return t_.ss * t_.es * n; }

  // Key s of sequence b, kv head h.
  const void* row(int64_t b, int64_t s, int64_t h) const { return head(b, h).row(s); }

 private:
  KvOperand t_;
  const int32_t* cu_;
  const int32_t* lens_;
  int64_t sk_;
};

class PagedKvSource {
 public:
  using RowSource = PagedRows;
  static constexpr bool kStrided = false;

  PagedKvSource(const core::AttentionProblem& p, const core::Operand4& t)
      : t_(p, t), lens_(p.seqlens_k), table_(p.block_table), table_sb_(p.block_table_sb),
        page_(uint32_t(p.page_size)) {}

  int64_t seq_len(int64_t b) const { return lens_[b]; }

  PagedRows head(int64_t b, int64_t h) const {
    return PagedRows{at(t_.data, t_.sh * h, t_.es), table_ + table_sb_ * b, t_.sb, t_.ss, page_, t_.dtype, t_.es};
  }

  const void* row(int64_t b, int64_t s, int64_t h) const { return head(b, h).row(s); }

 private:
  KvOperand t_;
  const int32_t* lens_;
  const int32_t* table_;
  int64_t table_sb_;
  uint32_t page_;
};

}  // namespace flashcore::cpu
