"""ALiBi on real HuggingFace GPT-2 / BERT models (small local configs) and plain PyTorch layers."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as TF
from torch import nn

import functional as fn
from functional.alibi import AlibiBias, AlibiMultiheadAttention, DisabledPositionEmbedding
from surgery import NoEffectWarning

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    BertConfig,
    BertForMaskedLM,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
)

VOCAB = 40


def gpt2(n_positions: int = 32, n_head: int = 4, impl: str = "sdpa", **kw) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=n_positions,
        n_embd=16,
        n_layer=2,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        **kw,
    )
    model = GPT2LMHeadModel(config)
    model.set_attn_implementation(impl)
    return model.eval()


def bert(max_positions: int = 32, heads: int = 4, impl: str = "sdpa", cls=BertForMaskedLM):
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=32,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = cls(config)
    model.set_attn_implementation(impl)
    return model.eval()


def paper_slopes(n: int) -> list[float]:
    """Press et al.'s reference code (attention_with_linear_biases, fairseq), written out."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def slow_bias(heads: int, q_len: int, k_len: int) -> torch.Tensor:
    """-m_h |i - j| by explicit loops over heads, queries and keys (queries at the end)."""
    slopes = paper_slopes(heads)
    out = torch.empty(heads, q_len, k_len, dtype=torch.float64)
    for h in range(heads):
        for t in range(q_len):
            i = k_len - q_len + t
            for j in range(k_len):
                out[h, t, j] = -slopes[h] * abs(i - j)
    return out


# ----------------------------------------------------------------------------- slopes and bias


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16, 32])
def test_slopes_power_of_two_are_2_pow_minus_8h_over_H(heads):
    expected = torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)])
    torch.testing.assert_close(fn.alibi_slopes(heads, dtype=torch.float64), expected.double())


def test_slopes_h8_paper_values():
    assert fn.alibi_slopes(8).tolist() == [
        1 / 2,
        1 / 4,
        1 / 8,
        1 / 16,
        1 / 32,
        1 / 64,
        1 / 128,
        1 / 256,
    ]


@pytest.mark.parametrize("heads", [3, 5, 6, 7, 12, 20, 24])
def test_slopes_non_power_of_two_follow_the_paper(heads):
    got = fn.alibi_slopes(heads, dtype=torch.float64)
    torch.testing.assert_close(got, torch.tensor(paper_slopes(heads), dtype=torch.float64))


def test_slopes_h6_and_h12_explicit():
    assert fn.alibi_slopes(6).tolist() == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    expected_12 = [2.0**-k for k in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    torch.testing.assert_close(
        fn.alibi_slopes(12, dtype=torch.float64), torch.tensor(expected_12).double()
    )


@pytest.mark.parametrize(("heads", "q_len", "k_len"), [(4, 7, 7), (6, 3, 9), (12, 1, 5), (8, 0, 4)])
def test_bias_matches_slow_loops(heads, q_len, k_len):
    got = fn.alibi_bias(heads, q_len, k_len, dtype=torch.float64)
    torch.testing.assert_close(got, slow_bias(heads, q_len, k_len))


def test_bias_keeps_dtype_and_validates():
    assert fn.alibi_bias(2, 3, dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="key_length must be >= query_length"):
        fn.alibi_bias(2, 5, 3)
    with pytest.raises(ValueError, match="num_heads must be >= 1"):
        fn.alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        fn.alibi_slopes(2.0)
    with pytest.raises(TypeError, match="dtype must be a floating"):
        fn.alibi_slopes(2, dtype=torch.int64)


def test_bias_module_caches_per_length_and_grows():
    module = AlibiBias(num_heads=4, max_sequence_length=64)
    first = module(10)
    storage = module.bias.data_ptr()
    module(10)
    module(6, 10)
    assert module.bias.data_ptr() == storage  # same length: no rebuild
    module(11)
    assert module.bias.shape[-1] == 20  # grew geometrically
    grown = module.bias.data_ptr()
    module(17)
    assert module.bias.data_ptr() == grown
    torch.testing.assert_close(first, fn.alibi_bias(4, 10))
    causal = module(5, causal=True)
    assert torch.isfinite(causal).all()
    assert (causal[:, 0, 1:] == torch.finfo(torch.float32).min).all()
    with pytest.raises(ValueError, match="max_sequence_length=64"):
        module(65)
    assert module.state_dict() == {}


# ----------------------------------------------------------------------------- GPT-2


def test_gpt2_runs_past_its_position_table():
    model = gpt2(n_positions=32)
    fn.apply_alibi(model, max_sequence_length=128)
    ids = torch.randint(0, VOCAB, (2, 100))
    out = model(ids, labels=ids)
    assert out.logits.shape == (2, 100, VOCAB)
    out.loss.backward()
    with pytest.raises(ValueError, match="max_sequence_length=128"):
        model(torch.randint(0, VOCAB, (1, 129)))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_gpt2_stays_causal(impl):
    model = fn.apply_alibi(gpt2(impl=impl), 128)
    ids = torch.randint(0, VOCAB, (2, 90))
    changed = ids.clone()
    changed[:, 50] = (changed[:, 50] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :50], b[:, :50], rtol=0, atol=0)
    assert (a[:, 50:] - b[:, 50:]).abs().amax() > 1e-3


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_gpt2_padding_is_masked_and_alibi_ignores_absolute_offsets(impl):
    model = fn.apply_alibi(gpt2(impl=impl), 64)
    ids = torch.randint(1, VOCAB, (1, 20))
    pad = 6
    padded = torch.cat([torch.zeros(1, pad, dtype=torch.long), ids], dim=1)
    mask = torch.cat(
        [torch.zeros(1, pad, dtype=torch.long), torch.ones(1, 20, dtype=torch.long)], 1
    )
    other_pad = padded.clone()
    other_pad[:, :pad] = torch.randint(1, VOCAB, (1, pad))
    with torch.no_grad():
        alone = model(ids).logits
        left = model(padded, attention_mask=mask).logits[:, pad:]
        left_other = model(other_pad, attention_mask=mask).logits[:, pad:]
    # Padded positions do not reach the real tokens, and ALiBi only sees relative distances.
    torch.testing.assert_close(left, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(left_other, left, atol=1e-6, rtol=0)


def test_gpt2_position_table_no_longer_contributes_nor_trains():
    model = gpt2()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (2, 16))
    model(ids, labels=ids).loss.backward()
    opt.step()
    old_weight = model.transformer.wpe.weight
    assert old_weight in opt.state
    keys_before = list(model.state_dict())
    fn.apply_alibi(model, 128, optimizers=opt)
    wpe = model.transformer.wpe
    assert isinstance(wpe, DisabledPositionEmbedding)
    assert all(p is not old_weight for p in model.parameters())
    held = [p for g in opt.param_groups for p in g["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()}
    assert len(held) == len(list(model.parameters()))
    assert old_weight not in opt.state
    assert list(model.state_dict()) == keys_before
    with torch.no_grad():
        before = model(ids).logits
        wpe.weight.normal_(std=10.0)
        after = model(ids).logits
    torch.testing.assert_close(before, after, rtol=0, atol=0)


def test_gpt2_checkpoints_load_across_the_transform():
    model = gpt2()
    pre = copy.deepcopy(model.state_dict())
    fn.apply_alibi(model, 64)
    model.load_state_dict(pre)  # strict: a checkpoint from before loads after
    post = model.state_dict()
    fresh = fn.apply_alibi(gpt2(), 64)
    fresh.load_state_dict(post)
    ids = torch.randint(0, VOCAB, (1, 40))
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids).logits, model(ids).logits)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("heads", [4, 2])
def test_gpt2_attention_output_matches_reference_attention(impl, heads):
    model = fn.apply_alibi(gpt2(n_head=heads, impl=impl), 64)
    attn = model.transformer.h[1].attn
    captured = {}

    def hook(module, args, kwargs, output):
        captured["x"] = args[0] if args else kwargs["hidden_states"]
        captured["y"] = output[0]

    handle = attn.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 45)))
    handle.remove()
    x = captured["x"].double()
    b, n, d = x.shape
    w, bias = attn.c_attn.weight.double(), attn.c_attn.bias.double()
    q, k, v = (x @ w + bias).split(d, dim=-1)
    q, k, v = (t.view(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // heads) + slow_bias(heads, n, n)
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    ref = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
    ref = ref @ attn.c_proj.weight.double() + attn.c_proj.bias.double()
    torch.testing.assert_close(captured["y"].double(), ref, atol=1e-5, rtol=1e-5)


def test_gpt2_generation_with_cache_matches_full_recompute():
    model = fn.apply_alibi(gpt2(), 64)
    prompt = torch.randint(1, VOCAB, (1, 7))
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=True)
        ids = prompt
        for _ in range(8):
            nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    assert torch.equal(cached, ids)


def test_gpt2_bias_follows_model_device_and_dtype_and_is_shared():
    model = fn.apply_alibi(gpt2(), 64).double()
    biases = {id(m) for m in model.modules() if isinstance(m, AlibiBias)}
    assert len(biases) == 1  # one cache for all layers
    with torch.no_grad():
        out = model(torch.randint(0, VOCAB, (1, 20))).logits
    assert out.dtype == torch.float64
    cache = model.transformer.h[0].attn.alibi_bias.causal_bias
    assert cache.dtype == torch.float64 and cache.shape == (4, 20, 20)


def test_gpt2_cache_built_under_inference_mode_can_train_later():
    model = fn.apply_alibi(gpt2(), 64)
    ids = torch.randint(0, VOCAB, (2, 24))
    with torch.inference_mode():
        model(ids)
        model(ids, attention_mask=torch.ones_like(ids))
    model.train()
    model(ids, labels=ids).loss.backward()
    model(ids, attention_mask=torch.ones_like(ids), labels=ids).loss.backward()


def test_gpt2_base_model_and_weight_tying():
    model = gpt2()
    fn.apply_alibi(model, 64)
    assert model.lm_head.weight is model.transformer.wte.weight
    base = GPT2Model(model.config)
    fn.apply_alibi(base, 64)  # the root itself is the registered class
    assert isinstance(base.wpe, DisabledPositionEmbedding)
    assert base(torch.randint(0, VOCAB, (1, 50))).last_hidden_state.shape == (1, 50, 16)


def test_idempotent_and_limit_can_change():
    model = fn.apply_alibi(gpt2(), 64)
    ids = torch.randint(0, VOCAB, (1, 30))
    with torch.no_grad():
        first = model(ids).logits
    params = [id(p) for p in model.parameters()]
    with pytest.warns(NoEffectWarning, match="already uses ALiBi"):
        fn.apply_alibi(model, 64)
    assert [id(p) for p in model.parameters()] == params
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, first, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn.apply_alibi(model, 200)  # a new limit is a change, not a no-op
    assert model(torch.randint(0, VOCAB, (1, 150))).logits.shape[1] == 150


def test_unsupported_attention_implementation_is_refused_before_any_change():
    model = gpt2()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="'sdpa' and 'eager'"):
        fn.apply_alibi(model, 64)
    assert isinstance(model.transformer.wpe, nn.Embedding)
    assert not any(isinstance(m, AlibiBias) for m in model.modules())


def test_cross_attention_is_left_alone():
    model = gpt2(add_cross_attention=True)
    fn.apply_alibi(model, 64)
    block = model.transformer.h[0]
    assert isinstance(block.attn.alibi_bias, AlibiBias)
    assert not hasattr(block.crossattention, "alibi_bias")
    enc = torch.randn(2, 5, 16)
    out = model(torch.randint(0, VOCAB, (2, 40)), encoder_hidden_states=enc).logits
    assert out.shape == (2, 40, VOCAB)


# ----------------------------------------------------------------------------- BERT


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_bert_runs_long_is_bidirectional_and_masks_padding(impl):
    model = fn.apply_alibi(bert(max_positions=32, impl=impl), 128)
    ids = torch.randint(1, VOCAB, (2, 100))
    with torch.no_grad():
        logits = model(ids).logits
        changed = ids.clone()
        changed[:, 15] = (changed[:, 15] + 1) % VOCAB
        # Bidirectional: a later token changes earlier outputs.
        assert (model(changed).logits[:, :10] - logits[:, :10]).abs().amax() > 1e-6
        mask = torch.ones_like(ids)
        mask[:, 70:] = 0
        noise = ids.clone()
        noise[:, 70:] = torch.randint(1, VOCAB, (2, 30))
        padded = model(ids, attention_mask=mask).logits[:, :70]
        torch.testing.assert_close(model(noise, attention_mask=mask).logits[:, :70], padded)
        torch.testing.assert_close(model(ids[:, :70]).logits, padded, atol=1e-5, rtol=1e-5)
    assert logits.shape == (2, 100, VOCAB)


def test_bert_position_table_unused_and_weight_tying_kept():
    model = bert()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    table = model.bert.embeddings.position_embeddings.weight
    fn.apply_alibi(model, 64, optimizers=[opt])
    emb = model.bert.embeddings
    assert model.cls.predictions.decoder.weight is emb.word_embeddings.weight
    assert all(p is not table for g in opt.param_groups for p in g["params"])
    assert emb.position_ids.shape[-1] == 64 and emb.token_type_ids.shape[-1] == 64
    ids = torch.randint(0, VOCAB, (2, 50))
    with torch.no_grad():
        before = model(ids).logits
        emb.position_embeddings.weight.add_(5.0)
        torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)


def test_bert_attention_matches_reference():
    heads = 6
    model = fn.apply_alibi(bert(heads=heads, cls=BertModel), 64)
    attn = model.encoder.layer[0].attention.self
    captured = {}

    def hook(module, args, kwargs, output):
        captured["x"] = args[0] if args else kwargs["hidden_states"]
        captured["y"] = output[0]

    handle = attn.register_forward_hook(hook, with_kwargs=True)
    ids = torch.randint(1, VOCAB, (2, 33))
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0
    with torch.no_grad():
        model(ids, attention_mask=mask)
    handle.remove()
    x = captured["x"].double()
    b, n, d = x.shape
    q, k, v = (
        (x @ lin.weight.double().T + lin.bias.double()).view(b, n, heads, -1).transpose(1, 2)
        for lin in (attn.query, attn.key, attn.value)
    )
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // heads) + slow_bias(heads, n, n)
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
    ref = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
    torch.testing.assert_close(captured["y"].double(), ref, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- plain PyTorch


def reference_encoder_layer(layer, x, heads, attn_mask=None, key_padding_mask=None):
    """The stock layer's Python path with the ALiBi bias passed as an explicit float mask."""
    stock = nn.TransformerEncoderLayer(
        layer.self_attn.embed_dim,
        heads,
        layer.linear1.out_features,
        dropout=0.0,
        batch_first=layer.self_attn.batch_first,
        norm_first=layer.norm_first,
    )
    stock.load_state_dict(layer.state_dict())
    stock.train()  # the module-by-module path
    batched_first = layer.self_attn.batch_first
    n, length = (x.shape[0], x.shape[1]) if batched_first else (x.shape[1], x.shape[0])
    mask = slow_bias(heads, length, length).to(x.dtype)
    if attn_mask is not None:
        mask = mask + attn_mask
    if key_padding_mask is not None:
        mask = mask[None] + torch.zeros(n, 1, 1, length).masked_fill(
            key_padding_mask[:, None, None, :], float("-inf")
        )
    mask = mask.expand(n, heads, length, length).reshape(n * heads, length, length)
    return stock(x, src_mask=mask)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_matches_reference_in_eval_no_grad(batch_first, norm_first):
    heads = 4
    layer = nn.TransformerEncoderLayer(
        16, heads, 32, dropout=0.0, batch_first=batch_first, norm_first=norm_first
    )
    # The nested-tensor path (batch_first, post-norm) must be switched off by the transform.
    nested = batch_first and not norm_first
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=nested)
    assert encoder.use_nested_tensor == nested
    fn.apply_alibi(encoder, 64)
    encoder.eval()
    x = torch.randn(3, 20, 16) if batch_first else torch.randn(20, 3, 16)
    padding = torch.zeros(3, 20, dtype=torch.bool)
    padding[1, 15:] = True
    with torch.no_grad():
        got = encoder(x, src_key_padding_mask=padding)
        ref = x
        for block in encoder.layers:
            ref = reference_encoder_layer(block, ref, heads, key_padding_mask=padding)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_transformer_encoder_causal_mask_and_reaches_past_nothing():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    fn.apply_alibi(layer, 64)  # the root is the layer itself: converted in place
    x = torch.randn(2, 12, 16)
    causal = nn.Transformer.generate_square_subsequent_mask(12)
    with torch.no_grad():
        got = layer(x, src_mask=causal, is_causal=True)
        ref = reference_encoder_layer(layer, x, 2, attn_mask=causal)
        changed = x.clone()
        changed[:, 7] += 1.0
        later = layer(changed, src_mask=causal, is_causal=True)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(later[:, :7], got[:, :7], rtol=0, atol=0)


def test_multihead_attention_self_vs_cross():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    stock = copy.deepcopy(mha)
    model = nn.ModuleDict({"attn": mha})
    fn.apply_alibi(model, 32)
    assert isinstance(model["attn"], AlibiMultiheadAttention) and model["attn"] is mha
    x, memory = torch.randn(2, 6, 8), torch.randn(2, 4, 8)
    got_cross, _ = mha(x, memory, memory)
    torch.testing.assert_close(got_cross, stock(x, memory, memory)[0])
    got_self, weights = mha(x, x, x)
    mask = fn.alibi_bias(2, 6).repeat(2, 1, 1)
    torch.testing.assert_close(got_self, stock(x, x, x, attn_mask=mask)[0])
    assert weights.shape == (2, 6, 6)


def test_subclassed_layer_is_reported_not_silently_skipped():
    class MyLayer(nn.TransformerEncoderLayer):
        def forward(self, src, *args, **kwargs):
            return super().forward(src, *args, **kwargs)

    model = nn.Sequential(MyLayer(8, 2, 16))
    with pytest.warns(NoEffectWarning, match="MyLayer"):
        fn.apply_alibi(model, 16)


# ----------------------------------------------------------------------------- registry


class TinyAttention(nn.Module):
    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.qkv, self.alibi = heads, nn.Linear(dim, 3 * dim), None

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        mask = None if self.alibi is None else self.alibi(n, device=x.device, dtype=x.dtype)
        return (
            TF.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            .transpose(1, 2)
            .reshape(b, n, d)
        )


def tiny_converter(module, context):
    if isinstance(module.alibi, AlibiBias):
        return False
    module.alibi = context.bias(module.heads)
    return True


def test_registry_extension_with_a_user_class():
    model = nn.Sequential(TinyAttention(), TinyAttention())
    with pytest.warns(NoEffectWarning, match="register_alibi"):
        fn.apply_alibi(model, 16)
    fn.register_alibi(TinyAttention, tiny_converter)
    try:
        assert fn.alibi_registry()[TinyAttention] is tiny_converter
        with pytest.raises(ValueError, match="already has an ALiBi converter"):
            fn.register_alibi(TinyAttention, tiny_converter)
        fn.register_alibi(TinyAttention, tiny_converter, replace=True)
        fn.apply_alibi(model, 16)
        assert model[0].alibi is model[1].alibi  # one shared cache
        x = torch.randn(1, 5, 8)
        q, k, v = model[0].qkv(x).view(1, 5, 3, 2, -1).permute(2, 0, 3, 1, 4)
        ref = TF.scaled_dot_product_attention(q, k, v, attn_mask=slow_bias(2, 5, 5).float())
        torch.testing.assert_close(model[0](x), ref.transpose(1, 2).reshape(1, 5, 8))
    finally:
        fn.unregister_alibi(TinyAttention)
    assert TinyAttention not in fn.alibi_registry()
    with pytest.raises(KeyError, match="TinyAttention"):
        fn.unregister_alibi(TinyAttention)


def test_registry_validates_and_works_as_decorator():
    with pytest.raises(TypeError, match=r"module_class must be an nn\.Module subclass"):
        fn.register_alibi(int, tiny_converter)
    with pytest.raises(TypeError, match="converter must be callable"):
        fn.register_alibi(TinyAttention, 3)

    class Sub(TinyAttention):
        pass

    @fn.register_alibi(Sub)
    def convert_sub(module, context):
        module.alibi = context.bias(module.heads)
        return True

    try:
        model = fn.apply_alibi(nn.Sequential(Sub()), 8)
        assert isinstance(model[0].alibi, AlibiBias)
    finally:
        fn.unregister_alibi(Sub)


def test_a_builtin_converter_unregistered_stays_unregistered_until_registered_again():
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    builtin = fn.alibi_registry()[GPT2Attention]  # resolved: its module is imported
    fn.unregister_alibi(GPT2Attention)
    try:
        assert GPT2Attention not in fn.alibi_registry()  # not resolved again
        model = fn.apply_alibi(gpt2(), 64)
        assert isinstance(model.transformer.wpe, DisabledPositionEmbedding)
        assert not hasattr(model.transformer.h[0].attn, "alibi_bias")
    finally:
        fn.register_alibi(GPT2Attention, builtin)
    model = fn.apply_alibi(gpt2(), 64)
    assert isinstance(model.transformer.h[0].attn.alibi_bias, AlibiBias)


class TwoTowers(nn.Module):
    """A model-specific block whose ``pos`` projection a converter swaps out (shared by two names)."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Linear(8, 8)
        self.pos_again = self.pos
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        return self.head(self.pos(x) + self.pos_again(x))


def replace_pos(module, context):
    if module.pos.bias is None:
        return False  # already converted
    context.replace_module(module.pos, nn.Linear(8, 8, bias=False))
    return True


def test_replace_module_keeps_optimizers_consistent_and_replaces_every_alias():
    model = TwoTowers()
    old = model.pos
    opt = torch.optim.Adam(
        [{"params": model.pos.parameters(), "lr": 0.1}, {"params": model.head.parameters()}]
    )
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    fn.register_alibi(TwoTowers, replace_pos)
    try:
        fn.apply_alibi(model, 16, optimizers=opt)
        assert model.pos is model.pos_again and model.pos is not old
        assert model.pos.bias is None
        group0 = opt.param_groups[0]["params"]
        assert len(group0) == 1 and group0[0] is model.pos.weight  # joined old's group
        assert all(p not in opt.state for p in old.parameters())
        assert all(p in opt.state for p in model.head.parameters())
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        assert held == {id(p) for p in model.parameters()}
        with pytest.warns(NoEffectWarning, match="changed nothing"):
            fn.apply_alibi(model, 16, optimizers=opt)
    finally:
        fn.unregister_alibi(TwoTowers)


def test_parameters_a_converter_removes_in_place_leave_the_optimizers():
    def drop_head_bias(module, context):
        if module.head.bias is None:
            return False
        module.head.bias = None  # in place, not through context.replace_module
        return True

    model = TwoTowers()
    bias = model.head.bias
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    fn.register_alibi(TwoTowers, drop_head_bias)
    try:
        fn.apply_alibi(model, 16, optimizers=opt)
    finally:
        fn.unregister_alibi(TwoTowers)
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert held == {id(p) for p in model.parameters()}
    assert bias not in opt.state and model.head.weight in opt.state


def test_replace_module_of_a_module_outside_the_model_is_refused():
    def replace_stranger(module, context):
        context.replace_module(nn.Linear(8, 8), nn.Identity())
        return True

    model = TwoTowers()
    fn.register_alibi(TwoTowers, replace_stranger)
    try:
        with pytest.raises(ValueError, match="not a submodule of model"):
            fn.apply_alibi(model, 16)
    finally:
        fn.unregister_alibi(TwoTowers)


def test_no_effect_warning_names_supported_classes_and_how_to_register():
    with pytest.warns(NoEffectWarning) as record:
        fn.apply_alibi(nn.Sequential(nn.Linear(4, 4)), 16)
    message = str(record[0].message)
    for name in ("GPT2Model", "BertSelfAttention", "TransformerEncoderLayer", "register_alibi"):
        assert name in message


def test_argument_validation():
    model = gpt2()
    with pytest.raises(ValueError, match="max_sequence_length must be >= 1"):
        fn.apply_alibi(model, 0)
    with pytest.raises(TypeError, match="max_sequence_length must be an int"):
        fn.apply_alibi(model, 64.0)
    with pytest.raises(TypeError, match="optimizers"):
        fn.apply_alibi(model, 64, optimizers="adam")
    with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
        fn.apply_alibi("gpt2", 64)
    with pytest.raises(TypeError, match=r"torch\.compile"):
        fn.apply_alibi(torch.compile(model), 64)
    assert isinstance(model.transformer.wpe, nn.Embedding)  # refusals changed nothing


def test_seed_train_sequence_length_scaling_recipe():
    """Issue 14 #5: the seed's ``train_sequence_length_scaling`` is a data-side recipe: every
    training batch (batch, L) is reshaped to (batch / scaling, L * scaling) with no token lost
    (``apply_seq_length_warmup(..., truncate=False)``); the ALiBi model trains on the short rows
    and evaluates on sequences longer than both the training rows and its old position table."""
    train_sequence_length_scaling = 0.25
    max_sequence_length = 64
    torch.manual_seed(0)
    model = fn.apply_alibi(gpt2(n_positions=16), max_sequence_length=max_sequence_length).train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, 32), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    short = fn.apply_seq_length_warmup(
        batch, int(32 * train_sequence_length_scaling), truncate=False
    )
    assert short["input_ids"].shape == (8, 8)
    assert torch.equal(short["input_ids"].reshape(2, 32), ids)  # every token kept, in order
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = model(**short, labels=short["input_ids"]).loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    model.eval()
    with torch.no_grad():
        long = torch.randint(0, VOCAB, (1, max_sequence_length), generator=g)
        assert model(long).logits.shape == (1, max_sequence_length, VOCAB)
