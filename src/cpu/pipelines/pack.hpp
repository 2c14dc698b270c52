// Packing for the CPU pipelines: row sources, the packers that turn them into the
// micro-kernels' operand blocks and panels (layouts in ukernel.hpp), and the per-thread
// scratch the pipelines pack into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu {

// ---------------------------------------------------------------- scratch
// Per-thread bump arena, reused across calls (grows, never shrinks).
class Arena {
 public:
  void reset(size_t bytes) {
    if (buf_.size() < bytes + 64) buf_.resize(bytes + 64);
    off_ = (64 - reinterpret_cast<uintptr_t>(buf_.data()) % 64) % 64;
  }
  template <class T>
  T* take(int64_t n) {
    T* p = reinterpret_cast<T*>(buf_.data() + off_);
    off_ += round_up(int64_t(n * sizeof(T)), 64);
    return p;
  }

 private:
  std::vector<char> buf_;
  size_t off_ = 0;
};
// The calling thread's arena (softmax_block's buffers, gemm_chain's per-item buffers).
Arena& thread_arena();

// Packed operands start on a cache line (pack_slot, Arena::take, PackedOperands), so that
// every 64-byte row piece of a B panel (NR fp32 = one or more zmm) is one aligned load,
// never a line split (measured: docs/results/cpu-pipelines-2026-11-29.md).
// The packers write every byte that is read.
//
// The large packed operands of one call (K/V, V, B and C), kept by the calling thread for
// its next call (grow-only, like the per-thread arenas): fresh pages cost a fault and the
// kernel's zeroing on first touch, which for gemm_chain's 16 MiB of B and C took about as
// long as the packing itself. Slots (0, 1) are distinct buffers used at the same time in a
// call. Throws std::bad_alloc.
char* pack_slot(int slot, size_t bytes);

// ---------------------------------------------------------------- row sources
// base + elems * es, leaving a null base null: an operand with no elements may be null
// (the checks allow it), and null + offset is undefined behaviour.
inline const char* at(const void* base, int64_t elems, int64_t es) {
  return base == nullptr ? nullptr : static_cast<const char*>(base) + elems * es;
}

// A row source: row r starts at base + r * stride (elements of dtype).
struct Rows {
  const void* base;
  int64_t stride;
  DType dtype = DType::f32;  // (es below reads it)
  int64_t es = int64_t(dtype_size(dtype));  // once, not per row (an out-of-line call)
  const void* row(int64_t r) const { return at(base, r * stride, es); }
  // The element stride of rows [r, r + n) as one strided run (always: `stride`).
  int64_t run_stride(int64_t, int64_t) const { return stride; }
  // How many of rows [r, r + n) form one strided run from r (all of them).
  int64_t run_length(int64_t, int64_t n) const { return n; }
  // The same rows from column c on.
  Rows columns_from(int64_t c) const { return Rows{at(base, c, es), stride, dtype, es}; }
};

// A paged row source (a paged KV cache): row r is row r % page of page table[r / page],
// at base + table[r / page] * page_stride + (r % page) * stride (elements of dtype).
struct PagedRows {
  const void* base;
  const int32_t* table;
  int64_t page_stride, stride;
  uint32_t page;  // rows per page
  DType dtype = DType::f32;
  int64_t es = int64_t(dtype_size(dtype));
  const void* row(int64_t r) const {
    const uint32_t u = uint32_t(r);  // (< 2^31: the lengths are int32)
    return at(base, int64_t(table[u / page]) * page_stride + int64_t(u % page) * stride, es);
  }
  // Rows [r, r + n) are one strided run when they lie in one page; 0 otherwise.
  int64_t run_stride(int64_t r, int64_t n) const {
    return n <= 0 || uint32_t(r) / page == uint32_t(r + n - 1) / page ? stride : 0;
  }
  // How many of rows [r, r + n) form one strided run from r: those up to the end of r's page.
  int64_t run_length(int64_t r, int64_t n) const {
    const int64_t left = int64_t(page - uint32_t(r) % page);
    return n < left ? n : left;
  }
  PagedRows columns_from(int64_t c) const {
    return PagedRows{at(base, c, es), table, page_stride, stride, page, dtype, es};
  }
};

// n fp32 values stored as dtype t at dst[i * dst_stride].
inline void store_row(const float* src, int64_t n, void* dst, int64_t dst_stride, DType t) {
  switch (t) {
    case DType::f32: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = src[i];
      break;
    }
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = core::f32_to_f16(src[i]);
      break;
    }
    default: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = core::f32_to_bf16(src[i]);
      break;
    }
  }
}

// One fp32 value stored as dtype t at element `at` of dst.
inline void store_at(void* dst, int64_t at, DType t, float v) {
  if (t == DType::f32) static_cast<float*>(dst)[at] = v;
  else if (t == DType::f16) static_cast<uint16_t*>(dst)[at] = core::f32_to_f16(v);
  else static_cast<uint16_t*>(dst)[at] = core::f32_to_bf16(v);
}

// ---------------------------------------------------------------- packers
// The leading dimension of a packed block or panel of w columns and kp rows of k in
// layout `lay` (ukernel.hpp): the row length for `rows`, else the width.
inline int64_t block_ld(Layout lay, int64_t kp, int64_t w) { return lay == Layout::rows ? kp : w; }

// Q K^T over fp16 storage on a bf16 kernel (attention's stage 1): each value x split into
// two bf16 parts, hi = bf16(x) and lo = x - hi (both exact: x has 11 significant bits, hi
// the first 8), a row of d values packed as 3 d: K's as [hi lo hi], Q's as [hi hi lo], so
// one GEMM over k = 3 d sums hi hi + lo hi + hi lo in fp32, the products exact; the
// dropped lo lo term is below 2^-16 of |q| |k| per element. A non-finite x is packed as
// [x 0 0] in both orders, so that its products are x q as in fp32 (never Inf 0 = NaN).
enum class Split : int { none = 0, keys, queries };
// The 3 n split values of x[0, n) as bf16 bits at out[0, 3 n) (order keys or queries).
void split_bf16(const float* x, int64_t n, Split order, uint16_t* out);

// The packers and f32_rows take any row source R (Rows or PagedRows; instantiated for both
// in pack.cpp).
//
// Blocks of W rows: block b holds element (k, w) = row(b*W+w)[k] at
// pack_index(lay, k, w, block_ld) (k-major: [kp][W]). Rows >= nrows and k >= len are zero.
// Packs blocks [b0, b1). rowbuf holds len floats.
// With a split (t bf16), each source row of len values is packed as its 3 len split values
// (kp >= 3 len; rowbuf holds len floats).
template <class R>
void pack_transposed(const R& src, int64_t nrows, int64_t len, int64_t kp, int64_t w,
                     int64_t b0, int64_t b1, void* dst, DType t, Layout lay, float* rowbuf,
                     Split split = Split::none);

// Panels of W columns: panel p holds element (r, w) = row(r)[p*W + w] at
// pack_index(lay, r, w, block_ld) (k-major: [rp][W]); zero padded. Packs rows [r0, r1) of
// every panel (with kpairs, two callers may share a pair row only through the slow path).
// rowbuf holds the columns rounded up to W.
// With dst_lo (t bf16, lay kpairs: V of a bf16 P V kernel over fp16 storage), each value x
// goes in two parts: hi = bf16(x) into dst, x - hi into dst_lo (split_bf16's parts), so that
// P V = P Vhi + P Vlo is exact in V.
template <class R>
void pack_panels(const R& src, int64_t nrows, int64_t cols, int64_t rp, int64_t w, int64_t r0,
                 int64_t r1, void* dst, DType t, Layout lay, float* rowbuf, void* dst_lo = nullptr);

// ---------------------------------------------------------------- row-op operands
// Rows [j0, j0+n) of a row source that the row ops cannot read in place (an e4m3 cache, or
// 16-bit rows under a row-op set without 16-bit forms) as fp32 rows of `len` elements,
// converted into `buf` (row stride len), prefetching the rows it reads next. (fp32 rows, and
// 16-bit rows where the set has their forms, are read in place, a page run per call: a copy
// into a contiguous buffer first was slower for BSHD rows, docs/results/cpu-pipelines-2026-11-29.md.)
template <class R>
const float* f32_rows(const R& src, int64_t j0, int64_t n, int64_t len, std::vector<float>& buf);

}  // namespace flashcore::cpu
