"""flashcore.integrations.transformers: small random models built from configs here (no
downloads) run on attn_implementation="fcore" and give the logits (fp32, within 1e-4) and the
greedy tokens (with the model's own cache) of transformers' own implementation: `sdpa` for a
Llama-style model (GQA, causal, padding masks as varlen), `eager` where sdpa cannot run the
model (Gemma 2: softcap and sliding windows; gpt-oss: sinks and sliding windows; transformers
refuses sdpa for both). Skips where transformers is not installed (requirements-test.txt pins
it; torch is not pinned there)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the transformers tests need it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(pip install -r requirements-test.txt)")

import flashcore.integrations.transformers as fct  # noqa: E402  (registers "fcore")

TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, initializer_range=0.2)


def _model(kind):
    torch.manual_seed(1234)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**TINY)
        return transformers.LlamaForCausalLM(cfg).eval(), "sdpa"
    if kind == "gemma2":  # (a softcap that bends these small scores; 0.05: greedy tokens that vary)
        cfg = transformers.Gemma2Config(**dict(TINY, initializer_range=0.05), sliding_window=6,
                                        attn_logit_softcapping=0.5, final_logit_softcapping=30.0,
                                        query_pre_attn_scalar=16)
        assert "sliding_attention" in cfg.layer_types
        return transformers.Gemma2ForCausalLM(cfg).eval(), "eager"
    cfg = transformers.GptOssConfig(**TINY, num_local_experts=4, num_experts_per_tok=2, sliding_window=6,
                                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    assert "sliding_attention" in cfg.layer_types
    model = transformers.GptOssForCausalLM(cfg).eval()
    with torch.no_grad():  # sinks that matter: about the rows' own log-sum-exp
        for layer in model.model.layers:
            layer.self_attn.sinks.uniform_(0.0, 3.0)
    return model, "eager"


def _inputs(padding):
    gen = torch.Generator().manual_seed(99)
    ids = torch.randint(0, TINY["vocab_size"], (3, 24), generator=gen)
    mask = torch.ones(3, 24, dtype=torch.long)
    if padding:
        mask[1, :5] = 0   # left padding
        mask[2, :2] = 0
    return ids, mask


def _logits(model, impl, ids, mask):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits


@pytest.mark.parametrize("kind", ["llama", "gemma2", "gpt_oss"])
@pytest.mark.parametrize("padding", [False, True], ids=["full", "padded"])
def test_logits_match_transformers(kind, padding):
    model, peer = _model(kind)
    ids, mask = _inputs(padding)
    want = _logits(model, peer, ids, mask)
    got = _logits(model, fct.NAME, ids, mask)
    valid = mask.bool()  # padded positions' outputs are no one's (sdpa's differ from eager's there)
    err = ((got - want)[valid].norm() / want[valid].norm()).item()
    assert err <= 1e-4, f"{kind}: logits rel_err {err:.2e} against {peer}"


@pytest.mark.parametrize("kind", ["gemma2", "gpt_oss"])
def test_the_variants_matter(kind):
    """The models above are ones where the variants change the logits by far more than the
    tolerance: without its softcap (Gemma 2) or its sinks (gpt-oss) the peer's logits move."""
    model, peer = _model(kind)
    ids, mask = _inputs(True)
    want = _logits(model, peer, ids, mask)
    with torch.no_grad():
        for layer in model.model.layers:
            if kind == "gemma2":
                layer.self_attn.attn_logit_softcapping = None
            else:
                layer.self_attn.sinks.fill_(float("-inf"))
    plain = _logits(model, peer, ids, mask)
    valid = mask.bool()
    assert ((plain - want)[valid].norm() / want[valid].norm()).item() > 1e-2


@pytest.mark.parametrize("kind", ["llama", "gemma2", "gpt_oss"])
def test_greedy_generation_same_tokens(kind):
    """Greedy decoding with the model's cache (prefill with padding, then one token per step:
    Sq = 1 against the cache, sliding windows over it) gives the peer's tokens."""
    model, peer = _model(kind)
    ids, mask = _inputs(True)
    runs = {}
    for impl in (peer, fct.NAME):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            runs[impl] = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                        pad_token_id=0)
    new = runs[peer][:, ids.shape[1]:]
    assert len(torch.unique(new)) > 3, "degenerate model: the same few tokens over and over"
    assert torch.equal(runs[fct.NAME], runs[peer])


def test_llama_mask_with_holes_and_gradients():
    """A padding mask with holes (causal attention stays exact in the packed positions), and
    training gradients through the model (flashcore's autograd) against sdpa's."""
    model, _ = _model("llama")
    ids, mask = _inputs(True)
    mask[0, 7] = 0
    mask[0, 15:17] = 0
    want = _logits(model, "sdpa", ids, mask)
    got = _logits(model, fct.NAME, ids, mask)
    valid = mask.bool()
    assert ((got - want)[valid].norm() / want[valid].norm()).item() <= 1e-4
    grads = {}
    for impl in ("sdpa", fct.NAME):
        model.set_attn_implementation(impl)
        model.zero_grad()
        model(ids, labels=ids).loss.backward()
        grads[impl] = torch.cat([p.grad.flatten() for p in model.parameters()])
    err = ((grads[fct.NAME] - grads["sdpa"]).norm() / grads["sdpa"].norm()).item()
    assert err <= 1e-4, f"gradients rel_err {err:.2e}"


def test_bf16_no_further_from_sdpa_than_eager():
    """bf16 Llama: flashcore's logits are no further from sdpa's than transformers' eager ones
    are (each rounds differently; the bound allows 25 % more)."""
    model, _ = _model("llama")
    model = model.to(torch.bfloat16)
    ids, mask = _inputs(True)
    valid = mask.bool()
    ref = _logits(model, "sdpa", ids, mask).float()[valid]

    def dist(impl):
        x = _logits(model, impl, ids, mask).float()[valid]
        return ((x - ref).norm() / ref.norm()).item()

    ours, eager = dist(fct.NAME), dist("eager")
    print(f"bf16 logits rel_err against sdpa: fcore {ours:.3e}, eager {eager:.3e}")
    assert ours <= 1.25 * eager + 1e-3, f"fcore {ours:.2e} vs eager {eager:.2e} (relative to sdpa)"


def test_refusals_named():
    model, _ = _model("llama")
    attn = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 6, 16)
    k = v = torch.randn(1, 2, 6, 16)
    with pytest.raises(NotImplementedError, match="^fcore: attention dropout"):
        fct.attention_forward(attn, q, k, v, None, dropout=0.1)
    chunked = torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()
    chunked[:, :, 3:, :3] = False  # two causal chunks: not causal over padded sequences
    with pytest.raises(NotImplementedError, match="^fcore: attention_mask is not a causal mask"):
        fct.attention_forward(attn, q, k, v, chunked)
    bias = torch.zeros(1, 1, 6, 6)
    bias[..., 0] = -1.0
    with pytest.raises(NotImplementedError, match="^fcore: attention_mask carries additive biases"):
        fct.attention_forward(attn, q, k, v, bias)
    with pytest.raises(ValueError, match="contains 'flash'"):
        fct.register("flashcore")
