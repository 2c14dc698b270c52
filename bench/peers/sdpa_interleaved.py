#!/usr/bin/env python3
"""flashcore against PyTorch's SDPA backends in one process, calls interleaved.

sdpa_peers.py and flashcore_cuda_timing time the two sides in separate processes, one
after the other, each with its own warm-up; on a GPU whose clock follows its power draw
(an H200 under sustained tensor work) the side that runs in short bursts gets higher
clocks. Here every shape is timed in rounds: each side warms up for at least `--warm-ms`,
then the rounds alternate the sides (ours, cuDNN, FA2, ours, ...), each round a median of
`--iters` CUDA-event-timed calls, and the row reports the median over rounds of each side
and of the per-round ratios. Inputs: the same random values in each side's native layout
(ours [B, S, H, D], SDPA [B, H, S, D], both contiguous).

--dtype e4m3: fp8 attention, whose peer is cuDNN's fp8 SDPA (`sdpa_fp8` of the cudnn
frontend's Python graph API, package nvidia-cudnn-frontend; PyTorch's SDPA has no fp8
path), on the very same e4m3 q, k, v memory ([B, S, H, D], described to cuDNN as
[B, H, S, D] with those strides): randn values (std 1) rounded to e4m3, descales 1, P
stored as e4m3(256 P) by both (cuDNN: scale_s = 256, descale_s = 1/256). cuDNN writes O in
e4m3 (its only output type on Hopper), ours in bf16 (twice O's bytes). Both write into
an O allocated once (the graph's variant pack; ours `out=`), unless `--fp8-out alloc`
(ours then allocates per call, as before 90cf3df of 2026-11-27). Each row also reports rel_cudnn,
||ours - cuDNN|| / ||cuDNN||, so a mis-described graph shows.

--timing isolated times each call the way cuDNN's published SDPA figures are measured
(cudnn-frontend's benchmark/sdpa_benchmark_training/benchmark_single_sdpa.py): the L2 cleared
(a 256 MiB buffer zeroed) and the GPU drained before every call, the call's time the sum of
its kernels' durations from the torch profiler (ours: the attention kernel, and the V^T
pre-pass or the memset of the kernel's V^T counters). The GPU idles between such calls,
so its clock runs above what a steady stream of calls holds under the power limit: the
figures are higher than `events` (the default: a median of --iters calls, each between
two CUDA events, timed one after the other).

--ours-env VAR=VALUE adds a side `ours_env`: ours with that environment variable set
around each of its calls (an A/B of two paths of the library in one process, e.g.
FLASHCORE_SM90_VT_PREPASS=1, the e4m3 V^T pre-pass in place of V^T made in the kernel);
`same_env` says whether its output equals ours bit for bit (its output buffer poisoned
with NaN first), x_ours_env = its time / ours.

Every side is also timed back to back (`--b2b` calls between two events, the per-call
mean; `*_b2b_us`): the GPU's time without each call's launch latency, which the
per-call figure includes.

  python3 bench/peers/sdpa_interleaved.py [--dtype f16|bf16|e4m3] [--hdims 64,128,256] [--seqs 512,2048]
      [--rounds 5] [--iters 10] [--b2b 10] [--warm-ms 200] [--all-kernels] [--exp exact|fast]
      [--shapes "B,Hq,Hkv,S,D;..."]   # explicit shapes (GQA where Hkv < Hq) in place of the grid
      [--timing events|isolated] [--ours-env VAR=VALUE]

Needs torch with CUDA and the flashcore Python package built with CUDA (pip install .);
e4m3 also the cudnn frontend (else the row has no peer). Where FlashAttention-3's `hopper/`
package is importable (`flash_attn_interface`, built from its source outside this tree), it is
one more side, `fa3`, in every dtype.
Prints one JSON line per shape: us and TFLOP/s per side, ratio = peer time / ours, and the
kernel the dispatcher chose for ours (ours_kernel).
"""
import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore

SIDES = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def kernel_of(q, k, v, causal, exp="exact"):
    """The kernel the dispatcher runs for this call (the name PhaseTimes reports, from one
    more call through the C++ timing loop), or None where that call fails."""
    try:
        out = torch.empty_like(q, dtype=torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype)
        return flashcore._core.attention_loop(q, k, v, out, None, 0.0, causal, -1, -1, 0,
                                              flashcore._api._EXP_MODES[exp], None, None, 0,
                                              None, torch.cuda.current_stream(q.device).cuda_stream,
                                              False, 1)[1] or None
    except Exception:  # noqa: BLE001 (a name is a nicety: never lose the row for it)
        return None


def event_median_us(fn, iters):
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def isolated_us(fn, iters, flush):
    """The median over `iters` calls of the summed durations of each call's kernels (torch
    profiler), each call after zeroing `flush` (the L2 cleared) and a device synchronize."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    times = []
    for _ in range(iters):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        times.append(sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA))
    return statistics.median(times)


def b2b_us(fn, calls):
    """The mean time per call of `calls` calls enqueued back to back between two events."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / calls


def cudnn_fp8(q, k, v, causal, descale=1.0):
    """cuDNN's fp8 SDPA on q, k, v (e4m3, [B, S, H, D]; each with the factor `descale`) as
    a call, and its output (e4m3, [B, S, H, D]); None where the cudnn frontend is missing or
    cuDNN rejects the graph."""
    try:
        import cudnn
    except ImportError:
        return None
    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32, handle=handle)

    def bhsd(x):  # a [B, S, H, D] array as cuDNN's [B, H, S, D] with its strides
        return dict(dim=[x.shape[0], x.shape[2], x.shape[1], x.shape[3]],
                    stride=[x.stride(0), x.stride(2), x.stride(1), x.stride(3)])

    out = torch.empty_like(q)
    one = lambda val: torch.full((1, 1, 1, 1), val, dtype=torch.float32, device=q.device)  # noqa: E731
    data = {"q": q, "k": k, "v": v, "dq": one(descale), "dk": one(descale), "dv": one(descale),
            "ds": one(1.0 / 256), "ss": one(256.0), "so": one(1.0)}
    t = {n: g.tensor(name=n, data_type=e4m3, **bhsd(x)) for n, x in data.items() if n in ("q", "k", "v")}
    t.update({n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
              for n in data if n not in ("q", "k", "v")})
    try:
        o, _, amax_s, amax_o = g.sdpa_fp8(
            q=t["q"], k=t["k"], v=t["v"], descale_q=t["dq"], descale_k=t["dk"], descale_v=t["dv"],
            descale_s=t["ds"], scale_s=t["ss"], scale_o=t["so"], generate_stats=False,
            attn_scale=q.shape[3] ** -0.5, use_causal_mask=causal, name="sdpa_fp8")
        o.set_output(True).set_data_type(e4m3).set_dim(bhsd(out)["dim"]).set_stride(bhsd(out)["stride"])
        data["o"], t["o"] = out, o
        for n, a in (("amax_s", amax_s), ("amax_o", amax_o)):
            a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
            data[n], t[n] = one(0.0), a
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
    except Exception as e:  # noqa: BLE001 (cudnnGraphNotSupportedError and kin: no peer row)
        print(json.dumps({"cudnn_fp8_error": str(e)[:300]}), flush=True)
        return None
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=q.device)
    pack = {t[n]: x for n, x in data.items()}
    return (lambda: g.execute(pack, ws, handle=handle)), out


def fa3_call(q, k, v, causal, out=None, descale=1.0):
    """FlashAttention-3's forward (Dao-AILab/flash-attention `hopper/`, built beside this
    script and never part of flashcore: PYTHONPATH names its hopper folder) on q, k, v as
    they are ([B, S, H, D], as ours; e4m3 with per-(batch, KV head) descales of `descale`,
    bf16 output into `out`), called through its registered op as `_flash_attn_forward`
    does, without the autograd wrapper; None where it is not importable or refuses the
    shape."""
    try:
        import flash_attn_interface as fai
    except ImportError:
        return None
    ds = None
    if q.dtype == torch.float8_e4m3fn:
        ds = torch.full((k.shape[0], k.shape[2]), descale, dtype=torch.float32, device=q.device)
    # fwd(q, k, v, k_new, v_new, qv, out_, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new,
    # seqused_q, seqused_k, max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx, leftpad_k,
    # rotary_cos, rotary_sin, seqlens_rotary, q/k/v_descale, softmax_scale, causal,
    # window_size_left, window_size_right, attention_chunk, softcap, rotary_interleaved,
    # scheduler_metadata, num_splits, pack_gqa, sm_margin)
    args = ([q, k, v, None, None, None, out] + [None] * 13 +
            [ds, ds, ds, q.shape[3] ** -0.5, causal, -1, -1, 0, 0.0, True, None, 1, None, 0])
    fn = lambda: fai.flash_attn_3_gpu.fwd(*args)[0]  # noqa: E731
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (a build without this head dim or dtype: no row)
        print(json.dumps({"fa3_error": str(e)[:300]}), flush=True)
        return None
    return fn


def codes_e4m3(shape):
    """flashcore_cuda_timing's e4m3 inputs: random sign and mantissa, exponent field 4 .. 8."""
    r = torch.randint(0, 1 << 30, shape, device="cuda", dtype=torch.int32)
    code = ((r & 1) << 7) | ((4 + (r >> 1) % 5) << 3) | ((r >> 4) & 7)
    return code.to(torch.uint8).view(torch.float8_e4m3fn)


def warm(fn, ms):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    n = 0
    while True:
        fn()
        n += 1
        b.record()
        b.synchronize()
        if n >= 5 and a.elapsed_time(b) >= ms:
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "e4m3"])
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--seqs", default="512,2048,8192,16384")
    ap.add_argument("--shapes", default="",
                    help="explicit shapes B,Hq,Hkv,S,D separated by ';' (GQA where Hkv < Hq), in place of "
                         "--hdims x --seqs (B = 16384 / S, H = Hq = Hkv = 2048 / D), e.g. cuDNN's published "
                         "llama3.1 shape 1,64,8,32768,128")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exp", default="exact", choices=["exact", "fast"],
                    help="ours: AttentionParams::exp2 (e4m3 fast: the chord exponentials)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timing", default="events", choices=["events", "isolated"],
                    help="per-call timing: CUDA events around each call (events), or cuDNN's published "
                         "method (isolated: L2 cleared, GPU drained, the call's kernel time from the profiler)")
    ap.add_argument("--fp8-out", default="prealloc", choices=["prealloc", "alloc"],
                    help="e4m3: ours writes into an output allocated once (prealloc, out=; cuDNN's graph "
                         "writes into one too), or allocates it per call (alloc, ~5 us of host time per call)")
    ap.add_argument("--fp8-inputs", default="randn", choices=["randn", "codes"],
                    help="e4m3 inputs: randn values rounded to e4m3, or flashcore_cuda_timing's codes "
                         "(random sign and mantissa, exponent field 4 .. 8: magnitudes 2^-3 .. 3.75)")
    ap.add_argument("--fp8-scale", type=float, default=1.0,
                    help="e4m3: inputs randn * this, with descales 1 / this on both sides")
    ap.add_argument("--b2b", type=int, default=10, help="calls per back-to-back timing (0: none)")
    ap.add_argument("--warm-ms", type=float, default=200.0)
    ap.add_argument("--ours-env", default="",
                    help="VAR=VALUE: one more side, ours with this environment variable set around its calls")
    ap.add_argument("--all-kernels", action="store_true",
                    help="also every available CUDA kernel of the dtype and head dim, forced by key")
    args = ap.parse_args()
    if args.fp8_inputs == "codes" and args.fp8_scale != 1.0:
        ap.error("--fp8-scale applies to randn inputs only")
    fp8 = args.dtype == "e4m3"
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float16}[args.dtype]
    if args.shapes:
        shapes = [tuple(int(v) for v in x.split(",")) for x in args.shapes.split(";")]
        if any(len(x) != 5 or min(x) < 1 or x[1] % x[2] for x in shapes):
            ap.error("--shapes: each B,Hq,Hkv,S,D positive with Hkv dividing Hq")
    else:
        shapes = [(max(16384 // s, 1), 2048 // d, 2048 // d, s, d)
                  for d in (int(x) for x in args.hdims.split(",")) for s in (int(x) for x in args.seqs.split(","))]
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda") if args.timing == "isolated" else None
    for b, h, hkv, s, d in shapes:
        for causal in (False, True):
            kw = {"causal": causal, "exp": args.exp}
            if fp8 and args.fp8_inputs == "codes":
                q, k, v = (codes_e4m3((b, s, hh, d)) for hh in (h, hkv, hkv))
            else:
                q, k, v = (torch.randn(b, s, hh, d, device="cuda", dtype=dt) for hh in (h, hkv, hkv))
            if fp8 and args.fp8_inputs == "randn":
                q, k, v = ((x * args.fp8_scale).to(torch.float8_e4m3fn) for x in (q, k, v))
                if args.fp8_scale != 1.0:
                    kw.update(q_descale=1 / args.fp8_scale, k_descale=1 / args.fp8_scale, v_descale=1 / args.fp8_scale)
            # SDPA's [B, H, S, D] copies (its peers only: cuDNN fp8 reads q, k, v in place)
            qt, kt, vt = (None,) * 3 if fp8 else (x.transpose(1, 2).contiguous() for x in (q, k, v))
            if fp8 and args.fp8_out == "prealloc":  # as cuDNN's graph: its O is allocated once
                kw["out"] = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            fns = {"ours": lambda: flashcore.attention(q, k, v, **kw)}
            if args.all_kernels:
                tail = "%s_hd%d_" % (args.dtype, d)
                for key, _, ok in flashcore.list_kernels():
                    if ok and (key.startswith("fwd_sm90_" + tail) or key.startswith("fwd_sm80_" + tail)):
                        fns[key] = lambda key=key: flashcore.attention(q, k, v, impl=key, **kw)
            extra = {}
            ours = flashcore.attention(q, k, v, **kw).float()  # for the peers' rel_* columns
            if args.ours_env:
                var, _, value = args.ours_env.partition("=")

                def ours_env():
                    os.environ[var] = value
                    try:
                        return flashcore.attention(q, k, v, **kw)
                    finally:
                        os.environ.pop(var, None)
                fns["ours_env"] = ours_env
                if "out" in kw:
                    kw["out"].fill_(float("nan"))
                extra["same_env"] = bool(torch.equal(ours, ours_env().float()))

            def rel(theirs):
                return round(float((ours - theirs.float()).norm() / theirs.float().norm()), 4)

            if fp8:
                peer = cudnn_fp8(q, k, v, causal, 1 / args.fp8_scale)
                if peer is not None:
                    fns["cudnn_fp8"] = peer[0]
                    peer[0]()
                    extra["rel_cudnn"] = rel(peer[1])
            fa3 = fa3_call(q, k, v, causal, torch.empty_like(kw["out"]) if "out" in kw else None,
                           1 / args.fp8_scale)
            if fa3 is not None:
                fns["fa3"] = fa3
                extra["rel_fa3"] = rel(fa3())
            for name, be in ({} if fp8 else SIDES).items():
                def call(be=be):
                    with sdpa_kernel(be):
                        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                              enable_gqa=hkv < h)
                try:
                    call()
                    fns[name] = call
                except RuntimeError:
                    pass  # this backend does not take the shape
            for fn in fns.values():
                warm(fn, args.warm_ms)
            us = {n: [] for n in fns}
            b2b = {n: [] for n in fns}
            for _ in range(args.rounds):
                for n, fn in fns.items():
                    us[n].append(isolated_us(fn, args.iters, flush) if flush is not None
                                 else event_median_us(fn, args.iters))
                    if args.b2b > 0:
                        b2b[n].append(b2b_us(fn, args.b2b))
            flop = 4 * b * h * s * s * d / (2 if causal else 1)
            row = {"dtype": args.dtype, "B": b, "H": h, "Hkv": hkv, "S": s, "D": d, "causal": causal,
                   "ours_kernel": kernel_of(q, k, v, causal, args.exp), **extra}
            if fp8:
                row["fp8_inputs"], row["fp8_scale"], row["fp8_out"] = args.fp8_inputs, args.fp8_scale, args.fp8_out
            row["timing"] = args.timing
            for n, t in us.items():
                row[n + "_us"] = round(statistics.median(t), 1)
                row[n + "_tflops"] = round(flop / statistics.median(t) / 1e6, 1)
                if n != "ours":
                    row["x_" + n] = round(statistics.median(p / o for p, o in zip(t, us["ours"])), 3)
                if b2b[n]:
                    row[n + "_b2b_us"] = round(statistics.median(b2b[n]), 1)
                    row[n + "_b2b_tflops"] = round(flop / statistics.median(b2b[n]) / 1e6, 1)
                    if n != "ours":
                        row["x_b2b_" + n] = round(statistics.median(p / o for p, o in zip(b2b[n], b2b["ours"])), 3)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
