"""flashcore ops registered with torch.library, for torch.compile and CUDA graphs.

    import torch, flashcore.torch
    out = flashcore.torch.attention(q, k, v, causal=True)        # q/k/v: [B, S, H, D]
    out = torch.ops.flashcore.attention(q, k, v, True, -1, -1, 0.0, "auto", "exact",
                                        None, None)[0]

Importing this module imports torch; importing `flashcore` alone never does. Each op
is a `torch.library.custom_op` with a fake (meta) implementation that gives the output
shapes and dtypes without running anything, so torch.compile traces through it and
CUDA-graph capture records the kernel launched on the current stream. The ops are
forward-only: no autograd formula is registered (a backward through them fails).
Under CUDA-graph capture, varlen on CUDA needs max_seqlen_q / max_seqlen_k (without them
cu_seqlens are copied to the host, which synchronizes the stream).
"""


from typing import Optional

import torch

from . import _api

__all__ = ["attention", "softmax_v", "gemm_chain"]

_Tensor = torch.Tensor


@torch.library.custom_op("flashcore::attention", mutates_args=())
def _attention(q: _Tensor, k: _Tensor, v: _Tensor, causal: bool, window_left: int,
               window_right: int, scale: float, strategy: str, exp: str,
               cu_seqlens_q: Optional[_Tensor], cu_seqlens_k: Optional[_Tensor],
               max_seqlen_q: int = 0, max_seqlen_k: int = 0) -> tuple[_Tensor, _Tensor]:
    out, lse = _api.attention(q, k, v, causal=causal, window=(window_left, window_right),
                              scale=None if scale == 0.0 else scale, return_lse=True,
                              strategy=strategy, exp=exp, cu_seqlens_q=cu_seqlens_q,
                              cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                              max_seqlen_k=max_seqlen_k)  # 0 and 0: no bounds
    return out, lse


@_attention.register_fake
def _attention_fake(q, k, v, causal, window_left, window_right, scale, strategy, exp,
                    cu_seqlens_q, cu_seqlens_k, max_seqlen_q=0, max_seqlen_k=0):
    torch._check(q.dim() == 4, lambda: f"q: expected rank 4 [B, Sq, H, D], got {q.dim()}")
    torch._check(v.dim() == 4, lambda: f"v: expected rank 4 [B, Sk, Hkv, Dv], got {v.dim()}")
    b, sq, h, _ = q.shape
    out = q.new_empty((b, sq, h, v.shape[3]))
    lse = q.new_empty((b, h, sq), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("flashcore::softmax_v", mutates_args=())
def _softmax_v(s: _Tensor, v: _Tensor, scale: float, strategy: str, exp: str) -> _Tensor:
    return _api.softmax_v(s, v, scale=scale, strategy=strategy, exp=exp)


@_softmax_v.register_fake
def _softmax_v_fake(s, v, scale, strategy, exp):
    torch._check(s.dim() == 2 and v.dim() == 2, lambda: "s, v: expected rank 2 [M, L], [L, d]")
    return v.new_empty((s.shape[0], v.shape[1]))


@torch.library.custom_op("flashcore::gemm_chain", mutates_args=())
def _gemm_chain(a: _Tensor, b: _Tensor, c: _Tensor) -> _Tensor:
    return _api.gemm_chain(a, b, c)


@_gemm_chain.register_fake
def _gemm_chain_fake(a, b, c):
    torch._check(a.dim() == 2 and c.dim() == 2, lambda: "a, c: expected rank 2")
    return a.new_empty((a.shape[0], c.shape[1]))


def attention(q, k, v, *, causal=False, window=(-1, -1), scale=None, return_lse=False,
              strategy="auto", exp="exact", cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=None, max_seqlen_k=None):
    """flashcore.attention as the registered op torch.ops.flashcore.attention (see
    flashcore.attention for the arguments). Returns out, or (out, lse)."""
    wl, wr = _api._window(window)
    out, lse = torch.ops.flashcore.attention(
        q, k, v, bool(causal), wl, wr, 0.0 if scale is None else _api._scale(scale, 0.0),
        strategy, exp, cu_seqlens_q, cu_seqlens_k, max_seqlen_q or 0, max_seqlen_k or 0)
    return (out, lse) if return_lse else out


def softmax_v(s, v, *, scale=1.0, strategy="auto", exp="exact"):
    """flashcore.softmax_v as torch.ops.flashcore.softmax_v."""
    return torch.ops.flashcore.softmax_v(s, v, float(scale), strategy, exp)


def gemm_chain(a, b, c):
    """flashcore.gemm_chain as torch.ops.flashcore.gemm_chain."""
    return torch.ops.flashcore.gemm_chain(a, b, c)
