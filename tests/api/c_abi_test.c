/* The C ABI, from C: a correct attention call against fc_attention_reference, its
 * backward against fc_attention_backward_reference, the other two operations, merge_states
 * of a split call and attention_with_kvcache over a paged cache against the whole call, bad inputs returning their status with fc_last_error() naming
 * the argument (and the output untouched), and null struct pointers. Exit code 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcore/flashcore.h"

static int failures = 0;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      ++failures;                                                \
    }                                                            \
  } while (0)

static fc_tensor tensor4(float* data, int64_t a, int64_t b, int64_t c, int64_t d) {
  fc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FC_F32;
  t.device = FC_CPU;
  t.rank = 4;
  t.shape[0] = a; t.shape[1] = b; t.shape[2] = c; t.shape[3] = d;
  t.strides[3] = 1; t.strides[2] = d; t.strides[1] = c * d; t.strides[0] = b * c * d;
  return t;
}

static fc_tensor tensor2(void* data, fc_dtype dt, int64_t m, int64_t n) {
  fc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  t.device = FC_CPU;
  t.rank = 2;
  t.shape[0] = m; t.shape[1] = n;
  t.strides[0] = n; t.strides[1] = 1;
  return t;
}

static void fill(float* x, size_t n, unsigned* state) {
  for (size_t i = 0; i < n; ++i) {
    *state = *state * 1664525u + 1013904223u;
    x[i] = (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  }
}

static void poison(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = NAN;
}

static double rel_err(const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!isfinite(out[i])) return INFINITY;
    num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
    den += (double)ref[i] * ref[i];
  }
  return sqrt(num / den);
}

/* The status and a message naming `needle`, output bytes unchanged. */
static void expect_fail(fc_status got, fc_status want, const char* needle, const float* out,
                        const float* copy, size_t n, const char* what) {
  CHECK(got == want, "%s: status %d, want %d (%s)", what, (int)got, (int)want, fc_last_error());
  CHECK(strstr(fc_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, fc_last_error(), needle);
  CHECK(memcmp(out, copy, n * sizeof(float)) == 0, "%s: output was written", what);
}

int main(void) {
  enum { B = 2, SQ = 9, SK = 13, H = 4, HKV = 2, D = 24 };
  const size_t nq = B * SQ * H * D, nk = B * SK * HKV * D;
  float* q = malloc(nq * sizeof(float));
  float* k = malloc(nk * sizeof(float));
  float* v = malloc(nk * sizeof(float));
  float* out = malloc(nq * sizeof(float));
  float* ref = malloc(nq * sizeof(float));
  float* copy = malloc(nq * sizeof(float));
  float lse[B * H * SQ], lse_ref[B * H * SQ];
  unsigned seed = 12345u;
  fill(q, nq, &seed);
  fill(k, nk, &seed);
  fill(v, nk, &seed);

  fc_tensor tq = tensor4(q, B, SQ, H, D), tk = tensor4(k, B, SK, HKV, D), tv = tensor4(v, B, SK, HKV, D);
  fc_tensor tout = tensor4(out, B, SQ, H, D), tref = tensor4(ref, B, SQ, H, D);
  fc_tensor tlse, tlse_ref;
  memset(&tlse, 0, sizeof tlse);
  tlse.data = lse; tlse.dtype = FC_F32; tlse.device = FC_CPU; tlse.rank = 3;
  tlse.shape[0] = B; tlse.shape[1] = H; tlse.shape[2] = SQ;
  tlse.strides[0] = H * SQ; tlse.strides[1] = SQ; tlse.strides[2] = 1;
  tlse_ref = tlse;
  tlse_ref.data = lse_ref;

  /* A correct call, causal with Sq < Sk, every strategy, against the reference. */
  fc_attention_params p, pref;
  fc_attention_params_init(&p);
  p.causal = 1;
  pref = p;
  pref.lse = &tlse_ref;
  CHECK(fc_attention_reference(&tq, &tk, &tv, &tref, &pref) == FC_OK, "%s", fc_last_error());
  for (int s = FC_AUTO; s <= FC_ONLINE; ++s) {
    poison(out, nq);
    poison(lse, B * H * SQ);
    p.strategy = (fc_strategy)s;
    p.lse = &tlse;
    CHECK(fc_attention(&tq, &tk, &tv, &tout, &p) == FC_OK, "strategy %d: %s", s, fc_last_error());
    CHECK(fc_last_error()[0] == '\0', "message after success: '%s'", fc_last_error());
    CHECK(rel_err(out, ref, nq) <= 1e-5, "strategy %d: rel_err %g", s, rel_err(out, ref, nq));
    CHECK(rel_err(lse, lse_ref, B * H * SQ) <= 1e-5, "strategy %d: lse rel_err %g", s,
          rel_err(lse, lse_ref, B * H * SQ));
  }
  /* params = NULL means the defaults (non-causal here). */
  CHECK(fc_attention(&tq, &tk, &tv, &tout, NULL) == FC_OK, "%s", fc_last_error());

  /* Bad inputs: status, message naming the argument, output untouched. */
  poison(out, nq);
  memcpy(copy, out, nq * sizeof(float));
  fc_attention_params_init(&p);
  fc_tensor bad = tq;
  bad.rank = 3;
  expect_fail(fc_attention(&bad, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "q: expected rank 4", out, copy, nq, "rank");
  bad = tk;
  bad.shape[2] = 3;
  fc_tensor bad_v = tv;
  bad_v.shape[2] = 3;
  expect_fail(fc_attention(&tq, &bad, &bad_v, &tout, &p), FC_INVALID_ARGUMENT, "k: kv heads", out, copy, nq, "gqa");
  bad = tq;
  bad.data = NULL;
  expect_fail(fc_attention(&bad, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "q: data is a null pointer", out, copy, nq, "null data");
  bad = tout;
  bad.data = q;
  expect_fail(fc_attention(&tq, &tk, &tv, &bad, &p), FC_INVALID_ARGUMENT, "out: overlaps q", out, copy, nq, "alias");
  {
    fc_tensor bq = tq, bk = tk, bv = tv, bo = tout;
    bq.dtype = bk.dtype = bv.dtype = bo.dtype = FC_I32;
    expect_fail(fc_attention(&bq, &bk, &bv, &bo, &p), FC_UNSUPPORTED, "q: dtype i32", out, copy, nq, "i32");
  }
  p.window_left = -3;
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.window_left", out, copy, nq, "window");
  fc_attention_params_init(&p);
  CHECK(p.q_descale == 1.0f && p.k_descale == 1.0f && p.v_descale == 1.0f, "init descales %g %g %g",
        p.q_descale, p.k_descale, p.v_descale);
  p.v_descale = 2.0f; /* fp8 inputs only */
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.v_descale", out, copy, nq, "descale");
  fc_attention_params_init(&p);
  CHECK(p.q_descale_heads == NULL && p.k_descale_heads == NULL && p.v_descale_heads == NULL, "init per-head descales");
  {
    static const float heads[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    p.q_descale_heads = heads; /* fp8 inputs only */
    expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.q_descale_heads", out, copy, nq,
                "per-head descale");
  }
  fc_attention_params_init(&p);
  p.scale = NAN;
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.scale", out, copy, nq, "scale");
  fc_attention_params_init(&p);
  p.strategy = (fc_strategy)17;
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.strategy", out, copy, nq, "strategy");
  fc_attention_params_init(&p);
  p.impl = "no_such_kernel";
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "impl", out, copy, nq, "impl");
  fc_attention_params_init(&p);
  bad = tlse;
  bad.dtype = FC_F16;
  p.lse = &bad;
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.lse", out, copy, nq, "lse dtype");
  fc_attention_params_init(&p);

  /* Null struct pointers name the argument too. */
  expect_fail(fc_attention(NULL, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "q", out, copy, nq, "null q");
  expect_fail(fc_attention(&tq, &tk, &tv, NULL, &p), FC_INVALID_ARGUMENT, "out", out, copy, nq, "null out");
  expect_fail(fc_attention_reference(&tq, NULL, &tv, &tout, &p), FC_INVALID_ARGUMENT, "k", out, copy, nq, "ref null k");
  fc_attention_params_init(NULL); /* must not crash */
  /* A struct filled by memset instead of fc_attention_params_init (window (0, 0) by its
   * zeros) is refused by name; so is threads far beyond the machine. */
  memset(&p, 0, sizeof p);
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params: not set up by fc_attention_params_init",
              out, copy, nq, "zero-filled params");
  fc_attention_params_init(&p);
  p.threads = 5000 * 1000;
  expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.threads", out, copy, nq, "threads");
  fc_attention_params_init(&p);

  /* softmax_v: row-major f32 scores, then errors. */
  {
    enum { M = 7, L = 11, DV = 5 };
    float s[M * L], vv[L * DV], o[M * DV], o_copy[M * DV];
    fill(s, M * L, &seed);
    fill(vv, L * DV, &seed);
    fc_tensor ts = tensor2(s, FC_F32, M, L), tvv = tensor2(vv, FC_F32, L, DV), to = tensor2(o, FC_F32, M, DV);
    poison(o, M * DV);
    CHECK(fc_softmax_v(&ts, &tvv, &to, 1.0f, FC_TWO_PASS, FC_EXP_EXACT, 1) == FC_OK, "%s", fc_last_error());
    /* Check one row by hand. */
    for (int i = 0; i < M; i += 3) {
      double mx = -INFINITY, sum = 0, acc[DV] = {0};
      for (int j = 0; j < L; ++j) mx = s[i * L + j] > mx ? s[i * L + j] : mx;
      for (int j = 0; j < L; ++j) {
        const double e = exp(s[i * L + j] - mx);
        sum += e;
        for (int d = 0; d < DV; ++d) acc[d] += e * vv[j * DV + d];
      }
      for (int d = 0; d < DV; ++d)
        CHECK(fabs(o[i * DV + d] - acc[d] / sum) < 1e-5, "softmax_v O(%d,%d) = %g, want %g", i, d, o[i * DV + d], acc[d] / sum);
    }
    memcpy(o_copy, o, sizeof o);
    expect_fail(fc_softmax_v(&ts, &tvv, &to, 1.0f, (fc_strategy)8, FC_EXP_EXACT, 1), FC_INVALID_ARGUMENT,
                "params.strategy", o, o_copy, M * DV, "softmax_v strategy");
    fc_tensor bs = ts;
    bs.dtype = FC_BF16;
    expect_fail(fc_softmax_v(&bs, &tvv, &to, 1.0f, FC_AUTO, FC_EXP_EXACT, 1), FC_UNSUPPORTED, "s:", o, o_copy,
                M * DV, "softmax_v s dtype");
    expect_fail(fc_softmax_v(&ts, NULL, &to, 1.0f, FC_AUTO, FC_EXP_EXACT, 1), FC_INVALID_ARGUMENT, "v", o, o_copy,
                M * DV, "softmax_v null v");
    /* Pre-packed V: the same answer as the unpacked call; then a mismatched L. */
    fc_packed* pv = NULL;
    CHECK(fc_pack_softmax_v(&tvv, NULL, 1, &pv) == FC_OK && pv != NULL, "%s", fc_last_error());
    CHECK(fc_packed_kernel(pv)[0] != '\0', "packed kernel key empty");
    float o2[M * DV];
    poison(o2, M * DV);
    fc_tensor to2 = tensor2(o2, FC_F32, M, DV);
    CHECK(fc_softmax_v_packed(&ts, pv, &to2, 1.0f, FC_TWO_PASS, FC_EXP_EXACT, 2) == FC_OK, "%s", fc_last_error());
    CHECK(rel_err(o2, o, M * DV) < 1e-5, "packed softmax_v differs from unpacked: %g", rel_err(o2, o, M * DV));
    fc_tensor short_s = tensor2(s, FC_F32, M, L - 1);
    expect_fail(fc_softmax_v_packed(&short_s, pv, &to, 1.0f, FC_AUTO, FC_EXP_EXACT, 1), FC_INVALID_ARGUMENT,
                "s: dim 1 (L)", o, o_copy, M * DV, "softmax_v packed L");
    expect_fail(fc_softmax_v_packed(&ts, NULL, &to, 1.0f, FC_AUTO, FC_EXP_EXACT, 1), FC_INVALID_ARGUMENT,
                "packed", o, o_copy, M * DV, "softmax_v null packed");
    fc_packed* untouched = pv;
    CHECK(fc_pack_softmax_v(&ts, "nope", 1, &untouched) == FC_INVALID_ARGUMENT && untouched == pv,
          "bad pack wrote *packed or passed: %s", fc_last_error());
    CHECK(fc_pack_softmax_v(&tvv, NULL, 1, NULL) == FC_INVALID_ARGUMENT && strstr(fc_last_error(), "packed"),
          "null packed out: %s", fc_last_error());
    fc_packed_free(pv);
    fc_packed_free(NULL);
  }

  /* gemm_chain: small case checked by hand, then errors. */
  {
    enum { M = 3, K1 = 4, K2 = 5, N = 6 };
    float a[M * K1], b[K1 * K2], c[K2 * N], e[M * N], e_copy[M * N];
    fill(a, M * K1, &seed);
    fill(b, K1 * K2, &seed);
    fill(c, K2 * N, &seed);
    fc_tensor ta = tensor2(a, FC_F32, M, K1), tb = tensor2(b, FC_F32, K1, K2), tc = tensor2(c, FC_F32, K2, N);
    fc_tensor te = tensor2(e, FC_F32, M, N);
    poison(e, M * N);
    CHECK(fc_gemm_chain(&ta, &tb, &tc, &te, 2) == FC_OK, "%s", fc_last_error());
    for (int i = 0; i < M; ++i)
      for (int n = 0; n < N; ++n) {
        double want = 0;
        for (int j = 0; j < K2; ++j) {
          double ab = 0;
          for (int kk = 0; kk < K1; ++kk) ab += (double)a[i * K1 + kk] * b[kk * K2 + j];
          want += ab * c[j * N + n];
        }
        CHECK(fabs(e[i * N + n] - want) < 1e-5 * (1 + fabs(want)), "gemm_chain E(%d,%d) = %g, want %g", i, n,
              e[i * N + n], want);
      }
    memcpy(e_copy, e, sizeof e);
    fc_tensor bb = tb;
    bb.shape[0] = 3;
    expect_fail(fc_gemm_chain(&ta, &bb, &tc, &te, 1), FC_INVALID_ARGUMENT, "b: dim 0 (K1)", e, e_copy, M * N,
                "gemm_chain K1");
    expect_fail(fc_gemm_chain(&ta, &tb, &tc, &te, -2), FC_INVALID_ARGUMENT, "params.threads", e, e_copy, M * N,
                "gemm_chain threads");
    expect_fail(fc_gemm_chain(NULL, &tb, &tc, &te, 1), FC_INVALID_ARGUMENT, "a", e, e_copy, M * N, "gemm_chain null a");
    /* Pre-packed B and C: the same answer twice (reused); then a softmax_v call refuses it. */
    fc_packed* pbc = NULL;
    CHECK(fc_pack_gemm_chain(&tb, &tc, NULL, 2, &pbc) == FC_OK, "%s", fc_last_error());
    for (int rep = 0; rep < 2; ++rep) {
      float e2[M * N];
      poison(e2, M * N);
      fc_tensor te2 = tensor2(e2, FC_F32, M, N);
      CHECK(fc_gemm_chain_packed(&ta, pbc, &te2, 1 + rep) == FC_OK, "%s", fc_last_error());
      CHECK(rel_err(e2, e, M * N) < 1e-6, "packed gemm_chain differs from unpacked: %g", rel_err(e2, e, M * N));
    }
    fc_tensor ta_short = tensor2(a, FC_F32, M, K1 - 1);
    expect_fail(fc_gemm_chain_packed(&ta_short, pbc, &te, 1), FC_INVALID_ARGUMENT, "a: dim 1 (K1)", e, e_copy,
                M * N, "gemm_chain packed K1");
    fc_tensor ts2 = tensor2(a, FC_F32, M, K2), to2 = tensor2(e, FC_F32, M, N);
    expect_fail(fc_softmax_v_packed(&ts2, pbc, &to2, 1.0f, FC_AUTO, FC_EXP_EXACT, 1), FC_INVALID_ARGUMENT,
                "packed: was packed for gemm_chain", e, e_copy, M * N, "softmax_v with gemm_chain's packed");
    fc_packed_free(pbc);
  }

  /* attention_backward: the gradients of a causal call against the fp64 reference (also in
   * deterministic mode), then a bad argument and a null one named, the gradients untouched. */
  {
    float* dout = malloc(nq * sizeof(float));
    float* grads = malloc((2 * nq + 4 * nk) * sizeof(float));
    float* dq = grads;
    float* dk = dq + nq;
    float* dv = dk + nk;
    float* dq_ref = dv + nk;
    float* dk_ref = dq_ref + nq;
    float* dv_ref = dk_ref + nk;
    fill(dout, nq, &seed);
    fc_attention_params_init(&p);
    p.causal = 1;
    p.lse = &tlse;
    CHECK(fc_attention(&tq, &tk, &tv, &tout, &p) == FC_OK, "%s", fc_last_error());
    p.lse = NULL;
    fc_tensor tdo = tensor4(dout, B, SQ, H, D);
    fc_tensor tdq = tensor4(dq, B, SQ, H, D), tdk = tensor4(dk, B, SK, HKV, D), tdv = tensor4(dv, B, SK, HKV, D);
    fc_tensor rdq = tensor4(dq_ref, B, SQ, H, D), rdk = tensor4(dk_ref, B, SK, HKV, D), rdv = tensor4(dv_ref, B, SK, HKV, D);
    CHECK(fc_attention_backward_reference(&tq, &tk, &tv, &tout, &tdo, &tlse, &rdq, &rdk, &rdv, &p) == FC_OK, "%s",
          fc_last_error());
    for (int det = 0; det <= 1; ++det) {
      poison(dq, nq + 2 * nk);
      p.deterministic = det;
      CHECK(fc_attention_backward(&tq, &tk, &tv, &tout, &tdo, &tlse, &tdq, &tdk, &tdv, &p) == FC_OK, "%s",
            fc_last_error());
      CHECK(rel_err(dq, dq_ref, nq) <= 1e-5, "dq rel_err %g", rel_err(dq, dq_ref, nq));
      CHECK(rel_err(dk, dk_ref, nk) <= 1e-5, "dk rel_err %g", rel_err(dk, dk_ref, nk));
      CHECK(rel_err(dv, dv_ref, nk) <= 1e-5, "dv rel_err %g", rel_err(dv, dv_ref, nk));
    }
    poison(dq, nq);
    memcpy(copy, dq, nq * sizeof(float));
    p.lse = &tlse;
    expect_fail(fc_attention_backward(&tq, &tk, &tv, &tout, &tdo, &tlse, &tdq, &tdk, &tdv, &p), FC_INVALID_ARGUMENT,
                "params.lse", dq, copy, nq, "backward with params.lse");
    p.lse = NULL;
    expect_fail(fc_attention_backward(&tq, &tk, &tv, &tout, NULL, &tlse, &tdq, &tdk, &tdv, &p), FC_INVALID_ARGUMENT,
                "dout", dq, copy, nq, "backward null dout");
    fc_tensor shared = tdk;
    shared.data = dq;
    expect_fail(fc_attention_backward(&tq, &tk, &tv, &tout, &tdo, &tlse, &tdq, &shared, &tdv, &p), FC_INVALID_ARGUMENT,
                "dk: overlaps dq", dq, copy, nq, "backward dk over dq");
    free(dout);
    free(grads);
  }

  /* merge_states: attention over keys [0, 6) and [6, SK), merged, against one call over all
   * keys (non-causal); then a call with no parts, refused by name. */
  {
    const size_t nl = B * H * SQ;
    float* parts = malloc(2 * nq * sizeof(float));
    float* lses = malloc(2 * nl * sizeof(float));
    float* whole = malloc(nq * sizeof(float));
    float* whole_lse = malloc(nl * sizeof(float));
    fc_tensor to[2], tl[2], tw = tensor4(whole, B, SQ, H, D), twl = tlse;
    twl.data = whole_lse;
    fc_attention_params pm;
    fc_attention_params_init(&pm);
    pm.lse = &twl;
    CHECK(fc_attention(&tq, &tk, &tv, &tw, &pm) == FC_OK, "%s", fc_last_error());
    for (int i = 0; i < 2; ++i) {
      fc_tensor ks = tk, vs = tv;
      ks.data = k + (i == 0 ? 0 : 6 * HKV * D);
      vs.data = v + (i == 0 ? 0 : 6 * HKV * D);
      ks.shape[1] = vs.shape[1] = i == 0 ? 6 : SK - 6;
      to[i] = tensor4(parts + i * nq, B, SQ, H, D);
      tl[i] = tlse;
      tl[i].data = lses + i * nl;
      pm.lse = &tl[i];
      CHECK(fc_attention(&tq, &ks, &vs, &to[i], &pm) == FC_OK, "%s", fc_last_error());
    }
    poison(out, nq);
    poison(lse, nl);
    CHECK(fc_merge_states(to, tl, 2, &tout, &tlse, 2, NULL) == FC_OK, "%s", fc_last_error());
    CHECK(rel_err(out, whole, nq) <= 1e-5, "merge_states rel_err %g", rel_err(out, whole, nq));
    CHECK(rel_err(lse, whole_lse, nl) <= 1e-5, "merge_states lse rel_err %g", rel_err(lse, whole_lse, nl));
    memcpy(copy, out, nq * sizeof(float));
    expect_fail(fc_merge_states(to, tl, 0, &tout, &tlse, 1, NULL), FC_INVALID_ARGUMENT, "n:", out, copy, nq,
                "merge_states with no parts");
    expect_fail(fc_merge_states(NULL, tl, 2, &tout, &tlse, 1, NULL), FC_INVALID_ARGUMENT, "out_parts", out, copy,
                nq, "merge_states null parts");
    free(parts); free(lses); free(whole); free(whole_lse);
  }

  /* attention_with_kvcache: the same keys in a paged cache (page 8, pages in reverse order),
   * the last key of each sequence appended by the call; against fc_attention; then a
   * block table entry outside the cache, refused by name with the cache untouched. */
  {
    enum { PAGE = 8, PAGES = 2 * ((SK + PAGE - 1) / PAGE), MAXP = (SK + PAGE - 1) / PAGE };
    const size_t np = (size_t)PAGES * PAGE * HKV * D;
    float* kc = calloc(np, sizeof(float));
    float* vc = calloc(np, sizeof(float));
    float* whole = malloc(nq * sizeof(float));
    int32_t lens[B], table[B * MAXP];
    for (int b = 0; b < B; ++b) {
      lens[b] = SK - 1;
      for (int i = 0; i < MAXP; ++i) table[b * MAXP + i] = PAGES - 1 - (b * MAXP + i);
      for (int s = 0; s < SK - 1; ++s) {
        const size_t dst = ((size_t)table[b * MAXP + s / PAGE] * PAGE + s % PAGE) * HKV * D;
        memcpy(kc + dst, k + ((size_t)b * SK + s) * HKV * D, HKV * D * sizeof(float));
        memcpy(vc + dst, v + ((size_t)b * SK + s) * HKV * D, HKV * D * sizeof(float));
      }
    }
    fc_tensor tw = tensor4(whole, B, SQ, H, D), tkc = tensor4(kc, PAGES, PAGE, HKV, D), tvc = tensor4(vc, PAGES, PAGE, HKV, D);
    fc_tensor tkn = tk, tvn = tv; /* the last key of each sequence: [B, 1, Hkv, D] views */
    tkn.data = k + (SK - 1) * HKV * D;
    tvn.data = v + (SK - 1) * HKV * D;
    tkn.shape[1] = tvn.shape[1] = 1;
    fc_tensor tlens, ttable;
    memset(&tlens, 0, sizeof tlens);
    tlens.data = lens; tlens.dtype = FC_I32; tlens.device = FC_CPU; tlens.rank = 1;
    tlens.shape[0] = B; tlens.strides[0] = 1;
    ttable = tensor2(table, FC_I32, B, MAXP);
    fc_attention_params pk;
    fc_attention_params_init(&pk);
    pk.causal = 1;
    CHECK(fc_attention(&tq, &tk, &tv, &tw, &pk) == FC_OK, "%s", fc_last_error());
    poison(out, nq);
    CHECK(fc_attention_with_kvcache(&tq, &tkc, &tvc, &tlens, &ttable, &tkn, &tvn, FC_KV_NHD, &tout, &pk) == FC_OK,
          "%s", fc_last_error());
    CHECK(rel_err(out, whole, nq) <= 1e-5, "attention_with_kvcache rel_err %g", rel_err(out, whole, nq));
    CHECK(lens[0] == SK - 1 && lens[1] == SK - 1, "cache_seqlens was written");
    float* kc_copy = malloc(np * sizeof(float));
    memcpy(kc_copy, kc, np * sizeof(float));
    memcpy(copy, out, nq * sizeof(float));
    table[MAXP] = PAGES; /* sequence 1's first page: outside the cache */
    expect_fail(fc_attention_with_kvcache(&tq, &tkc, &tvc, &tlens, &ttable, &tkn, &tvn, FC_KV_NHD, &tout, &pk),
                FC_INVALID_ARGUMENT, "block_table: entry [1, 0]", out, copy, nq, "kvcache bad page id");
    CHECK(memcmp(kc, kc_copy, np * sizeof(float)) == 0, "k_cache written by a refused call");
    expect_fail(fc_attention_with_kvcache(&tq, &tkc, &tvc, NULL, &ttable, NULL, NULL, FC_KV_NHD, &tout, &pk),
                FC_INVALID_ARGUMENT, "cache_seqlens", out, copy, nq, "kvcache null cache_seqlens");
    free(kc); free(vc); free(whole); free(kc_copy);
  }

  /* Score variants through the struct's fields: softcap, ALiBi slopes [B, H] and sinks [H]
   * (causal) against the reference, forward and backward with dsinks; a bad softcap named. */
  {
    float slopes[B * H], sinks[H], dsinks[H], dsinks_ref[H];
    for (int i = 0; i < B * H; ++i) slopes[i] = 0.05f * (float)(i + 1);
    for (int i = 0; i < H; ++i) sinks[i] = 0.5f * (float)i - 1.0f;
    fc_tensor tslopes, tsinks, tds, tds_ref;
    memset(&tslopes, 0, sizeof tslopes);
    tslopes.data = slopes; tslopes.dtype = FC_F32; tslopes.device = FC_CPU; tslopes.rank = 2;
    tslopes.shape[0] = B; tslopes.shape[1] = H; tslopes.strides[0] = H; tslopes.strides[1] = 1;
    tsinks = tslopes;
    tsinks.data = sinks; tsinks.rank = 1; tsinks.shape[0] = H; tsinks.strides[0] = 1;
    tds = tsinks;
    tds.data = dsinks;
    tds_ref = tsinks;
    tds_ref.data = dsinks_ref;
    fc_attention_params_init(&p);
    p.causal = 1;
    p.softcap = 2.0f;
    p.alibi_slopes = &tslopes;
    p.sinks = &tsinks;
    pref = p;
    pref.lse = &tlse_ref;
    CHECK(fc_attention_reference(&tq, &tk, &tv, &tref, &pref) == FC_OK, "%s", fc_last_error());
    poison(out, nq);
    p.lse = &tlse;
    CHECK(fc_attention(&tq, &tk, &tv, &tout, &p) == FC_OK, "variants: %s", fc_last_error());
    CHECK(rel_err(out, ref, nq) <= 1e-5, "variants: rel_err %g", rel_err(out, ref, nq));
    CHECK(rel_err(lse, lse_ref, B * H * SQ) <= 1e-5, "variants: lse rel_err %g", rel_err(lse, lse_ref, B * H * SQ));
    float* dq = malloc((2 * nq + 2 * nk) * sizeof(float));
    float* dk = dq + nq;
    float* dv = dk + nk;
    float* dout = dv + nk;
    fill(dout, nq, &seed);
    fc_tensor tdo = tensor4(dout, B, SQ, H, D);
    fc_tensor tdq = tensor4(dq, B, SQ, H, D), tdk = tensor4(dk, B, SK, HKV, D), tdv = tensor4(dv, B, SK, HKV, D);
    p.lse = NULL;
    p.dsinks = &tds_ref;
    CHECK(fc_attention_backward_reference(&tq, &tk, &tv, &tout, &tdo, &tlse, &tdq, &tdk, &tdv, &p) == FC_OK, "%s",
          fc_last_error());
    p.dsinks = &tds;
    poison(dsinks, H);
    CHECK(fc_attention_backward(&tq, &tk, &tv, &tout, &tdo, &tlse, &tdq, &tdk, &tdv, &p) == FC_OK, "%s",
          fc_last_error());
    CHECK(rel_err(dsinks, dsinks_ref, H) <= 1e-5, "dsinks rel_err %g", rel_err(dsinks, dsinks_ref, H));
    poison(out, nq);
    memcpy(copy, out, nq * sizeof(float));
    p.softcap = -1.0f;
    expect_fail(fc_attention(&tq, &tk, &tv, &tout, &p), FC_INVALID_ARGUMENT, "params.softcap", out, copy, nq, "softcap");
    free(dq);
  }

  CHECK(fc_version() != NULL && fc_version()[0] != '\0', "empty version");
  free(q); free(k); free(v); free(out); free(ref); free(copy);
  if (failures == 0) printf("c_abi: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
