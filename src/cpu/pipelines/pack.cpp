// The packers and the per-thread scratch of the CPU pipelines (pack.hpp).
#include "cpu/pipelines/pack.hpp"

#include "core/clones.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace flashcore::cpu {

Arena& thread_arena() {
  thread_local Arena arena;
  return arena;
}

char* pack_slot(int slot, size_t bytes) {
  struct Slot {
    char* p = nullptr;
    size_t cap = 0;
    ~Slot() { std::free(p); }
  };
  thread_local Slot slots[2];
  Slot& s = slots[slot];
  if (s.cap < bytes || s.p == nullptr) {
    std::free(s.p);
    s.cap = size_t(round_up(int64_t(bytes) + 1, 64));
    s.p = static_cast<char*>(std::aligned_alloc(64, s.cap));
    if (s.p == nullptr) {
      s.cap = 0;
      throw std::bad_alloc();
    }
  }
  return s.p;
}

namespace {

// One block [kp][w] (k-major) of rows row0 .. row0 + w - 1 (those >= nrows zero), copied
// without conversion as elements of type E: the storage dtype for k-major blocks, or for
// k pairs (bf16) the 32-bit word of keys 2 k2 and 2 k2 + 1, with `len` and `kp` then
// counted in pair rows and `half_tail` set when the last pair has only its first key.
// k runs outermost, so the block is written in order, w contiguous elements per k, while
// up to 16 source rows are read in step (one strided column per row cost far more:
// docs/results/cpu-pipelines-2026-11-29.md).
// Loads go through memcpy: a bf16 row is only 2-byte aligned.
#if defined(__SSE2__)
// One 16-byte column strip of the block through SSE2 (every x86-64): B = 16 / sizeof(E)
// source rows (s[i] + k: B elements each; rows >= live read as zeros) transposed into B
// k rows of the block, `cnt` elements each (B, or 4 for 16-bit elements: the low half),
// at o + kk * w.
template <typename E>
inline void transpose_strip(const char* const* s, int64_t live, int64_t k, E* o, int64_t w, int64_t cnt) {
  constexpr int kB = 16 / int(sizeof(E));
  __m128i a[kB];
  for (int i = 0; i < kB; ++i)
    a[i] = i < live ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[i] + k * int64_t(sizeof(E))))
                    : _mm_setzero_si128();
  __m128i r[kB];
  if constexpr (kB == 8) {
    __m128i t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
      t[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3
      u[4 * h + 0] = _mm_unpacklo_epi32(t[4 * h], t[4 * h + 2]);      // k 0, 1
      u[4 * h + 1] = _mm_unpackhi_epi32(t[4 * h], t[4 * h + 2]);      // k 2, 3
      u[4 * h + 2] = _mm_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);  // k 4, 5
      u[4 * h + 3] = _mm_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);  // k 6, 7
    }
    for (int q = 0; q < 4; ++q) {
      r[2 * q] = _mm_unpacklo_epi64(u[q], u[4 + q]);
      r[2 * q + 1] = _mm_unpackhi_epi64(u[q], u[4 + q]);
    }
  } else {
    const __m128i t0 = _mm_unpacklo_epi32(a[0], a[1]), t1 = _mm_unpackhi_epi32(a[0], a[1]);
    const __m128i t2 = _mm_unpacklo_epi32(a[2], a[3]), t3 = _mm_unpackhi_epi32(a[2], a[3]);
    r[0] = _mm_unpacklo_epi64(t0, t2);
    r[1] = _mm_unpackhi_epi64(t0, t2);
    r[2] = _mm_unpacklo_epi64(t1, t3);
    r[3] = _mm_unpackhi_epi64(t1, t3);
  }
  for (int kk = 0; kk < kB; ++kk) {
    if (cnt == kB)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + kk * w), r[kk]);
    else
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + kk * w), r[kk]);
  }
}
#endif

template <typename E, class R>
void copy_block(const R& src, int64_t row0, int64_t nrows, int64_t len, int64_t kp, int64_t w,
                bool half_tail, void* dst) {
  E* d = static_cast<E*>(dst);
  const int64_t rows = std::max<int64_t>(0, std::min(w, nrows - row0));
  constexpr int64_t kGroup = 16;
  for (int64_t r0 = 0; r0 < w; r0 += kGroup) {
    const int64_t n = std::min(kGroup, w - r0), live = std::max<int64_t>(0, std::min(n, rows - r0));
    const char* s[kGroup];
    for (int64_t r = 0; r < live; ++r) s[r] = static_cast<const char*>(src.row(row0 + r0 + r));
    // The next rows (the next group, or the next block's first rows), fetched while this
    // group is copied: 16 rows read in step are 16 streams, which the hardware prefetcher
    // does not follow.
    for (int64_t r = row0 + r0 + n; r < std::min(nrows, row0 + r0 + 2 * n); ++r)
      for (int64_t o = 0; o < len * int64_t(sizeof(E)); o += 64)
        __builtin_prefetch(static_cast<const char*>(src.row(r)) + o);
    int64_t k0 = 0;
#if defined(__SSE2__)
    // Whole 16-byte strips of the rows (8 fp16/bf16 or 4 fp32/pair words) by register
    // transposes, groups of a multiple of 4 rows; the scalar loop below does the rest.
    constexpr int64_t kB = 16 / int64_t(sizeof(E));
    if (n % 4 == 0) {
      for (; k0 + kB <= len; k0 += kB)
        for (int64_t rr = 0; rr < n; rr += kB)
          transpose_strip<E>(s + rr, live - rr, k0, d + k0 * w + r0 + rr, w, std::min(kB, n - rr));
    }
#endif
    for (int64_t k = k0; k < len; ++k) {
      E* o = d + k * w + r0;
      for (int64_t r = 0; r < live; ++r) std::memcpy(o + r, s[r] + k * int64_t(sizeof(E)), sizeof(E));
      for (int64_t r = live; r < n; ++r) o[r] = E(0);
    }
    if (half_tail) {  // the first half of the word: the first key of the pair (little endian)
      E* o = d + len * w + r0;
      for (int64_t r = 0; r < live; ++r) {
        uint16_t h;
        std::memcpy(&h, s[r] + len * int64_t(sizeof(E)), 2);
        o[r] = E(h);
      }
      for (int64_t r = live; r < n; ++r) o[r] = E(0);
    }
  }
  const int64_t done = len + (half_tail ? 1 : 0);
  std::memset(d + done * w, 0, size_t((kp - done) * w) * sizeof(E));
}

}  // namespace

FC_PORTABLE_CLONES_V4 void split_bf16(const float* x, int64_t n, Split order, uint16_t* out) {
  // Branch-free (the loop vectorizes): bf16 rounding to nearest even, NaN kept quiet NaN.
  uint16_t* second = out + n;
  uint16_t* third = out + 2 * n;
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t u = core::f32_bits(x[j]);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t h = nan ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    // A non-finite x keeps only its first part (the others 0): its products are then
    // x q_hi (+ 0 terms), which is +-Inf or NaN as x q is, where a repeated Inf part would
    // meet the other operand's zero low part and make Inf 0 = NaN.
    const bool finite = (h & 0x7f80u) != 0x7f80u;
    const uint32_t l = finite ? core::f32_bits(x[j] - core::bits_f32(h << 16)) >> 16 : 0u;
    const uint32_t h2 = finite ? h : 0u;
    out[j] = uint16_t(h);
    second[j] = uint16_t(order == Split::keys ? l : h2);
    third[j] = uint16_t(order == Split::keys ? h2 : l);
  }
}

template <class R>
void pack_transposed(const R& src, int64_t nrows, int64_t len, int64_t kp, int64_t w,
                     int64_t b0, int64_t b1, void* dst, DType t, Layout lay, float* rowbuf, Split split) {
  const int64_t es = int64_t(dtype_size(t));
  const int64_t ld = block_ld(lay, kp, w);
  if (kp == 0 || w == 0) return;  // an empty k range: empty (maybe null) blocks
  char* out = static_cast<char*>(dst);
  if (split != Split::none) {
    // (t is bf16) A block of w rows as k-major 16-bit words [len][w] (copy_block), widened
    // in one run, split in one run: the three parts, each [len][w], are the block's 3 len
    // k rows in order, k-major; then stored in the layout (rows: transposed back; kpairs:
    // pair rows interleaved). One call per row cost 4x the packing time of the fp32 path.
    const int64_t n3 = 3 * len;
    thread_local std::vector<uint16_t> words, bits;
    thread_local std::vector<float> wide;
    words.resize(static_cast<size_t>(len * w));
    wide.resize(static_cast<size_t>(len * w));
    bits.resize(static_cast<size_t>(n3 * w));
    for (int64_t b = b0; b < b1; ++b) {
      uint16_t* blk = reinterpret_cast<uint16_t*>(out + b * kp * w * es);
      if (src.dtype == DType::f16 || src.dtype == DType::bf16) {
        copy_block<uint16_t>(src, b * w, nrows, len, len, w, false, words.data());
        core::convert_row(words.data(), src.dtype, len * w, wide.data());
      } else {  // (other storage: row by row)
        for (int64_t r = 0; r < w; ++r) {
          if (b * w + r < nrows) core::convert_row(src.row(b * w + r), src.dtype, len, rowbuf);
          for (int64_t k = 0; k < len; ++k) wide[size_t(k * w + r)] = b * w + r < nrows ? rowbuf[k] : 0.0f;
        }
      }
      split_bf16(wide.data(), len * w, split, bits.data());  // bits: [3 len][w], k-major
      const uint16_t* kb = bits.data();
      if (lay == Layout::kpairs) {
        for (int64_t j = 0; j < kp / 2; ++j) {
          const uint16_t* e0 = 2 * j < n3 ? kb + 2 * j * w : nullptr;
          const uint16_t* e1 = 2 * j + 1 < n3 ? kb + (2 * j + 1) * w : nullptr;
          uint16_t* o = blk + j * 2 * w;
          for (int64_t i = 0; i < w; ++i) {
            o[2 * i] = e0 != nullptr ? e0[i] : uint16_t(0);
            o[2 * i + 1] = e1 != nullptr ? e1[i] : uint16_t(0);
          }
        }
      } else if (lay == Layout::rows) {
        for (int64_t r = 0; r < w; ++r) {
          uint16_t* o = blk + r * ld;
          for (int64_t k = 0; k < n3; ++k) o[k] = kb[k * w + r];
          std::memset(o + n3, 0, size_t((kp - n3) * 2));
        }
      } else {
        std::memcpy(blk, kb, size_t(n3 * w * 2));
        std::memset(blk + n3 * w, 0, size_t((kp - n3) * w * 2));
      }
    }
    return;
  }
  for (int64_t b = b0; b < b1; ++b) {
    char* blk = out + b * kp * w * es;
    if (src.dtype == t && lay == Layout::kmajor) {  // no conversion: copy
      if (es == 4)
        copy_block<uint32_t>(src, b * w, nrows, len, kp, w, false, blk);
      else
        copy_block<uint16_t>(src, b * w, nrows, len, kp, w, false, blk);
      continue;
    }
    if (t == DType::f32 && lay == Layout::kmajor && dtype_size(src.dtype) == 2) {
      // fp16/bf16 rows widened for the fp32 kernels (`auto` for f16 storage): transposed
      // as 16-bit words by copy_block, then widened as one contiguous run, instead of a
      // converted row stored with a stride of w per element (which packed at less than half
      // the speed of f32 storage: docs/results/cpu-pipelines-2026-11-29.md).
      thread_local std::vector<uint16_t> words;
      words.resize(static_cast<size_t>(kp * w));
      copy_block<uint16_t>(src, b * w, nrows, len, kp, w, false, words.data());
      core::convert_row(words.data(), src.dtype, kp * w, reinterpret_cast<float*>(blk));
      continue;
    }
    if (src.dtype == t && es == 2 && lay == Layout::kpairs) {
      // Pair (k, k+1) of a row is one 32-bit word of the source row: a word transpose.
      copy_block<uint32_t>(src, b * w, nrows, len / 2, kp / 2, w, len % 2 == 1, blk);
      continue;
    }
    if (src.dtype == t && es == 2 && lay == Layout::rows) {
      // A row is a row: copy it, zero only its tail past len and the rows past nrows.
      for (int64_t r = 0; r < w; ++r) {
        char* o = blk + r * kp * 2;
        const int64_t row = b * w + r, n = row < nrows ? len : 0;
        if (n > 0) std::memcpy(o, src.row(row), size_t(n * 2));
        std::memset(o + n * 2, 0, size_t((kp - n) * 2));
      }
      continue;
    }
    std::memset(blk, 0, size_t(kp * w * es));
    for (int64_t r = 0; r < w; ++r) {
      const int64_t row = b * w + r;
      if (row >= nrows) break;
      core::convert_row(src.row(row), src.dtype, len, rowbuf);
      if (lay == Layout::kmajor) {
        store_row(rowbuf, len, blk + r * es, w, t);
      } else {
        for (int64_t k = 0; k < len; ++k) store_at(blk, pack_index(lay, k, r, ld), t, rowbuf[k]);
      }
    }
  }
}

template <class R>
void pack_panels(const R& src, int64_t nrows, int64_t cols, int64_t rp, int64_t w, int64_t r0,
                 int64_t r1, void* dst, DType t, Layout lay, float* rowbuf, void* dst_lo) {
  const int64_t es = int64_t(dtype_size(t));
  const int64_t npanels = (cols + w - 1) / w;
  const int64_t cols_pad = npanels * w;
  const int64_t ld = block_ld(lay, rp, w);
  if (rp == 0 || w == 0) return;  // no rows: empty (maybe null) panels
  char* out = static_cast<char*>(dst);
  int64_t r = r0;
  if (t == DType::bf16 && lay == Layout::kpairs && src.dtype != DType::bf16) {
    // Converted rows into bf16 k pairs (fp16 V for a bf16 P V kernel): a row's bf16 bits
    // (and with dst_lo its low parts) worked out in one run; two rows at a time, so that a
    // pair row is written as 32-bit words (16-bit stores at a stride of 2 took 1 ns per value).
    thread_local std::vector<uint16_t> parts;
    parts.resize(static_cast<size_t>(6 * cols_pad));
    uint16_t* const pa = parts.data();
    uint16_t* const pb = pa + 3 * cols_pad;
    const auto split_row = [&](int64_t rr, uint16_t* to) {  // to: [hi lo hi] of row rr (zeros past nrows)
      if (rr < nrows) {
        core::convert_row(src.row(rr), src.dtype, cols, rowbuf);
        std::fill(rowbuf + cols, rowbuf + cols_pad, 0.0f);
      } else {
        std::fill(rowbuf, rowbuf + cols_pad, 0.0f);
      }
      split_bf16(rowbuf, cols_pad, Split::keys, to);
    };
    const auto store_pair = [&](int64_t pr, const uint16_t* a, const uint16_t* b) {  // pair row pr
      for (int64_t p = 0; p < npanels; ++p) {
        uint32_t* d = reinterpret_cast<uint32_t*>(out) + p * rp * w / 2 + pr * w;
        for (int64_t j = 0; j < w; ++j) d[j] = uint32_t(a[p * w + j]) | uint32_t(b[p * w + j]) << 16;
        if (dst_lo != nullptr) {
          uint32_t* dl = static_cast<uint32_t*>(dst_lo) + p * rp * w / 2 + pr * w;
          const uint16_t *al = a + cols_pad, *bl = b + cols_pad;
          for (int64_t j = 0; j < w; ++j) dl[j] = uint32_t(al[p * w + j]) | uint32_t(bl[p * w + j]) << 16;
        }
      }
    };
    const auto store_one = [&](int64_t rr, const uint16_t* a) {  // one row of a pair row
      for (int64_t p = 0; p < npanels; ++p) {
        const int64_t at = p * rp * w + (rr / 2) * 2 * w + rr % 2;
        uint16_t* d = reinterpret_cast<uint16_t*>(out) + at;
        for (int64_t j = 0; j < w; ++j) d[2 * j] = a[p * w + j];
        if (dst_lo != nullptr) {
          uint16_t* dl = static_cast<uint16_t*>(dst_lo) + at;
          for (int64_t j = 0; j < w; ++j) dl[2 * j] = a[cols_pad + p * w + j];
        }
      }
    };
    if (r < r1 && r % 2 == 1) {
      split_row(r, pa);
      store_one(r, pa);
      ++r;
    }
    for (; r + 1 < r1; r += 2) {
      split_row(r, pa);
      split_row(r + 1, pb);
      store_pair(r / 2, pa, pb);
    }
    if (r < r1) {
      split_row(r, pa);
      store_one(r, pa);
    }
    return;
  }
  if (src.dtype == t && lay == Layout::kmajor) {
    // No conversion (fp32, or fp16 for the fp16 kernels): copy straight in, 16 rows at a
    // time panel by panel, so that the writes of a group are 16*w contiguous elements of
    // one panel rather than w per panel per row (gemm_chain's B is 683 panels of 12 KiB:
    // one row touched 683 pages), while the reads walk 16 rows in step. This packing is a
    // per-call cost of gemm_chain and softmax_v.
    auto copy_in = [&](auto elem) {
      using E = decltype(elem);
      constexpr int64_t kRowGroup = 16;
      constexpr int64_t kPrefetchRowBytes = 2048;
      const int64_t rend = std::min(r1, nrows);
      // Short rows (gemm_chain's B tile: 1 KiB pieces of rows 32 KiB apart, one page each)
      // defeat the hardware prefetcher: prefetch the next group's rows by hand.
      const bool fetch_ahead = cols * es <= kPrefetchRowBytes;
      for (; r < rend; r += kRowGroup) {
        const int64_t rb = std::min(kRowGroup, rend - r);
        if (fetch_ahead)
          for (int64_t i = r + kRowGroup; i < std::min(rend, r + 2 * kRowGroup); ++i)
            for (int64_t o = 0; o < cols * es; o += 64)
              __builtin_prefetch(static_cast<const char*>(src.row(i)) + o);
        for (int64_t p = 0; p < npanels; ++p) {
          const int64_t n = std::min(w, cols - p * w);
          E* d = reinterpret_cast<E*>(out) + (p * rp + r) * w;
          for (int64_t i = 0; i < rb; ++i, d += w) {
            const E* s = static_cast<const E*>(src.row(r + i)) + p * w;
            for (int64_t j = 0; j < n; ++j) d[j] = s[j];
            for (int64_t j = n; j < w; ++j) d[j] = E(0);
          }
        }
      }
      r = std::max(r0, rend);  // the last group may end short: padding rows start at rend
    };
    if (es == 4)
      copy_in(uint32_t(0));
    else
      copy_in(uint16_t(0));
  }
  if (src.dtype == t && es == 2 && lay == Layout::kpairs && r0 % 2 == 0) {
    // No conversion (bf16 V for the bf16 kernels): rows r and r+1 interleaved into one
    // pair row per panel; a missing partner row (past nrows) is zero.
    for (; r + 1 < r1; r += 2) {
      const uint16_t* s0 = r < nrows ? static_cast<const uint16_t*>(src.row(r)) : nullptr;
      const uint16_t* s1 = r + 1 < nrows ? static_cast<const uint16_t*>(src.row(r + 1)) : nullptr;
      for (int64_t p = 0; p < npanels; ++p) {
        uint16_t* d = reinterpret_cast<uint16_t*>(out) + p * rp * w + (r / 2) * 2 * w;
        const int64_t n = std::min(w, cols - p * w);
        if (s0 != nullptr && s1 != nullptr) {
          // Both rows present (all but the last pair): one 32-bit word per column, a loop
          // the compiler vectorizes (the null tests inside it kept it scalar).
          const uint16_t* a0 = s0 + p * w;
          const uint16_t* a1 = s1 + p * w;
          uint32_t* d32 = reinterpret_cast<uint32_t*>(d);
          for (int64_t j = 0; j < n; ++j) d32[j] = uint32_t(a0[j]) | (uint32_t(a1[j]) << 16);
        } else {
          for (int64_t j = 0; j < n; ++j) {
            d[2 * j] = s0 ? s0[p * w + j] : 0;
            d[2 * j + 1] = s1 ? s1[p * w + j] : 0;
          }
        }
        for (int64_t j = n; j < w; ++j) d[2 * j] = d[2 * j + 1] = 0;
      }
    }
  }
  if (src.dtype == t && es == 2 && lay == Layout::rows && r0 == 0 && r1 == rp) {
    // No conversion (bf16 B for AMX, gemm_chain): panel p is the transpose of columns
    // [p w, p w + w) of the rows, row j holding column p w + j: copy_block's register
    // transposes with the rows as its block rows and the columns as its k.
    for (int64_t p = 0; p < npanels; ++p) {
      copy_block<uint16_t>(src.columns_from(p * w), 0, nrows, std::min(w, cols - p * w), w, rp, false, out + p * rp * w * es);
    }
    r = r1;
  }
  for (; r < r1; ++r) {
    if (r < nrows) {
      core::convert_row(src.row(r), src.dtype, cols, rowbuf);
      std::fill(rowbuf + cols, rowbuf + cols_pad, 0.0f);
    } else {
      std::fill(rowbuf, rowbuf + cols_pad, 0.0f);
    }
    for (int64_t p = 0; p < npanels; ++p) {
      char* panel = out + p * rp * w * es;
      if (lay == Layout::kmajor)
        store_row(rowbuf + p * w, w, panel + r * w * es, 1, t);
      else
        for (int64_t j = 0; j < w; ++j)
          store_at(panel, pack_index(lay, r, j, ld), t, rowbuf[p * w + j]);
    }
  }
}

template <class R>
const float* f32_rows(const R& src, int64_t j0, int64_t n, int64_t len, std::vector<float>& buf) {
  constexpr int64_t kAhead = 8;
  const int64_t row_bytes = len * src.es;
  auto row = [&](int64_t k) { return static_cast<const char*>(src.row(j0 + k)); };
  for (int64_t k = 0; k < std::min(kAhead, n); ++k)
    for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(row(k) + o);
  buf.resize(static_cast<size_t>(n * len));
  for (int64_t k = 0; k < n; ++k) {
    if (k + kAhead < n)
      for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(row(k + kAhead) + o);
    core::convert_row(row(k), src.dtype, len, buf.data() + k * len);
  }
  return buf.data();
}

#define FC_ROW_SOURCE(R)                                                                              \
  template void pack_transposed<R>(const R&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,   \
                                   void*, DType, Layout, float*, Split);                              \
  template void pack_panels<R>(const R&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, void*, \
                               DType, Layout, float*, void*);                                         \
  template const float* f32_rows<R>(const R&, int64_t, int64_t, int64_t, std::vector<float>&);
FC_ROW_SOURCE(Rows)
FC_ROW_SOURCE(PagedRows)
#undef FC_ROW_SOURCE

}  // namespace flashcore::cpu
