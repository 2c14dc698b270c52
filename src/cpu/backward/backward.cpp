// The CPU backward of attention: FlashAttention-2's algorithm (Dao 2023, Algorithm 2) with
// the forward's GEMM micro-kernels (one kernel of gemm.inc, chosen by select_kernels).
//
// Work items: (batch, KV head, key range). An item owns the dK and dV rows of its key range
// (summed over the KV head's query heads in order) and, per query head, a fp32 dQ
// accumulator over the query rows that see the range. Per query head, key block j and
// query block i (T x T, T a multiple of the kernel's tile):
//   S   = Q_i K_j^T                       (GEMM: A = Q_i^T, B = K_j^T panels)
//   P   = exp2(c S - lse_i log2 e), 0 where masked        (c = scale log2 e)
//   dP  = dO_i V_j^T                      (GEMM: A = dO_i^T, B = V_j^T panels)
//   dS  = P (dP - D_i),   D_i = rowsum(dO_i O_i)
//   dV_j += P^T dO_i,  dK_j += dS^T Q_i   (GEMMs: A = P, dS as they are [query][key])
//   dQ_i += dS K_j                        (GEMM: A = dS^T, one transpose per tile)
// Where the kernel's vector ops have the backward's tile ops (AMX: bwd_probs, bwd_dscores),
// P and dS are written straight into the bf16 A operands as they are computed (P and dS
// transposed, dS as it is); elsewhere the portable loops run and `pack` / pack_operand
// convert afterwards (docs/results/cpu-backward-spr-2026-11-30.md).
// dQ and dK are scaled by `scale` when stored. When one (batch, KV head) is split over
// several key ranges (fewer of them than threads), each range's dQ goes to its own fp32
// partial copy and the copies are summed in range order afterwards: no atomics, and the
// sums run in the same order whatever thread runs an item. The number of ranges follows
// the thread count by default and the shape alone in deterministic mode.
#include "cpu/backward/backward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/exp2.hpp"
#include "core/threads.hpp"
#include "cpu/backward/bwd_ops.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace flashcore::cpu {
namespace {

// Query and key block: the multiple of the kernel's unit (lcm of MR, NR and its k step)
// nearest this; S, P, dP and dS tiles are T x T fp32 (144 KiB each at 192: in L2). Longer
// k runs for the dV, dK and dQ GEMMs (k = T) against 96: B1 H2 S2048 D128, 1 thread,
// shared dev VM (AVX512-BF16, no AMX), alternated runs: bf16 p50 171-179 -> 146-155 ms,
// fp32 218-222 -> 210-239 ms (noise-level). Causal tiles on the diagonal cost more at
// larger T (S512: 15 % more tile area than at 96).
constexpr int64_t kTargetTile = 192;
// Deterministic mode: a (batch, KV head) is split into key ranges until there are this many
// work items (or one range per key block), whatever the thread count.
constexpr int64_t kDeterministicItems = 16;
// The fp32 partial copies of dQ (split key ranges) take at most this many bytes: fewer
// ranges beyond it.
constexpr int64_t kPartialBudgetBytes = int64_t(256) << 20;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
int64_t lcm(int64_t a, int64_t b) {
  int64_t x = a, y = b;
  while (y != 0) x = std::exchange(y, x % y);
  return a / x * b;
}

// The micro-kernel and every padded size that follows from its tile.
struct Plan {
  const GemmUkernel* k;
  const VecOps* vec;  // the kernel's vector ops: P and dS into its operand layout
  int64_t mr, nr, es;
  Layout al, bl;
  DType ab;
  bool plain;        // fp32 k-major A: a row-major fp32 matrix [k][i] is an A operand as it is
  bool fused;        // the vector ops compute P and dS straight into the bf16 rows operands
  int64_t t;         // query block = key block
  int64_t dk, dvk;   // D, Dv rounded up to the kernel's k step (the k of S and of dP)
  int64_t dn, dvn;   // D, Dv rounded up to NR (the columns of dQ, dK and dV)
  int64_t w;         // staging row length: the largest of the four
};

Plan make_plan(const core::AttentionProblem& p) {
  const CpuConfig cfg = select_kernels(p.dtype, p.impl);
  const GemmUkernel* k = cfg.gemm;
  if (k->acc != DType::f32)
    throw Error(Status::unsupported, std::string("impl: kernel '") + k->key +
                                         "' sums in fp16; attention_backward needs a kernel with fp32 sums");
  Plan g;
  g.k = k;
  g.vec = cfg.vec;
  g.mr = k->mr;
  g.nr = k->nr;
  g.es = int64_t(dtype_size(k->ab));
  g.al = k->a_layout;
  g.bl = k->b_layout;
  g.ab = k->ab;
  g.plain = k->ab == DType::f32 && k->a_layout == Layout::kmajor;
  const int64_t unit = lcm(lcm(k->mr, k->nr), k->k_align);
  g.t = std::max<int64_t>(unit, (kTargetTile + unit / 2) / unit * unit);
  g.fused = cfg.vec->bwd_probs != nullptr && cfg.vec->bwd_dscores != nullptr && g.al == Layout::rows &&
            g.ab == DType::bf16 && g.t % 32 == 0;
  g.dk = round_up(p.d, k->k_align);
  g.dvk = round_up(p.dv, k->k_align);
  g.dn = round_up(p.d, k->nr);
  g.dvn = round_up(p.dv, k->nr);
  g.w = std::max({g.dk, g.dvk, g.dn, g.dvn});
  return g;
}

// The leading dimension of an A operand of kk x mm in layout l (ukernel.hpp).
int64_t a_ld(Layout l, int64_t kk, int64_t mm) { return l == Layout::rows ? kk : mm; }

// A packed A operand: blocks of MR rows i, block r at data + r * bs elements, its element
// (k, i) at pack_index(layout, k, i, ld) within (one wide panel: bs = pack_index(layout, 0,
// MR, ld); separate [k][MR] blocks: ld = MR, bs = k * MR). And a set of packed B panels
// (panel p, element (k, j) at data + p * kp * NR + pack_index(layout, k, j, NR) elements).
struct AOp { const char* data; int64_t ld, bs; };
struct BOp { const char* data; int64_t kp; };

// C[m][n] (row stride ldc) = (or +=) sum_{k < kc} A(k, i0 + i) B(k0 + k, p0 * NR + j), m and
// i0 multiples of MR, n of NR, kc of the kernel's k step. Panels outer: one B panel stays in
// L1 while the row blocks of A stream past it.
void gemm(const Plan& g, int64_t kc, int64_t m, int64_t n, const AOp& a, int64_t i0, const BOp& b, int64_t p0,
          int64_t k0, float* c, int64_t ldc, bool accumulate) {
  if (kc == 0) {  // Dv = 0: an empty sum
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  for (int64_t pn = 0; pn < n / g.nr; ++pn) {
    const char* bp = b.data + ((p0 + pn) * b.kp * g.nr + pack_index(g.bl, k0, 0, g.nr)) * g.es;
    for (int64_t r = 0; r < m / g.mr; ++r)
      g.k->fn(kc, a.data + (i0 / g.mr + r) * a.bs * g.es, a.ld, bp, c + r * g.mr * ldc + pn * g.nr, ldc,
              accumulate ? 1 : 0);
  }
}

// Panels of NR columns of the fp32 matrix src (element (k, j) = src[k * lds + j], or
// src[j * lds + k] when transposed), kk rows of k each, j < nn.
void pack_panels(const Plan& g, const float* src, int64_t lds, bool transposed, int64_t kk, int64_t nn, char* dst) {
  for (int64_t pn = 0; pn < nn / g.nr; ++pn) {
    char* d = dst + pn * kk * g.nr * g.es;
    if (transposed)
      bwd::pack_operand(src + pn * g.nr * lds, lds, true, kk, g.nr, d, g.nr, g.ab, g.bl);
    else  // element (k, j) at src[k * lds + j]: the vector ops' pack form
      g.vec->pack(kk, g.nr, src + pn * g.nr, lds, d, g.nr, g.ab, g.bl);
  }
}

// A wide fp32 panel [kk][mm] (row stride ld) as an A operand of plain kernels, or a
// packed T x T tile in the kernel's layout (leading dimension ld).
AOp wide(const Plan& g, const void* data, int64_t ld) {
  return AOp{static_cast<const char*>(data), ld, pack_index(g.al, 0, g.mr, ld)};
}

// Blocks of MR rows (i) of an A operand from a transposed fp32 source (element (k, i) at
// src[i * lds + k]), kk rows of k each, i < mm: each block one contiguous run, so that a
// micro-kernel call reads its A strip from consecutive lines (a wide panel of a whole head,
// 2048 queries, puts the strip's k rows 8 KiB apart, all in one L1 set).
AOp pack_blocks(const Plan& g, const float* src, int64_t lds, int64_t kk, int64_t mm, char* dst) {
  const int64_t ld = a_ld(g.al, kk, g.mr);
  if (g.al == Layout::rows) {  // row i of the block is source row i: a conversion
    for (int64_t i = 0; i < mm; ++i) g.vec->store_row(src + i * lds, kk, 1.0f, dst + i * kk * g.es, g.ab);
    return AOp{dst, ld, kk * g.mr};
  }
  for (int64_t r = 0; r < mm / g.mr; ++r)
    bwd::pack_operand(src + r * g.mr * lds, lds, true, kk, g.mr, dst + r * kk * g.mr * g.es, ld, g.ab, g.al);
  return AOp{dst, ld, kk * g.mr};
}

// Rows of one head sit H * D elements apart (4 KiB at H 16, D 128 in bf16): one page each,
// where the hardware prefetcher stops, so the row loops prefetch kAhead rows ahead by hand
// (without it the backward waited on these loads for ~14 % of its time at H 16, S 2048).
constexpr int64_t kAhead = 8;
void prefetch_row(const char* row, int64_t bytes, bool write = false) {
  for (int64_t o = 0; o < bytes; o += 64) {
    if (write)
      __builtin_prefetch(row + o, 1);
    else
      __builtin_prefetch(row + o);
  }
}

// Rows [r0, r1) of a row source (row r at base + r * stride elements of dt; rows >= valid
// are zero) as fp32 rows of w floats, zero past len.
void stage_rows(const char* base, int64_t stride, DType dt, int64_t r0, int64_t r1, int64_t valid, int64_t len,
                float* dst, int64_t w) {
  const int64_t es = int64_t(dtype_size(dt));
  const int64_t live = std::min(r1, valid);
  for (int64_t r = r0; r < std::min(live, r0 + kAhead); ++r) prefetch_row(base + r * stride * es, len * es);
  for (int64_t r = r0; r < r1; ++r) {
    if (r + kAhead < live) prefetch_row(base + (r + kAhead) * stride * es, len * es);
    float* d = dst + (r - r0) * w;
    const int64_t n = r < valid ? len : 0;
    if (n > 0) core::convert_row(base + r * stride * es, dt, n, d);
    std::fill(d + n, d + w, 0.0f);
  }
}

// Per-thread buffers, kept across calls (grow-only), each on whole cache lines.
struct alignas(64) Line { char bytes[64]; };
template <class T>
T* grow(std::vector<Line>& v, int64_t n) {
  const size_t lines = size_t((std::max<int64_t>(n, 1) * int64_t(sizeof(T)) + 63) / 64);
  if (v.size() < lines) v.resize(lines);
  return reinterpret_cast<T*>(v.data());
}
struct Scratch {
  std::vector<Line> rows, kb1, vb3, kb4, dk, dv;        // the key range
  std::vector<Line> qa, oa, qb, ob, dq, info, orow;     // one query head
  std::vector<Line> s, dp, pa, dsa, dsta, tlo, thi, dz;  // one tile
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// One work item: (batch b, KV head hk, key range `chunk` of `nchunks`).
class Item {
 public:
  Item(const core::AttentionBackwardProblem& bp, const Plan& g, int64_t b, int64_t hk, int64_t chunk,
       int64_t nchunks, float* partial)
      : bp_(bp), p_(bp.fwd), g_(g), hk_(hk), chunk_(chunk), partial_(partial), es_(int64_t(dtype_size(p_.dtype))) {
    const core::Sequence sq = core::sequence(p_, b);
    b_ = b;
    q_off_ = sq.q_off;
    k_off_ = sq.k_off;
    sq_ = sq.sq;
    sk_ = sq.sk;
    bb_ = sq.bb;
    mask_ = core::make_mask(p_.causal, p_.window_left, p_.window_right, sq_, sk_);
    const int64_t nkb = ceil_div(sk_, g.t);
    key0_ = std::min(sk_, nkb * chunk / nchunks * g.t);
    key1_ = std::min(sk_, nkb * (chunk + 1) / nchunks * g.t);
    rk_ = round_up(key1_ - key0_, g.t);
    nchunks_ = nchunks;
  }

  void run() {
    prepare_gemm(g_.k->isa);
    pack_range();
    for (int64_t h = hk_ * p_.group(); h < (hk_ + 1) * p_.group(); ++h) run_head(h);
    // dK and dV of the range (keys no query sees: zeros).
    for (int64_t j = key0_; j < key1_; ++j) {
      const int64_t row = k_off_ + j;
      if (j + kAhead < key1_) {
        prefetch_row(grad_row(bp_.dk, row + kAhead, hk_), p_.d * es_, true);
        prefetch_row(grad_row(bp_.dv, row + kAhead, hk_), p_.dv * es_, true);
      }
      g_.vec->store_row(dk_ + (j - key0_) * g_.dn, p_.d, p_.scale, grad_row(bp_.dk, row, hk_), p_.dtype);
      g_.vec->store_row(dv_ + (j - key0_) * g_.dvn, p_.dv, 1.0f, grad_row(bp_.dv, row, hk_), p_.dtype);
    }
  }

 private:
  char* grad_row(const core::GradOut& o, int64_t row, int64_t h) const {
    return static_cast<char*>(o.data) + (bb_ * o.sb + row * o.ss + h * o.sh) * es_;
  }
  const char* in_row(const void* base, int64_t sb, int64_t ss, int64_t sh, int64_t row, int64_t h) const {
    return static_cast<const char*>(base) + (bb_ * sb + row * ss + h * sh) * es_;
  }

  // K and V of the key range, in the three forms the tiles read; dK, dV accumulators zeroed.
  void pack_range() {
    Scratch& s = scratch();
    const int64_t n = rk_;
    float* rows = grow<float>(s.rows, n * g_.w);
    kb1_ = grow<char>(s.kb1, g_.dk * n * g_.es);
    vb3_ = grow<char>(s.vb3, g_.dvk * n * g_.es);
    kb4_ = grow<char>(s.kb4, n * g_.dn * g_.es);
    dk_ = grow<float>(s.dk, n * g_.dn);
    dv_ = grow<float>(s.dv, n * g_.dvn);
    std::fill(dk_, dk_ + n * g_.dn, 0.0f);
    std::fill(dv_, dv_ + n * g_.dvn, 0.0f);
    if (n == 0) return;
    const int64_t valid = key1_ - key0_;
    stage_rows(in_row(p_.k.data, p_.k.sb, p_.k.ss, p_.k.sh, k_off_ + key0_, hk_), p_.k.ss, p_.dtype, 0, n, valid,
               p_.d, rows, g_.w);
    pack_panels(g_, rows, g_.w, true, g_.dk, n, kb1_);    // B(k = d, j = key): S = Q K^T
    pack_panels(g_, rows, g_.w, false, n, g_.dn, kb4_);   // B(k = key, j = d): dQ = dS K
    stage_rows(in_row(p_.v.data, p_.v.sb, p_.v.ss, p_.v.sh, k_off_ + key0_, hk_), p_.v.ss, p_.dtype, 0, n, valid,
               p_.dv, rows, g_.w);
    pack_panels(g_, rows, g_.w, true, g_.dvk, n, vb3_);   // B(k = dv, j = key): dP = dO V^T
  }

  // The query rows of head h that see a key of the range: [r0_, r1_) padded to whole
  // blocks, with their key bounds (lo_, hi_), lse * log2(e) (sub_) and D (d_).
  void pack_head(int64_t h) {
    Scratch& s = scratch();
    const float* lse = p_.lse + bb_ * p_.lse_sb + h * p_.lse_sh + q_off_;
    int64_t qlo = sq_, qhi = 0;
    for (int64_t i = 0; i < sq_ && key1_ > key0_; ++i) {
      if (lse[i] == kNegInf) continue;  // fully masked: no gradient
      const int64_t lo = mask_.key_begin(i, sk_), hi = mask_.key_end(i, sk_);
      if (lo < hi && lo < key1_ && hi > key0_) {
        qlo = std::min(qlo, i);
        qhi = i + 1;
      }
    }
    r0_ = qhi > qlo ? qlo / g_.t * g_.t : 0;
    r1_ = qhi > qlo ? round_up(qhi, g_.t) : 0;
    const int64_t n = r1_ - r0_;
    int64_t* info = grow<int64_t>(s.info, 2 * n + n);
    lo_ = info;
    hi_ = info + n;
    float* f = reinterpret_cast<float*>(info + 2 * n);
    sub_ = f;
    d_ = grow<float>(s.orow, n + g_.w);
    float* orow = d_ + n;
    float* rows = grow<float>(s.rows, std::max(rk_, n) * g_.w);
    char* qa_buf = grow<char>(s.qa, g_.dk * n * g_.es);
    char* oa_buf = grow<char>(s.oa, g_.dvk * n * g_.es);
    qb_ = grow<char>(s.qb, n * g_.dn * g_.es);
    ob_ = grow<char>(s.ob, n * g_.dvn * g_.es);
    dq_ = grow<float>(s.dq, n * g_.dn);
    std::fill(dq_, dq_ + n * g_.dn, 0.0f);
    if (n == 0) return;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = r0_ + r;
      const bool live = i < sq_ && lse[i] != kNegInf;
      lo_[r] = live ? mask_.key_begin(i, sk_) : 0;
      hi_[r] = live ? mask_.key_end(i, sk_) : 0;
      sub_[r] = live ? lse[i] * core::kLog2e : 0.0f;
    }
    const int64_t valid = std::min(sq_, r1_) - r0_;
    stage_rows(in_row(p_.q.data, p_.q.sb, p_.q.ss, p_.q.sh, q_off_ + r0_, h), p_.q.ss, p_.dtype, 0, n, valid, p_.d,
               rows, g_.w);
    qa_ = pack_blocks(g_, rows, g_.w, g_.dk, n, qa_buf);  // A(k = d, i = query)
    pack_panels(g_, rows, g_.w, false, n, g_.dn, qb_);  // B(k = query, j = d): dK = dS^T Q
    stage_rows(in_row(bp_.dout.data, bp_.dout.sb, bp_.dout.ss, bp_.dout.sh, q_off_ + r0_, h), bp_.dout.ss, p_.dtype,
               0, n, valid, p_.dv, rows, g_.w);
    oa_ = pack_blocks(g_, rows, g_.w, g_.dvk, n, oa_buf);  // A(k = dv, i = query)
    pack_panels(g_, rows, g_.w, false, n, g_.dvn, ob_);  // B(k = query, j = dv): dV = P^T dO
    // D_i = dO_i . O_i in fp32 (padding rows: 0).
    auto o_row = [&](int64_t r) { return in_row(p_.o, p_.o_sb, p_.o_ss, p_.o_sh, q_off_ + r0_ + r, h); };
    for (int64_t r = 0; r < std::min(valid, kAhead); ++r) prefetch_row(o_row(r), p_.dv * es_);
    for (int64_t r = 0; r < n; ++r) {
      d_[r] = 0.0f;
      if (r >= valid || p_.dv == 0) continue;
      if (r + kAhead < valid) prefetch_row(o_row(r + kAhead), p_.dv * es_);
      core::convert_row(o_row(r), p_.dtype, p_.dv, orow);
      d_[r] = bwd::dot(rows + r * g_.w, orow, p_.dv);
    }
  }

  void run_head(int64_t h) {
    pack_head(h);
    slope_ = p_.slope(b_, h);
    for (int64_t kb = key0_; kb < key1_; kb += g_.t)
      for (int64_t qb = r0_; qb < r1_; qb += g_.t) tile(qb, kb);
    store_dq(h);
  }

  // dQ of head h: the item's rows of dq itself (one key range per KV head), else its
  // partial copy (zero-initialized by the caller).
  void store_dq(int64_t h) {
    const int64_t end = std::min(sq_, r1_);
    if (nchunks_ > 1) {
      const int64_t nh = p_.heads;
      float* base = partial_ + (chunk_ * (p_.cu_q ? 1 : p_.batch) + bb_) * bp_.rows_q * nh * p_.d;
      for (int64_t i = r0_; i < end; ++i)
        std::copy(dq_ + (i - r0_) * g_.dn, dq_ + (i - r0_) * g_.dn + p_.d, base + ((q_off_ + i) * nh + h) * p_.d);
      return;
    }
    for (int64_t i = 0; i < sq_; ++i) {
      if (i + kAhead < sq_) prefetch_row(grad_row(bp_.dq, q_off_ + i + kAhead, h), p_.d * es_, true);
      char* dst = grad_row(bp_.dq, q_off_ + i, h);
      if (i >= r0_ && i < end)
        g_.vec->store_row(dq_ + (i - r0_) * g_.dn, p_.d, p_.scale, dst, p_.dtype);
      else
        std::memset(dst, 0, size_t(p_.d * es_));  // rows that see no key of the sequence
    }
  }

  // The tile of query block [qb, qb + T) and key block [kb, kb + T), in sequence rows.
  void tile(int64_t qb, int64_t kb) {
    Scratch& s = scratch();
    const int64_t t = g_.t, qr = qb - r0_, kr = kb - key0_;
    int64_t* tlo = grow<int64_t>(s.tlo, t);
    int64_t* thi = grow<int64_t>(s.thi, t);
    bool any = false;
    for (int64_t i = 0; i < t; ++i) {
      tlo[i] = lo_[qr + i] - kb;
      thi[i] = hi_[qr + i] - kb;
      any = any || (std::max<int64_t>(tlo[i], 0) < std::min(thi[i], t));
    }
    if (!any) return;  // every entry masked: nothing flows through this tile
    float* S = grow<float>(s.s, t * t);
    float* dP = grow<float>(s.dp, t * t);
    const int64_t ld = a_ld(g_.al, t, t);
    // The A operands of the last three GEMMs: P and dS as A(k = query, i = key), dS^T as
    // A(k = key, i = query). Plain kernels read P and dS from the fp32 tiles themselves.
    const char* pa = reinterpret_cast<const char*>(S);
    const char* dsa = reinterpret_cast<const char*>(dP);
    char* pp = g_.plain ? nullptr : grow<char>(s.pa, t * t * g_.es);
    char* dd = g_.plain ? nullptr : grow<char>(s.dsa, t * t * g_.es);
    char* dst = grow<char>(s.dsta, t * t * g_.es);
    const bool fused = g_.fused && !mod_.active();  // the vector ops write them as they go
    gemm(g_, g_.dk, t, t, qa_, qr, BOp{kb1_, g_.dk}, kr / g_.nr, 0, S, t, false);
    float* dz = nullptr;  // softcap: dz/ds of each entry, into dS
    if (fused) {
      g_.vec->bwd_probs(t, t, S, t, p_.scale * core::kLog2e, sub_ + qr, tlo, thi, p_.exp2, pp, ld);
    } else if (mod_.active()) {
      bwd::ProbsMod pm{mod_, p_.scale, slope_, qb + sk_ - sq_ - kb, nullptr};
      if (mod_.softcap > 0.0f) dz = pm.dz = grow<float>(s.dz, t * t);
      bwd::probs_mod(S, t, t, t, sub_ + qr, tlo, thi, p_.exp2, pm);
    } else {
      bwd::probs(S, t, t, t, p_.scale * core::kLog2e, sub_ + qr, tlo, thi, p_.exp2);
    }
    gemm(g_, g_.dvk, t, t, oa_, qr, BOp{vb3_, g_.dvk}, kr / g_.nr, 0, dP, t, false);
    if (fused) {
      g_.vec->bwd_dscores(t, t, S, dP, t, d_ + qr, dd, ld, dst, ld);
      pa = pp;
      dsa = dd;
    } else {
      bwd::dscores(S, dP, t, t, t, d_ + qr, dz);
      if (!g_.plain) {  // element (k, i) of either is tile[k * t + i]: the vector ops' pack form
        g_.vec->pack(t, t, S, t, pp, ld, g_.ab, g_.al);
        g_.vec->pack(t, t, dP, t, dd, ld, g_.ab, g_.al);
        pa = pp;
        dsa = dd;
      }
      if (g_.al == Layout::rows) {  // row i of dS^T's A is row i of dS: a conversion
        for (int64_t i = 0; i < t; ++i) g_.vec->store_row(dP + i * t, t, 1.0f, dst + i * ld * g_.es, g_.ab);
      } else {
        bwd::pack_operand(dP, t, true, t, t, dst, ld, g_.ab, g_.al);
      }
    }
    const int64_t n = r1_ - r0_;
    gemm(g_, t, t, g_.dvn, wide(g_, pa, ld), 0, BOp{ob_, n}, 0, qr, dv_ + kr * g_.dvn, g_.dvn, true);
    gemm(g_, t, t, g_.dn, wide(g_, dsa, ld), 0, BOp{qb_, n}, 0, qr, dk_ + kr * g_.dn, g_.dn, true);
    gemm(g_, t, t, g_.dn, wide(g_, dst, ld), 0, BOp{kb4_, rk_}, 0, kr, dq_ + qr * g_.dn, g_.dn, true);
  }

  const core::AttentionBackwardProblem& bp_;
  const core::AttentionProblem& p_;
  const Plan& g_;
  int64_t hk_, chunk_, nchunks_ = 1;
  float* partial_;
  int64_t es_;
  int64_t q_off_ = 0, k_off_ = 0, sq_ = 0, sk_ = 0, bb_ = 0;
  core::BandMask mask_;
  const core::ScoreMod mod_ = p_.score_mod();
  int64_t b_ = 0;         // the batch entry (varlen: sequence)
  float slope_ = 0.0f;    // ALiBi: the current head's slope
  int64_t key0_ = 0, key1_ = 0, rk_ = 0;  // the key range and its padded length
  char *kb1_ = nullptr, *vb3_ = nullptr, *kb4_ = nullptr;
  float *dk_ = nullptr, *dv_ = nullptr;
  int64_t r0_ = 0, r1_ = 0;  // the current head's query rows (padded)
  int64_t *lo_ = nullptr, *hi_ = nullptr;
  float *sub_ = nullptr, *d_ = nullptr, *dq_ = nullptr;
  AOp qa_{}, oa_{};  // Q^T and dO^T of the head as A operands (blocks of MR queries)
  char *qb_ = nullptr, *ob_ = nullptr;
};

// dsinks_h = -sum over head h's rows (every batch entry or sequence) of exp(sink_h - lse_i) *
// D_i, D_i = dout_i . out_i in fp32, summed in fp64 in row order: one head per thread, so
// the bits follow the shape alone. Rows without keys (lse = -inf, no sink) add nothing.
void sink_grads(const core::AttentionBackwardProblem& bp, int nthreads) {
  const core::AttentionProblem& p = bp.fwd;
  const int64_t es = int64_t(dtype_size(p.dtype));
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> o(size_t(p.dv)), dout(size_t(p.dv));
#pragma omp for schedule(dynamic)
    for (int64_t h = 0; h < p.heads; ++h) {
      double acc = 0;
      for (int64_t b = 0; b < p.batch; ++b) {
        const core::Sequence seq = core::sequence(p, b);
        const float* lse = p.lse + seq.bb * p.lse_sb + h * p.lse_sh + seq.q_off;
        for (int64_t i = 0; i < seq.sq; ++i) {
          if (lse[i] == kNegInf || p.dv == 0) continue;  // (D_i = 0 without values)
          const int64_t row = seq.q_off + i;
          core::convert_row(static_cast<const char*>(p.o) + (seq.bb * p.o_sb + row * p.o_ss + h * p.o_sh) * es,
                            p.dtype, p.dv, o.data());
          core::convert_row(static_cast<const char*>(bp.dout.data) +
                                (seq.bb * bp.dout.sb + row * bp.dout.ss + h * bp.dout.sh) * es,
                            p.dtype, p.dv, dout.data());
          acc -= std::exp(double(p.sinks[h]) - double(lse[i])) * double(bwd::dot(dout.data(), o.data(), p.dv));
        }
      }
      bp.dsinks[h] = float(acc);
    }
  }
}

}  // namespace

void attention_backward(const core::AttentionBackwardProblem& bp) {
  const core::AttentionProblem& p = bp.fwd;
  const Plan g = make_plan(p);  // (an `impl` it refuses: before anything is written)
  const int64_t nb = p.cu_q ? 1 : p.batch;
  // Rows outside every varlen sequence are never reached by an item; with no query heads
  // there is nothing to sum.
  if (p.cu_q != nullptr || p.heads == 0) {
    core::zero_grad(bp.dq, p.dtype, nb, bp.rows_q, p.heads, p.d);
    core::zero_grad(bp.dk, p.dtype, nb, bp.rows_k, p.kv_heads, p.d);
    core::zero_grad(bp.dv, p.dtype, nb, bp.rows_k, p.kv_heads, p.dv);
  }
  const int nthreads = p.threads > 0 ? p.threads : std::min(omp_get_max_threads(), core::max_threads());
  if (bp.dsinks != nullptr) sink_grads(bp, nthreads);
  if (p.heads == 0 || p.batch == 0) return;
  const int64_t groups = p.batch * p.kv_heads;
  const int64_t target = bp.deterministic ? kDeterministicItems : nthreads;
  const int64_t dq_bytes = nb * bp.rows_q * p.heads * p.d * 4;
  int64_t nchunks = groups >= target ? 1 : std::min(ceil_div(std::max<int64_t>(p.sk, 1), g.t), ceil_div(target, groups));
  nchunks = std::max<int64_t>(1, std::min(nchunks, kPartialBudgetBytes / std::max<int64_t>(dq_bytes, 1)));
  std::vector<float> partial(size_t(nchunks > 1 ? nchunks * dq_bytes / 4 : 0), 0.0f);

  std::exception_ptr failure;
  std::mutex failure_lock;
#pragma omp parallel for schedule(dynamic) num_threads(nthreads)
  for (int64_t it = 0; it < groups * nchunks; ++it) {
    try {
      const int64_t grp = it / nchunks;
      Item(bp, g, grp / p.kv_heads, grp % p.kv_heads, it % nchunks, nchunks, partial.data()).run();
    } catch (...) {  // (bad_alloc) nothing may leave an OpenMP region: rethrown below
      std::lock_guard<std::mutex> lock(failure_lock);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  if (nchunks == 1) return;
  // dQ: the ranges' partial copies summed in range order.
  const int64_t per_chunk = dq_bytes / 4, es = int64_t(dtype_size(p.dtype));
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> acc(size_t(p.d));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < nb * bp.rows_q; ++r) {
      const int64_t b = r / bp.rows_q, s = r % bp.rows_q;
      for (int64_t h = 0; h < p.heads; ++h) {
        const float* src = partial.data() + (r * p.heads + h) * p.d;
        std::copy(src, src + p.d, acc.begin());
        for (int64_t c = 1; c < nchunks; ++c)
          for (int64_t e = 0; e < p.d; ++e) acc[size_t(e)] += src[c * per_chunk + e];
        g.vec->store_row(acc.data(), p.d, p.scale,
                          static_cast<char*>(bp.dq.data) + (b * bp.dq.sb + s * bp.dq.ss + h * bp.dq.sh) * es, p.dtype);
      }
    }
  }
}

}  // namespace flashcore::cpu
