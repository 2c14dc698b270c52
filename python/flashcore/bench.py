"""python -m flashcore.bench: the flashcore-bench table from Python.

Times flashcore.attention / softmax_v / gemm_chain called from Python (p50 / p90 over
--iters calls after warm-up), checks each configuration against a float64 numpy
reference with --check, and, where PyTorch is importable, times
torch.nn.functional.scaled_dot_product_attention on the same inputs (ratio =
torch p50 / flashcore p50; > 1 means flashcore is faster). Then it measures the Python
overhead per call: flashcore.attention from Python minus the same call looped in C++
(B=1, H=8, S=128, D=64, CPU f32), both in this process.

Flags follow flashcore-bench (shared/BENCH.md); with no shape flags it runs a small
default suite (well under a minute on 2 cores). --op ring-attention times
flashcore.distributed.ring_attention over --world processes (ring_bench.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from . import _core, attention, gemm_chain, softmax_v
from ._api import _params

_STRATEGIES = ("auto", "two-pass", "three-pass", "online")


def _bf16():
    try:
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


def _np_dtype(name):
    if name == "bf16":
        d = _bf16()
        if d is None:
            raise SystemExit("flashcore.bench: --dtype bf16 needs ml_dtypes (pip install ml-dtypes)")
        return d
    return {"f32": np.float32, "f16": np.float16}[name]


def _torch():
    if os.environ.get("FLASHCORE_BENCH_NO_TORCH"):
        return None
    try:
        import torch
        return torch
    except ImportError:
        return None


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _time_cpu(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        ts.append((time.perf_counter_ns() - t0) / 1e3)
    return _pct(ts, 50), _pct(ts, 90)


def _time_cuda(torch, fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = [a.elapsed_time(b) * 1e3 for a, b in ev]
    return _pct(ts, 50), _pct(ts, 90)


class Config:
    def __init__(self, op="attention", dtype="f32", strategy="auto", exp="exact", batch=1,
                 heads=8, kv_heads=None, seq_q=128, seq_k=None, head_dim=64, causal=False,
                 threads=0, impl=None, backend="cpu"):
        self.op, self.dtype, self.strategy, self.exp = op, dtype, strategy, exp
        self.batch, self.heads = batch, heads
        self.kv_heads = heads if kv_heads is None else kv_heads
        self.seq_q = seq_q
        self.seq_k = seq_q if seq_k is None else seq_k
        self.head_dim, self.causal, self.threads, self.impl = head_dim, causal, threads, impl
        self.backend = backend

    def shape(self):
        m = self.batch * self.heads * self.seq_q
        if self.op == "softmax-v":
            return f"M{m} L{self.seq_k} d{self.head_dim}"
        if self.op == "gemm-chain":
            return f"M{m} K1=N={self.head_dim} K2={self.seq_k}"
        heads = f"H{self.heads}" if self.kv_heads == self.heads else f"H{self.heads}/{self.kv_heads}"
        seq = f"S{self.seq_q}" if self.seq_q == self.seq_k else f"Sq{self.seq_q} Sk{self.seq_k}"
        return f"B{self.batch} {heads} {seq} D{self.head_dim}" + (" causal" if self.causal else "")

    def flops(self):
        b, h, sq, sk, d = self.batch, self.heads, self.seq_q, self.seq_k, self.head_dim
        if self.op == "softmax-v":
            return 2.0 * b * h * sq * sk * d
        if self.op == "gemm-chain":
            m = b * h * sq
            return 2.0 * m * d * sk + 2.0 * m * sk * d
        f = 4.0 * b * h * sq * sk * d
        return f / 2 if self.causal and sq == sk else f


def default_suite():
    c = []
    for s in _STRATEGIES:
        c.append(Config(strategy=s))                                   # the overhead shape
    c.append(Config(seq_q=512, causal=True))
    c.append(Config(seq_q=512, dtype="f16"))
    if _bf16() is not None:
        c.append(Config(seq_q=512, dtype="bf16"))
    c.append(Config(heads=8, kv_heads=2, seq_q=256, head_dim=128))
    c.append(Config(seq_q=1, seq_k=2048, heads=16, head_dim=128))      # decode-like
    c.append(Config(op="softmax-v", batch=1, heads=1, seq_q=512, seq_k=512, head_dim=64))
    c.append(Config(op="gemm-chain", batch=1, heads=1, seq_q=256, seq_k=256, head_dim=64))
    return c


def _ref_attention(q, k, v, causal):
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[3])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v)


def _rel_err(got, ref):
    got = np.asarray(got).astype(np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))


def _to_torch(torch, x, device):
    """numpy (incl. ml_dtypes bf16) -> torch tensor on `device`, same memory layout."""
    if x.dtype == _bf16():
        t = torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(x)
    return t.to(device)


def run_config(c: Config, iters: int, check: bool, torch):
    rng = np.random.default_rng()
    dt = _np_dtype(c.dtype)
    row = {"op": c.op, "backend": c.backend, "impl": c.impl or "auto", "strategy": c.strategy,
           "dtype": c.dtype, "exp": c.exp, "B": c.batch, "H": c.heads, "Hkv": c.kv_heads,
           "Sq": c.seq_q, "Sk": c.seq_k, "D": c.head_dim, "causal": c.causal,
           "threads": c.threads, "shape": c.shape(), "kernel": "-", "note": ""}
    cuda = c.backend == "cuda"
    if cuda and torch is None:
        raise SystemExit("flashcore.bench: --backend cuda needs PyTorch for CUDA arrays")
    dev = "cuda" if cuda else "cpu"
    timer = (lambda fn: _time_cuda(torch, fn, iters)) if cuda else (lambda fn: _time_cpu(fn, iters))
    thr = c.threads or None
    if c.op == "attention":
        q = rng.standard_normal((c.batch, c.seq_q, c.heads, c.head_dim), dtype=np.float32).astype(dt)
        k = rng.standard_normal((c.batch, c.seq_k, c.kv_heads, c.head_dim), dtype=np.float32).astype(dt)
        v = rng.standard_normal((c.batch, c.seq_k, c.kv_heads, c.head_dim), dtype=np.float32).astype(dt)
        qq, kk, vv = (_to_torch(torch, x, dev) for x in (q, k, v)) if cuda else (q, k, v)
        out = attention(qq, kk, vv, causal=c.causal, strategy=c.strategy, exp=c.exp, threads=thr, impl=c.impl)
        fn = lambda: attention(qq, kk, vv, causal=c.causal, strategy=c.strategy, exp=c.exp,
                               threads=thr, impl=c.impl, out=out)
        if not cuda:
            params = _params("numpy", causal=c.causal, strategy=c.strategy, exp=c.exp, threads=thr,
                             impl=c.impl)
            info = _core.attention_loop(q, k, v, out, None, params, 1)
            row["kernel"] = info[1] or "-"
            if c.strategy == "auto" and info[2]:
                row["note"] = "auto chose " + info[2]
        if check:
            got = out.float().cpu().numpy() if cuda else out
            row["rel_err"] = _rel_err(got, _ref_attention(q, k, v, c.causal))
    elif c.op == "softmax-v":
        m = c.batch * c.heads * c.seq_q
        s = rng.standard_normal((m, c.seq_k), dtype=np.float32) * 3
        v = rng.standard_normal((c.seq_k, c.head_dim), dtype=np.float32).astype(dt)
        out = softmax_v(s, v, strategy=c.strategy, exp=c.exp, threads=thr, impl=c.impl)
        fn = lambda: softmax_v(s, v, strategy=c.strategy, exp=c.exp, threads=thr, impl=c.impl, out=out)
        if check:
            sd = s.astype(np.float64)
            p = np.exp(sd - sd.max(1, keepdims=True))
            row["rel_err"] = _rel_err(out, (p / p.sum(1, keepdims=True)) @ v.astype(np.float64))
    else:
        m = c.batch * c.heads * c.seq_q
        a = rng.standard_normal((m, c.head_dim), dtype=np.float32).astype(dt)
        b = rng.standard_normal((c.head_dim, c.seq_k), dtype=np.float32).astype(dt)
        cc = rng.standard_normal((c.seq_k, c.head_dim), dtype=np.float32).astype(dt)
        out = gemm_chain(a, b, cc, threads=thr, impl=c.impl)
        fn = lambda: gemm_chain(a, b, cc, threads=thr, impl=c.impl, out=out)
        if check:
            ad, bd, cd = (x.astype(np.float64) for x in (a, b, cc))
            row["rel_err"] = _rel_err(out, (ad @ bd) @ cd)
    p50, p90 = timer(fn)
    row["p50_us"], row["p90_us"] = p50, p90
    row["gflops"] = c.flops() / (p50 * 1e3)
    if torch is not None and c.op == "attention":
        _add_sdpa(row, c, torch, q, k, v, dev, timer)
    return row


def _add_sdpa(row, c, torch, q, k, v, dev, timer):
    """PyTorch SDPA on the same inputs (BHSD views of the same data)."""
    import torch.nn.functional as F
    qt, kt, vt = (_to_torch(torch, x, dev).permute(0, 2, 1, 3) for x in (q, k, v))
    kw = {"is_causal": c.causal}
    if c.heads != c.kv_heads:
        kw["enable_gqa"] = True
    if c.causal and c.seq_q != c.seq_k:
        row["note"] = (row["note"] + "; " if row["note"] else "") + "torch causal is top-left aligned"
    prev = torch.get_num_threads()
    if c.threads:
        torch.set_num_threads(c.threads)
    try:
        with torch.no_grad():
            p50, p90 = timer(lambda: F.scaled_dot_product_attention(qt, kt, vt, **kw))
        row["torch_p50_us"] = p50
        row["ratio"] = p50 / row["p50_us"]
    except Exception as e:  # e.g. a dtype the CPU SDPA lacks
        row["note"] = f"torch: {type(e).__name__}: {e}"[:80]
    finally:
        torch.set_num_threads(prev)


def measure_overhead(iters=3000, threads=1):
    """Per-call Python overhead of flashcore.attention: B=1, H=8, S=128, D=64, CPU f32.

    paired: for each call from Python, its time (perf_counter_ns around
    flashcore.attention, output allocated by the call as a user calls it) minus the time
    the binding measured around the C++ flashcore::attention of that same call
    (_core.last_call_ns); the median of the differences. Pairing cancels the kernel's
    own noise. Also loop: p50 of Python calls minus p50 of the same call looped in C++
    (_core.attention_loop), which carries the kernel's run-to-run noise.
    """
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 128, 8, 64), dtype=np.float32) for _ in range(3))
    out = np.empty_like(q)
    for _ in range(20):
        attention(q, k, v, threads=threads)
    diffs, diffs_out, py = [], [], []
    clock, last = time.perf_counter_ns, _core.last_call_ns
    for _ in range(iters):
        t0 = clock()
        attention(q, k, v, threads=threads)
        t1 = clock()
        diffs.append((t1 - t0 - last()) / 1e3)
        py.append((t1 - t0) / 1e3)
        t0 = clock()
        attention(q, k, v, threads=threads, out=out)
        t1 = clock()
        diffs_out.append((t1 - t0 - last()) / 1e3)
    ns = _core.attention_loop(q, k, v, out, None, _params("numpy", threads=threads), iters)[0]
    cpp = statistics.median(ns) / 1e3
    return {"shape": "B1 H8 S128 D64 f32 cpu", "threads": threads,
            "overhead_us": statistics.median(diffs), "overhead_out_us": statistics.median(diffs_out),
            "overhead_p90_us": _pct(diffs, 90),
            "python_p50_us": statistics.median(py), "cpp_loop_p50_us": cpp,
            "loop_overhead_us": statistics.median(py) - cpp}


def _fmt_us(x):
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:.0f}")


def print_table(rows, show_torch):
    cols = "| row | op | dtype | shape | strategy | kernel | thr | p50 us | p90 us | GFLOP/s | rel_err |"
    if show_torch:
        cols += " torch p50 us | torch/flashcore |"
    print(cols + " note |")
    print("|" + "---|" * (cols.count("|")))
    for i, r in enumerate(rows, 1):
        dt = r["dtype"] + ("/fastexp" if r["exp"] == "fast" else "")
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else "-"
        line = (f"| {i} | {r['op']} | {dt} | {r['shape']} | {r['strategy']} | {r['kernel']} | "
                f"{r['threads']} | {_fmt_us(r['p50_us'])} | {_fmt_us(r['p90_us'])} | "
                f"{r['gflops']:.1f} | {err} |")
        if show_torch:
            tp = r.get("torch_p50_us")
            line += f" {_fmt_us(tp)} | {('%.2f' % r['ratio']) if tp else '-'} |"
        print(line + f" {r['note']} |")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m flashcore.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=["attention", "softmax-v", "gemm-chain", "ring-attention"], default="attention")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--impl", default="auto")
    ap.add_argument("--strategy", choices=_STRATEGIES, default="auto")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--exp", choices=["exact", "fast"], default="exact")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--seq-q", type=int)
    ap.add_argument("--seq-k", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch SDPA column")
    ap.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead measurement")
    ap.add_argument("--overhead-iters", type=int, default=2000)
    ap.add_argument("--world", type=int, default=2, help="ring-attention: ranks (processes; one GPU each on cuda)")
    ap.add_argument("--layout", choices=["contiguous", "zigzag"], default="zigzag", help="ring-attention sharding")
    ap.add_argument("--forward-only", action="store_true", help="ring-attention: time the forward alone")
    a = ap.parse_args(argv)
    if a.op == "ring-attention":
        from . import ring_bench

        a.batch, a.heads, a.head_dim = a.batch or 1, a.heads or 8, a.head_dim or 64
        a.seq = a.seq_q or 1024
        if a.seq_k not in (None, a.seq):
            raise SystemExit("flashcore.bench: ring-attention takes one sequence (--seq-k = --seq-q)")
        ring_bench.main(a)
        return 0

    shape_given = any(x is not None for x in (a.batch, a.heads, a.kv_heads, a.seq_q, a.seq_k, a.head_dim))
    impl = None if a.impl == "auto" else a.impl
    if shape_given or a.op != "attention" or a.backend != "cpu" or a.dtype != "f32" or a.causal:
        configs = [Config(op=a.op, dtype=a.dtype, strategy=a.strategy, exp=a.exp,
                          batch=a.batch or 1, heads=a.heads or 8, kv_heads=a.kv_heads,
                          seq_q=a.seq_q or 128, seq_k=a.seq_k, head_dim=a.head_dim or 64,
                          causal=a.causal, threads=a.threads, impl=impl, backend=a.backend)]
    else:
        configs = default_suite()
        for c in configs:
            c.threads, c.exp, c.impl = a.threads, a.exp, impl
            if a.strategy != "auto":
                c.strategy = a.strategy

    # The overhead first, in a quiet process: before torch is imported and before other
    # configurations leave thread pools spinning.
    overhead = None if a.no_overhead else measure_overhead(a.overhead_iters)
    torch = None if a.no_torch else _torch()
    rows = []
    for c in configs:
        rows.append(run_config(c, a.iters, a.check, torch))

    if a.json:
        for r in rows:
            print(json.dumps(r))
        if overhead:
            print(json.dumps({"op": "python-overhead", **overhead}))
        return 0
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tv = f", torch {torch.__version__}" if torch is not None else ", torch not importable"
    print(f"flashcore {_core.version()} python bench, {date}, {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}{tv}\n")
    print_table(rows, torch is not None)
    print("\nTimes are from Python (the call includes the binding). thr 0 = all cores. "
          "torch/flashcore > 1: flashcore is faster.")
    if overhead:
        o = overhead
        print(f"\nPython overhead per call ({o['shape']}, threads={o['threads']}): "
              f"{o['overhead_us']:.2f} us (p90 {o['overhead_p90_us']:.2f}) with the output "
              f"allocated by the call, {o['overhead_out_us']:.2f} us with out= "
              f"[paired: Python time of each call minus its C++ time]. "
              f"Unpaired: Python p50 {o['python_p50_us']:.1f} us - C++ loop p50 "
              f"{o['cpp_loop_p50_us']:.1f} us = {o['loop_overhead_us']:.1f} us.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
