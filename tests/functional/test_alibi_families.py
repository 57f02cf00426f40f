"""ALiBi beyond GPT-2/BERT: RoBERTa, DistilBERT, XLM-RoBERTa; models it refuses (rotary and
relative positions); the eager attention's dtype; the ``save_pretrained``/``from_pretrained``
round trip."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import functional as fn
from functional.alibi import AlibiBias, DisabledPositionEmbedding
from surgery import NoEffectWarning
from tests.functional._hf_models import (
    MAX_POSITIONS,
    ROTARY_OR_RELATIVE,
    hf_inputs,
    hf_logits,
    hf_model,
)

transformers = pytest.importorskip("transformers")

VOCAB = 40


def gpt2(impl: str = "sdpa", dtype: torch.dtype = torch.float32):
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).to(dtype)
    model.set_attn_implementation(impl)
    return model.eval()


# ------------------------------------------------------------------ the eager attention's dtype


class _RecordAttentionMatrices(TorchDispatchMode):
    """Records the dtype of every op output shaped like an attention matrix (B, H, L, L)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and tuple(t.shape) == self.shape:
                self.dtypes.append(t.dtype)
        return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_eager_attention_keeps_the_low_precision_attention_matrix(dtype):
    """Issue 27 item 4: no float32 (B, H, L, L) copy in a bf16/fp16 model, as in HF's eager."""
    model = fn.apply_alibi(gpt2("eager", dtype), 64)
    ids = torch.randint(0, VOCAB, (2, 12))
    record = _RecordAttentionMatrices((2, 4, 12, 12))
    with torch.no_grad(), record:
        model(ids)
    assert record.dtypes, "no attention matrix seen"
    assert set(record.dtypes) == {dtype}, record.dtypes


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_eager_attention_is_bit_exact_with_transformers_eager_given_the_bias(family):
    """The ALiBi eager function is HF's eager attention with the bias merged into the mask."""
    from functional.alibi.hf_attention import _alibi_eager_attention, _hf_mask

    module = __import__(f"transformers.models.{family}.modeling_{family}", fromlist=["x"])
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=gen).to(torch.bfloat16) for _ in range(3))
    holder = torch.nn.Module()
    holder.alibi_bias = AlibiBias(4, 64)
    padding = torch.zeros(2, 1, 9, 9, dtype=torch.bfloat16)
    padding[0, ..., :3] = torch.finfo(torch.bfloat16).min
    ours, ours_weights = _alibi_eager_attention(holder, q, k, v, padding, scaling=0.3)
    mask = _hf_mask(holder, holder.alibi_bias, q, k, padding, False)
    ref, ref_weights = module.eager_attention_forward(holder, q, k, v, mask, scaling=0.3)
    assert ours.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(ours, ref) and torch.equal(ours_weights, ref_weights)


# ------------------------------------------------------------- save_pretrained / from_pretrained


def test_from_pretrained_gives_a_plain_model_and_reapplying_restores_alibi(tmp_path):
    """Issue 24: the saved config does not carry ALiBi. Loading gives plain GPT-2 (using the
    saved, unused position table); re-applying ALiBi after loading gives the saved model back."""
    model = fn.apply_alibi(gpt2(), 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, VOCAB, (2, 20))
    model.train()
    model(ids, labels=ids).loss.backward()
    opt.step()
    model.eval()
    model.save_pretrained(tmp_path)

    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert not any(isinstance(m, AlibiBias) for m in loaded.modules())  # plain GPT-2
    assert type(loaded.transformer.wpe) is torch.nn.Embedding
    assert loaded.config._attn_implementation in ("sdpa", "eager")
    with torch.no_grad():
        expected = model(ids).logits
        assert not torch.allclose(loaded(ids).logits, expected)  # silently another model
        fn.apply_alibi(loaded, 64)
        assert isinstance(loaded.transformer.wpe, DisabledPositionEmbedding)
        torch.testing.assert_close(loaded(ids).logits, expected, rtol=0, atol=0)
        # and past the old position table, as before saving
        long_ids = torch.randint(0, VOCAB, (1, 50))
        torch.testing.assert_close(loaded(long_ids).logits, model(long_ids).logits, rtol=0, atol=0)
    assert list(loaded.state_dict()) == list(model.state_dict())


# ---------------------------------------------- RoBERTa, XLM-RoBERTa, DistilBERT (learned tables)

_NEW_FAMILIES = ("roberta", "xlm_roberta", "distilbert")


def _position_table(model: torch.nn.Module) -> torch.nn.Module:
    base = getattr(model, model.base_model_prefix)
    return base.embeddings.position_embeddings


def _attention_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if isinstance(m._modules.get("alibi_bias"), AlibiBias)]


@pytest.mark.parametrize("family", _NEW_FAMILIES)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_new_families_run_past_their_table_which_no_longer_counts_nor_trains(family, impl):
    model = hf_model(family, impl)
    table = _position_table(model).weight
    keys = list(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs = hf_inputs(family, 20)
    model.train()
    hf_logits(model, inputs).sum().backward()
    opt.step()
    momentum = {id(p): opt.state[p]["momentum_buffer"] for p in model.parameters()}
    model.eval()
    fn.apply_alibi(model, 3 * MAX_POSITIONS, optimizers=opt)
    assert isinstance(_position_table(model), DisabledPositionEmbedding)
    assert list(model.state_dict()) == keys  # the table's key is kept
    held = [p for g in opt.param_groups for p in g["params"]]
    assert all(p is not table for p in held)
    assert {id(p) for p in held} == {id(p) for p in model.parameters() if p.requires_grad}
    assert all(opt.state[p]["momentum_buffer"] is momentum[id(p)] for p in held)
    heads = {m.alibi_bias.num_heads for m in _attention_layers(model)}
    assert heads == {4} and len(_attention_layers(model)) == 2
    long = hf_inputs(family, 3 * MAX_POSITIONS)  # past the old table
    with torch.no_grad():
        before = hf_logits(model, long)
        _position_table(model).weight.add_(5.0)
        torch.testing.assert_close(hf_logits(model, long), before, rtol=0, atol=0)
    model.train()
    loss = hf_logits(model, long).float().logsumexp(-1).mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)


def _projections(attention: torch.nn.Module) -> tuple[torch.nn.Linear, ...]:
    names = (
        ("q_lin", "k_lin", "v_lin") if hasattr(attention, "q_lin") else ("query", "key", "value")
    )
    return tuple(getattr(attention, name) for name in names)


@pytest.mark.parametrize("family", _NEW_FAMILIES)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_new_families_attention_matches_a_reference_with_padding(family, impl):
    from tests.functional.test_alibi import slow_bias

    model = fn.apply_alibi(hf_model(family, impl), 64)
    attention = _attention_layers(model)[1]
    captured = {}

    def hook(module, args, kwargs, output):
        captured["x"] = args[0] if args else kwargs["hidden_states"]
        captured["y"] = output[0]

    handle = attention.register_forward_hook(hook, with_kwargs=True)
    inputs = hf_inputs(family, 37)
    mask = torch.ones_like(inputs["input_ids"])
    mask[1, 30:] = 0
    with torch.no_grad():
        model(**inputs, attention_mask=mask)
    handle.remove()
    x = captured["x"].double()
    b, n, d = x.shape
    q, k, v = (
        (x @ lin.weight.double().T + lin.bias.double()).view(b, n, 4, -1).transpose(1, 2)
        for lin in _projections(attention)
    )
    scores = q @ k.transpose(-1, -2) / (d // 4) ** 0.5 + slow_bias(4, n, n)
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
    reference = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
    y = captured["y"]
    if hasattr(attention, "out_lin"):  # DistilBERT's attention module projects its output
        reference = (
            reference @ attention.out_lin.weight.double().T + attention.out_lin.bias.double()
        )
    torch.testing.assert_close(y.double(), reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", _NEW_FAMILIES)
def test_new_families_are_registry_entries_users_can_remove(family):
    model = hf_model(family)
    attention_class = type(_projections_owner(model))
    assert attention_class in fn.alibi_registry()
    converter = fn.alibi_registry()[attention_class]
    fn.unregister_alibi(attention_class)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoEffectWarning)
            fn.apply_alibi(model, 64)
        assert not _attention_layers(model)  # the table is off, the attention left alone
    finally:
        fn.register_alibi(attention_class, converter)
    assert attention_class in fn.alibi_registry()


def _projections_owner(model: torch.nn.Module) -> torch.nn.Module:
    return next(m for m in model.modules() if type(m).__name__.endswith("SelfAttention"))


# ---------------------------------------------------- rotary and relative positions: refused


@pytest.mark.parametrize("family", ROTARY_OR_RELATIVE)
def test_rotary_and_relative_models_are_refused_unchanged(family):
    model = hf_model(family)
    state = copy.deepcopy(model.state_dict())
    structure = [(name, type(m)) for name, m in model.named_modules()]
    inputs = hf_inputs(family)
    with torch.no_grad():
        before = hf_logits(model, inputs)
    with pytest.warns(NoEffectWarning, match="rotary|relative") as caught:
        fn.apply_alibi(model, 64)
    assert "two position schemes" in str(caught[0].message)
    assert [(name, type(m)) for name, m in model.named_modules()] == structure
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        torch.testing.assert_close(hf_logits(model, inputs), before, rtol=0, atol=0)


def test_a_converter_registered_for_a_rotary_model_is_refused_before_any_change():
    model = hf_model("llama")
    attention_class = type(model.model.layers[0].self_attn)
    fn.register_alibi(attention_class, lambda m, c: c.bias_attention_interface(m, 4))
    try:
        with pytest.raises(ValueError, match="two position schemes"):
            fn.apply_alibi(model, 64)
    finally:
        fn.unregister_alibi(attention_class)
    assert not _attention_layers(model)
    assert attention_class not in fn.alibi_registry()


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_roberta_as_a_decoder_stays_causal(impl):
    config = transformers.RobertaConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=24, max_position_embeddings=34, is_decoder=True,
    )  # fmt: skip
    model = transformers.RobertaForCausalLM(config).eval()
    model.set_attn_implementation(impl)
    fn.apply_alibi(model, 64)
    ids = torch.randint(2, 39, (1, 50), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, 30] += 1
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    assert torch.equal(a[:, :30], b[:, :30])  # no position sees a later one
    assert not torch.allclose(a[:, 30:], b[:, 30:])
