"""attention_with_kvcache and merge_states from Python (numpy; torch and jax when present)
against the float64 reference in reference.py on the same keys laid out contiguously."""

import numpy as np
import pytest

import flashcore
import reference as ref
from conftest import TOL, np_dtype, randn


def build_cache(rng, k_seqs, v_seqs, lens, s_new, page, dt, hnd=False):
    """Caches holding each sequence's first lens[b] keys, room for s_new more, every other slot
    NaN: contiguous [B, S_max, Hkv, D] (page 0) or paged [pages, page, Hkv, D] with the
    sequences' pages in a random permutation and unused table entries -1; HND: dims 1, 2
    swapped. Returns (k_cache, v_cache, table, slot): slot(b, s) indexes key s of sequence b
    in the NHD order (k_cache.transpose(0, 2, 1, 3) for HND)."""
    b, hkv, d = len(lens), k_seqs[0].shape[1], k_seqs[0].shape[2]
    if page == 0:
        shape, table = (b, int(max(lens)) + s_new + 5, hkv, d), None
        slot = lambda i, s: (i, s)  # noqa: E731
    else:
        need = [-(-(int(n) + s_new) // page) for n in lens]
        perm = rng.permutation(sum(need) + 2).astype(np.int32)
        table = np.full((b, max(need) + 1), -1, np.int32)
        for i in range(b):
            table[i, :need[i]] = perm[sum(need[:i]):sum(need[:i + 1])]
        shape = (len(perm), page, hkv, d)
        slot = lambda i, s: (table[i, s // page], s % page)  # noqa: E731
    kc, vc = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    for i, n in enumerate(lens):
        for s in range(int(n)):
            kc[slot(i, s)], vc[slot(i, s)] = k_seqs[i][s], v_seqs[i][s]
    kc, vc = kc.astype(dt), vc.astype(dt)
    if hnd:
        kc, vc = kc.transpose(0, 2, 1, 3).copy(), vc.transpose(0, 2, 1, 3).copy()
    return kc, vc, table, slot


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("page", [0, 8, 16, 64, 256])
@pytest.mark.parametrize("causal,sq", [(False, 1), (True, 3)])
def test_kvcache_with_append_matches_reference(rng, dtype, page, causal, sq):
    dt = np_dtype(dtype)
    b, h, hkv, d, s_new = 3, 8, 1 if page in (8, 64) else 2, 64, sq
    lens = np.array([0, 1, int(rng.integers(2, 300))], np.int32)
    q = randn(rng, (b, sq, h, d), dt)
    k_all = [randn(rng, (int(n) + s_new, hkv, d), dt) for n in lens]
    v_all = [randn(rng, (int(n) + s_new, hkv, d), dt) for n in lens]
    k_new = np.stack([ks[n:] for ks, n in zip(k_all, lens)])
    v_new = np.stack([vs[n:] for vs, n in zip(v_all, lens)])
    hnd = page in (0, 16) and causal
    kc, vc, table, slot = build_cache(rng, k_all, v_all, lens, s_new, page, dt, hnd)
    out, lse = flashcore.attention_with_kvcache(
        q, kc, vc, lens, k_new=k_new, v_new=v_new, block_table=table, kv_layout="HND" if hnd else "NHD",
        causal=causal, return_lse=True, threads=2)
    assert out.dtype == dt and out.shape == (b, sq, h, d) and lse.shape == (b, h, sq)
    for i in range(b):
        o_ref, lse_ref = ref.attention(q[i:i + 1], k_all[i][None], v_all[i][None], causal=causal)
        assert ref.rel_err(out[i:i + 1], o_ref) <= TOL[dtype]
        assert np.allclose(lse[i], lse_ref[0], atol=2e-2, rtol=2e-2)
    nhd = kc.transpose(0, 2, 1, 3) if hnd else kc
    for i, n in enumerate(lens):  # the new keys at their slots
        for j in range(s_new):
            assert np.array_equal(nhd[slot(i, int(n) + j)], k_new[i, j])
    assert list(lens[:2]) == [0, 1]  # cache_seqlens is not updated


def test_kvcache_split_decode_and_window(rng):
    # B x Hkv = 1 below the threads: split over keys; with a window too.
    q = randn(rng, (1, 1, 8, 32), np.float32)
    k = randn(rng, (1, 900, 1, 32), np.float32)
    v = randn(rng, (1, 900, 1, 32), np.float32)
    lens = np.array([900], np.int32)
    kc, vc, table, _ = build_cache(rng, k, v, lens, 0, 16, np.float32)
    for window in [(-1, -1), (100, 0)]:
        out = flashcore.attention_with_kvcache(q, kc, vc, lens, block_table=table, window=window, threads=2)
        o_ref, _ = ref.attention(q, k, v, window=window)
        assert ref.rel_err(out, o_ref) <= 1e-5


def test_kvcache_score_variants(rng):
    # softcap, ALiBi slopes [B, H] (distances from each sequence's own length) and sinks,
    # speculative causal rows with an append, paged: against the reference sequence by sequence.
    b, sq, h, hkv, d = 3, 3, 4, 2, 32
    lens = np.array([40, 0, 17], np.int32)
    q = randn(rng, (b, sq, h, d), np.float32)
    k_all = [randn(rng, (int(n) + sq, hkv, d), np.float32) for n in lens]
    v_all = [randn(rng, (int(n) + sq, hkv, d), np.float32) for n in lens]
    k_new = np.stack([ks[n:] for ks, n in zip(k_all, lens)])
    v_new = np.stack([vs[n:] for vs, n in zip(v_all, lens)])
    kc, vc, table, _ = build_cache(rng, k_all, v_all, lens, sq, 16, np.float32)
    slopes = rng.uniform(0.01, 0.5, (b, h)).astype(np.float32)
    sinks = rng.uniform(-1, 1, h).astype(np.float32)
    out, lse = flashcore.attention_with_kvcache(
        q, kc, vc, lens, k_new=k_new, v_new=v_new, block_table=table, causal=True, return_lse=True, threads=2,
        softcap=5.0, alibi_slopes=slopes, sinks=sinks)
    for i in range(b):
        o_ref, lse_ref = ref.attention(q[i:i + 1], k_all[i][None], v_all[i][None], causal=True, softcap=5.0,
                                       alibi_slopes=slopes[i:i + 1], sinks=sinks)
        assert ref.rel_err(out[i:i + 1], o_ref) <= 1e-5
        assert np.allclose(lse[i], lse_ref[0], atol=1e-5, rtol=1e-5)


def test_kvcache_errors_name_the_argument(rng):
    q = randn(rng, (2, 1, 4, 16), np.float32)
    kc = randn(rng, (6, 8, 2, 16), np.float32)
    vc = randn(rng, (6, 8, 2, 16), np.float32)
    table = np.array([[0, 1], [2, 3]], np.int32)
    good = np.array([5, 9], np.int32)
    with pytest.raises(ValueError, match="cache_seqlens: entry 0 is -2"):
        flashcore.attention_with_kvcache(q, kc, vc, np.array([-2, 3], np.int32), block_table=table)
    with pytest.raises(ValueError, match="block_table: entry \\[1, 0\\] = 7 is not a page"):
        flashcore.attention_with_kvcache(q, kc, vc, good, block_table=np.array([[0, 1], [7, 3]], np.int32))
    with pytest.raises(ValueError, match="block_table: sequence 1"):
        flashcore.attention_with_kvcache(q, kc, vc, np.array([5, 17], np.int32), block_table=table)
    with pytest.raises(TypeError, match="cache_seqlens: dtype int64 is not supported"):
        flashcore.attention_with_kvcache(q, kc, vc, good.astype(np.int64), block_table=table)
    with pytest.raises(ValueError, match="kv_layout"):
        flashcore.attention_with_kvcache(q, kc, vc, good, block_table=table, kv_layout="NDH")
    kn = randn(rng, (2, 1, 2, 16), np.float32)
    before = kc.copy()
    with pytest.raises(ValueError, match="v_new"):
        flashcore.attention_with_kvcache(q, kc, vc, good, block_table=table, k_new=kn)
    with pytest.raises(ValueError, match="k_new: sequence 1"):  # contiguous: 16 + 1 keys in S_max 16
        flashcore.attention_with_kvcache(q, kc.reshape(2, 24, 2, 16)[:, :16], vc.reshape(2, 24, 2, 16)[:, :16],
                                         np.array([3, 16], np.int32), k_new=kn, v_new=kn)
    assert np.array_equal(kc, before)
    # check_cache: CPU arrays are always checked (True changes nothing); a non-bool is refused
    with pytest.raises(ValueError, match="block_table: sequence 1"):
        flashcore.attention_with_kvcache(q, kc, vc, np.array([5, 17], np.int32), block_table=table, check_cache=True)
    flashcore.attention_with_kvcache(q, kc, vc, good, block_table=table, check_cache=True)
    with pytest.raises(TypeError, match="check_cache: must be a bool"):
        flashcore.attention_with_kvcache(q, kc, vc, good, block_table=table, check_cache="yes")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_merge_states_of_split_attention(rng, dtype):
    dt = np_dtype(dtype)
    q = randn(rng, (2, 5, 4, 32), dt)
    k = randn(rng, (2, 100, 2, 32), dt)
    v = randn(rng, (2, 100, 2, 32), dt)
    cuts = sorted(int(c) for c in rng.integers(0, 101, 2))
    parts = [flashcore.attention(q, k[:, a:b], v[:, a:b], return_lse=True)
             for a, b in zip([0] + cuts, cuts + [100])]
    o_ref, lse_ref = ref.attention(q, k, v)
    out, lse = flashcore.merge_states(*parts[0], *parts[1])
    out, lse = flashcore.merge_states(out, lse, *parts[2])
    assert out.dtype == dt and lse.dtype == np.float32
    assert ref.rel_err(out, o_ref) <= TOL[dtype]
    on, ln = flashcore.merge_states_n(np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]))
    assert ref.rel_err(on, o_ref) <= TOL[dtype]
    assert np.allclose(ln, lse_ref, atol=1e-3, rtol=1e-3)
    # in place into the first part
    oa, la = parts[0]
    flashcore.merge_states_n([p[0] for p in parts], [p[1] for p in parts], out=oa, lse=la)
    assert np.array_equal(oa, on) and np.array_equal(la, ln)


def test_merge_states_hostile_and_errors(rng):
    oa = randn(rng, (1, 3, 2, 8), np.float32)
    ob = randn(rng, (1, 3, 2, 8), np.float32)
    la = np.array([[[-np.inf, 0.5, np.nan], [1.0, 2.0, 3.0]]], np.float32)
    lb = np.array([[[-np.inf, -np.inf, 0.0], [1.0, 2.0, 3.0]]], np.float32)
    oa[0, 0, 0] = np.nan  # a -inf part's out is not read
    ob[0, :2, 0] = np.nan
    out, lse = flashcore.merge_states(oa, la, ob, lb)
    assert (out[0, 0, 0] == 0).all() and lse[0, 0, 0] == -np.inf
    assert np.array_equal(out[0, 1, 0], oa[0, 1, 0]) and lse[0, 0, 1] == np.float32(0.5)
    assert np.isnan(out[0, 2, 0]).all() and np.isnan(lse[0, 0, 2])
    assert np.allclose(out[0, :, 1], (oa[0, :, 1] + ob[0, :, 1]) / 2, atol=1e-6)
    with pytest.raises(ValueError, match="out_b: dim 2"):
        flashcore.merge_states(oa, la, ob[:, :, :1], lb)
    with pytest.raises(ValueError, match="lse_parts: has 1 parts"):
        flashcore.merge_states_n([oa, ob], [la])
    buf = np.zeros(oa.size + 1, np.float32)
    a_view, shifted = buf[:-1].reshape(oa.shape), buf[1:].reshape(oa.shape)
    with pytest.raises(ValueError, match="out: overlaps out_a"):
        flashcore.merge_states(a_view, la, ob, lb, out=shifted)
    with pytest.raises(TypeError, match="out_parts"):
        flashcore.merge_states_n(oa, [la])


def test_torch_kvcache_and_merge(rng):
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 40, 2, 64, dtype=torch.bfloat16)
    v = torch.randn(2, 40, 2, 64, dtype=torch.bfloat16)
    # FlashInfer's layout: one tensor [pages, 2, page, Hkv, D], k and v views of it
    kv = torch.full((8, 2, 16, 2, 64), float("nan"), dtype=torch.bfloat16)
    table = torch.tensor([[5, 0, 7], [2, 6, 1]], dtype=torch.int32)
    for b in range(2):
        for s in range(39):
            kv[table[b, s // 16], 0, s % 16] = k[b, s]
            kv[table[b, s // 16], 1, s % 16] = v[b, s]
    lens = torch.tensor([39, 39], dtype=torch.int32)
    out, lse = flashcore.attention_with_kvcache(q, kv[:, 0], kv[:, 1], lens, k_new=k[:, 39:], v_new=v[:, 39:],
                                                block_table=table, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    f64 = lambda x: x.to(torch.float64).numpy()  # noqa: E731
    o_ref, _ = ref.attention(f64(q), f64(k), f64(v))
    assert ref.rel_err(f64(out), o_ref) <= TOL["bf16"]
    assert torch.equal(kv[int(table[0, 2]), 0, 7], k[0, 39])
    oa, la = flashcore.attention(q, k[:, :10], v[:, :10], return_lse=True)
    ob, lb = flashcore.attention(q, k[:, 10:], v[:, 10:], return_lse=True)
    om, _ = flashcore.merge_states(oa, la, ob, lb)
    assert ref.rel_err(f64(om), o_ref) <= TOL["bf16"]


def test_torch_kvcache_op_and_compile(rng):
    torch = pytest.importorskip("torch")
    fct = pytest.importorskip("flashcore.torch")
    q = torch.randn(2, 2, 8, 64)
    k = torch.randn(2, 50, 2, 64)
    v = torch.randn(2, 50, 2, 64)
    table = torch.tensor([[3, 0, 5, 1], [2, 6, 4, 7]], dtype=torch.int32)

    def cache():
        kc = torch.full((8, 16, 2, 64), float("nan"))
        vc = torch.full((8, 16, 2, 64), float("nan"))
        for b in range(2):
            for s in range(48):
                kc[table[b, s // 16], s % 16], vc[table[b, s // 16], s % 16] = k[b, s], v[b, s]
        return kc, vc

    lens = torch.tensor([48, 48], dtype=torch.int32)
    f64 = lambda x: x.to(torch.float64).numpy()  # noqa: E731
    o_ref, _ = ref.attention(f64(q), f64(k), f64(v), causal=True)
    step = lambda q, kc, vc: fct.attention_with_kvcache(q, kc, vc, lens, k_new=k[:, 48:], v_new=v[:, 48:],  # noqa: E731
                                                        block_table=table, causal=True)
    for f in (step, torch.compile(step, fullgraph=True)):
        kc, vc = cache()
        out = f(q, kc, vc)
        assert ref.rel_err(f64(out), o_ref) <= TOL["f32"]
        assert torch.equal(kc[int(table[1, 3]), 1], k[1, 49])  # the append, in place


def test_jax_merge(rng):
    jnp = pytest.importorskip("jax.numpy")
    oa, ob = (randn(rng, (1, 4, 2, 8), np.float32) for _ in range(2))
    la, lb = (randn(rng, (1, 2, 4), np.float32) for _ in range(2))
    out, lse = flashcore.merge_states(jnp.asarray(oa), jnp.asarray(la), jnp.asarray(ob), jnp.asarray(lb))
    want, wlse = flashcore.merge_states(oa, la, ob, lb)
    assert np.allclose(np.asarray(out), want) and np.allclose(np.asarray(lse), wlse)


def test_torch_cuda_merge(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not flashcore.built_with_cuda():
        pytest.skip("needs a CUDA GPU and a flashcore built with CUDA")
    q = torch.randn(2, 3, 8, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(2, 300, 2, 128, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(2, 300, 2, 128, dtype=torch.bfloat16, device="cuda")
    whole, whole_lse = flashcore.attention(q, k, v, return_lse=True)
    parts = [flashcore.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in ((0, 77), (77, 300))]
    out, lse = flashcore.merge_states(*parts[0], *parts[1])
    assert out.is_cuda and out.dtype == torch.bfloat16
    f64 = lambda x: x.to("cpu", torch.float64).numpy()  # noqa: E731
    assert ref.rel_err(f64(out), f64(whole)) <= TOL["bf16"]
    assert np.allclose(f64(lse), f64(whole_lse), atol=1e-3, rtol=1e-3)


def test_torch_cuda_kvcache(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not flashcore.built_with_cuda():
        pytest.skip("needs a CUDA GPU and a flashcore built with CUDA")
    b, h, hkv, d, page = 3, 8, 2, 128, 16
    lens = np.array([0, 37, 300], np.int32)
    k_all = [randn(rng, (int(n) + 1, hkv, d), np.float32) for n in lens]
    v_all = [randn(rng, (int(n) + 1, hkv, d), np.float32) for n in lens]
    q = randn(rng, (b, 1, h, d), np.float32)
    kc, vc, table, _ = build_cache(rng, k_all, v_all, lens, 1, page, np.float32)
    kn = np.stack([ks[n:] for ks, n in zip(k_all, lens)])
    vn = np.stack([vs[n:] for vs, n in zip(v_all, lens)])
    cu = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to("cuda")  # noqa: E731
    bf = lambda x: cu(x).to(torch.bfloat16)  # noqa: E731
    kc_d, vc_d = bf(np.nan_to_num(kc)), bf(np.nan_to_num(vc))
    out = flashcore.attention_with_kvcache(bf(q), kc_d, vc_d, cu(lens), k_new=bf(kn), v_new=bf(vn),
                                           block_table=cu(table), causal=True, check_cache=True)
    assert out.is_cuda and out.dtype == torch.bfloat16
    for i in range(b):
        o_ref, _ = ref.attention(q[i:i + 1], k_all[i][None], v_all[i][None], causal=True)
        assert ref.rel_err(out[i:i + 1].to("cpu", torch.float64).numpy(), o_ref) <= TOL["bf16"]
    bad = table.copy()
    bad[2, 0] = 10 ** 6
    with pytest.raises(ValueError, match="block_table"):
        flashcore.attention_with_kvcache(bf(q), kc_d, vc_d, cu(lens), block_table=cu(bad), check_cache=True)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("heads", [False, True])
def test_torch_fp8_cache(rng, heads, device):
    # An e4m3 cache under bf16 q: per-tensor factors, or per-head [B, Hkv] ones too (on the
    # cache's device); the new keys go in as e4m3; the reference runs on the dequantized values.
    torch = pytest.importorskip("torch")
    if device == "cuda" and (not torch.cuda.is_available() or not flashcore.built_with_cuda()):
        pytest.skip("needs a CUDA GPU and a flashcore built with CUDA")
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    b, sq, h, hkv, d, page = 2, 2, 8, 2, 64, 16
    lens = torch.tensor([37, 5], dtype=torch.int32)
    q = torch.randn(b, sq, h, d, generator=gen).to(torch.bfloat16)
    k = (torch.randn(b, 40, hkv, d, generator=gen) * 2).to(torch.float8_e4m3fn)
    v = torch.randn(b, 40, hkv, d, generator=gen).to(torch.float8_e4m3fn)
    kc = torch.full((8, page, hkv, d), float("nan")).to(torch.float8_e4m3fn)
    vc = kc.clone()
    table = torch.tensor([[5, 0, 7], [2, 6, 1]], dtype=torch.int32)
    for i in range(b):
        for s in range(int(lens[i])):
            kc[table[i, s // page], s % page] = k[i, s]
            vc[table[i, s // page], s % page] = v[i, s]
    kd, vd = 0.5, 1.75
    kdh = torch.rand(b, hkv, generator=gen) + 0.5 if heads else None
    vdh = torch.rand(b, hkv, generator=gen) + 0.5 if heads else None
    idx = torch.arange(b)[:, None], lens[:, None].long() + torch.arange(sq)[None, :]
    to = lambda x: x.to(device)  # noqa: E731
    kc_d, vc_d = to(kc), to(vc)
    out, lse = flashcore.attention_with_kvcache(
        to(q), kc_d, vc_d, to(lens), k_new=to(k[idx]), v_new=to(v[idx]), block_table=to(table), causal=True,
        return_lse=True, k_descale=to(kdh * kd) if heads else kd, v_descale=to(vdh * vd) if heads else vd)
    assert out.dtype == torch.bfloat16 and out.device.type == device
    out, lse, kc, vc = out.cpu(), lse.cpu(), kc_d.cpu(), vc_d.cpu()
    for i in range(b):
        n = int(lens[i]) + sq
        fk = kd * (kdh[i] if heads else torch.ones(hkv))
        fv = vd * (vdh[i] if heads else torch.ones(hkv))
        kf = (k[i, :n].to(torch.float64) * fk[:, None].double())[None].numpy()
        vf = (v[i, :n].to(torch.float64) * fv[:, None].double())[None].numpy()
        o_ref, lse_ref = ref.attention(q[i:i + 1].to(torch.float64).numpy(), kf, vf, causal=True)
        assert ref.rel_err(out[i:i + 1].to(torch.float64).numpy(), o_ref) <= TOL["bf16"]
        assert np.allclose(lse[i].numpy(), lse_ref[0], atol=2e-2, rtol=2e-2)
    assert torch.equal(kc[int(table[0, 2]), 38 % page].view(torch.uint8), k[0, 38].view(torch.uint8))
    # The torch op (torch.compile's path) with the same factors (no append: the cache as is).
    import flashcore.torch as ft
    lens2 = to(lens + sq)
    kw = dict(block_table=to(table), causal=True, k_descale=to(kdh * kd) if heads else kd,
              v_descale=to(vdh * vd) if heads else vd)
    q, kc, vc = to(q), to(kc), to(vc)
    assert torch.equal(ft.attention_with_kvcache(q, kc, vc, lens2, **kw),
                       flashcore.attention_with_kvcache(q, kc, vc, lens2, **kw))
    with pytest.raises((TypeError, ValueError), match="k_new"):
        flashcore.attention_with_kvcache(q, kc, vc, to(lens), k_new=to(k[idx]).to(torch.bfloat16), v_new=to(v[idx]),
                                         block_table=to(table))
    with pytest.raises(ValueError, match="q_descale"):
        flashcore.attention(q, q, q, q_descale=2.0)
