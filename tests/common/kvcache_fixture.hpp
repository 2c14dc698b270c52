// attention_with_kvcache's test fixture, shared by the CPU and the CUDA tests: a case (page
// size or contiguous, layout, shapes, lengths, appended keys, masks, variants), its inputs
// and caches built from every sequence's keys (pages in a random permutation, unused table
// entries far outside the cache, unused slots NaN), the fp64 reference over each sequence's
// keys laid out contiguously, and the checks of one call (out, lse, the caches after the
// append: the new keys at their slots and nothing else changed). An fp8 case (KvCase::fp8)
// keeps K and V as e4m3 in the cache with random dequantization factors, and the reference
// runs on the dequantized values.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {

namespace fc = flashcore;

struct KvCase {
  const char* name;
  DType dtype;
  int64_t page;   // 0: a contiguous cache
  bool hnd;
  int64_t b, sq, h, hkv, d;
  std::vector<int64_t> lens;  // cache_seqlens (before the append)
  int64_t s_new;              // appended keys (0: none)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  int threads = 2;
  Strategy strategy = Strategy::automatic;
  bool variants = false;  // softcap 5, ALiBi slopes [B, H], sinks [H]
  // NaN in K and V at the old keys that no query row sees (before every row's window): the
  // stale slots a sliding window leaves in a cache; they must not reach any row.
  bool stale_nan = false;
  // NaN in V at keys that some rows see and others do not (each sequence's newest key, which
  // only the last query row sees under the causal mask; with a window, also the first key of
  // row 0's window): the rows that see one are NaN, the others must not be.
  bool hidden_nan = false;
  // q and k of 0 or +-2^14 (exact 16-bit values): scaled scores near 2^29, whose softmax the
  // kernels must still give (computed again exactly where the key loop cannot).
  bool huge = false;
  // An e4m3 cache (k_cache, v_cache, k_new, v_new) under q's dtype: 1 with per-tensor
  // k_descale / v_descale, 2 with per-head [B, Hkv] factors as well.
  int fp8 = 0;
};

// Inputs, the cache built from them, and the reference over each sequence's keys.
struct KvFixture {
  const KvCase& c;
  int64_t rows = 0, slots = 0, max_pages = 0;  // cache rows per page (or S_max), pages (or B)
  int64_t out_pad = 3;  // elements past each output row in check() (CUDA: even, rows 4-byte aligned)
  std::vector<std::vector<int32_t>> pages;     // per sequence, its pages in order
  HostTensor q, k_all, v_all, k_new, v_new, k_cache, v_cache, seqlens, table, ref_out, ref_lse;
  HostTensor slopes, sinks;                     // the score variants' arrays (c.variants)
  mutable Tensor slopes_view, sinks_view;       // what params() points to
  DType kv;                                     // the cache's dtype (c.dtype, or e4m3)
  float kd = 1.0f, vd = 1.0f;                   // fp8: per-tensor factors
  HostTensor kdh, vdh;                          // fp8 == 2: per-head factors [B, Hkv]

  explicit KvFixture(const KvCase& cs, Rng& rng) : c(cs), kv(cs.fp8 ? DType::e4m3 : cs.dtype) {
    if (c.fp8) {
      kd = float(rng.uniform(0.25, 2.0));
      vd = float(rng.uniform(0.25, 2.0));
      if (c.fp8 == 2) {
        kdh = HostTensor(DType::f32, {c.b, c.hkv});
        vdh = HostTensor(DType::f32, {c.b, c.hkv});
        kdh.fill_uniform(rng, 0.5, 2);
        vdh.fill_uniform(rng, 0.5, 2);
      }
    }
    if (c.variants) {
      slopes = HostTensor(DType::f32, {c.b, c.h});
      sinks = HostTensor(DType::f32, {c.h});
      slopes.fill_uniform(rng, 0.01, 0.5);
      sinks.fill_uniform(rng, -1, 1);
    }
    const int64_t longest = *std::max_element(c.lens.begin(), c.lens.end()) + c.s_new;
    // Every sequence's keys, old and new: K_all [B, longest, Hkv, D].
    q = HostTensor(c.dtype, {c.b, c.sq, c.h, c.d});
    k_all = HostTensor(kv, {c.b, std::max<int64_t>(longest, 1), c.hkv, c.d});
    v_all = HostTensor(kv, {c.b, std::max<int64_t>(longest, 1), c.hkv, c.d});
    q.fill_uniform(rng, -3, 3);
    k_all.fill_uniform(rng, -3, 3);
    v_all.fill_uniform(rng, -1, 1);
    if (c.huge)
      for (HostTensor* t : {&q, &k_all})
        for (int64_t i = 0; i < t->numel(); ++i) {
          const int64_t r = rng.integer(0, 2);
          t->set(i, r == 0 ? 0.0 : r == 1 ? 0x1p14 : -0x1p14);
        }
    if (c.hidden_nan)
      for (int64_t b = 0; b < c.b; ++b) {
        const int64_t total = c.lens[size_t(b)] + c.s_new;
        std::vector<int64_t> keys{total - 1};
        if (c.window_left >= 0 && total - c.sq - c.window_left >= 0) keys.push_back(total - c.sq - c.window_left);
        for (int64_t s : keys)
          if (s >= 0)
            for (int64_t i = 0; i < c.hkv * c.d; ++i) v_all.set((b * v_all.shape()[1] + s) * c.hkv * c.d + i, std::nan(""));
      }
    if (c.stale_nan && c.window_left >= 0)  // row 0's window starts at total - Sq - left
      for (int64_t b = 0; b < c.b; ++b) {
        const int64_t total = c.lens[size_t(b)] + c.s_new;
        const int64_t hidden = std::min(c.lens[size_t(b)], total - c.sq - c.window_left);
        for (int64_t s = 0; s < hidden; ++s)
          for (int64_t i = 0; i < c.hkv * c.d; ++i) {
            k_all.set((b * k_all.shape()[1] + s) * c.hkv * c.d + i, std::nan(""));
            v_all.set((b * v_all.shape()[1] + s) * c.hkv * c.d + i, std::nan(""));
          }
      }
    if (c.page == 0) {
      rows = longest + rng.integer(0, 9);  // S_max
      slots = c.b;
    } else {
      rows = c.page;
      for (int64_t b = 0; b < c.b; ++b) {
        const int64_t need = (c.lens[size_t(b)] + c.s_new + c.page - 1) / c.page;
        max_pages = std::max(max_pages, need + rng.integer(0, 2));
        pages.emplace_back(size_t(need));
        slots += need;
      }
      slots += 3;  // pages no sequence uses
      std::vector<int32_t> perm(static_cast<size_t>(slots));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937_64(uint64_t(rng.integer(0, 1 << 30))));
      size_t next = 0;
      for (auto& ps : pages)
        for (int32_t& p : ps) p = perm[next++];
    }
    // The caches, NaN everywhere (stale slots), then each sequence's old keys.
    const std::vector<int64_t> shape = c.hnd ? std::vector<int64_t>{slots, c.hkv, rows, c.d}
                                             : std::vector<int64_t>{slots, rows, c.hkv, c.d};
    k_cache = HostTensor(kv, shape);
    v_cache = HostTensor(kv, shape);
    k_cache.poison();
    v_cache.poison();
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t s = 0; s < c.lens[size_t(b)]; ++s)
        for (int64_t hk = 0; hk < c.hkv; ++hk)
          for (int64_t e = 0; e < c.d; ++e) {
            const int64_t src = ((b * k_all.shape()[1] + s) * c.hkv + hk) * c.d + e;
            k_cache.set(cache_index(b, s, hk, e), k_all.get(src));
            v_cache.set(cache_index(b, s, hk, e), v_all.get(src));
          }
    if (c.s_new > 0) {
      k_new = HostTensor(kv, {c.b, c.s_new, c.hkv, c.d});
      v_new = HostTensor(kv, {c.b, c.s_new, c.hkv, c.d});
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t i = 0; i < c.s_new * c.hkv * c.d; ++i) {
          const int64_t src = (b * k_all.shape()[1] + c.lens[size_t(b)]) * c.hkv * c.d + i;
          k_new.set(b * c.s_new * c.hkv * c.d + i, k_all.get(src));
          v_new.set(b * c.s_new * c.hkv * c.d + i, v_all.get(src));
        }
    }
    seqlens = HostTensor(DType::i32, {c.b});
    for (int64_t b = 0; b < c.b; ++b) seqlens.set(b, double(c.lens[size_t(b)]));
    if (c.page > 0) {
      table = HostTensor(DType::i32, {c.b, max_pages});
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t i = 0; i < max_pages; ++i)  // unused entries: ids far outside the cache
          table.set(b * max_pages + i, i < int64_t(pages[size_t(b)].size()) ? pages[size_t(b)][size_t(i)]
                                                                             : (i % 2 ? -7 : 1 << 30));
    }
    reference();
  }

  // Logical index (in the tensor's own shape) of key s, kv head hk, element e of sequence b.
  int64_t cache_index(int64_t b, int64_t s, int64_t hk, int64_t e) const {
    const int64_t slot = c.page == 0 ? b : pages[size_t(b)][size_t(s / c.page)], row = c.page == 0 ? s : s % c.page;
    return c.hnd ? ((slot * c.hkv + hk) * rows + row) * c.d + e : ((slot * rows + row) * c.hkv + hk) * c.d + e;
  }

  // The call's options; seq >= 0: those of the reference over sequence seq alone (its row
  // of the ALiBi slopes as [1, H]).
  fc::AttentionParams params(int64_t seq = -1) const {
    fc::AttentionParams p;
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    if (c.variants) {
      p.softcap = 5.0f;
      slopes_view = slopes.view();
      if (seq >= 0) {
        slopes_view.shape[0] = 1;
        slopes_view.data = static_cast<float*>(slopes_view.data) + seq * c.h;
      }
      sinks_view = sinks.view();
      p.alibi_slopes = &slopes_view;
      p.sinks = &sinks_view;
    }
    if (c.fp8 && seq < 0) {  // (the reference runs on dequantized values)
      p.k_descale = kd;
      p.v_descale = vd;
      if (c.fp8 == 2) {
        p.k_descale_heads = static_cast<const float*>(kdh.view().data);
        p.v_descale_heads = static_cast<const float*>(vdh.view().data);
      }
    }
    return p;
  }

  // The real value of cache element (b, hk) of K (v = false) or V: stored times its factors.
  double dequant(double x, int64_t b, int64_t hk, bool v) const {
    if (!c.fp8) return x;
    const double head = c.fp8 == 2 ? (v ? vdh : kdh).get(b * c.hkv + hk) : 1.0;
    return x * (v ? vd : kd) * head;
  }

  // Sequence by sequence: its queries against its keys (old and new) in fp32 rows.
  void reference() {
    ref_out = HostTensor(DType::f32, {c.b, c.sq, c.h, c.d});
    ref_lse = HostTensor(DType::f32, {c.b, c.h, c.sq});
    const HostTensor qf = to_f32(q);
    for (int64_t b = 0; b < c.b; ++b) {
      const int64_t len = c.lens[size_t(b)] + c.s_new;
      HostTensor kb(DType::f32, {1, len, c.hkv, c.d}), vb(DType::f32, {1, len, c.hkv, c.d});
      for (int64_t i = 0; i < len * c.hkv * c.d; ++i) {
        const int64_t hk = i / c.d % c.hkv;
        kb.set(i, dequant(k_all.get(b * k_all.shape()[1] * c.hkv * c.d + i), b, hk, false));
        vb.set(i, dequant(v_all.get(b * k_all.shape()[1] * c.hkv * c.d + i), b, hk, true));
      }
      Tensor qv = qf.view(), ov = ref_out.view(), lv = ref_lse.view();
      qv.shape[0] = ov.shape[0] = lv.shape[0] = 1;
      qv.data = static_cast<float*>(qv.data) + b * c.sq * c.h * c.d;
      ov.data = static_cast<float*>(ov.data) + b * c.sq * c.h * c.d;
      lv.data = static_cast<float*>(lv.data) + b * c.h * c.sq;
      fc::AttentionParams p = params(b);
      p.lse = &lv;
      fc::reference::attention(qv, kb.view(), vb.view(), ov, p);
    }
  }

  // The call's cache options on the fixture's host tensors.
  fc::KvCacheOptions options() {
    fc::KvCacheOptions opt;
    if (c.page > 0) opt.block_table = table.ptr();
    if (c.s_new > 0) {
      opt.k_new = k_new.ptr();
      opt.v_new = v_new.ptr();
    }
    opt.layout = c.hnd ? fc::KvLayout::hnd : fc::KvLayout::nhd;
    return opt;
  }

  // Runs the call on a fresh copy of the caches (kc, vc), writing out and lse (p.lse is set
  // by the runner): the CPU call by default; the CUDA tests copy to the device and back.
  using Runner = std::function<void(KvFixture&, HostTensor& kc, HostTensor& vc, HostTensor& out, HostTensor& lse,
                                    fc::AttentionParams p)>;
  static void run_cpu(KvFixture& f, HostTensor& kc, HostTensor& vc, HostTensor& out, HostTensor& lse,
                      fc::AttentionParams p) {
    p.lse = lse.ptr();
    fc::attention_with_kvcache(f.q.view(), kc.view(), vc.view(), f.seqlens.view(), out.view(), f.options(), p);
  }

  // One call (poisoned, padded outputs; a fresh copy of the cache) and every property.
  void check(int threads, Strategy s, const Runner& run = run_cpu) {
    std::ostringstream tr;
    tr << "threads " << threads << ", strategy " << name(s);
    SCOPED_TRACE(tr.str());
    HostTensor kc(kv, k_cache.shape()), vc(kv, v_cache.shape());
    for (int64_t i = 0; i < kc.numel(); ++i) {
      kc.set(i, k_cache.get(i));
      vc.set(i, v_cache.get(i));
    }
    HostTensor out(c.dtype, {c.b, c.sq, c.h, c.d}, {}, out_pad), lse(DType::f32, {c.b, c.h, c.sq}, {}, 1);
    out.poison();
    lse.poison();
    fc::AttentionParams p = params();
    p.threads = threads;
    p.strategy = s;
    run(*this, kc, vc, out, lse, p);
    const double tol = tolerance(c.dtype, Exp2Mode::exact, k_all.shape()[1]);
    if (c.hidden_nan) {  // rows that see a NaN are NaN (out and lse), the others as usual
      EXPECT_TRUE(outputs_agree(out, ref_out, tol));
      EXPECT_TRUE(lse_agree(lse, ref_lse, tol));
    } else {
      EXPECT_TRUE(close(out, ref_out, tol));
      EXPECT_TRUE(lse_close(lse, ref_lse, tol));
    }
    EXPECT_TRUE(out.padding_untouched());
    EXPECT_TRUE(lse.padding_untouched());
    for (int64_t b = 0; b < c.b; ++b)  // cache_seqlens is read, never written
      EXPECT_EQ(seqlens.get(b), double(c.lens[size_t(b)]));
    // The caches: the new keys at their slots, every other element as it was (NaN too).
    std::vector<bool> written(static_cast<size_t>(kc.numel()), false);
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t i = 0; i < c.s_new; ++i)
        for (int64_t hk = 0; hk < c.hkv; ++hk)
          for (int64_t e = 0; e < c.d; ++e) {
            const int64_t at = cache_index(b, c.lens[size_t(b)] + i, hk, e), src = ((b * c.s_new + i) * c.hkv + hk) * c.d + e;
            written[size_t(at)] = true;
            const auto same = [](double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; };
            ASSERT_TRUE(same(kc.get(at), k_new.get(src))) << "k_cache: new key " << i << " of sequence " << b;
            ASSERT_TRUE(same(vc.get(at), v_new.get(src))) << "v_cache: new key " << i << " of sequence " << b;
          }
    for (int64_t i = 0; i < kc.numel(); ++i) {
      if (written[size_t(i)]) continue;
      const double k0 = k_cache.get(i), k1 = kc.get(i), v0 = v_cache.get(i), v1 = vc.get(i);
      ASSERT_TRUE((std::isnan(k0) && std::isnan(k1)) || k0 == k1) << "k_cache element " << i << " changed";
      ASSERT_TRUE((std::isnan(v0) && std::isnan(v1)) || v0 == v1) << "v_cache element " << i << " changed";
    }
  }
};

}  // namespace fctest
