// The CPU strategies, written once against the micro-kernel interface (ukernel.hpp).
//
// Data flow for one query block of Mq rows (Mq a multiple of the GEMM kernel's MR and
// NR). Scores are key-major tiles T[kc][Mq], the A operand of the second GEMM as it is:
//
//   stage 1  T  = Xblk (A operand, k = head dim) x Y^T (B panels of Mq queries)
//            (attention: X = K, Y = Q;  gemm_chain: X = B^T columns, Y = A rows;
//             softmax_v: T is read from the given scores instead)
//   softmax  m = max over keys; P = exp2(c*T - c*m) in the kernel's operand dtype;
//            l = row sums of P (c = scale * log2(e), seed 000's exp2 domain)
//   stage 2  O[Mq][Dv] += P^T x V panels
//   finish   O /= l, lse = scale*m + ln(l), convert to the output dtype
//
// Strategies differ only in how they order these steps over the key tiles:
//   two_pass   max-find over all tiles (scores kept in a strip), then exp+pack of tile
//              t+pipe_ahead interleaved with the GEMM of tile t through a ring buffer
//   three_pass max-find, then every P block into one buffer, then one pure GEMM over it
//   online     per tile: running max, rescale O and l when it grows, exp+pack, GEMM
#include "cpu/pipelines/pipelines.hpp"

#include <omp.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/exp2.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace flashcore::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Key tile: 256 keys keep a Kc x NR panel of V (fp32, NR = 16..64) and the P tile in L1/L2,
// the seeds' Kc. Packed operands of at most this many bytes are built per chunk of groups.
constexpr int64_t kKeyTile = 256;
constexpr int64_t kTargetQueryBlock = 64;
// ... except that the kernels with row-major A tiles (AMX, Layout::rows) take blocks of
// kRowsQueryBlock rows when the operands each block streams (attention: one group's packed
// K and V) exceed kRowsStreamBytes: every block then reads them from beyond L2, which the
// tile unit, at its peak only from L1, feels more than the FMA kernels. Sapphire Rapids
// host, 1 thread, bf16 (docs/results/cpu-x86-2026-11-22.md, session 9): B1 H2 S4096 D128
// (2 MiB of K and V per head) 64 rows 394-442 GFLOP/s, 128 rows 477-499, 256 rows 500-511;
// 256 against 64 rows, same run: S4096 1.09-1.14x, S16384 1.16x, GQA H4/1 Sk4000 D256
// 1.2x, but S2048 D128 (1 MiB) 1.02-1.04x and 2 threads 0.96x, S512 D64 unclear.
constexpr int64_t kRowsQueryBlock = 256;
constexpr int64_t kRowsStreamBytes = int64_t(1) << 20;
constexpr size_t kPackBudgetBytes = size_t(64) << 20;
// The B panel chunk a micro-kernel call keeps in L1 takes what L1D leaves beside this
// many bytes (the A strip streaming past, C, the stack), and at least this many: half of a
// 32 KiB L1D, 32 KiB of Sapphire Rapids' 48 (l1_panel_bytes).
constexpr int64_t kL1ReserveBytes = 16 << 10;
constexpr int kPipeAhead = 1;  // two_pass: producer leads the GEMM by this many tiles
// online: the running reference max moves only when a tile's max passes it by more than
// this (in log2 units, so P <= 2^8 until then), FlashAttention-4's conditional rescaling.
// O, l and m stay consistent (all relative to the same reference), so the result is the
// same softmax; what it saves is the O and l rescale of nearly every tile (random scores
// raise some row's max in almost every 256-key tile): scale_rows of a 256 x 128 fp32 O
// measured ~12 % of the exp+pack phase on the Sapphire Rapids host (session 10 probe).
constexpr float kRescaleSlack = 8.0f;
// gemm_chain: a group of query blocks shares each packed K2 tile of B and C; groups are
// this many blocks or more, so that the packing (B and C once per group) stays small next
// to the GEMMs.
constexpr int64_t kChainMinGroupBlocks = 8;
// gemm_chain: query blocks of at most this many rows (rounded up to NR), and the K2 tile:
// as many keys as make a row of this many bytes of the kernel's operand dtype (rounded up
// to MR), 120 fp32 keys, 240 fp16/bf16. Measured on the 2-core AVX-512 VM (docs/results/
// cpu-x86-2026-11-22.md): 128 x 120 against 256 x 264 (fp32): B and C tiles of 120 KiB
// and a 62 KiB intermediate leave room in a 1 MiB L2 for both blocks' A panels and
// partial E. 16-bit operands at 240 keys (the same bytes; Sapphire Rapids host, 2 threads,
// session 24): fp16 noepi 75 -> 79-80 % of peak pre-packed, 68 -> 70 % unpacked; bf16 AMX
// (256 keys) 2100-2200 -> 2530 GFLOP/s pre-packed: the fp16 kernels add each call's fp16
// tile into fp32 and the AMX kernel stores its C tiles, once per key tile. fp32 at 240
// keys measured 0.98-1.0x of 120.
constexpr int64_t kChainQueryBlock = 128;
constexpr int64_t kChainKeyTileBytes = 480;
// Attention takes the decode path (row ops, K/V read in place) when the query rows of one
// GQA group, group * Sq, are at most this many.
constexpr int64_t kDecodeRows = 32;
// ... and blocks take several kv heads' query rows, up to this many rows (softmax_v: the
// row ops up to this many rows).
constexpr int64_t kDecodeBlockRows = 64;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }
int64_t lcm(int64_t a, int64_t b) { return a / gcd(a, b) * b; }

// `impl` naming a GEMM micro-kernel keeps a call on that kernel (the GEMM path), also for
// the shapes that would otherwise take the row ops.
bool gemm_forced(const char* impl) {
  return impl != nullptr && impl[0] != '\0' && std::strcmp(impl, "auto") != 0;
}

int resolve_threads(int requested) {
  return requested > 0 ? requested : omp_get_max_threads();
}

// ---------------------------------------------------------------- timing
struct Phases {
  double pack = 0, max_find = 0, exp_pack = 0, gemm = 0, normalize = 0;
  void add(const Phases& o) {
    pack += o.pack; max_find += o.max_find; exp_pack += o.exp_pack; gemm += o.gemm;
    normalize += o.normalize;
  }
};

// Lap timer that costs nothing when the caller did not ask for phase times.
class Lap {
 public:
  explicit Lap(bool on) : on_(on) { if (on_) t_ = std::chrono::steady_clock::now(); }
  void to(double& slot) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    slot += std::chrono::duration<double>(now - t_).count();
    t_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point t_;
};

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
Arena& thread_arena() {
  thread_local Arena arena;
  return arena;
}

// Packed operands start on a cache line (pack_slot, Arena::take, PackedOperands), so that
// every 64-byte row piece of a B panel (NR fp32 = one or more zmm) is one aligned load,
// never a line split (measured ~2x on AVX-512 GEMM-only with 16-byte aligned panels). The
// packers write every byte that is read.

// The large packed operands of one call (K/V, V, B and C), kept by the calling thread for
// its next call (grow-only, like the per-thread arenas): fresh pages cost a fault and the
// kernel's zeroing on first touch, which for gemm_chain's 16 MiB of B and C took about as
// long as the packing itself. Slots are distinct buffers used at the same time in a call.
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

// ---------------------------------------------------------------- packing
// A row source: row r starts at base + r * stride (elements of dtype).
// base + elems * es, leaving a null base null: an operand with no elements may be null
// (the checks allow it), and null + offset is undefined behaviour.
const char* at(const void* base, int64_t elems, int64_t es) {
  return base == nullptr ? nullptr : static_cast<const char*>(base) + elems * es;
}

struct Rows {
  const void* base;
  int64_t stride;
  DType dtype = DType::f32;  // (es below reads it)
  int64_t es = int64_t(dtype_size(dtype));  // once, not per row (an out-of-line call)
  const void* row(int64_t r) const { return at(base, r * stride, es); }
};

void store_row(const float* src, int64_t n, void* dst, int64_t dst_stride, DType t) {
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
void store_at(void* dst, int64_t at, DType t, float v) {
  if (t == DType::f32) static_cast<float*>(dst)[at] = v;
  else if (t == DType::f16) static_cast<uint16_t*>(dst)[at] = core::f32_to_f16(v);
  else static_cast<uint16_t*>(dst)[at] = core::f32_to_bf16(v);
}

// One block [kp][w] (k-major) of rows row0 .. row0 + w - 1 (those >= nrows zero), copied
// without conversion as elements of type E: the storage dtype for k-major blocks, or for
// k pairs (bf16) the 32-bit word of keys 2 k2 and 2 k2 + 1, with `len` and `kp` then
// counted in pair rows and `half_tail` set when the last pair has only its first key.
// k runs outermost, so the block is written in order, w contiguous elements per k, while
// up to 16 source rows are read in step (one strided column per row, as before, was ~10 %
// of an fp32 attention call on the dev VM). Loads go through memcpy: a bf16 row is only
// 2-byte aligned.
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

template <typename E>
void copy_block(const Rows& src, int64_t row0, int64_t nrows, int64_t len, int64_t kp, int64_t w,
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
    // (fp16 B1 H8 S512 D64 on the Sapphire Rapids host: the element-wise copies were
    // ~8 % of the call, docs/results/cpu-x86-2026-11-22.md, session 9.)
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

// The leading dimension of a packed block or panel of w columns and kp rows of k in
// layout `lay` (ukernel.hpp): the row length for `rows`, else the width.
int64_t block_ld(Layout lay, int64_t kp, int64_t w) { return lay == Layout::rows ? kp : w; }

// Blocks of W rows: block b holds element (k, w) = row(b*W+w)[k] at
// pack_index(lay, k, w, block_ld) (k-major: [kp][W]). Rows >= nrows and k >= len are zero.
// Packs blocks [b0, b1).
void pack_transposed(const Rows& src, int64_t nrows, int64_t len, int64_t kp, int64_t w,
                     int64_t b0, int64_t b1, void* dst, DType t, Layout lay, float* rowbuf) {
  const int64_t es = int64_t(dtype_size(t));
  const int64_t ld = block_ld(lay, kp, w);
  if (kp == 0 || w == 0) return;  // an empty k range: empty (maybe null) blocks
  char* out = static_cast<char*>(dst);
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
      // converted row stored with a stride of w per element. Sapphire Rapids host, f16
      // B1 H16 S2048 D128 2 threads: the pack phase was 18-19.5 ms per thread against
      // 7.5-8.7 for f32 (session 10, call 10).
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

// Panels of W columns: panel p holds element (r, w) = row(r)[p*W + w] at
// pack_index(lay, r, w, block_ld) (k-major: [rp][W]); zero padded. Packs rows [r0, r1) of
// every panel (with kpairs, two callers may share a pair row only through the slow path).
void pack_panels(const Rows& src, int64_t nrows, int64_t cols, int64_t rp, int64_t w, int64_t r0,
                 int64_t r1, void* dst, DType t, Layout lay, float* rowbuf) {
  const int64_t es = int64_t(dtype_size(t));
  const int64_t npanels = (cols + w - 1) / w;
  const int64_t cols_pad = npanels * w;
  const int64_t ld = block_ld(lay, rp, w);
  if (rp == 0 || w == 0) return;  // no rows: empty (maybe null) panels
  char* out = static_cast<char*>(dst);
  int64_t r = r0;
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
      const Rows cols_p{at(src.base, p * w, es), src.stride, src.dtype};
      copy_block<uint16_t>(cols_p, 0, nrows, std::min(w, cols - p * w), w, rp, false, out + p * rp * w * es);
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

// ---------------------------------------------------------------- shared shapes
struct Geometry {
  const GemmUkernel* gk;
  const VecOps* vec;
  int64_t mr, nr, mq;   // kernel tile and query block
  int64_t kc;           // key tile (multiple of mr and k_align)
  int64_t kb;           // k chunk of one micro-kernel call (multiple of k_align)
  int64_t key_align;    // keys are padded to this
  int64_t es;           // element size of P (and of the packed operands)
  DType pt;             // dtype of P as exp2_pack writes it
  Layout pa = Layout::kmajor;  // the kernel's A layout: K blocks, P, gemm_chain's B^T blocks
  Layout pb = Layout::kmajor;  // the kernel's B layout: Q panels, V panels, gemm_chain's C
  const char* key;      // what ran, for PhaseTimes
  const GemmPanel* panel = nullptr;  // the kernel's panel form (stage 1 at small k), or null
  const GemmUkernel* tail = nullptr;  // its tail kernel (a row range's last rows), or null
  const GemmUkernel* stream = nullptr;  // its stream form (stage 2 with one row block), or null
  GemmFn c32 = nullptr, tail_c32 = nullptr;  // their fp32-C forms (acc-f16 kernels), or null
  // online: how far (log2 units of exp2's argument) a tile's max may pass the running
  // reference max before O and l are rescaled to it (see softmax_block); 0 for kernels
  // that accumulate in fp16, whose <= 256-term sums must keep P <= 1.
  float rescale_slack = kRescaleSlack;
};

// Keys (softmax_v's L, gemm_chain's K2) are padded to this: whole MR blocks of P (the
// second GEMM's A operand) and whole k steps of the kernel.
int64_t key_align_of(const GemmUkernel& k) { return lcm(k.mr, k.k_align); }

// L1D less kL1ReserveBytes, at least kL1ReserveBytes (the L1D size unknown: that). Sapphire
// Rapids host (48 KiB), session 24: fp32 K1 = 256 in one call per C tile of gemm_chain's
// stage 1 instead of two 128-k chunks, pre-packed M256 K2 8192 on 2 threads 1.02x (p50
// medians of 5 alternated rounds, 426.0 against 418.0 GFLOP/s); attention S4096 D128
// fp32 and fp16, 2 threads: unchanged within the noise.
int64_t l1_panel_bytes() {
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  static const int64_t b =
      std::max<int64_t>(kL1ReserveBytes, std::max<long>(0, sysconf(_SC_LEVEL1_DCACHE_SIZE)) - kL1ReserveBytes);
  return b;
#else
  return kL1ReserveBytes;
#endif
}

// stream_bytes: what every query block reads of the other operands (attention: the packed
// K and V of its group; 0 where blocks read nothing large).
// The fields of g that follow its GEMM kernel: tile, operand dtype and layouts, vector ops,
// k chunk and the online strategy's rescale slack.
void set_kernel(Geometry& g, const GemmUkernel* gk, const VecOps* vec) {
  g.gk = gk;
  g.vec = vec;
  g.mr = gk->mr;
  g.nr = gk->nr;
  g.es = int64_t(dtype_size(gk->ab));
  g.pt = gk->ab;
  g.pa = gk->a_layout;
  g.pb = gk->b_layout;
  g.key = gk->key;
  g.panel = gemm_panel(*gk);
  g.tail = gemm_tail(*gk);
  g.stream = gemm_stream(*gk);
  g.c32 = gemm_c32(*gk);
  g.tail_c32 = g.tail != nullptr ? gemm_c32(*g.tail) : nullptr;
  g.rescale_slack = gk->acc == DType::f32 ? kRescaleSlack : 0.0f;
  // A B panel chunk of kb x NR operands fills at most l1_panel_bytes().
  g.kb = std::max<int64_t>(gk->k_align, l1_panel_bytes() / (g.nr * g.es) / gk->k_align * gk->k_align);
}

// The per-core L2 size the OS reports (0 if unknown: no cap below).
int64_t l2_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  static const int64_t b = std::max<long>(0, sysconf(_SC_LEVEL2_CACHE_SIZE));
  return b;
#else
  return 0;
#endif
}

// row_bytes: the block buffers' bytes per query row (attention: its scores and P rows of a
// key tile, its O row and packed Q row); 0 for no cap from the cache size.
Geometry make_geometry(const CpuConfig& cfg, int64_t rows, bool needs_stage1, int64_t stream_bytes = 0,
                       int64_t row_bytes = 0) {
  Geometry g;
  set_kernel(g, cfg.gemm, cfg.vec);
  // Query blocks: whole stage-1 panels (NR queries) and whole stage-2 A blocks (MR query
  // rows, of the P V kernel when attention runs a pair, CpuConfig::gemm2).
  const GemmUkernel* gk2 = cfg.gemm2 != nullptr ? cfg.gemm2 : cfg.gemm;
  const int64_t unit = needs_stage1 ? lcm(lcm(g.mr, g.nr), gk2->mr) : g.mr;
  const bool streams = g.gk->a_layout == Layout::rows && stream_bytes > kRowsStreamBytes;
  g.mq = std::min(round_up(std::max<int64_t>(rows, 1), unit),
                  round_up(streams ? kRowsQueryBlock : kTargetQueryBlock, unit));
  // Default blocks take at most half of L2 in block buffers. Zen 3 (512 KiB L2), AVX2 6x2
  // kernel (unit 48), f32, 2 threads: 48-row blocks against 96, B1 H16/1 Sq512 Sk4096
  // D256 1.09x, S2048 D128 1.02x, S512 D64 1.08x (docs/results/cpu-avx2-2026-11-25.md).
  // With the 2 MiB L2 of Sapphire Rapids no block of the measured kernels is capped; the
  // streaming blocks of AMX (measured there) are left as they are.
  if (row_bytes > 0 && l2_bytes() > 0 && !streams)
    g.mq = std::min(g.mq, std::max(unit, l2_bytes() / 2 / row_bytes / unit * unit));
  g.key_align = lcm(key_align_of(*g.gk), gk2->k_align);  // K blocks of MR keys; P V's k steps
  g.kc = round_up(kKeyTile, g.key_align);
  return g;
}

// The geometry of stage 2 (P V) and of P when attention runs a kernel pair: the query
// block and key tile of `g`, the P V kernel's tile, layouts, operand dtype and vector ops.
Geometry stage2_geometry(const Geometry& g, const CpuConfig& cfg) {
  if (cfg.gemm2 == nullptr) return g;
  Geometry g2 = g;
  set_kernel(g2, cfg.gemm2, cfg.vec2);
  return g2;
}

// The rows a query block with `valid` rows computes: whole stage-1 panels (g's NR) rounded
// up to whole stage-2 row blocks (g2's MR); at most g.mq. The last block of a sequence
// that is not a multiple of g.mq computes only these (12x2, S512: 516 rows instead of
// 576), with the same leading dimensions as a whole block's buffers would have.
int64_t live_rows(const Geometry& g, const Geometry& g2, int64_t valid) {
  return std::min(g.mq, round_up(round_up(std::max<int64_t>(valid, 1), g.nr), g2.mr));
}

// The decode path's block: `rows` query rows in the lanes of the row ops, no padding; K/V
// rows read in place (no key padding), P in fp32 (what the row ops read).
Geometry make_rows_geometry(const CpuConfig& cfg, int64_t rows) {
  Geometry g;
  g.gk = cfg.gemm;
  g.vec = cfg.vec;
  g.mr = g.nr = 1;
  g.mq = std::max<int64_t>(rows, 1);
  g.kc = kKeyTile;
  g.kb = kKeyTile;
  g.key_align = 1;
  g.es = 4;
  g.pt = DType::f32;
  g.key = cfg.rows->key;
  return g;
}

// One micro-kernel call into an fp32 C tile. A kernel that accumulates in fp16 (acc f16:
// seed 000's noepi kernels, chosen only through `impl`) writes an fp16 tile, k chunk by k
// chunk of at most kKeyTile, and each chunk is added into the fp32 tile (by the kernel's
// fp32-C form where it has one, gemm_c32.inc): fp16 sums stay within 256 products (no
// overflow while |A B| terms stay under 255), fp32 across chunks.
// k: the kernel when not g's own (its tail kernel: same NR, dtypes and layouts).
void gemm_call(const Geometry& g, int64_t kc, const char* a, int64_t as, const char* b, float* c,
               int64_t ldc, int accumulate, const GemmUkernel* k = nullptr) {
  if (k == nullptr) k = g.gk;
  if (k->acc == DType::f32) {
    k->fn(kc, a, as, b, c, ldc, accumulate);
    return;
  }
  const int64_t step = round_up(kKeyTile, k->k_align);
  // The kernel's fp32-C form where it has one: each chunk's sums added straight into C.
  if (const GemmFn c32 = k == g.gk ? g.c32 : g.tail_c32) {
    for (int64_t k0 = 0; k0 < kc; k0 += step)
      c32(std::min(step, kc - k0), a + pack_index(g.pa, k0, 0, as) * g.es, as,
          b + pack_index(g.pb, k0, 0, g.nr) * g.es, c, ldc, accumulate || k0 > 0);
    return;
  }
  thread_local std::vector<uint16_t> tile;
  tile.resize(static_cast<size_t>(k->mr * g.nr));
  for (int64_t k0 = 0; k0 < kc; k0 += step) {
    k->fn(std::min(step, kc - k0), a + pack_index(g.pa, k0, 0, as) * g.es, as,
          b + pack_index(g.pb, k0, 0, g.nr) * g.es, tile.data(), g.nr, 0);
    g.vec->add_f16_tile(k->mr, g.nr, tile.data(), c, ldc, accumulate || k0 > 0);
  }
}

// The k chunk for a range of k rows: at most kb (g.kb), the chunks of equal size (a
// multiple of k_align), so that no short tail chunk pays a C-tile load and store for a few
// k steps (gemm_chain's 264-key tile was 128 + 128 + 8 with kb = 128).
int64_t chunk_for(const Geometry& g, int64_t k, int64_t kb = 0) {
  if (kb == 0) kb = g.kb;
  const int64_t n = (k + kb - 1) / kb;
  return std::max<int64_t>(1, round_up((k + n - 1) / n, g.gk->k_align));
}

// A run of bytes brought into L2 by software prefetches, `lines` cache lines after each
// micro-kernel call of the stages it is given to (gemm_chain: the next K2 tile of a
// pre-packed B and C, during this tile's GEMMs). The pre-packed tiles come from memory at
// every call (16 MiB at K2 = 8192), and the hardware prefetchers left the kernels waiting
// for them: Sapphire Rapids host, fp32, 1 thread 77-79 -> 85 % of peak; 2 threads, paired
// % of peak 78-80 -> 84-86 (docs/results/cpu-x86-2026-11-26.md, session 24).
struct Prefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  int64_t lines = 0;
  void step() {
    for (int64_t i = 0; i < lines && p < end; ++i, p += 64) __builtin_prefetch(p, 0, 2);
  }
};

// Both stages keep one B panel resident in L1 while the A operand streams past it
// (B-stationary): per k step a kernel reads NR elements of B but only MR of A, so B is the
// stream worth keeping. The k range is cut into chunks of kb (g.kb) rows so that a B panel
// chunk (kb x NR) takes at most l1_panel_bytes() of L1D. On AVX-512 (docs/results/
// cpu-x86-2026-11-22.md) it measured equal to the A-stationary order within the noise
// (GEMM-only 89.0% vs 87.9% of peak); it is kept for the smaller L1 footprint.
//
// Operand addresses use the kernel's layouts (ukernel.hpp): k offsets are multiples of
// k_align (even for kpairs), so a chunk starts on a whole pair row.
//
// stage 1: T[kc][mq] (row stride ldt) = X blocks x Y panels ([kp][nr] in layout pb). Key
// block r (mr keys) of X starts at element r * xbs of x and is read with A stride xs, in
// layout pa: separate [kp][mr] blocks (xbs = kp * mr, xs = mr for k-major), or one wide
// panel of ld columns read in place (xbs = pack_index(pa, 0, mr, ld), xs = ld).
// Columns past the last whole panel (a trimmed block, live_rows) are set to 0.
// f16_out, when given (an acc-f16 kernel, kp within one call: gemm_call's step): T is not
// written; each C tile goes from the kernel's fp16 tile straight into the second GEMM's A
// operand, f16_out in the kernel's A layout (leading dimension ldo), by vec->f16_tile_as.
// The same fp16 values as T's fp32 converted back (gemm_chain, fp16 noepi, 2 threads:
// 787-794 -> 817-834 GFLOP/s, the T pass and the fp16 tile's widening gone; session 24).
// mx, when given: the column max of T over the whole panels folded into mx[0, done) block
// by block, each right after its last k chunk while it is in L1 (col_max over the finished
// 64 KiB tile read it back from L2: bf16 B1 H8 S512 D64, 2 threads, ~8 % of the call).
void stage1(const Geometry& g, int64_t kp, int64_t kc, const char* x, int64_t xbs, int64_t xs,
            const char* ypanels, float* t, int64_t ldt, float* mx = nullptr,
            Prefetch* pf = nullptr, uint16_t* f16_out = nullptr, int64_t ldo = 0) {
  const int64_t done = kp == 0 ? 0 : g.mq / g.nr * g.nr;  // kp = 0 (gemm_chain K1 = 0): T = 0
  if (done < g.mq)
    for (int64_t k = 0; k < kc; ++k) std::fill(t + k * ldt + done, t + k * ldt + g.mq, 0.0f);
  if (kp == 0) return;
  prepare_gemm(g.gk->isa);
  // The kernel's panel form where the whole k range fits it and the X blocks are one run of
  // rows (block r + 1 right after block r): each Y panel stays in the unit for the whole
  // tile. bf16 B1 H8 S512 D64, 2 threads, alternated: 1045-1050 -> 1111-1125 GFLOP/s
  // (session 20; stage 1 had taken ~170 us per thread against stage 2's ~106).
  if (g.panel != nullptr && kp <= g.panel->max_k && g.pa == Layout::rows && xbs == g.mr * xs &&
      kc % 16 == 0) {
    for (int64_t q = 0; q < g.mq / g.nr; ++q) {
      g.panel->fn(kp, x, xs, kc, ypanels + q * kp * g.nr * g.es, t + q * g.nr, ldt,
                  mx != nullptr ? mx + q * g.nr : nullptr);
      if (pf != nullptr) pf->step();
    }
    return;
  }
  if (f16_out != nullptr) {
    thread_local std::vector<uint16_t> tile;
    tile.resize(static_cast<size_t>(g.mr * g.nr));
    for (int64_t q = 0; q < g.mq / g.nr; ++q)
      for (int64_t r = 0; r < kc / g.mr; ++r) {
        g.gk->fn(kp, x + r * xbs * g.es, xs, ypanels + q * kp * g.nr * g.es, tile.data(), g.nr, 0);
        g.vec->f16_tile_as(g.mr, g.nr, tile.data(), f16_out + pack_index(g.pa, r * g.mr, q * g.nr, ldo),
                           ldo, g.pa);
        if (pf != nullptr) pf->step();
      }
    return;
  }
  const int64_t kb = chunk_for(g, kp);
  for (int64_t k0 = 0; k0 < kp; k0 += kb) {
    const int64_t kl = std::min(kb, kp - k0);
    const bool last = k0 + kl == kp;
    for (int64_t q = 0; q < g.mq / g.nr; ++q)
      for (int64_t r = 0; r < kc / g.mr; ++r) {
        float* c = t + r * g.mr * ldt + q * g.nr;
        gemm_call(g, kl, x + (r * xbs + pack_index(g.pa, k0, 0, xs)) * g.es, xs,
                  ypanels + (q * kp * g.nr + pack_index(g.pb, k0, 0, g.nr)) * g.es, c, ldt, k0 > 0);
        if (pf != nullptr) pf->step();
        if (mx != nullptr && last) g.vec->col_max(g.mr, g.nr, c, ldt, mx + q * g.nr);
      }
  }
}

// stage 2: O[mq][dvp] += P^T x V panels (rows [j0, j0+kc) of each [rp][nr] panel). P holds
// kc keys x mq queries in layout pa with leading dimension ldp (see softmax_block). When mq
// is not a multiple of MR, the last row block reads P and writes O up to the next multiple
// (padding the caller provides), or runs g's tail kernel if its rows fit that.
// One row block (mq <= MR) reads each V panel once: the kernel's stream form, where it has
// one, runs each panel's k range in chunks of gemm_stream_chunk (its A strip stays in L1).
void stage2(const Geometry& g, int64_t kc, const char* p, int64_t ldp, const char* vpanels,
            int64_t rp, int64_t j0, int64_t dvp, float* o, Prefetch* pf = nullptr) {
  const bool once = g.stream != nullptr && g.mq <= g.mr;
  const int64_t kb = once ? chunk_for(g, kc, gemm_stream_chunk(*g.stream)) : chunk_for(g, kc);
  prepare_gemm(g.gk->isa);
  for (int64_t k0 = 0; k0 < kc; k0 += kb) {
    const int64_t kl = std::min(kb, kc - k0);
    // Many panels (gemm_chain's N = 256, D = 256): row blocks outer, so that a block's
    // strip of P (MR columns of kc rows, one strided piece per row) stays in L1 while the
    // contiguous panels stream past it; with the panels outer it came back from L2 once
    // per panel. Zen 5 VM, 2 threads: gemm_chain fp32 83.1-83.4 -> 85.0-86.8 % of peak,
    // bf16 D256 attention 1.04x; at 2-4 panels (D64, D128) the panels-outer order stays.
    const bool rows_outer = dvp / g.nr >= 8;
    const int64_t nc = dvp / g.nr, ni = (g.mq + g.mr - 1) / g.mr;
    for (int64_t u = 0; u < nc * ni; ++u) {
      const int64_t c = rows_outer ? u % nc : u / ni, i0 = (rows_outer ? u / nc : u % ni) * g.mr;
      const bool tail = g.tail != nullptr && g.mq - i0 <= g.tail->mr;
      gemm_call(g, kl, p + pack_index(g.pa, k0, i0, ldp) * g.es, ldp,
                vpanels + (c * rp * g.nr + pack_index(g.pb, j0 + k0, 0, g.nr)) * g.es,
                o + i0 * dvp + c * g.nr, dvp, 1, tail ? g.tail : once ? g.stream : nullptr);
      if (pf != nullptr) pf->step();
    }
  }
}

// ---------------------------------------------------------------- row-op operands
// Rows [j0, j0+n) of a row source (row r at base + r * stride elements of dt) as fp32 rows
// the row ops can read: fp32 rows in place, with ld = stride (measured: copying BSHD rows,
// a head-row apart, into a contiguous buffer first was 1.2-1.6x slower); other storage
// converted into `buf` (ld = len), prefetching the rows it reads next.
const float* f32_rows(const char* base, int64_t stride, DType dt, int64_t j0, int64_t n,
                      int64_t len, std::vector<float>& buf, int64_t& ld) {
  if (dt == DType::f32) {
    ld = stride;
    return reinterpret_cast<const float*>(base) + j0 * stride;
  }
  constexpr int64_t kAhead = 8;
  const int64_t es = int64_t(dtype_size(dt));
  const int64_t row_bytes = len * es;
  auto src = [&](int64_t k) { return base + (j0 + k) * stride * es; };
  for (int64_t k = 0; k < std::min(kAhead, n); ++k)
    for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(src(k) + o);
  buf.resize(static_cast<size_t>(n * len));
  for (int64_t k = 0; k < n; ++k) {
    if (k + kAhead < n)
      for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(src(k + kAhead) + o);
    core::convert_row(src(k), dt, len, buf.data() + k * len);
  }
  ld = len;
  return buf.data();
}

// O[mq][ldo] (rows [0, mq)) += P[kc][ldp]^T (columns [0, mq)) x V rows [j0, j0+kc) of a row
// source, by the row ops, key tile by key tile.
void rows_pv(const Geometry& g, const RowOps& ops, int64_t kc, const float* P, int64_t ldp,
             int64_t mq, const char* vbase, int64_t vstride, DType dt, int64_t j0, int64_t dv,
             float* O, int64_t ldo) {
  thread_local std::vector<float> vconv;
  for (int64_t k0 = 0; k0 < kc; k0 += g.kc) {
    const int64_t n = std::min(g.kc, kc - k0);
    int64_t vs = 0;
    const float* vr = f32_rows(vbase, vstride, dt, j0 + k0, n, dv, vconv, vs);
    ops.axpy(n, mq, P + k0 * ldp, ldp, vr, vs, dv, O, ldo);
  }
}

// ---------------------------------------------------------------- softmax block
// One query block through a strategy. `Scores` (j0, kc, t, mx, phases, lap) fills key
// tile [j0, j0+kc) as T[kc][mq] (masked entries -inf) and returns whether it also folded
// the tile's column max into mx (given only where it may; softmax_block does it otherwise).
// Rows of a block are segments of `seg` rows, one per head (a GQA block holds several
// heads' queries; other blocks are one segment): row i is row i % seg of segment i / seg,
// and the first `rows` rows of each segment exist (the rest is padding).
struct BlockOut {
  void* o;          // output row 0 of the block
  int64_t o_stride; // between output rows of a segment (elements)
  DType o_type = DType::f32;  // (es below reads it, also in a default-constructed one)
  int64_t rows;     // valid rows per segment (<= seg)
  int64_t dv;
  float* lse;       // lse of row 0 (stride 1 within a segment) or null
  int64_t seg;      // rows per segment
  int64_t o_hs = 0, lse_hs = 0;  // between segments (elements)
  int64_t es = int64_t(dtype_size(o_type));
  bool valid(int64_t i) const { return i % seg < rows; }
  char* row(int64_t i) const {
    return static_cast<char*>(o) + ((i / seg) * o_hs + (i % seg) * o_stride) * es;
  }
  float* lse_at(int64_t i) const { return lse + (i / seg) * lse_hs + i % seg; }
};

// A negative scale turns the row max of scale*s into scale*min(s). Rather than a second
// max/min path, flip the sign of the scores (masked -inf entries stay -inf) and of the scale.
void negate_scores(float* t, int64_t n) {
  for (int64_t i = 0; i < n; ++i) t[i] = t[i] == kNegInf ? kNegInf : -t[i];
}

// `pv(j0, kc, P, ldp, O)` adds P^T x V rows [j0, j0+kc) into O[mq][dvp] (P: kc keys x mq
// queries in layout g.pa, leading dimension ldp); rp is the
// (padded) key count.
template <class Scores, class PV>
void softmax_block(const Geometry& g, Strategy strategy, Exp2Mode mode, float c, float scale,
                   const Scores& raw_scores, int64_t key_lo, int64_t key_hi, const PV& pv,
                   int64_t rp, int64_t dvp, const BlockOut& out, bool timed, Phases& ph) {
  const int64_t mq = g.mq;
  Lap lap(timed);
  const bool flip = c < 0.0f;
  if (flip) {
    c = -c;
    scale = -scale;
  }
  // Fills tile t and folds its column max into mx: in stage 1 where the Scores callable
  // can (it returns true), else here. (Not with flipped scores: their max is taken after.)
  auto scores = [&](int64_t j0, int64_t kc, float* t, float* mx, Phases& phx, Lap& lapx) {
    const bool fused = raw_scores(j0, kc, t, flip ? nullptr : mx, phx, lapx);
    if (flip) negate_scores(t, kc * mq);
    if (!fused) g.vec->col_max(kc, mq, t, mq, mx);
  };
  int64_t t_begin = key_lo / g.kc, t_end = key_hi > key_lo ? (key_hi + g.kc - 1) / g.kc : t_begin;
  const int64_t ntiles = t_end - t_begin;
  const int64_t keys_total = std::min(ntiles * g.kc, rp - t_begin * g.kc);
  auto tile_len = [&](int64_t t) { return std::min(g.kc, rp - t * g.kc); };

  Arena& arena = thread_arena();
  const bool strip = strategy != Strategy::online;
  const int64_t tbuf_rows = strip ? std::max<int64_t>(keys_total, 1) : g.kc;
  const int64_t pbuf_rows = strategy == Strategy::three_pass ? std::max<int64_t>(keys_total, 1)
                            : strategy == Strategy::two_pass ? (kPipeAhead + 1) * g.kc
                                                             : g.kc;
  arena.reset(static_cast<size_t>(tbuf_rows * mq * 4 + pbuf_rows * mq * g.es + mq * dvp * 4 + 9 * mq * 4 +
                     8 * 64));
  float* T = arena.take<float>(tbuf_rows * mq);
  char* P = arena.take<char>(pbuf_rows * mq * g.es);
  float* O = arena.take<float>(mq * dvp);
  float* m = arena.take<float>(mq);
  float* l = arena.take<float>(mq);
  float* cm = arena.take<float>(mq);
  float* alpha = arena.take<float>(mq);
  float* tmax = arena.take<float>(mq);
  float* tsum = arena.take<float>(mq);
  std::fill(O, O + mq * dvp, 0.0f);
  std::fill(m, m + mq, kNegInf);
  std::fill(l, l + mq, 0.0f);

  // c*m with the fully-masked case (m = -inf) mapped to 0 so that exp2(-inf - 0) = 0.
  auto fold_max = [&]() {
    for (int64_t i = 0; i < mq; ++i) cm[i] = m[i] == kNegInf ? 0.0f : c * m[i];
  };
  // exp+pack of one key tile. Its row sums go through a tile-local sum before joining l:
  // adding tens of thousands of terms one by one into l cost fp32 softmax_v 2.8e-5 rel_err
  // at L = 32768 (one partial sum per tile: ~2e-7).
  // P is written in the kernel's A layout (g.pa): a buffer of `width` keys has leading
  // dimension p_ld(width) (the row length for `rows`, mq otherwise), and key kk of it
  // starts at p_at(buffer, kk, ld).
  auto p_ld = [&](int64_t width) { return g.pa == Layout::rows ? width : mq; };
  auto p_at = [&](char* buf, int64_t kk, int64_t ld) {
    return buf + pack_index(g.pa, kk, 0, ld) * g.es;
  };
  auto exp_tile = [&](int64_t kc, const float* t, char* p, int64_t ldp) {
    std::fill(tsum, tsum + mq, 0.0f);
    g.vec->exp2_pack(kc, mq, t, mq, c, cm, p, ldp, g.pt, g.pa, mode, tsum);
    for (int64_t i = 0; i < mq; ++i) l[i] += tsum[i];
  };

  if (strategy == Strategy::online) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t kc = tile_len(t);
      std::fill(tmax, tmax + mq, kNegInf);
      scores(t * g.kc, kc, T, tmax, ph, lap);
      // The reference max m[i] follows the tile max only past the slack (g.rescale_slack);
      // the first visible key always sets it (m = -inf before).
      bool rescale = false;
      for (int64_t i = 0; i < mq; ++i) {
        alpha[i] = 1.0f;
        if (m[i] == kNegInf) {
          m[i] = tmax[i];
        } else if (c * (tmax[i] - m[i]) > g.rescale_slack) {
          alpha[i] = std::exp2(c * (m[i] - tmax[i]));
          rescale = true;
          m[i] = tmax[i];
        }
      }
      fold_max();
      lap.to(ph.max_find);
      if (rescale) {
        g.vec->scale_rows(mq, dvp, O, dvp, alpha);
        for (int64_t i = 0; i < mq; ++i) l[i] *= alpha[i];
      }
      exp_tile(kc, T, P, p_ld(g.kc));
      lap.to(ph.exp_pack);
      pv(t * g.kc, kc, P, p_ld(g.kc), O);
      lap.to(ph.gemm);
    }
  } else {
    // Phase 0: scores of every tile into the strip, and the row max.
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t kc = tile_len(t);
      float* tt = T + (t - t_begin) * g.kc * mq;
      scores(t * g.kc, kc, tt, m, ph, lap);
      lap.to(ph.max_find);
    }
    fold_max();
    if (strategy == Strategy::three_pass) {
      // Phase 1: all of P; phase 2: one pure GEMM over every key.
      const int64_t ld = p_ld(std::max<int64_t>(keys_total, 1));
      for (int64_t t = t_begin; t < t_end; ++t)
        exp_tile(tile_len(t), T + (t - t_begin) * g.kc * mq, p_at(P, (t - t_begin) * g.kc, ld), ld);
      lap.to(ph.exp_pack);
      if (keys_total > 0) pv(t_begin * g.kc, keys_total, P, ld, O);
      lap.to(ph.gemm);
    } else {
      // Phases 1+2: the producer runs kPipeAhead tiles ahead of the GEMM in a ring.
      const int64_t slots = kPipeAhead + 1;
      auto produce = [&](int64_t t) {
        exp_tile(tile_len(t), T + (t - t_begin) * g.kc * mq,
                 P + ((t - t_begin) % slots) * g.kc * mq * g.es, p_ld(g.kc));
        lap.to(ph.exp_pack);
      };
      for (int64_t t = t_begin; t < std::min(t_end, t_begin + kPipeAhead); ++t) produce(t);
      for (int64_t t = t_begin; t < t_end; ++t) {
        if (t + kPipeAhead < t_end) produce(t + kPipeAhead);
        pv(t * g.kc, tile_len(t), P + ((t - t_begin) % slots) * g.kc * mq * g.es, p_ld(g.kc), O);
        lap.to(ph.gemm);
      }
    }
  }

  // Phase 3: normalize, lse, store. A row with no visible key has l = 0: O = 0, lse = -inf.
  for (int64_t i = 0; i < mq; ++i) {
    if (!out.valid(i)) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    g.vec->store_row(O + i * dvp, out.dv, inv, out.row(i), out.o_type);
    if (out.lse != nullptr)
      *out.lse_at(i) = l[i] > 0.0f ? scale * m[i] + std::log(l[i]) : kNegInf;
  }
  lap.to(ph.normalize);
}

void report(PhaseTimes* times, const std::vector<Phases>& per_thread, const Geometry& g,
            Strategy s) {
  if (times == nullptr) return;
  Phases sum;
  for (const Phases& p : per_thread) sum.add(p);
  times->pack = sum.pack;
  times->max_find = sum.max_find;
  times->exp_pack = sum.exp_pack;
  times->gemm = sum.gemm;
  times->normalize = sum.normalize;
  times->kernel = g.key;
  times->strategy = to_string(s);
}

Strategy resolve(Strategy s, int64_t sq, int64_t sk, int64_t d, DType t) {
  return s == Strategy::automatic ? choose_strategy(sq, sk, d, t) : s;
}

}  // namespace

Strategy choose_strategy(int64_t sq, int64_t sk, int64_t d, DType storage) {
  (void)sq; (void)d; (void)storage;
  // From flashcore-bench runs (docs/results/cpu-x86-2026-11-22.md, 'automatic strategy'):
  // at Sk = 4096 online and two-pass overlap within the noise of a shared host and
  // three-pass trails; online never pays for a score strip, and for short key ranges the
  // strip of two_pass fits in L2 and saves the rescales.
  return sk <= 1024 ? Strategy::two_pass : Strategy::online;
}

// ================================================================ attention
// Split over keys (FlashAttention's split-KV combine): each of `items` blocks ran as
// `nsplit` parts over disjoint key ranges, each part writing its normalized O rows and
// lse to scratch (split_o [item][part][mq][dv], split_lse [item][part][mq]); the parts
// are merged with weights exp(lse_s - max lse) into out_of(item) (a BlockOut).
template <class OutOf>
void merge_splits(int64_t items, int64_t nsplit, int64_t mq, int64_t dv, const std::vector<float>& split_o,
                  const std::vector<float>& split_lse, const OutOf& out_of, int nthreads) {
#pragma omp parallel for num_threads(nthreads)
  for (int64_t it = 0; it < items; ++it) {
    const BlockOut out = out_of(it);
    if (out.rows <= 0) continue;
    std::vector<float> acc(static_cast<size_t>(dv));
    for (int64_t i = 0; i < mq; ++i) {
      if (!out.valid(i)) continue;
      float mx = kNegInf;
      for (int64_t s = 0; s < nsplit; ++s) mx = std::max(mx, split_lse[size_t((it * nsplit + s) * mq + i)]);
      std::fill(acc.begin(), acc.end(), 0.0f);
      float wsum = 0.0f;
      if (mx != kNegInf) {  // every part fully masked: O = 0, lse = -inf
        for (int64_t s = 0; s < nsplit; ++s) {
          const float w = std::exp(split_lse[size_t((it * nsplit + s) * mq + i)] - mx);
          const float* os = split_o.data() + ((it * nsplit + s) * mq + i) * dv;
          for (int64_t j = 0; j < dv; ++j) acc[size_t(j)] += w * os[j];
          wsum += w;
        }
        for (float& a : acc) a /= wsum;
      }
      core::convert_row(acc.data(), dv, out.row(i), out.o_type);
      if (out.lse) *out.lse_at(i) = mx == kNegInf ? kNegInf : mx + std::log(wsum);
    }
  }
}

// Whether every element of V (fp16 storage) has |v| <= 2^7: NaN and inf do not. P V summed
// in fp16 (a kernel with acc f16) adds at most 128 products P v per lane and two lanes per
// chunk of <= 256 keys, with P <= 1: |sum| <= 256 * 128 = 32768 < 65504.
bool v_fits_f16_sums(const core::AttentionProblem& p, int nthreads) {
  constexpr int16_t kBound = 0x5800;  // fp16 bits of 128
  const uint16_t* v = static_cast<const uint16_t*>(p.v.data);
  const int64_t rows = p.cu_k ? int64_t(p.cu_k[p.batch]) : p.batch * p.sk;  // (b, s) rows
  int fits = 1;
#pragma omp parallel for num_threads(nthreads) reduction(min : fits)
  for (int64_t r = 0; r < rows; ++r) {
    // varlen: sequences are concatenated along s (b = 0 strides); else r = b * sk + s
    const int64_t b = p.cu_k ? 0 : r / std::max<int64_t>(p.sk, 1), sidx = p.cu_k ? r : r % p.sk;
    for (int64_t h = 0; h < p.kv_heads; ++h) {
      const uint16_t* row = v + b * p.v.sb + sidx * p.v.ss + h * p.v.sh;
      int16_t worst = 0;  // |v| bits as a signed max (SSE2's pmaxsw)
      for (int64_t e = 0; e < p.dv; ++e) worst = std::max(worst, int16_t(row[e] & 0x7FFF));
      if (worst > kBound) fits = 0;
    }
  }
  return fits == 1;
}

// Two block shapes, one pipeline. Prefill: blocks of mq query rows of one head, K and V
// packed once per (batch, kv head) for the GEMM micro-kernels. Decode (the query rows of
// a whole GQA group, group * Sq, fit in kDecodeRows): one block holds every query row of
// one or more whole groups (kv heads), computed by the row ops straight from K and V, so
// each call reads K and V once and packs nothing; split over keys when there are fewer
// blocks than threads. Several kv heads per block: in BSHD tensors the rows of
// consecutive kv heads of one key are adjacent, so a block's key tile reads whole
// stretches of each page instead of one head's 2^k bytes per page (one head alone ran
// at ~40-50 % of the memory bandwidth that contiguous rows reach).
void attention(const core::AttentionProblem& p, PhaseTimes* times) {
  CpuConfig cfg = select_kernels(p.dtype, p.impl, true);
  const bool varlen = p.cu_q != nullptr;
  const int64_t sq_max = std::max<int64_t>(p.sq, 1);
  const bool rows_mode = p.group() * sq_max <= kDecodeRows && !gemm_forced(p.impl);
  // `auto`'s fp16 P V kernel (a pair, auto_table.inc) only where its fp16 sums cannot
  // overflow; otherwise the first kernel runs both stages. (A forced pair is the caller's
  // choice, as a forced fp16 kernel is.)
  if (cfg.gemm2 != nullptr && cfg.gemm2->acc != DType::f32 && !gemm_forced(p.impl) && !rows_mode &&
      !(p.dtype == DType::f16 && v_fits_f16_sums(p, resolve_threads(p.threads)))) {
    cfg.gemm2 = nullptr;
    cfg.vec2 = nullptr;
  }
  // kv heads per block: 1, or in decode the most that divide Hkv within kDecodeBlockRows.
  const int64_t mqh = p.group() * sq_max;  // decode: query rows per kv head
  int64_t kvb = 1;
  if (rows_mode)
    for (int64_t n = 1; n <= p.kv_heads; ++n)
      if (p.kv_heads % n == 0 && n * mqh <= std::max(kDecodeBlockRows, mqh)) kvb = n;
  Geometry g = rows_mode ? make_rows_geometry(cfg, kvb * mqh)
                         : make_geometry(cfg, p.sq, true,
                                         p.sk * (p.d + p.dv) * int64_t(dtype_size(cfg.gemm->ab)),
                                         kKeyTile * 8 + (p.d + p.dv) * 4);
  // A decode key tile covers every kv head of the block: as many rows in all as a
  // one-head tile, so that the heads' reads of one page stay close in time (B1 H16 Sq1
  // Sk4096 D128 BSHD, 1 thread: 48-55 % of the memory read bandwidth with 256 keys per
  // tile, 104-111 % with 16).
  if (rows_mode) g.kc = std::max<int64_t>(16, round_up(kKeyTile / kvb, 16));
  // P and stage 2 (P V): the pair's second kernel, else g itself.
  const Geometry g2 = rows_mode ? g : stage2_geometry(g, cfg);
  const Strategy strategy = resolve(p.strategy, p.sq, p.sk, p.d, p.dtype);
  const int nthreads = resolve_threads(p.threads);
  const float c = p.scale * core::kLog2e;
  const int64_t kp = rows_mode ? p.d : round_up(p.d, g.gk->k_align);
  const int64_t dvp = rows_mode ? p.dv : round_up(p.dv, g2.nr);
  const int64_t es_in = int64_t(dtype_size(p.dtype));
  const bool timed = times != nullptr;
  std::vector<Phases> phases(static_cast<size_t>(nthreads));
  // A block: `hpb` heads of kvb groups x `seg` query rows each.
  const int64_t hpb = rows_mode ? kvb * p.group() : 1;
  const int64_t seg = rows_mode ? sq_max : g.mq;
  const int64_t qblocks = (sq_max + seg - 1) / seg;
  const int64_t blocks_per_group = rows_mode ? 1 : p.group() * qblocks;

  // Groups (batch, kv head; decode: batch, kv block) share one packed K and V; process
  // them in chunks that fit the packing budget.
  const int64_t nkvb = p.kv_heads / kvb;
  const int64_t ngroups = p.batch * nkvb;
  auto seq = [&](const int32_t* cu, int64_t b, int64_t fixed) -> std::pair<int64_t, int64_t> {
    return cu ? std::make_pair(int64_t(cu[b]), int64_t(cu[b + 1] - cu[b])) : std::make_pair(int64_t(0), fixed);
  };
  const int64_t skp_max = round_up(std::max<int64_t>(p.sk, 1), g.key_align);
  // Stage 1 reads K in place where the kernel's A layout is plain rows of the storage
  // dtype (AMX: bf16 rows, any row stride) and no key block or k step needs padding: its
  // packing was a copy (bf16 B1 H8 S512 D64, 2 threads: ~half of the K/V packing time).
  // Only while one head's K rows span at most half of L2: rows a power-of-two stride apart
  // share cache sets, and over a longer span they no longer fit (B1 H16 S2048 D128, rows
  // 4 KiB apart over 8 MiB: 1773-1810 -> ~1090 GFLOP/s in place).
  const bool k_inplace = !rows_mode && !varlen && g.pa == Layout::rows && g.gk->ab == p.dtype &&
                         kp == p.d && skp_max == p.sk && p.k.ss * es_in * p.sk <= l2_bytes() / 2;
  const int64_t group_bytes = rows_mode ? 0 : skp_max * (kp * g.es + dvp * g2.es);
  const int64_t chunk =
      rows_mode ? ngroups : std::max<int64_t>(1, int64_t(kPackBudgetBytes) / group_bytes);
  char* const packed =
      rows_mode ? nullptr : pack_slot(0, static_cast<size_t>(std::min(chunk, ngroups) * group_bytes));

  for (int64_t g0 = 0; g0 < ngroups; g0 += chunk) {
    const int64_t g1 = std::min(ngroups, g0 + chunk);
    // Pack K (as stage-1 A blocks of MR keys) and V (as stage-2 panels) of each group,
    // split into parts so that one large group still uses every thread.
    const int64_t parts =
        rows_mode ? 0 : std::max<int64_t>(1, (nthreads + (g1 - g0) - 1) / (g1 - g0));
    // (contiguous runs of groups per thread: see the items loop below)
#pragma omp parallel for schedule(static) num_threads(nthreads) collapse(2)
    for (int64_t gi = g0; gi < g1; ++gi) {
      for (int64_t part = 0; part < parts; ++part) {
        Lap lap(timed);
        const int64_t b = gi / p.kv_heads, hk = gi % p.kv_heads;
        const auto [k_off, sk] = seq(p.cu_k, b, p.sk);
        const int64_t skp = round_up(std::max<int64_t>(sk, 1), g.key_align);
        const int64_t bb = varlen ? 0 : b;
        char* kpack = packed + (gi - g0) * group_bytes;
        char* vpack = kpack + skp_max * kp * g.es;
        std::vector<float> rowbuf(static_cast<size_t>(std::max(kp, dvp) + 64));
        const Rows krows{at(p.k.data, bb * p.k.sb + k_off * p.k.ss + hk * p.k.sh, es_in),
                         p.k.ss, p.dtype};
        const Rows vrows{at(p.v.data, bb * p.v.sb + k_off * p.v.ss + hk * p.v.sh, es_in),
                         p.v.ss, p.dtype};
        const int64_t nblk = skp / g.mr;
        const int64_t kb0 = nblk * part / parts, kb1 = nblk * (part + 1) / parts;
        if (!k_inplace)
          pack_transposed(krows, sk, p.d, kp, g.mr, kb0, kb1, kpack, g.gk->ab, g.pa, rowbuf.data());
        pack_panels(vrows, sk, p.dv, skp, g2.nr, kb0 * g.mr, kb1 * g.mr, vpack, g2.gk->ab, g2.pb,
                    rowbuf.data());
        lap.to(phases[size_t(omp_get_thread_num())].pack);
      }
    }

    // Work items: (group, block of the group).
    const int64_t items = (g1 - g0) * blocks_per_group;
    // Split over keys (decode-like shapes: fewer work items than threads). Each item's key
    // tiles are cut into nsplit parts run as separate items; every part writes its own
    // normalized O and lse to scratch, and the parts are merged with weights
    // exp(lse_s - max lse) (FlashAttention's split-KV combine), so no thread idles.
    const int64_t ktiles = (skp_max + g.kc - 1) / g.kc;
    const int64_t nsplit =
        items < nthreads ? std::min<int64_t>((nthreads + items - 1) / items, ktiles) : 1;
    std::vector<float> split_o(static_cast<size_t>(nsplit > 1 ? items * nsplit * g.mq * p.dv : 0));
    std::vector<float> split_lse(static_cast<size_t>(nsplit > 1 ? items * nsplit * g.mq : 0));

    // Where item `it` lives: its group, first head and first query row, and its output.
    struct Item {
      int64_t gi, b, hk, h0, s0, bb, k_off, sq, sk;
      BlockOut out;
    };
    auto locate = [&](int64_t it) {
      Item x;
      x.gi = g0 + it / blocks_per_group;
      const int64_t r = it % blocks_per_group;
      x.b = x.gi / nkvb;
      x.hk = x.gi % nkvb * kvb;
      x.h0 = x.hk * p.group() + (r / qblocks) * hpb;
      x.s0 = (r % qblocks) * seg;
      x.bb = varlen ? 0 : x.b;
      const auto [q_off, sq] = seq(p.cu_q, x.b, p.sq);
      const auto [k_off, sk] = seq(p.cu_k, x.b, p.sk);
      x.sq = sq;
      x.sk = sk;
      x.k_off = k_off;
      const int64_t qs = q_off + x.s0;
      x.out = BlockOut{static_cast<char*>(p.o) + (x.bb * p.o_sb + qs * p.o_ss + x.h0 * p.o_sh) * es_in,
                       p.o_ss, p.dtype, std::min(seg, sq - x.s0), p.dv,
                       p.lse ? p.lse + x.bb * p.lse_sb + x.h0 * p.lse_sh + qs : nullptr,
                       seg, p.o_sh, p.lse_sh};
      return x;
    };

    auto run_item = [&](int64_t it2) {
      const int64_t it = it2 / nsplit, part = it2 % nsplit;
      Phases& ph = phases[size_t(omp_get_thread_num())];
      Lap lap(timed);
      const Item x = locate(it);
      if (x.out.rows <= 0) return;
      const int64_t sk = x.sk;
      const int64_t skp = round_up(std::max<int64_t>(sk, 1), g.key_align);
      // (the row ops pack nothing: `packed` is null there, and so are these)
      const char* kpack = packed ? packed + (x.gi - g0) * group_bytes : nullptr;
      const char* vpack = packed ? kpack + skp_max * kp * g.es : nullptr;
      const char* kin = at(p.k.data, x.bb * p.k.sb + x.k_off * p.k.ss + x.hk * p.k.sh, es_in);
      const char* vin = at(p.v.data, x.bb * p.v.sb + x.k_off * p.v.ss + x.hk * p.v.sh, es_in);
      const core::BandMask mask =
          core::make_mask(p.causal, p.window_left, p.window_right, x.sq, sk);

      // Pack this block's queries: stage-1 B panels (Q^T, NR queries per panel), or for
      // the row ops fp32 [d][mq] followed by [mq][d].
      // (per-thread buffers kept across items and calls, as the arenas: four allocations
      // per item were ~2 % of bf16 S512 D64 attention)
      thread_local Arena item_arena;
      const int64_t qbytes = g.mq * kp * (rows_mode ? 2 * 4 : g.es);
      item_arena.reset(static_cast<size_t>(qbytes + (kp + 64) * 4 + 2 * g.mq * 8 + 4 * 64));
      char* const qpack = item_arena.take<char>(qbytes);
      // decode: per kv head of the block, y = [d][mqh] then q = [mqh][d] (RowOps::dot)
      auto qy = [&](int64_t kvi) { return reinterpret_cast<float*>(qpack) + kvi * 2 * mqh * p.d; };
      float* const rowbuf = item_arena.take<float>(kp + 64);
      int64_t* const lo = item_arena.take<int64_t>(g.mq);
      int64_t* const hi = item_arena.take<int64_t>(g.mq);
      if (rows_mode) {
        for (int64_t i = 0; i < g.mq; ++i) {
          if (x.out.valid(i)) {
            core::convert_row(at(p.q.data, x.bb * p.q.sb + (i / seg) * p.q.sh +
                                               (x.s0 + i % seg + (varlen ? p.cu_q[x.b] : 0)) * p.q.ss +
                                               x.h0 * p.q.sh, es_in),
                              p.dtype, p.d, rowbuf);
          } else {
            std::fill(rowbuf, rowbuf + p.d, 0.0f);
          }
          float* y = qy(i / mqh);
          const int64_t il = i % mqh;
          for (int64_t e = 0; e < p.d; ++e) y[e * mqh + il] = rowbuf[e];
          std::copy(rowbuf, rowbuf + p.d, y + mqh * p.d + il * p.d);
        }
      } else {
        const Rows qrows{at(p.q.data, x.bb * p.q.sb + ((varlen ? p.cu_q[x.b] : 0) + x.s0) * p.q.ss +
                                          x.h0 * p.q.sh, es_in),
                         p.q.ss, p.dtype};
        pack_transposed(qrows, x.out.rows, p.d, kp, g.nr, 0, g.mq / g.nr, qpack, g.gk->ab,
                        g.pb, rowbuf);
      }
      // The block's geometry: g and g2 with the rows this block computes (live_rows).
      Geometry gb = g, gb2 = g2;
      if (!rows_mode) gb.mq = gb2.mq = live_rows(g, g2, x.out.rows);
      int64_t key_lo = sk, key_hi = 0, all_lo = 0, all_hi = sk;
      for (int64_t i = 0; i < gb.mq; ++i) {
        const bool v = x.out.valid(i);
        lo[i] = v ? mask.key_begin(x.s0 + i % seg, sk) : 0;
        hi[i] = v ? mask.key_end(x.s0 + i % seg, sk) : sk;
        if (v && hi[i] > lo[i]) {
          key_lo = std::min(key_lo, lo[i]);
          key_hi = std::max(key_hi, hi[i]);
        }
        all_lo = std::max(all_lo, lo[i]);
        all_hi = std::min(all_hi, hi[i]);
      }
      lap.to(ph.pack);

      thread_local std::vector<float> kconv;
      auto scores = [&](int64_t j0, int64_t kc, float* t, float* mx, Phases& phx, Lap& lapx) {
        const bool visible = j0 >= all_lo && j0 + kc <= all_hi;  // no key of the tile masked
        if (rows_mode) {
          for (int64_t kvi = 0; kvi < kvb; ++kvi) {
            int64_t xs = 0;
            const float* xr =
                f32_rows(kin + kvi * p.k.sh * es_in, p.k.ss, p.dtype, j0, kc, p.d, kconv, xs);
            cfg.rows->dot(kc, p.d, xr, xs, qy(kvi) + mqh * p.d, qy(kvi), mqh, t + kvi * mqh, g.mq);
          }
        } else {
          // K's blocks: rows of the caller's tensor (k_inplace) or the packed blocks
          const char* kx = k_inplace ? kin + j0 * p.k.ss * es_in : kpack + j0 * kp * g.es;
          const int64_t kxs = k_inplace ? p.k.ss : block_ld(g.pa, kp, g.mr);
          stage1(gb, kp, kc, kx, k_inplace ? g.mr * p.k.ss : kp * g.mr, kxs, qpack, t, gb.mq,
                 visible ? mx : nullptr);
        }
        lapx.to(phx.gemm);
        if (visible) return !rows_mode && mx != nullptr;
        // Per key: skip the keys every row sees ([all_lo, all_hi)), blank the ones no row
        // sees (past Sk: the tile's padding to whole kernel tiles; the last tile of every
        // block has some), and test rows only on the rest (the causal or window band).
        // One test per element over the whole tile took ~11 % of fp32 attention at
        // S512 D64 (half of its tiles end in padding).
        // Within a segment (one head's rows) key_begin and key_end never decrease from row
        // to row (mask.hpp), so the valid rows that cannot see key j are a prefix (end <= j)
        // and a suffix (begin > j): two binary searches and two fills per key, where a test
        // per element took half of causal bf16 B1 H8 S512 D64 (2 threads: ~250 us per
        // thread of ~650).
        for (int64_t k = 0; k < kc; ++k) {
          const int64_t j = j0 + k;
          if (j >= all_lo && j < all_hi) continue;
          float* row = t + k * gb.mq;
          if (j >= sk) {
            std::fill(row, row + gb.mq, kNegInf);
            continue;
          }
          for (int64_t r0 = 0; r0 < gb.mq; r0 += seg) {
            const int64_t r1 = std::min(gb.mq, r0 + x.out.rows);
            std::fill(row + r0, row + (std::upper_bound(hi + r0, hi + r1, j) - hi), kNegInf);
            std::fill(row + (std::upper_bound(lo + r0, lo + r1, j) - lo), row + r1, kNegInf);
          }
        }
        return false;
      };
      auto pv = [&](int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) {
        if (!rows_mode) {
          stage2(gb2, kc, P, ldp, vpack, skp, j0, dvp, O);
          return;
        }
        for (int64_t kvi = 0; kvi < kvb; ++kvi)
          rows_pv(g, *cfg.rows, kc, reinterpret_cast<const float*>(P) + kvi * mqh, g.mq, mqh,
                  vin + kvi * p.v.sh * es_in, p.v.ss, p.dtype, j0, p.dv, O + kvi * mqh * dvp, dvp);
      };
      BlockOut out = x.out;
      if (key_hi <= key_lo) key_lo = key_hi = 0;  // every row fully masked: O = 0
      if (nsplit > 1) {
        // This part's tiles [t0, t1) of the sequence; ranges stay tile-aligned, so no key
        // is seen by two parts.
        const int64_t nt = (skp + g.kc - 1) / g.kc;
        key_lo = std::max(key_lo, nt * part / nsplit * g.kc);
        key_hi = std::min(key_hi, nt * (part + 1) / nsplit * g.kc);
        if (key_hi <= key_lo) key_lo = key_hi = 0;
        // Scratch rows are contiguous: segment stride = seg rows.
        out = BlockOut{split_o.data() + it2 * g.mq * p.dv, p.dv, DType::f32, x.out.rows, p.dv,
                       split_lse.data() + it2 * g.mq, seg, seg * p.dv, seg};
      }
      softmax_block(gb2, strategy, p.exp2, c, p.scale, scores, key_lo, key_hi, pv, skp, dvp,
                    out, timed, ph);
    };
    // Items of equal cost (no mask band, one sequence length) go out in contiguous runs,
    // the groups' runs of the packing loop above: each thread then reads the Q, K, V and O
    // rows of the same heads as in the previous call, still in its L2 (bf16 B1 H8 S512
    // D64, 2 threads, alternated: 1114-1143 -> 1207-1244 GFLOP/s against taking them in
    // turn). Causal, windowed and varlen items differ in cost: taken in turn.
    const int64_t total = items * nsplit;
    const bool even = !varlen && !p.causal && !p.windowed();
#pragma omp parallel num_threads(nthreads)
    {
      if (even) {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        for (int64_t it2 = total * id / nt; it2 < total * (id + 1) / nt; ++it2) run_item(it2);
      } else {
#pragma omp for schedule(dynamic)
        for (int64_t it2 = 0; it2 < total; ++it2) run_item(it2);
      }
    }
    if (nsplit > 1) {
      Lap lap(timed);
      merge_splits(items, nsplit, g.mq, p.dv, split_o, split_lse, [&](int64_t it) { return locate(it).out; },
                   nthreads);
      lap.to(phases[0].normalize);
    }
  }
  report(times, phases, g, strategy);
  if (times != nullptr && g2.gk != g.gk) times->kernel = std::string(g.key) + "+" + g2.key;
}

// ================================================================ softmax_v
// V packed for the GEMM path: [dvp / NR] panels of [lp][NR] (the kernel's B layout and
// operand dtype), keys padded to lp, columns to dvp; zeros in the padding.
struct VLayout {
  int64_t lp, dvp;
  size_t bytes;
};
VLayout v_layout(const GemmUkernel& k, int64_t l, int64_t d) {
  VLayout v;
  v.lp = round_up(std::max<int64_t>(l, 1), key_align_of(k));
  v.dvp = round_up(d, k.nr);
  v.bytes = size_t(v.lp * v.dvp) * dtype_size(k.ab);
  return v;
}

// Packs V into `dst` (v_layout), the key blocks split over the threads.
void pack_v(const core::SoftmaxVProblem& p, const GemmUkernel& k, const VLayout& lay, char* dst,
            int nthreads) {
  const Rows vrows{p.v, p.v_sl, p.dtype};
  const int64_t nblk = lay.lp / k.mr;
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> rowbuf(static_cast<size_t>(lay.dvp + 64));
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t b0 = nblk * id / nt, b1 = nblk * (id + 1) / nt;
    pack_panels(vrows, p.l, p.d, lay.lp, k.nr, b0 * k.mr, b1 * k.mr, dst, k.ab, k.b_layout,
                rowbuf.data());
  }
}

// Few rows (M <= kDecodeBlockRows: one block) take the row ops: P V by axpy straight from
// V's rows, so V is read once and never packed (packing V, 32 MiB at L = 32768, d = 256,
// took more time than the GEMM: 2.3-3.3 ms of 5-6 ms). More rows pack V once per call
// and share it across the row blocks of every thread. A pre-packed V always takes the
// GEMM path (seed 000's pipeline: its V is packed before the timed calls).
void softmax_v(const core::SoftmaxVProblem& p, const PackedOperands::State* packed,
               PhaseTimes* times) {
  const CpuConfig cfg = select_kernels(p.dtype, packed ? packed->kernel->key : p.impl);
  const bool rows_mode = packed == nullptr && p.m <= kDecodeBlockRows && !gemm_forced(p.impl);
  const Geometry g = rows_mode ? make_rows_geometry(cfg, p.m) : make_geometry(cfg, p.m, false);
  const Strategy strategy = resolve(p.strategy, p.m, p.l, p.d, p.dtype);
  const int nthreads = resolve_threads(p.threads);
  const float c = p.scale * core::kLog2e;
  const VLayout vl = v_layout(*g.gk, p.l, p.d);
  const int64_t lp = rows_mode ? round_up(std::max<int64_t>(p.l, 1), g.key_align) : vl.lp;
  const int64_t dvp = round_up(p.d, g.nr);
  const bool timed = times != nullptr;
  std::vector<Phases> phases(static_cast<size_t>(nthreads));
  const char* vpack = packed ? packed->data : nullptr;
  if (!rows_mode && !packed) {  // pack into this thread's reused buffer, then as if pre-packed
    Lap lap(timed);
    char* buf = pack_slot(0, vl.bytes);
    pack_v(p, *g.gk, vl, buf, nthreads);
    vpack = buf;
    lap.to(phases[0].pack);
  }
  const int64_t ses = int64_t(dtype_size(p.s_dtype));
  const int64_t oes = int64_t(dtype_size(p.dtype));
  const int64_t nblocks = (p.m + g.mq - 1) / g.mq;
  // Fewer row blocks than threads (the seeds' M = 12): split the keys of each block into
  // parts run by different threads and merged as attention's split-KV does.
  const int64_t ktiles = (lp + g.kc - 1) / g.kc;
  const int64_t nsplit = nblocks < nthreads ? std::min<int64_t>((nthreads + nblocks - 1) / nblocks, ktiles) : 1;
  std::vector<float> split_o(static_cast<size_t>(nsplit > 1 ? nblocks * nsplit * g.mq * p.d : 0));
  std::vector<float> split_lse(static_cast<size_t>(nsplit > 1 ? nblocks * nsplit * g.mq : 0));
  auto block_out = [&](int64_t qb) {
    const int64_t i0 = qb * g.mq;
    return BlockOut{static_cast<char*>(p.o) + i0 * p.o_sm * oes, p.o_sm, p.dtype, std::min(g.mq, p.m - i0), p.d,
                    nullptr, g.mq};
  };
#pragma omp parallel for schedule(dynamic) num_threads(nthreads)
  for (int64_t it2 = 0; it2 < nblocks * nsplit; ++it2) {
    const int64_t qb = it2 / nsplit, part = it2 % nsplit;
    Phases& ph = phases[size_t(omp_get_thread_num())];
    const int64_t i0 = qb * g.mq, rows = std::min(g.mq, p.m - i0);
    // Scores tile: T[k][i] = S[i0 + i][j0 + k] (as float; the scale is folded into c).
    // Row by row: each score row is read in order and written down a column of T (in L1);
    // key by key, the first version, read the block's rows in step, one element of each
    // per key (M12 L32768, 1 thread, Zen 3 VM: 635 us of the 4.1 ms call).
    auto scores = [&](int64_t j0, int64_t kc, float* t, float*, Phases& phx, Lap& lapx) {
      const int64_t kv = std::max<int64_t>(0, std::min(kc, p.l - j0));  // keys before L
      // Rows [0, rdone) x keys [0, kdone) by the transposes below, the rest by the
      // element loop after them.
      int64_t rdone = 0, kdone = 0;
#if defined(__SSE2__)
      // Contiguous score rows, 4 valid rows at a time: 4 x 4 register transposes, one 16-byte
      // store per 4 queries of a key (the element-wise column writes took 206 of 1116 us:
      // M12 L32768 d256 fp16 three-pass, f16_12x2_noepi4, 1 thread, V pre-packed).
      if (p.s_sl == 1) {
        rdone = rows / 4 * 4;
        kdone = kv / 4 * 4;
        for (int64_t i = 0; i < rdone; i += 4) {
          const int64_t base = (i0 + i) * p.s_sm + j0;
          auto row4 = [&](int64_t q, int64_t k) {
            if (p.s_dtype == DType::i32)
              return _mm_cvtepi32_ps(_mm_loadu_si128(
                  reinterpret_cast<const __m128i*>(static_cast<const int32_t*>(p.s) + base + q * p.s_sm + k)));
            return _mm_loadu_ps(static_cast<const float*>(p.s) + base + q * p.s_sm + k);
          };
          for (int64_t k = 0; k < kdone; k += 4) {
            __m128 r0 = row4(0, k), r1 = row4(1, k), r2 = row4(2, k), r3 = row4(3, k);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps(t + k * g.mq + i, r0);
            _mm_storeu_ps(t + (k + 1) * g.mq + i, r1);
            _mm_storeu_ps(t + (k + 2) * g.mq + i, r2);
            _mm_storeu_ps(t + (k + 3) * g.mq + i, r3);
          }
        }
      }
#endif
      for (int64_t i = 0; i < g.mq; ++i) {
        float* col = t + i;
        if (i >= rows) {
          for (int64_t k = 0; k < kv; ++k) col[k * g.mq] = 0.0f;
          continue;
        }
        const int64_t k0 = i < rdone ? kdone : 0;
        const int64_t base = (i0 + i) * p.s_sm + j0 * p.s_sl;
        if (p.s_dtype == DType::i32) {
          const int32_t* src = static_cast<const int32_t*>(p.s) + base;
          for (int64_t k = k0; k < kv; ++k) col[k * g.mq] = float(src[k * p.s_sl]);
        } else {
          const float* src = static_cast<const float*>(p.s) + base;
          for (int64_t k = k0; k < kv; ++k) col[k * g.mq] = src[k * p.s_sl];
        }
      }
      for (int64_t k = kv; k < kc; ++k) std::fill(t + k * g.mq, t + (k + 1) * g.mq, kNegInf);
      lapx.to(phx.max_find);
      return false;
    };
    (void)ses;
    BlockOut out = block_out(qb);
    int64_t key_lo = 0, key_hi = p.l;
    if (nsplit > 1) {  // this part's key tiles (tile-aligned: no key is seen by two parts)
      key_lo = std::min(p.l, ktiles * part / nsplit * g.kc);
      key_hi = std::min(p.l, ktiles * (part + 1) / nsplit * g.kc);
      if (key_hi <= key_lo) key_lo = key_hi = 0;
      out = BlockOut{split_o.data() + it2 * g.mq * p.d, p.d, DType::f32, rows, p.d,
                     split_lse.data() + it2 * g.mq, g.mq};
    }
    auto pv = [&](int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) {
      if (rows_mode)
        rows_pv(g, *cfg.rows, kc, reinterpret_cast<const float*>(P), g.mq, g.mq,
                static_cast<const char*>(p.v), p.v_sl, p.dtype, j0, p.d, O, dvp);
      else
        stage2(g, kc, P, ldp, vpack, lp, j0, dvp, O);
    };
    softmax_block(g, strategy, p.exp2, c, p.scale, scores, key_lo, key_hi, pv, lp, dvp, out, timed, ph);
  }
  if (nsplit > 1) {
    Lap lap(timed);
    merge_splits(nblocks, nsplit, g.mq, p.d, split_o, split_lse, block_out, nthreads);
    lap.to(phases[0].normalize);
  }
  report(times, phases, g, strategy);
}

// ================================================================ gemm_chain
// E = (A B) C, per query block of mq rows and per key tile of kc columns of B / rows of C:
//   stage 1  T[kc][mq] = (B tile)^T x A^T panels   (keys are the kernel's rows, queries its
//            columns: mq is a multiple of NR only)
//   stage 2  E[mq][N] += T^T x C tile panels        (queries are the kernel's rows: T's
//            query columns are padded with zeros to a multiple of MR, mq2, and only the
//            padded rows of E are computed in vain: M = 256 with 12x2 is two blocks of 128
//            computing 132 rows each in stage 2, where blocks of lcm(MR, NR) = 96 made
//            both stages compute 288)
// The B tile of an unpacked call is copied, not re-blocked: row k of B's columns [j0, j0+kc)
// becomes row k of one wide panel ([K1][ldb] k-major), and stage 1 reads key block r at
// column r*MR of it with A stride ldb (ukernel.hpp allows any A stride): whole rows copied
// with vector moves instead of 48-byte pieces scattered into [K1][MR] blocks. Pre-packed B
// tiles are such blocks (chain_layout).
//
// B and C in one kernel's layout, K2 tile by K2 tile (ktiles of kc keys; the last one
// ends at k2p, padded with zeros): per tile t, B's columns [t*kc, t*kc+kc) as one
// [k1p][kc] panel in the kernel's A layout (btile bytes), and C's rows of the tile as
// np / NR panels of [tile length][NR] in its B layout (ctile bytes). A pre-packed
// object holds tile after tile, each its B panel then its C panels: one run of bytes
// that the call prefetches into L2 during the tile before (Prefetch below); the unpacked
// call packs each tile into its thread's buffers just before the tile's GEMMs (it stays
// in L2).
struct ChainLayout {
  int64_t k1p, k2p, np, kc, ktiles;
  int64_t xw;  // B tile: columns per packed panel (kc: one panel; MR: key blocks, see below)
  size_t btile, ctile;
  size_t b_offset(int64_t t) const { return size_t(t) * (btile + ctile); }
  size_t c_offset(int64_t t) const { return b_offset(t) + btile; }
};
// Pre-packed B tiles of the fp32 k-major kernels are [K1][MR] key blocks instead of one
// wide panel: stage 1 then reads each block as one contiguous run, not MR elements of rows
// kc apart. The pre-packed tiles come from memory at every call (16 MiB at K2 = 8192), where
// the contiguous blocks ran the fp32 12x2 kernel at 76-78 % of the paired peak instead of
// 69-73 (2 threads; docs/results/cpu-x86-2026-11-26.md, session 22). Not for fp16 (half
// the bytes: 68-72 % either way), nor for unpacked calls, whose per-call packing into
// blocks costs ~15 % more than the wide copy with no gain at the L2-resident tiles
// (68.8-70.4 -> 67.6-70.5 %).
ChainLayout chain_layout(const GemmUkernel& k, int64_t k1, int64_t k2, int64_t n, bool prepacked) {
  ChainLayout c;
  const size_t es = dtype_size(k.ab);
  c.kc = round_up(kChainKeyTileBytes / int64_t(es), key_align_of(k));
  c.k1p = round_up(k1, k.k_align);
  c.k2p = round_up(std::max<int64_t>(k2, 1), key_align_of(k));
  c.np = round_up(n, k.nr);
  c.ktiles = k2 == 0 ? 0 : (c.k2p + c.kc - 1) / c.kc;  // K2 = 0: nothing to pack (E = 0)
  c.xw = prepacked && k.a_layout == Layout::kmajor && es == 4 ? k.mr : c.kc;
  c.btile = size_t(c.k1p * c.kc) * es;
  c.ctile = size_t(c.kc * c.np) * es;
  return c;
}

// Packs K2 tile t of B and C (chain_layout) into btile / ctile; rowbuf holds
// max(kc, np) + 64 floats.
void pack_chain_tile(const core::GemmChainProblem& p, const GemmUkernel& k, const ChainLayout& lay,
                     int64_t t, char* btile, char* ctile, float* rowbuf) {
  const int64_t es = int64_t(dtype_size(p.dtype));
  const int64_t j0 = t * lay.kc;
  const int64_t kc = std::min(lay.kc, lay.k2p - j0);  // multiple of MR
  const int64_t cols = std::min(lay.kc, p.k2 - j0);   // >= 1: j0 < k2p - key_align < k2
  // B's columns [j0, j0+cols) as one panel; columns past them are zero.
  const Rows bt{at(p.b, j0, es), p.b_sk, p.dtype};
  pack_panels(bt, p.k1, cols, lay.k1p, lay.xw, 0, lay.k1p, btile, k.ab, k.a_layout, rowbuf);
  const Rows ct{at(p.c, j0 * p.c_sk, es), p.c_sk, p.dtype};
  pack_panels(ct, cols, p.n, kc, k.nr, 0, kc, ctile, k.ab, k.b_layout, rowbuf);
}

void gemm_chain(const core::GemmChainProblem& p, const PackedOperands::State* packed,
                PhaseTimes* times) {
  const CpuConfig cfg = select_kernels(p.dtype, packed ? packed->kernel->key : p.impl);
  Geometry g = make_geometry(cfg, p.m, true);
  const int nthreads = resolve_threads(p.threads);
  const ChainLayout lay = chain_layout(*g.gk, p.k1, p.k2, p.n, packed != nullptr);
  const int64_t k1p = lay.k1p, k2p = lay.k2p, np = lay.np;
  const bool timed = times != nullptr;
  std::vector<Phases> phases(static_cast<size_t>(nthreads));
  const int64_t oes0 = int64_t(dtype_size(p.dtype));
  if (p.k2 == 0) {
    // Empty inner dimension: E = 0. (The packed buffers are reused between calls and
    // hold old data, and B has no columns to pack into the one padded key block.)
    const std::vector<float> zero(static_cast<size_t>(p.n), 0.0f);
    for (int64_t i = 0; i < p.m; ++i)
      core::convert_row(zero.data(), p.n, static_cast<char*>(p.e) + i * p.e_sm * oes0, p.dtype);
    report(times, phases, g, Strategy::three_pass);
    if (times) times->strategy = "fused";
    return;
  }
  // Query blocks: as few as blocks of at most kChainQueryBlock rows allow, of equal size,
  // rounded up to NR (stage 1); stage 2 runs mq rows (its last row block on the tail kernel
  // where it fits, else on mq2 = mq rounded up to MR rows: T's and E's padding).
  g.kc = lay.kc;
  const int64_t nblocks0 = (p.m + kChainQueryBlock - 1) / kChainQueryBlock;
  g.mq = round_up((p.m + nblocks0 - 1) / nblocks0, g.nr);
  const int64_t mq2 = round_up(g.mq, g.mr);
  // K2 tiles outside the query blocks: a work item is (group of query blocks, range of K2
  // tiles). Per tile it packs that tile of B and of C (stage-2 panels, [kc][NR]) into its
  // thread's buffers, then runs every block of its group on them, so B and C are read from
  // memory once per group instead of once per block.
  const int64_t oes = int64_t(dtype_size(p.dtype));
  const int64_t nblocks = (p.m + g.mq - 1) / g.mq;
  // Groups: one per thread when each gets kChainMinGroupBlocks blocks or more, else fewer.
  const int64_t ngroups =
      std::clamp<int64_t>(nblocks / kChainMinGroupBlocks, 1,
                          std::max<int64_t>(1, std::min<int64_t>(nthreads, nblocks)));
  const int64_t per_group = (nblocks + ngroups - 1) / ngroups;
  // Split over K2 when the groups alone would leave threads idle or unevenly loaded
  // (M = 256 on 2 threads is one group of two blocks): every group then runs on nsplit
  // threads, each for 1/nsplit of the K2 tiles into its own partial E, summed at the end.
  // ngroups * nsplit is a multiple of the thread count.
  const int64_t ktiles = lay.ktiles;
  const int64_t nsplit = std::min<int64_t>(nthreads / gcd(ngroups, nthreads), ktiles);
  std::vector<float> partial(static_cast<size_t>(nsplit > 1 ? nblocks * nsplit * mq2 * np : 0));
  // The B tile in the kernel's A layout (see above): one panel of ldb columns, key block r
  // at column r MR, or (pre-packed fp32, chain_layout) blocks of k1p x MR, ldb = MR.
  const int64_t ldb = block_ld(g.pa, k1p, lay.xw);
  const int64_t xbs = lay.xw == g.mr ? k1p * g.mr : pack_index(g.pa, 0, g.mr, ldb);
  // An acc-f16 kernel whose stage 1 is one call per C tile (one k chunk of stage1, one
  // fp16 chunk of gemm_call) writes its fp16 tiles into P itself (stage1's f16_out).
  const bool f16_direct = g.gk->acc == DType::f16 && g.gk->ab == DType::f16 && k1p > 0 &&
                          k1p <= std::min(g.kb, round_up(kKeyTile, g.gk->k_align)) &&
                          (g.pa != Layout::kpairs || g.mr % 2 == 0);
#pragma omp parallel for schedule(dynamic) num_threads(nthreads)
  for (int64_t item = 0; item < ngroups * nsplit; ++item) {
    const int64_t grp = item / nsplit, split = item % nsplit;
    const int64_t qb0 = std::min(nblocks, grp * per_group), qb1 = std::min(nblocks, qb0 + per_group);
    const int64_t jt0 = ktiles * split / nsplit, jt1 = ktiles * (split + 1) / nsplit;
    Phases& ph = phases[size_t(omp_get_thread_num())];
    Lap lap(timed);
    const int64_t nb = qb1 - qb0;
    Arena& arena = thread_arena();
    arena.reset(static_cast<size_t>(nb * g.mq * k1p * g.es + nb * mq2 * np * 4 +
                                    g.kc * mq2 * (4 + g.es) + 4 * 64));
    char* apack = arena.take<char>(nb * g.mq * k1p * g.es);
    float* T = arena.take<float>(g.kc * mq2);
    char* P = arena.take<char>(g.kc * mq2 * g.es);
    float* Eown = nsplit > 1 ? nullptr : arena.take<float>(nb * mq2 * np);
    auto E = [&](int64_t qb) {
      return nsplit > 1 ? partial.data() + (qb * nsplit + split) * mq2 * np
                        : Eown + (qb - qb0) * mq2 * np;
    };
    // Stage 1 writes T's (or P's) first mq columns; the padding columns up to mq2 stay zero.
    std::fill(T, T + g.kc * mq2, 0.0f);
    if (f16_direct) std::memset(P, 0, size_t(g.kc * mq2 * g.es));
    std::vector<float> rowbuf(static_cast<size_t>(std::max({k1p, g.kc, np}) + 64));
    for (int64_t qb = qb0; qb < qb1; ++qb) {
      std::fill(E(qb), E(qb) + mq2 * np, 0.0f);
      const int64_t i0 = qb * g.mq;
      const Rows arows{at(p.a, i0 * p.a_sm, oes), p.a_sm, p.dtype};
      pack_transposed(arows, std::min(g.mq, p.m - i0), p.k1, k1p, g.nr, 0, g.mq / g.nr,
                      apack + (qb - qb0) * g.mq * k1p * g.es, g.gk->ab, g.pb, rowbuf.data());
    }
    char* const bbuf = packed ? nullptr : pack_slot(0, lay.btile);
    char* const cbuf = packed ? nullptr : pack_slot(1, lay.ctile);
    lap.to(ph.pack);
    for (int64_t t = jt0; t < jt1; ++t) {
      const int64_t kc = std::min(g.kc, k2p - t * g.kc);  // multiple of MR
      const char* btile = packed ? packed->data + lay.b_offset(t) : bbuf;
      const char* ctile = packed ? packed->data + lay.c_offset(t) : cbuf;
      if (!packed) {
        pack_chain_tile(p, *g.gk, lay, t, bbuf, cbuf, rowbuf.data());
        lap.to(ph.pack);
      }
      // A pre-packed call prefetches the next tile over this tile's micro-kernel calls.
      Prefetch pf;
      if (packed != nullptr && t + 1 < jt1) {
        // (chunk_for: ceil(k / kb) chunks of k)
        const int64_t calls = nb * (ceil_div(k1p, g.kb) * (g.mq / g.nr) * (kc / g.mr) +
                                    ceil_div(kc, g.kb) * (mq2 / g.mr) * (np / g.nr));
        pf.p = packed->data + lay.b_offset(t + 1);
        pf.end = pf.p + lay.btile + lay.ctile;
        pf.lines = ceil_div(int64_t(lay.btile + lay.ctile) / 64, calls);
      }
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        // Intermediate tile (A B)^T[kc][mq2], consumed at once by the second GEMM: T itself
        // for fp32 k-major kernels, the kernel's fp16 tiles straight into P (f16_direct),
        // else T converted into the kernel's dtype and layout (leading dimension ldp).
        const char* pt = reinterpret_cast<const char*>(T);
        const int64_t ldp = g.pa == Layout::rows ? g.kc : mq2;
        stage1(g, k1p, kc, btile, xbs, ldb, apack + (qb - qb0) * g.mq * k1p * g.es, T, mq2, nullptr,
               &pf, f16_direct ? reinterpret_cast<uint16_t*>(P) : nullptr, ldp);
        lap.to(ph.gemm);
        if (f16_direct) {
          pt = P;
        } else if (g.gk->ab != DType::f32 || g.pa != Layout::kmajor) {
          if (g.pa == Layout::kmajor) {
            for (int64_t k = 0; k < kc; ++k)
              store_row(T + k * mq2, mq2, P + k * mq2 * g.es, 1, g.gk->ab);
          } else {
            g.vec->pack(kc, mq2, T, mq2, P, ldp, g.gk->ab, g.pa);
          }
          pt = P;
          lap.to(ph.exp_pack);
        }
        stage2(g, kc, pt, ldp, ctile, kc, 0, np, E(qb), &pf);
        lap.to(ph.gemm);
      }
    }
    if (nsplit == 1)
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        const int64_t i0 = qb * g.mq;
        for (int64_t i = 0; i < std::min(g.mq, p.m - i0); ++i)
          core::convert_row(E(qb) + i * np, p.n,
                            static_cast<char*>(p.e) + (i0 + i) * p.e_sm * oes, p.dtype);
      }
    lap.to(ph.normalize);
  }
  if (nsplit > 1) {
    Lap lap(timed);
#pragma omp parallel for num_threads(nthreads)
    for (int64_t r = 0; r < p.m; ++r) {
      const int64_t qb = r / g.mq, i = r % g.mq;
      float* e0 = partial.data() + (qb * nsplit * mq2 + i) * np;
      for (int64_t sp = 1; sp < nsplit; ++sp) {
        const float* e = e0 + sp * mq2 * np;
        for (int64_t j = 0; j < p.n; ++j) e0[j] += e[j];
      }
      core::convert_row(e0, p.n, static_cast<char*>(p.e) + r * p.e_sm * oes, p.dtype);
    }
    lap.to(phases[0].normalize);
  }
  report(times, phases, g, Strategy::three_pass);
  if (times) times->strategy = "fused";
}

// ================================================================ pre-packed operands
std::shared_ptr<const PackedOperands::State> pack_softmax_v(const core::SoftmaxVProblem& p) {
  const GemmUkernel& k = *select_kernels(p.dtype, p.impl).gemm;
  const VLayout lay = v_layout(k, p.l, p.d);
  auto st = std::make_shared<PackedOperands::State>(PackedOperands::State::Op::softmax_v, p.dtype,
                                                    &k, p.l, p.d, 0, lay.bytes);
  pack_v(p, k, lay, st->data, resolve_threads(p.threads));
  return st;
}

std::shared_ptr<const PackedOperands::State> pack_gemm_chain(const core::GemmChainProblem& p) {
  const GemmUkernel& k = *select_kernels(p.dtype, p.impl).gemm;
  const ChainLayout lay = chain_layout(k, p.k1, p.k2, p.n, true);
  auto st = std::make_shared<PackedOperands::State>(PackedOperands::State::Op::gemm_chain, p.dtype,
                                                    &k, p.k1, p.k2, p.n,
                                                    size_t(lay.ktiles) * (lay.btile + lay.ctile));
  char* const base = st->data;
#pragma omp parallel num_threads(resolve_threads(p.threads))
  {
    std::vector<float> rowbuf(static_cast<size_t>(std::max(lay.kc, lay.np) + 64));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < lay.ktiles; ++t)
      pack_chain_tile(p, k, lay, t, base + lay.b_offset(t), base + lay.c_offset(t), rowbuf.data());
  }
  return st;
}

}  // namespace flashcore::cpu

namespace flashcore {

PackedOperands::State::State(Op op_, DType dtype_, const cpu::GemmUkernel* kernel_, int64_t d0,
                             int64_t d1, int64_t d2, size_t bytes_)
    : op(op_), dtype(dtype_), kernel(kernel_), dims{d0, d1, d2}, data(nullptr), bytes(bytes_) {
  // Whole cache lines (see pack_slot); at least one, so that data is never null.
  data = static_cast<char*>(std::aligned_alloc(64, size_t(cpu::round_up(int64_t(bytes) + 1, 64))));
  if (data == nullptr) throw std::bad_alloc();
}

PackedOperands::State::~State() { std::free(data); }

}  // namespace flashcore
