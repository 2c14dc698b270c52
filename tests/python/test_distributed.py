"""flashcore.distributed.ring_attention over gloo on CPU: world sizes 1 to 4 (processes on
this machine, flashcore's CPU kernels), and over NCCL on two GPUs where a machine has them, each rank's output, lse and gradients against the
float64 reference of the whole sequence (tests/python/reference.py), causal and not,
contiguous and zigzag sharding, GQA, odd shard lengths, float32 and bfloat16, softcap and
sinks (their gradient summed over the ranks), varlen batches; flashcore as the per-block
kernel of PyTorch's own ring; shard / unshard; the options it refuses.
"""
import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

import reference as ref  # noqa: E402

if not dist.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)

# (causal, layout, H, Hkv, dtype, tolerance): odd chunk lengths in both layouts (contiguous
# S_local 7; zigzag S_local 6 = two chunks of 3).
CONFIGS = [(causal, layout, h, hkv, torch.float32, 2e-5)
           for causal in (False, True) for layout in ("contiguous", "zigzag") for h, hkv in ((2, 2), (4, 1))]
CONFIGS.append((True, "zigzag", 4, 2, torch.bfloat16, 3e-2))


def _spawn(worker, world, prefix, *args):
    """Runs worker(rank, world, init_file, *args) in `world` processes (a file store)."""
    fd, init_file = tempfile.mkstemp(prefix=prefix)
    os.close(fd)
    os.unlink(init_file)  # the file store creates it
    try:
        mp.spawn(worker, args=(world, init_file, *args), nprocs=world, join=True)
    finally:
        if os.path.exists(init_file):
            os.unlink(init_file)


def _worker(rank, world, init_file, seed, backend="gloo"):
    import flashcore.distributed as fd

    # nccl: one GPU per rank, flashcore's CUDA kernels
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for n, (causal, layout, h, hkv, dtype, tol) in enumerate(CONFIGS):
            s_local = 6 if layout == "zigzag" else 7
            s = s_local * world
            g = torch.Generator().manual_seed(seed + n)  # the same global tensors on every rank
            q = torch.randn(2, s, h, 16, generator=g)
            k = torch.randn(2, s, hkv, 16, generator=g)
            dv = 16 if cuda else 12  # the CUDA backward takes head dims that are multiples of 8
            v = torch.randn(2, s, hkv, dv, generator=g)
            dout = torch.randn(2, s, h, dv, generator=g)
            if cuda and dtype == torch.float32:
                # the CUDA backward takes f16 / bf16: the float32 configurations run in float16
                dtype, tol = torch.float16, 4e-3
            q, k, v, dout = (x.to(dtype) for x in (q, k, v, dout))
            want_o, want_lse = ref.attention(q.float().numpy(), k.float().numpy(), v.float().numpy(), causal=causal)
            want_g = ref.attention_backward(q.float().numpy(), k.float().numpy(), v.float().numpy(),
                                            dout.float().numpy(), causal=causal)
            dev = f"cuda:{rank}" if cuda else "cpu"
            mine = [fd.shard(x, rank, world, layout).to(dev).clone().requires_grad_(True) for x in (q, k, v)]
            out, lse = fd.ring_attention(*mine, causal=causal, layout=layout, return_lse=True, threads=1)
            out.backward(fd.shard(dout, rank, world, layout).to(dev))
            out, lse = out.cpu(), lse.cpu()
            grads = [x.grad.cpu() for x in mine]
            what = f"rank {rank}/{world} causal={causal} {layout} H{h}/{hkv} {dtype}"
            err = ref.rel_err(out.detach().float().numpy(), fd.shard(torch.from_numpy(want_o), rank, world, layout))
            assert err <= tol, f"{what}: out rel_err {err:.2e}"
            want_lse_mine = fd.shard(torch.from_numpy(want_lse), rank, world, layout, dim=2)
            assert np.allclose(lse.numpy(), want_lse_mine.numpy(), rtol=1e-3, atol=1e-3 if dtype == torch.float32
                               else 5e-2), f"{what}: lse"
            for x, w, name in zip(grads, want_g, ("dq", "dk", "dv")):
                err = ref.rel_err(x.float().numpy(), fd.shard(torch.from_numpy(w), rank, world, layout))
                assert err <= tol * (1 if dtype == torch.float32 else 2), f"{what}: {name} rel_err {err:.2e}"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ring_matches_reference(world):
    _spawn(_worker, world, "fc_ring_", 1234 + world)


def _worker_variants(rank, world, init_file, seed):
    """softcap on every key block, sinks joined once per row (and their gradient: the ranks'
    shares summed over the group), against the reference of the whole sequence."""
    import flashcore.distributed as fd

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for n, (causal, layout) in enumerate(((True, "zigzag"), (False, "contiguous"), (True, "contiguous"))):
            s_local = 6 if layout == "zigzag" else 5
            s = s_local * world
            g = torch.Generator().manual_seed(seed + n)
            q, k, v, dout = (torch.randn(2, s, h, 16, generator=g) for h in (4, 2, 2, 4))
            sinks = torch.randn(4, generator=g)
            kw = dict(causal=causal, softcap=1.5, sinks=sinks.numpy())
            want_o, want_lse = ref.attention(q.numpy(), k.numpy(), v.numpy(), **kw)
            want_g = ref.attention_backward(q.numpy(), k.numpy(), v.numpy(), dout.numpy(), **kw)
            mine = [fd.shard(x, rank, world, layout).clone().requires_grad_(True) for x in (q, k, v)]
            my_sinks = sinks.clone().requires_grad_(True)
            out, lse = fd.ring_attention(*mine, causal=causal, layout=layout, softcap=1.5, sinks=my_sinks,
                                         return_lse=True, threads=1)
            out.backward(fd.shard(dout, rank, world, layout))
            what = f"rank {rank}/{world} causal={causal} {layout} softcap+sinks"
            err = ref.rel_err(out.detach().numpy(), fd.shard(torch.from_numpy(want_o), rank, world, layout))
            assert err <= 2e-5, f"{what}: out rel_err {err:.2e}"
            want_lse_mine = fd.shard(torch.from_numpy(want_lse), rank, world, layout, dim=2)
            assert np.allclose(lse.numpy(), want_lse_mine.numpy(), rtol=1e-4, atol=1e-4), f"{what}: lse"
            for x, w, name in zip(mine, want_g[:3], ("dq", "dk", "dv")):
                err = ref.rel_err(x.grad.numpy(), fd.shard(torch.from_numpy(w), rank, world, layout))
                assert err <= 2e-5, f"{what}: {name} rel_err {err:.2e}"
            dsinks = my_sinks.grad.clone()
            dist.all_reduce(dsinks)
            err = ref.rel_err(dsinks.numpy(), want_g[3])
            assert err <= 2e-5, f"{what}: dsinks rel_err {err:.2e}"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_ring_softcap_and_sinks(world):
    _spawn(_worker_variants, world, "fc_ring_var_", 99 + world)


def _worker_varlen(rank, world, init_file, seed):
    """Varlen batches: each sequence sharded on its own (lengths multiples of the world size,
    of twice it for zigzag; one of them one unit long), packed; out, lse and the gradients
    against the float64 reference of every sequence, GQA 2:1, both layouts, causal and not."""
    import flashcore.distributed as fd

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for n, (causal, layout) in enumerate(((True, "zigzag"), (False, "zigzag"), (True, "contiguous"),
                                              (False, "contiguous"))):
            unit = world * (2 if layout == "zigzag" else 1)
            cu = np.cumsum([0, 3 * unit, unit, 5 * unit]).tolist()
            g = torch.Generator().manual_seed(seed + n)
            q, k, v, dout = (torch.randn(1, cu[-1], h, 16, generator=g) for h in (4, 2, 2, 4))
            want_o, want_lse = ref.attention_varlen(q.numpy(), k.numpy(), v.numpy(), cu, cu, causal=causal)
            want_g = ref.attention_backward_varlen(q.numpy(), k.numpy(), v.numpy(), dout.numpy(), cu, cu,
                                                   causal=causal)
            cut = lambda x, dim=1: fd.shard(x, rank, world, layout, dim=dim, cu_seqlens=cu)  # noqa: E731
            mine = [cut(x).clone().requires_grad_(True) for x in (q, k, v)]
            out, lse = fd.ring_attention(*mine, causal=causal, layout=layout, cu_seqlens_q=torch.tensor(cu),
                                         return_lse=True, threads=1)
            out.backward(cut(dout))
            what = f"rank {rank}/{world} varlen causal={causal} {layout}"
            err = ref.rel_err(out.detach().numpy(), cut(torch.from_numpy(want_o)))
            assert err <= 2e-5, f"{what}: out rel_err {err:.2e}"
            assert np.allclose(lse.numpy(), cut(torch.from_numpy(want_lse), 2).numpy(), rtol=1e-4, atol=1e-4), \
                f"{what}: lse"
            for x, w, name in zip(mine, want_g, ("dq", "dk", "dv")):
                err = ref.rel_err(x.grad.numpy(), cut(torch.from_numpy(w)))
                assert err <= 2e-5, f"{what}: {name} rel_err {err:.2e}"
            # shard / unshard round trip of the packed sequences
            parts = [fd.shard(q, r, world, layout, cu_seqlens=cu) for r in range(world)]
            assert torch.equal(fd.unshard(parts, layout, cu_seqlens=cu), q)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ring_varlen(world):
    _spawn(_worker_varlen, world, "fc_ring_varlen_", 55 + world)


def _block_fwd(query, key, value, is_causal=False, scale=None, **_):
    """flashcore as the per-block op of PyTorch's own ring (SDPA's [B, H, S, D] layout)."""
    import flashcore

    o, lse = flashcore.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                 causal=bool(is_causal), scale=scale, return_lse=True, threads=1)
    return o.transpose(1, 2), lse


def _block_bwd(query, key, value, out, logsumexp, is_causal=False, grad_out=None, scale=None, **_):
    import flashcore

    t = lambda x: x.transpose(1, 2)  # noqa: E731
    dq, dk, dv = flashcore.attention_backward(t(query), t(key), t(value), t(out), t(grad_out), logsumexp,
                                              causal=bool(is_causal), scale=scale, threads=1)
    return t(dq), t(dk), t(dv)


def _worker_torch_ring(rank, world, init_file, seed):
    """PyTorch's own ring (torch.distributed.tensor.experimental's private
    _templated_ring_attention and its backward, with its head-tail load balancing: our
    zigzag) running flashcore's kernels per block; and what a direct flashcore call inside
    context_parallel() sees: the local shard only."""
    import flashcore.distributed as fd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(seed)
        s = 10 * world
        q, k, v, dout = (torch.randn(2, 3, s, 16, generator=g) for _ in range(4))  # [B, H, S, D]
        bshd = [x.transpose(1, 2).numpy() for x in (q, k, v, dout)]
        want_o, _ = ref.attention(*bshd[:3], causal=True)
        want_g = ref.attention_backward(*bshd, causal=True)
        mine = [fd.shard(x, rank, world, "zigzag", dim=2).contiguous() for x in (q, k, v, dout)]
        mine_want = lambda w: fd.shard(torch.from_numpy(w).transpose(1, 2), rank, world, "zigzag", dim=2)  # noqa: E731
        assert cp._cp_options.enable_load_balance
        group = dist.group.WORLD
        out, lse = cp._templated_ring_attention(group, 2, _block_fwd, *mine[:3], is_causal=True)
        assert ref.rel_err(out.numpy(), mine_want(want_o)) <= 2e-5, f"rank {rank}: torch ring out"
        grads = cp._templated_ring_attention_backward(group, 2, _block_bwd, mine[3], "grad_out", *mine[:3],
                                                      out.to(q.dtype), lse.squeeze(-1).contiguous(), is_causal=True)
        for x, w, name in zip(grads[:3], want_g, ("dq", "dk", "dv")):
            assert ref.rel_err(x.numpy(), mine_want(w)) <= 2e-5, f"rank {rank}: torch ring {name}"
        # Inside context_parallel() the buffers are this rank's shards, and a call that is
        # not aten's SDPA is not dispatched to the ring: a plain flashcore.attention gives the
        # shard's own attention (which is why ring_attention is the call to make there).
        mesh = init_device_mesh("cpu", (world,))
        qq, kk, vv = q.clone(), k.clone(), v.clone()
        with context_parallel(mesh, buffers=[qq, kk, vv], buffer_seq_dims=[2, 2, 2]):
            assert qq.shape[2] == s // world
            local = _block_fwd(qq, kk, vv, is_causal=True)[0]
        assert ref.rel_err(local.numpy(), mine_want(want_o)) > 1e-2, f"rank {rank}: local attention"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_flashcore_in_torch_ring(world):
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention as cp
    except ImportError:
        pytest.skip("this torch has no torch.distributed.tensor.experimental._context_parallel._attention")
    if not all(hasattr(cp, f) for f in ("_templated_ring_attention", "_templated_ring_attention_backward", "_cp_options")):
        pytest.skip("this torch's ring has no _templated_ring_attention(_backward)")
    _spawn(_worker_torch_ring, world, "fc_torch_ring_", 77 + world)


@pytest.mark.parametrize("world", [2])
def test_ring_nccl_on_gpus(world):
    if not torch.cuda.is_available() or torch.cuda.device_count() < world or not dist.is_nccl_available():
        pytest.skip(f"needs {world} CUDA GPUs and NCCL")
    import flashcore
    if not flashcore.built_with_cuda():
        pytest.skip("needs a flashcore built with CUDA")
    _spawn(_worker, world, "fc_ring_nccl_", 4321 + world, "nccl")


def test_shard_unshard_round_trip():
    import flashcore.distributed as fd

    x = torch.arange(2 * 24 * 3, dtype=torch.float32).reshape(2, 24, 3)
    for world in (1, 2, 3, 4):
        for layout in ("contiguous", "zigzag"):
            parts = [fd.shard(x, r, world, layout) for r in range(world)]
            assert torch.equal(fd.unshard(parts, layout), x)
    # zigzag: rank 0 of 2 holds chunks 0 and 3 of 4
    assert torch.equal(fd.shard(x, 0, 2, "zigzag")[0, :, 0], torch.cat([x[0, 0:6, 0], x[0, 18:24, 0]]))
    with pytest.raises(ValueError, match="layout"):
        fd.shard(x, 0, 2, "striped")
    with pytest.raises(ValueError, match="multiple"):
        fd.shard(x[:, :10], 0, 3, "contiguous")


def test_refusals_name_the_option():
    import flashcore.distributed as fd

    q = torch.zeros(1, 4, 2, 8)
    if not dist.is_initialized():
        with pytest.raises(RuntimeError, match="init_process_group"):
            fd.ring_attention(q, q, q)
    fd_, init_file = tempfile.mkstemp(prefix="fc_ring_")
    os.close(fd_)
    os.unlink(init_file)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="window"):
            fd.ring_attention(q, q, q, window=(2, 0))
        with pytest.raises(ValueError, match="cu_seqlens_k"):
            fd.ring_attention(q, q, q, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 2, 4])
        with pytest.raises(ValueError, match="cu_seqlens_q: every sequence length must be a multiple of 2"):
            fd.ring_attention(q, q, q, cu_seqlens_q=[0, 1, 4], layout="zigzag")
        with pytest.raises(ValueError, match="q: local length 4"):
            fd.ring_attention(q, q, q, cu_seqlens_q=[0, 2])
        with pytest.raises(ValueError, match="q: varlen takes B = 1"):
            fd.ring_attention(torch.zeros(2, 4, 2, 8), torch.zeros(2, 4, 2, 8), torch.zeros(2, 4, 2, 8),
                              cu_seqlens_q=[0, 4])
        with pytest.raises(ValueError, match="cu_seqlens: expected prefix sums"):
            fd.ring_attention(q, q, q, cu_seqlens_q=[0, 3, 2])
        with pytest.raises(ValueError, match="layout"):
            fd.ring_attention(q, q, q, layout="striped")
        with pytest.raises(ValueError, match="even"):
            fd.ring_attention(torch.zeros(1, 5, 2, 8), torch.zeros(1, 5, 2, 8), torch.zeros(1, 5, 2, 8),
                              layout="zigzag")
        with pytest.raises(TypeError, match="torch tensors"):
            fd.ring_attention(q.numpy(), q, q)
        with pytest.raises(ValueError, match="alibi_slopes"):
            fd.ring_attention(q, q, q, alibi_slopes=torch.zeros(2))
        with pytest.raises(ValueError, match="sinks: expected a torch tensor"):
            fd.ring_attention(q, q, q, sinks=torch.zeros(3))
    finally:
        dist.destroy_process_group()
        if os.path.exists(init_file):
            os.unlink(init_file)


def test_bench_ring_attention(capsys):
    import json

    from flashcore import bench

    assert bench.main(["--op", "ring-attention", "--world", "2", "--batch", "1", "--heads", "2", "--seq-q", "64",
                       "--head-dim", "16", "--causal", "--iters", "2", "--threads", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["op"] == "ring-attention" and row["world"] == 2 and row["layout"] == "zigzag"
    assert len(row["per_rank_ms"]) == 2
    for key in ("fwd_ms", "step_ms", "single_fwd_ms", "single_step_ms", "fwd_scaling", "step_scaling",
                "fwd_compute_ms", "step_compute_ms", "fwd_over_compute", "step_over_compute"):
        assert row[key] > 0, key
    assert bench.main(["--op", "ring-attention", "--world", "2", "--batch", "1", "--heads", "2", "--seq-q", "64",
                       "--head-dim", "16", "--iters", "2", "--threads", "1", "--forward-only", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["fwd_ms"] > 0 and row["fwd_over_compute"] > 0 and "step_ms" not in row
