"""torch tensors (CPU, and CUDA when present) and flashcore.torch; skipped without torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashcore  # noqa: E402
import reference as ref  # noqa: E402

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or not flashcore.built_with_cuda(),
    reason="needs a CUDA GPU and a flashcore built with CUDA")

TORCH_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}


def t64(x):
    return x.detach().to("cpu", torch.float64).numpy()


def make(shape, dtype, device="cpu", gen=None):
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(device=device, dtype=TORCH_DT[dtype])


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_cpu(dtype, causal):
    q, k, v = make((2, 9, 4, 32), dtype), make((2, 13, 2, 32), dtype), make((2, 13, 2, 24), dtype)
    out, lse = flashcore.attention(q, k, v, causal=causal, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == q.dtype and out.shape == (2, 9, 4, 24)
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 9)
    o_ref, _ = ref.attention(t64(q), t64(k), t64(v), causal=causal)
    assert ref.rel_err(t64(out), o_ref) <= TOL[dtype]


def test_torch_cpu_bhsd_views_and_out():
    q = make((1, 4, 17, 16), "f32").transpose(1, 2)   # BHSD memory, BSHD logical
    k = make((1, 2, 23, 16), "f32").transpose(1, 2)
    out = torch.full((1, 4, 17, 16), float("nan")).transpose(1, 2)
    assert flashcore.attention(q, k, k, out=out) is out
    assert ref.rel_err(t64(out), ref.attention(t64(q), t64(k), t64(k))[0]) <= 1e-5


def test_torch_numpy_mix_rejected():
    q = make((1, 5, 2, 8), "f32")
    with pytest.raises(TypeError, match="^k:"):
        flashcore.attention(q, q.numpy(), q)
    with pytest.raises(TypeError, match="^out:"):
        flashcore.attention(q, q, q, out=np.empty((1, 5, 2, 8), np.float32))


def test_torch_fast_path_errors_and_fallbacks():
    """Plain tensors go to _core as raw views (_api._torch_view), the rest through DLPack:
    both name the bad argument and leave out untouched."""
    q = make((1, 5, 2, 8), "f32")
    out = torch.full((1, 5, 2, 8), float("nan"))
    with pytest.raises(TypeError, match="^k: dtype f16 differs from q"):
        flashcore.attention(q, q.half(), q, out=out)
    with pytest.raises(ValueError, match="^out:"):
        flashcore.attention(q, q, q, out=out[:, :4])
    with pytest.raises(TypeError, match="^cu_seqlens_q: dtype int64"):  # int64: DLPack's path
        flashcore.attention(q, q, q, out=out, cu_seqlens_q=torch.tensor([0, 5]),
                            cu_seqlens_k=torch.tensor([0, 5], dtype=torch.int32))
    assert torch.isnan(out).all()
    # a subclass (nn.Parameter) goes through DLPack, a tensor that requires grad is read as
    # it is (forward only, as before the fast path): both give the plain tensors' result
    pk = torch.nn.Parameter(q.clone(), requires_grad=False)
    o = flashcore.attention(q, q, q)
    assert torch.equal(flashcore.attention(q, pk, pk), o)
    assert torch.equal(flashcore.attention(q.clone().requires_grad_(), q, q), o)


def test_torch_op_cpu_and_compile():
    import flashcore.torch as fct
    q, k, v = make((1, 11, 4, 16), "f32"), make((1, 11, 2, 16), "f32"), make((1, 11, 2, 16), "f32")
    out, lse = fct.attention(q, k, v, causal=True, return_lse=True)
    assert ref.rel_err(t64(out), ref.attention(t64(q), t64(k), t64(v), causal=True)[0]) <= 1e-5
    torch.library.opcheck(torch.ops.flashcore.attention.default,
                          (q, k, v, True, -1, -1, 0.0, "auto", "exact", None, None),
                          test_utils=("test_schema", "test_faketensor"))

    def f(q, k, v):
        return fct.attention(q, k, v, causal=True) * 2.0

    compiled = torch.compile(f, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), out * 2.0)
    s, vv = make((7, 9), "f32"), make((9, 5), "f32")
    assert ref.rel_err(t64(fct.softmax_v(s, vv)), ref.softmax_v(t64(s), t64(vv))) <= 1e-5
    a, b, c = make((6, 5), "f32"), make((5, 7), "f32"), make((7, 3), "f32")
    assert ref.rel_err(t64(fct.gemm_chain(a, b, c)), ref.gemm_chain(t64(a), t64(b), t64(c))) <= 1e-5


@needs_cuda
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 128, 128, 8, 8, 64), (1, 77, 300, 8, 2, 128), (3, 1, 513, 4, 1, 64),
                                   # decode and short queries with few KV heads: KV splits on Hopper
                                   (1, 1, 4096, 32, 8, 128), (2, 5, 3000, 16, 2, 64)])
def test_torch_cuda_vs_sdpa(dtype, causal, shape):
    import torch.nn.functional as F
    b, sq, sk, h, hkv, d = shape
    dev = "cuda"
    q, k, v = make((b, sq, h, d), dtype, dev), make((b, sk, hkv, d), dtype, dev), make((b, sk, hkv, d), dtype, dev)
    out = flashcore.attention(q, k, v, causal=causal)
    assert out.device == q.device and out.dtype == q.dtype
    # SDPA's is_causal is top-left aligned; ours is bottom-right (FlashAttention): give SDPA the mask.
    mask = None
    if causal:
        i = torch.arange(sq, device=dev)[:, None]
        j = torch.arange(sk, device=dev)[None, :]
        mask = j <= i + (sk - sq)
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    expect = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=h != hkv).transpose(1, 2)
    if causal and sq > sk:
        expect = torch.nan_to_num(expect)  # fully masked rows: ours are 0
    err = (out.float() - expect).norm() / expect.norm()
    assert err <= (2e-3 if dtype == "f32" else TOL[dtype]), float(err)


@needs_cuda
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("exp", ["exact", "fast"])
def test_torch_cuda_fp8_descales(per_head, causal, exp):
    """float8_e4m3fn q/k/v on Hopper with per-tensor or per-head ([B, Hkv] tensor) descales,
    GQA, against the float64 reference on the dequantized values (BENCH.md's fp8 bound);
    exp="fast": half of P's exponentials by their chord (the kernel's second form)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fp8 attention runs on compute capability 9.0 (Hopper)")
    b, sq, sk, h, hkv, d = 2, 100, 300, 8, 2, 128
    q8, k8, v8 = ((torch.randn(shape) * 8).to(torch.float8_e4m3fn).cuda()
                  for shape in ((b, sq, h, d), (b, sk, hkv, d), (b, sk, hkv, d)))
    if per_head:  # one factor per batch entry and KV head, spread 4x: logits' spread 1 to 10
        qd, kd, vd = (torch.rand(b, hkv, device="cuda") * 0.3 + 0.1 for _ in range(3))
    else:
        qd, kd, vd = 0.2, 0.15, 0.4

    def deq(x8, f, group):  # float64 values: code * factor (per head: the KV head's)
        x = x8.cpu().to(torch.float64)
        if isinstance(f, torch.Tensor):
            x = x * f.cpu().to(torch.float64).repeat_interleave(group, dim=1)[:, None, :, None]
        else:
            x = x * f
        return x.numpy()

    try:
        out = flashcore.attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd, exp=exp)
    except (NotImplementedError, TypeError) as e:  # a build without e4m3 kernels: TypeError (about the dtype)
        if isinstance(e, TypeError) and "in this build" not in str(e):
            raise
        pytest.skip(f"CUDA backend: {e}")
    assert out.dtype == torch.bfloat16 and out.shape == (b, sq, h, d)
    o_ref, _ = ref.attention(deq(q8, qd, h // hkv), deq(k8, kd, 1), deq(v8, vd, 1), causal=causal)
    assert ref.rel_err(t64(out), o_ref) <= 6e-2


@needs_cuda
def test_torch_cuda_fp8_varlen_decode():
    """float8_e4m3fn varlen batches of decode rows and short prefixes, 32 query heads on 8
    KV heads (packed per KV head, the key range split for the long sequence), with the
    descales, against the float64 reference on the dequantized values."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fp8 attention runs on compute capability 9.0 (Hopper)")
    cu_q = torch.tensor([0, 1, 2, 5, 6], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 700, 701, 4000, 4100], dtype=torch.int32, device="cuda")
    q8, k8, v8 = ((torch.randn(shape) * 8).to(torch.float8_e4m3fn).cuda()
                  for shape in ((1, 6, 32, 128), (1, 4100, 8, 128), (1, 4100, 8, 128)))
    qd, kd, vd = 0.05, 0.04, 0.3
    try:
        out = flashcore.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd,
                                  cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    except (NotImplementedError, TypeError) as e:  # a build without e4m3 kernels
        if isinstance(e, TypeError) and "in this build" not in str(e):
            raise
        pytest.skip(f"CUDA backend: {e}")
    deq = [(x.cpu().to(torch.float64) * f).numpy() for x, f in ((q8, qd), (k8, kd), (v8, vd))]
    o_ref, _ = ref.attention_varlen(*deq, cu_q.cpu().numpy(), cu_k.cpu().numpy())
    assert ref.rel_err(t64(out), o_ref) <= 6e-2


@needs_cuda
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_torch_cuda_lse_window_strides(dtype):
    """lse, a local window with Sq != Sk and BHSD-strided inputs on the GPU, against the
    float64 reference."""
    b, h, hkv, sq, sk, d = 2, 4, 2, 40, 57, 64
    q = make((b, h, sq, d), dtype, "cuda").transpose(1, 2)
    k = make((b, hkv, sk, d), dtype, "cuda").transpose(1, 2)
    v = make((b, hkv, sk, d), dtype, "cuda").transpose(1, 2)
    try:
        out, lse = flashcore.attention(q, k, v, window=(9, 3), return_lse=True)
    except NotImplementedError as e:
        pytest.skip(f"CUDA backend: {e}")
    o_ref, lse_ref = ref.attention(t64(q), t64(k), t64(v), window=(9, 3))
    assert ref.rel_err(t64(out), o_ref) <= TOL[dtype]
    finite = np.isfinite(lse_ref)
    got = t64(lse)
    assert np.array_equal(np.isfinite(got), finite)
    assert np.abs(got[finite] - lse_ref[finite]).max() <= 2e-2


@needs_cuda
def test_torch_cuda_varlen():
    cu_q = torch.tensor([0, 10, 25, 41], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 20, 20, 53], dtype=torch.int32, device="cuda")
    q = make((1, 41, 4, 64), "f16", "cuda")
    k = make((1, 53, 2, 64), "f16", "cuda")
    v = make((1, 53, 2, 64), "f16", "cuda")
    try:
        out = flashcore.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    except NotImplementedError as e:
        pytest.skip(f"CUDA backend: {e}")
    o_ref, _ = ref.attention_varlen(t64(q), t64(k), t64(v), cu_q.cpu().numpy(), cu_k.cpu().numpy(), causal=True)
    assert ref.rel_err(t64(out), o_ref) <= 1e-2


@needs_cuda
def test_torch_cuda_varlen_graph():
    """Varlen with max_seqlen_q/k under CUDA-graph capture (no host copy of cu_seqlens):
    decode rows with few KV heads, one sequence longer than the rest, one with one key."""
    import flashcore.torch as fct
    cu_q = torch.tensor([0, 1, 2, 3, 7], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 900, 901, 3000, 3100], dtype=torch.int32, device="cuda")
    q = make((1, 7, 32, 128), "f16", "cuda")
    k = make((1, 3100, 8, 128), "f16", "cuda")
    v = make((1, 3100, 8, 128), "f16", "cuda")
    o_ref, _ = ref.attention_varlen(t64(q), t64(k), t64(v), cu_q.cpu().numpy(), cu_k.cpu().numpy())
    try:
        fct.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=4, max_seqlen_k=2100)
    except NotImplementedError as e:
        pytest.skip(f"CUDA backend: {e}")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fct.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=4, max_seqlen_k=2100)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert ref.rel_err(t64(out), o_ref) <= 1e-2


@needs_cuda
def test_torch_cuda_stream_and_graph():
    import flashcore.torch as fct
    q = make((1, 64, 4, 64), "f16", "cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = flashcore.attention(q, q, q)
    s.synchronize()
    static_q = q.clone()
    g = torch.cuda.CUDAGraph()
    fct.attention(static_q, static_q, static_q)  # warm-up outside capture
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        static_out = fct.attention(static_q, static_q, static_q)
    static_q.copy_(q)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(static_out.float(), out.float(), atol=1e-3)


@needs_cuda
def test_torch_cuda_runs_on_current_stream():
    """The call is ordered after the current stream's work: q is written on a side stream
    behind a 20 ms spin, and read by flashcore on that stream."""
    src = make((1, 256, 4, 64), "f16", "cuda")
    o_ref = flashcore.attention(src, src, src)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        q = torch.full_like(src, float("nan"))
        torch.cuda._sleep(int(2e7))
        q.copy_(src)
        out = flashcore.attention(q, q, q)
    s.synchronize()
    assert torch.allclose(out.float(), o_ref.float(), atol=1e-3)  # NaN if it ran before the copy


def test_cuda_mixed_devices_rejected():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q = make((1, 5, 2, 8), "f32")
    with pytest.raises(ValueError, match="^k:"):
        flashcore.attention(q, q.cuda(), q)


def test_cuda_without_cuda_build():
    if not torch.cuda.is_available() or flashcore.built_with_cuda():
        pytest.skip("needs a CUDA GPU and a flashcore built without CUDA")
    q = make((1, 5, 2, 8), "f16", "cuda")
    with pytest.raises(NotImplementedError, match="^q:.*without CUDA"):
        flashcore.attention(q, q, q)
