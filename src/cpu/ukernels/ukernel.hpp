// The CPU micro-kernel interface. The strategies in cpu/pipelines are written once
// against these kinds of kernel; an ISA adds kernels to gemm.inc / vecops.inc / rowops.inc.
//
// GEMM micro-kernel (seed 000's interface, with an A stride):
//   C[MR x NR] (=|+=) sum_{k < kc} A(k, i) * B(k, j)
//   A(k, i) at a[pack_index(a_layout, k, i, a_stride)]   (k-major by default: a[k * a_stride + i],
//                                                          a_stride >= MR, in elements)
//   B(k, j) at b[pack_index(b_layout, k, j, NR)]         (one packed panel, K x NR)
//   C(i, j) at c[i * ldc + j]        (row-major, fp32 unless acc says otherwise)
// The pipelines pad every operand to whole MR x NR tiles (zeros in A/B), so kernels have
// no tail code. kc may be any value >= 1 unless k_align says otherwise.
//
// Layouts (Layout below; each kernel's list entry names the one it wants for A and for B,
// and the single copy of each pipeline packs K, Q, V, P and gemm_chain's operands into it):
//   kmajor  element (k, i) at k * ld + i: one k step is one contiguous row (the fp32/fp16
//           FMA kernels broadcast A(k, i) and load B(k, 0..NR-1) as vectors).
//   kpairs  element (k, i) at (k / 2) * 2 * ld + 2 * i + k % 2: the two products of
//           consecutive k of one column sit together ("VNNI" order), as the bf16 dot
//           instructions (vdpbf16ps, tdpbf16ps's B tile) take them. k_align is even.
//   rows    element (k, i) at i * ld + k, ld >= kc: row-major rows of k (AMX's A tile:
//           16 rows of 64 bytes). A only.
//
// Score tiles are key-major: a block of Kc keys x Mq queries is stored as [Kc][Mq], which
// is exactly the A operand of the P V product (A(k=key, i=query)). The Q K^T product
// writes it directly as C = K_blk (A operand, k = head dim) x Q^T (B panels of queries).
#pragma once

#include <cstdint>

#include "flashcore/flashcore.hpp"

namespace flashcore::cpu {

enum class Isa : int { generic = 0, avx512f, avx512fp16, avx512bf16, amx_bf16, sve, avx2 };
const char* isa_name(Isa isa);

enum class Layout : int { kmajor = 0, kpairs, rows };

// Offset (in elements) of element (k, i) of an operand in layout `l` with leading
// dimension `ld` (k-major: elements per k row; kpairs: columns per k pair; rows: row length).
static inline int64_t pack_index(Layout l, int64_t k, int64_t i, int64_t ld) {
  switch (l) {
    case Layout::kpairs: return (k >> 1) * 2 * ld + 2 * i + (k & 1);
    case Layout::rows: return i * ld + k;
    default: return k * ld + i;
  }
}
const char* layout_name(Layout l);

using GemmFn = void (*)(int64_t kc, const void* a, int64_t a_stride, const void* b, void* c,
                        int64_t ldc, int accumulate);

// Per-thread state a kernel ISA needs (AMX: the tile palette in the thread's tile
// configuration). Run prepare_gemm(isa) on the calling thread before a run of calls of
// that ISA's kernels, with nothing in between that may change the state (other AMX code
// loading its own palette, TILERELEASE); the pipelines do it once per stage, not per call.
// A no-op for ISAs without such state. (dispatch.cpp)
void prepare_gemm(Isa isa);

struct GemmUkernel {
  const char* key;  // {ab}_{MR}x{NR}{_variant}_{isa}, NR in vectors for SIMD kernels
  Isa isa;
  DType ab;         // storage of A and B operands (packing converts into it)
  DType acc;        // C dtype (f32; f16 for the seeds' noepi kernels)
  int mr;           // rows of C
  int nr;           // columns of C, in elements
  int k_align;      // kc must be a multiple of this (packing pads with zeros)
  GemmFn fn;
  Layout a_layout;  // how A and B are packed (see above)
  Layout b_layout;
};

// A kernel's panel form (optional; gemm_panels.inc): C[i][j] = sum_k A(k, i) B(k, j) for
// rows i < rows (a multiple of 16) and the kernel's NR columns j, written (not added) as fp32
// at c[i * ldc + j]; A in layout `rows` (row i at a + i * as), B one packed panel in the
// kernel's B layout, kc <= max_k and a multiple of k_align. With mx not null,
// mx[j] = max(mx[j], max_i C[i][j]). The unit holds the whole B panel while the rows stream
// past it: AMX keeps kc <= 64 of B in four tiles, where the MR x NR kernel reloads B for
// every 32 rows (attention's stage 1 at head dim 64: 2 k steps per call).
using GemmPanelFn = void (*)(int64_t kc, const void* a, int64_t as, int64_t rows, const void* b, float* c,
                             int64_t ldc, float* mx);
struct GemmPanel {
  GemmFn kernel;  // the MR x NR kernel it belongs to
  GemmPanelFn fn;
  int max_k;
};

// Vector operations of the softmax stages, over key-major tiles t[k * ldt + i]
// (k < kc keys, i < mq queries, mq a multiple of the vector length).
struct VecOps {
  const char* key;
  Isa isa;
  // mx[i] = max(mx[i], max_k t[k][i])
  void (*col_max)(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx);
  // p[k][i] = exp2(c * t[k][i] - cm[i]) stored as `dst_type` at
  // dst[pack_index(dst_layout, k, i, ldd)] (the A operand of the P V kernel, in its layout);
  // sum[i] += sum_k p (of the value as stored). kpairs with an odd kc also writes the zero
  // partner of the last key.
  void (*exp2_pack)(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
                    void* dst, int64_t ldd, DType dst_type, Layout dst_layout, Exp2Mode mode,
                    float* sum);
  // exp2_pack without the exponential: t[k][i] itself stored as `dst_type` at
  // dst[pack_index(dst_layout, k, i, ldd)] (gemm_chain's intermediate tile as the second
  // GEMM's A operand); kpairs with an odd kc also writes the zero partner of the last key.
  void (*pack)(int64_t kc, int64_t mq, const float* t, int64_t ldt, void* dst, int64_t ldd,
               DType dst_type, Layout dst_layout);
  // rows of an fp32 [mq x n] block (row stride ld) scaled: o[i][j] *= alpha[i]
  void (*scale_rows)(int64_t mq, int64_t n, float* o, int64_t ld, const float* alpha);
  // An acc-f16 kernel's C tile into fp32: c[i * ldc + j] (accumulate: +=, else =)
  // tile[i * nr + j] (fp16 bits; i < mr, j < nr, nr a multiple of 16).
  void (*add_f16_tile)(int64_t mr, int64_t nr, const uint16_t* tile, float* c, int64_t ldc,
                       int accumulate);
  // An acc-f16 kernel's C tile (fp16 bits, tile[i * nr + j], i < mr, j < nr) stored as the
  // A operand of a GEMM with the tile's rows as its k: dst[pack_index(layout, i, j, ld)]
  // (kpairs: mr even). gemm_chain's intermediate when stage 1 is one call per C tile.
  void (*f16_tile_as)(int64_t mr, int64_t nr, const uint16_t* tile, uint16_t* dst, int64_t ld,
                      Layout layout);
  // A finished output row: dst[j] = row[j] * scale stored as dt (f32, f16 or bf16, round to
  // nearest even, as core::store_from_f32), j < n, any n >= 0.
  void (*store_row)(const float* row, int64_t n, float scale, void* dst, DType dt);
  // The backward's tiles (cpu/backward), row-major [query][key] fp32 (row stride ld), m
  // queries (a multiple of 32) x n keys (a multiple of 16), into bf16 A operands of an AMX
  // kernel (layout rows). Optional: null where the backward's portable loops and `pack` serve.
  // bwd_probs: s[i][j] = exp2(c * s[i][j] - sub[i]) for lo[i] <= j < hi[i], exactly 0 elsewhere
  // (in place), and the same values as bf16 at pt[j * ldp + i] (A(k = query, i = key)).
  void (*bwd_probs)(int64_t m, int64_t n, float* s, int64_t ld, float c, const float* sub, const int64_t* lo,
                    const int64_t* hi, Exp2Mode mode, void* pt, int64_t ldp);
  // bwd_dscores: dS[i][j] = p[i][j] (dp[i][j] - d[i]) as bf16, twice: at dst[j * ldt + i]
  // (A(k = query, i = key)) and at dsr[i * ldr + j] (A(k = key, i = query)).
  void (*bwd_dscores)(int64_t m, int64_t n, const float* p, const float* dp, int64_t ld, const float* d, void* dst,
                      int64_t ldt, void* dsr, int64_t ldr);
};

// Row operations of the small-query (decode) path: K and V rows are read in place from
// the caller's tensors (row stride in elements, fp32), never packed, so a call streams
// them from memory once. Queries sit in the lanes: mq is small (the query rows of one
// GQA group, <= a few vectors), and any mq >= 1 is allowed.
struct RowOps {
  const char* key;
  Isa isa;
  // t[k * ldt + i] = sum_{e < d} x[k * xs + e] * q[i * d + e]   (k < kc, i < mq)
  // (x: kc key rows; the queries given twice: q = [mq][d], y = q transposed,
  // y[e * mq + i] = q[i * d + e], so a kernel may put either axis in the lanes)
  void (*dot)(int64_t kc, int64_t d, const float* x, int64_t xs, const float* q,
              const float* y, int64_t mq, float* t, int64_t ldt);
  // o[i * ldo + j] += sum_{k < kc} p[k * ldp + i] * v[k * vs + j]   (i < mq, j < n)
  // (p: key-major probabilities; v: kc value rows)
  void (*axpy)(int64_t kc, int64_t mq, const float* p, int64_t ldp, const float* v, int64_t vs,
               int64_t n, float* o, int64_t ldo);
  // The same with 16-bit rows x / v (their bits; strides in elements): bf16, then IEEE fp16;
  // a null pair: the caller converts such rows to fp32 first.
  using Dot16 = void (*)(int64_t kc, int64_t d, const uint16_t* x, int64_t xs, const float* q, const float* y,
                         int64_t mq, float* t, int64_t ldt);
  using Axpy16 = void (*)(int64_t kc, int64_t mq, const float* p, int64_t ldp, const uint16_t* v, int64_t vs,
                          int64_t n, float* o, int64_t ldo);
  Dot16 dot_bf16;
  Axpy16 axpy_bf16;
  Dot16 dot_f16;
  Axpy16 axpy_f16;
  // The form for rows stored as dt, or null (fp32 rows: dot / axpy; others: converted).
  Dot16 dot16(DType dt) const { return dt == DType::bf16 ? dot_bf16 : dt == DType::f16 ? dot_f16 : nullptr; }
  Axpy16 axpy16(DType dt) const { return dt == DType::bf16 ? axpy_bf16 : dt == DType::f16 ? axpy_f16 : nullptr; }
};

// The kernel lists, expanded into declarations here and into tables in dispatch.
#define FC_GEMM_UKERNEL(key, isa, ab, acc, mr, nr, k_align, a_layout, b_layout) \
  void key(int64_t, const void*, int64_t, const void*, void*, int64_t, int);
#define FC_GEMM_PANEL(kernel, key, max_k) \
  void key(int64_t, const void*, int64_t, int64_t, const void*, float*, int64_t, float*);
#define FC_GEMM_C32(kernel, key) \
  void key(int64_t, const void*, int64_t, const void*, void*, int64_t, int);
#define FC_VECOPS(key, isa) \
  extern const VecOps key;
#define FC_ROWOPS(key, isa) \
  extern const RowOps key;
namespace ukernels {
#include "cpu/ukernels/gemm.inc"
#include "cpu/ukernels/gemm_panels.inc"
#include "cpu/ukernels/gemm_c32.inc"
#include "cpu/ukernels/vecops.inc"
#include "cpu/ukernels/rowops.inc"
#if defined(FC_BUILD_AMX)
void amx_configure_tiles();  // prepare_gemm(Isa::amx_bf16) (src/cpu/x86/gemm_bf16_amx.cpp)
#endif
}  // namespace ukernels
#undef FC_GEMM_UKERNEL
#undef FC_GEMM_PANEL
#undef FC_GEMM_C32
#undef FC_VECOPS
#undef FC_ROWOPS

}  // namespace flashcore::cpu
