"""flashcore as an attention implementation of Hugging Face transformers.

    import flashcore.integrations.transformers      # registers "fcore"
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fcore")
    model.set_attn_implementation("fcore")          # or on a model already made

Importing this module imports transformers and torch and registers `attention_forward` with
transformers' `AttentionInterface` under NAME ("fcore": transformers 5 reads a registered name
containing "flash" as a FlashAttention kernel from the Hub), and transformers' own boolean mask
builder (`sdpa_mask`) with `AttentionMaskInterface` under the same name, so that the model
hands each layer a boolean mask [B, 1, Sq, Sk], or None where the mask is plain causal.

What a layer's call becomes (flashcore.attention on the same tensors, [B, H, S, D] read in
place as [B, S, H, D] views):
  * causal: the module's `is_causal` (or the call's `is_causal`), bottom-right aligned like
    transformers' masks with a cache; sliding_window W: keys q - W < k <= q when causal (a
    window (W - 1, 0)), |q - k| <= W otherwise; scaling -> scale; softcap -> softcap;
    s_aux (gpt-oss' learnable sinks) -> sinks (in float32); GQA as is.
  * attention_mask: None, or a mask that is the band above restricted to valid key positions
    (padding: left, right, holes; with sliding windows, padding that keeps the distances
    between valid tokens, as left padding does). The valid tokens of each batch entry become
    one varlen sequence (the band is checked in the packed positions, so a mask that is
    anything else is refused, not approximated). Rows that see no key, and with causal
    attention the rows of padding tokens, give 0. Additive float masks are read as 0 =
    visible, below half the dtype's lowest value = masked; any other value (a bias) is
    refused.
  * dropout must be 0 (eval mode, or attention_dropout = 0): flashcore has no dropout.
Refusals raise NotImplementedError naming what flashcore cannot express.
"""

from __future__ import annotations

import weakref

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .. import _api

__all__ = ["NAME", "register", "attention_forward"]

NAME = "fcore"


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      sliding_window=None, softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention call (query [B, H, Sq, D], key / value [B, Hkv, Sk, D]) on
    flashcore; returns (out [B, Sq, H, Dv], None)."""
    if dropout:
        raise NotImplementedError(f"{NAME}: attention dropout {dropout} is not supported (flashcore has no "
                                  "dropout; use eval mode or attention_dropout=0)")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = (-1, -1)
    if sliding_window is not None:
        w = int(sliding_window)
        window = (w - 1, 0) if causal else (w, w)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    options = dict(causal=causal, window=window, scale=scaling, softcap=softcap or None,
                   sinks=None if s_aux is None else s_aux.float())
    layout = None if attention_mask is None else _mask_layout(attention_mask, q.shape[0], q.shape[1], k.shape[1],
                                                              causal, window)
    if layout is None:
        return _api.attention(q, k, v, **options), None
    qvalid, kvalid, cu_q, cu_k = layout
    b, sq, h, _ = q.shape
    out = _api.attention(q[qvalid].unsqueeze(0), k[kvalid].unsqueeze(0), v[kvalid].unsqueeze(0),
                         cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **options)
    full = out.new_zeros((b, sq, h, v.shape[-1]))
    full[qvalid] = out[0]
    return full, None


# The last masks analysed (a model's layers share one mask object per forward): (weak
# reference, version, band, layout).
_LAYOUTS: list = []


def _mask_layout(mask, b, sq, sk, causal, window):
    """None when `mask` hides nothing beyond the band (causal / window); else (qvalid [B, Sq],
    kvalid [B, Sk], cu_seqlens_q, cu_seqlens_k) of the varlen call it equals. Refuses a mask
    that is neither."""
    band = (b, sq, sk, causal, window)
    for ref, version, key, layout in _LAYOUTS:
        if ref() is mask and version == mask._version and key == band:
            return layout
    layout = _analyse(mask, b, sq, sk, causal, window)
    _LAYOUTS.insert(0, (weakref.ref(mask), mask._version, band, layout))
    del _LAYOUTS[4:]
    return layout


def _analyse(mask, b, sq, sk, causal, window):
    if not isinstance(mask, torch.Tensor) or mask.dim() != 4 or tuple(mask.shape[-2:]) != (sq, sk) \
            or mask.shape[0] not in (1, b):
        raise NotImplementedError(f"{NAME}: attention_mask must be a 4-d tensor [B, 1, {sq}, {sk}] (or None), got "
                                  f"{type(mask).__name__} {tuple(getattr(mask, 'shape', ()))}")
    if mask.dtype != torch.bool:
        low = mask <= torch.finfo(mask.dtype).min / 2
        if not bool(torch.all(low | (mask == 0))):
            raise NotImplementedError(f"{NAME}: attention_mask carries additive biases (values other than 0 and "
                                      "-inf), which flashcore does not take")
        mask = ~low
    if mask.shape[1] != 1 and not bool((mask == mask[:, :1]).all()):
        raise NotImplementedError(f"{NAME}: attention_mask differs between heads")
    m = mask[:, 0].expand(b, sq, sk)
    qvalid, kvalid = m.any(dim=2), m.any(dim=1)
    if causal:
        # The queries are the last Sq tokens; a query whose own token is padding (right padding,
        # holes) is one: dropped (its output is 0), its row not compared.
        own = torch.zeros_like(qvalid)
        n = min(sq, sk)
        own[:, sq - n:] = kvalid[:, sk - n:]
        qvalid &= own
    # The band in each entry's packed positions (its valid queries and keys, in order), bottom-right
    # aligned: packed query i is aligned with packed key i + nk - nq.
    nq, nk = qvalid.sum(1, keepdim=True), kvalid.sum(1, keepdim=True)
    rel = (kvalid.cumsum(1) - 1)[:, None, :] - (qvalid.cumsum(1) - 1 + nk - nq)[:, :, None]
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    want = qvalid[:, :, None] & kvalid[:, None, :]
    if right >= 0:
        want &= rel <= right
    if left >= 0:
        want &= rel >= -left
    if not torch.equal(want, m & qvalid[:, :, None]):
        raise NotImplementedError(
            f"{NAME}: attention_mask is not a{' causal' if causal else ''} mask"
            f"{f' with window {window}' if window != (-1, -1) else ''} over padded sequences (packed sequences, "
            "chunked or custom masks are not expressible as flashcore's varlen batches)")
    if bool(qvalid.all()) and bool(kvalid.all()):
        return None
    zero = torch.zeros(1, dtype=torch.int32, device=m.device)
    cu_q = torch.cat([zero, nq[:, 0].cumsum(0).to(torch.int32)])
    cu_k = torch.cat([zero, nk[:, 0].cumsum(0).to(torch.int32)])
    return qvalid, kvalid, cu_q, cu_k


def register(name: str = NAME) -> str:
    """Registers flashcore with transformers under `name` (the attention call and the mask
    builder); returns the name. Done for NAME on import."""
    if "flash" in name:
        raise ValueError(f"name: {name!r} contains 'flash', which transformers 5 reads as a Hub kernel")
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


register()
