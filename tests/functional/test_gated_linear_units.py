"""Gated linear units in real HuggingFace BERT models (small local configs) and torch encoders."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as TF
from torch import nn

import functional as fn
from functional._transformer_layers import ModularTransformerEncoderLayer
from functional.gated_linear_units import GatedLinear
from surgery import NoEffectWarning, remap_state_dict
from tests.functional._model_checks import optimizer_ids

transformers = pytest.importorskip("transformers")
from transformers import BertConfig, BertForMaskedLM  # noqa: E402
from transformers.models.bert.modeling_bert import BertOutput  # noqa: E402

VOCAB = 40


def bert(**kw) -> BertForMaskedLM:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **kw,
    )
    return BertForMaskedLM(config).eval()


def encoder(batch_first: bool = True, norm_first: bool = False, activation="relu"):
    layer = nn.TransformerEncoderLayer(
        8,
        2,
        16,
        dropout=0.0,
        batch_first=batch_first,
        norm_first=norm_first,
        activation=activation,
    )
    nested = batch_first and not norm_first
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=nested).eval()


# ----------------------------------------------------------------------------- the layer


def test_gated_linear_formula_and_shared_value_parameters():
    linear = nn.Linear(5, 7)
    layer = GatedLinear.from_linear(linear, torch.sigmoid, gate_bias=True)
    assert layer.weight is linear.weight and layer.bias is linear.bias
    x = torch.randn(3, 4, 5)
    expected = torch.sigmoid(x @ layer.gate.weight.T + layer.gate.bias) * linear(x)
    torch.testing.assert_close(layer(x), expected)
    assert torch.equal(layer.gate.bias, torch.zeros(7))
    assert sorted(layer.state_dict()) == ["bias", "gate.bias", "gate.weight", "weight"]


def test_gate_initialisation_scale_and_generator():
    linear = nn.Linear(64, 128)
    with torch.no_grad():
        linear.weight.normal_(std=0.02)
    a = GatedLinear.from_linear(linear, TF.gelu, generator=torch.Generator().manual_seed(3))
    b = GatedLinear.from_linear(linear, TF.gelu, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.gate.weight, b.gate.weight)
    assert a.gate.bias is None
    assert abs(a.gate.weight.std().item() - linear.weight.std().item()) < 0.002
    with torch.no_grad():
        linear.weight.zero_()  # degenerate scale: falls back to 1/sqrt(in_features)
    c = GatedLinear.from_linear(linear, TF.gelu)
    assert abs(c.gate.weight.std().item() - 64**-0.5) < 0.02


def test_value_bias_options():
    linear = nn.Linear(4, 6)
    assert GatedLinear.from_linear(linear, TF.relu, value_bias=False).bias is None
    no_bias = nn.Linear(4, 6, bias=False)
    added = GatedLinear.from_linear(no_bias, TF.relu, value_bias=True)
    assert torch.equal(added.bias, torch.zeros(6))
    kept = GatedLinear.from_linear(no_bias, TF.relu)
    assert kept.bias is None and "bias" in kept._parameters
    assert sorted(kept.state_dict()) == ["gate.weight", "weight"]


# ----------------------------------------------------------------------------- BERT


def test_bert_value_path_is_the_original_projection():
    model = bert()
    dense = [layer.intermediate.dense for layer in model.bert.encoder.layer]
    values = [(d.weight.clone(), d.bias.clone()) for d in dense]
    acts = [type(layer.intermediate.intermediate_act_fn) for layer in model.bert.encoder.layer]
    outputs = [layer.output for layer in model.bert.encoder.layer]
    fn.apply_gated_linear_units(model)
    for layer, old, (w, b), act, out in zip(
        model.bert.encoder.layer, dense, values, acts, outputs, strict=True
    ):
        new = layer.intermediate.dense
        assert isinstance(new, GatedLinear)
        assert new.weight is old.weight and new.bias is old.bias
        assert torch.equal(new.weight, w) and torch.equal(new.bias, b)
        assert isinstance(new.activation, act)  # the block's own activation, now on the gate
        assert isinstance(layer.intermediate.intermediate_act_fn, nn.Identity)
        assert layer.output is out and isinstance(out, BertOutput)  # dropout, LayerNorm, residual
        x = torch.randn(2, 5, 16)
        expected = new.activation(x @ new.gate.weight.T) * (x @ w.T + b)
        torch.testing.assert_close(layer.intermediate(x), expected)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_bert_optimizer_consistency_and_training_step():
    model = bert()
    model.train()
    decay = [p for n, p in model.named_parameters() if "LayerNorm" not in n and "bias" not in n]
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or "bias" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-2,
    )
    ids = torch.randint(0, VOCAB, (4, 12))
    model(ids, labels=ids).loss.backward()
    opt.step()
    value_weight = model.bert.encoder.layer[0].intermediate.dense.weight
    moment = opt.state[value_weight]["exp_avg"].clone()
    fn.apply_gated_linear_units(model, opt)
    assert sorted(optimizer_ids(opt)) == sorted(id(p) for p in model.parameters())
    assert len(optimizer_ids(opt)) == len(list(model.parameters()))
    assert torch.equal(opt.state[value_weight]["exp_avg"], moment)  # state kept
    gate = model.bert.encoder.layer[0].intermediate.dense.gate.weight
    assert any(p is gate for p in opt.param_groups[0]["params"])  # the group of the projection
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert gate.grad is not None and gate.grad.abs().sum() > 0
    assert losses[-1] < losses[0]


def test_bert_idempotent_and_checkpoint_remap():
    model = bert()
    pre = copy.deepcopy(model.state_dict())
    fn.apply_gated_linear_units(model, act_fn="silu", gated_layer_bias=True)
    params = [id(p) for p in model.parameters()]
    with pytest.warns(NoEffectWarning, match="already gated"):
        fn.apply_gated_linear_units(model)
    assert [id(p) for p in model.parameters()] == params
    gate_before = model.bert.encoder.layer[1].intermediate.dense.gate.weight.clone()
    model.load_state_dict(remap_state_dict(pre, model))  # strict
    torch.testing.assert_close(
        model.bert.encoder.layer[1].intermediate.dense.gate.weight, gate_before
    )
    ids = torch.randint(0, VOCAB, (2, 9))
    assert model(ids).logits.shape == (2, 9, VOCAB)


# ----------------------------------------------------------------------------- torch encoders


def reference_ffn(layer, x):
    gated = layer.linear1
    hidden = gated.activation(TF.linear(x, gated.gate.weight, gated.gate.bias))
    hidden = hidden * TF.linear(x, gated.weight, gated.bias)
    return TF.linear(hidden, layer.linear2.weight, layer.linear2.bias)


def self_attention(layer, x, padding):
    return layer.self_attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_glu_matches_reference_in_eval_no_grad(batch_first, norm_first):
    model = encoder(batch_first, norm_first)
    fn.apply_gated_linear_units(model)
    assert not model.use_nested_tensor
    x = torch.randn(3, 6, 8) if batch_first else torch.randn(6, 3, 8)
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[2, 4:] = True
    with torch.no_grad():
        got = model(x, src_key_padding_mask=padding)
        ref = x
        for layer in model.layers:
            assert isinstance(layer, ModularTransformerEncoderLayer)
            if norm_first:
                ref = ref + self_attention(layer, layer.norm1(ref), padding)
                ref = ref + reference_ffn(layer, layer.norm2(ref))
            else:
                ref = layer.norm1(ref + self_attention(layer, ref, padding))
                ref = layer.norm2(ref + reference_ffn(layer, ref))
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_encoder_activation_choice_and_optimizer():
    model = encoder(activation="gelu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fn.apply_gated_linear_units(model, opt, act_fn=torch.tanh, non_gated_layer_bias=False)
    layer = model.layers[0]
    assert layer.linear1.activation is torch.tanh and layer.linear1.bias is None
    assert sorted(optimizer_ids(opt)) == sorted(id(p) for p in model.parameters())
    model.train()
    loss = model(torch.randn(2, 5, 8)).pow(2).mean()
    loss.backward()
    opt.step()


def test_glu_and_alibi_compose_in_either_order():
    x = torch.randn(2, 7, 8)
    outputs = []
    for order in ("glu-first", "alibi-first"):
        torch.manual_seed(0)
        model = encoder()
        gen = torch.Generator().manual_seed(1)
        if order == "glu-first":
            fn.apply_gated_linear_units(model, generator=gen)
            fn.apply_alibi(model, 32)
        else:
            fn.apply_alibi(model, 32)
            fn.apply_gated_linear_units(model, generator=gen)
        assert isinstance(model.layers[0].self_attn, fn.AlibiMultiheadAttention)
        assert isinstance(model.layers[0].linear1, GatedLinear)
        with torch.no_grad():
            outputs.append(model(x))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)


def test_no_effect_warning_and_validation():
    with pytest.warns(NoEffectWarning, match="BertIntermediate"):
        fn.apply_gated_linear_units(nn.Sequential(nn.Linear(3, 3)))
    model = encoder()
    with pytest.raises(ValueError, match="act_fn must be a callable or one of"):
        fn.apply_gated_linear_units(model, act_fn="softmax")
    with pytest.raises(TypeError, match="act_fn must be a callable"):
        fn.apply_gated_linear_units(model, act_fn=3)
    with pytest.raises(TypeError, match="gated_layer_bias must be a bool"):
        fn.apply_gated_linear_units(model, gated_layer_bias=1)
    with pytest.raises(TypeError, match="non_gated_layer_bias must be a bool or None"):
        fn.apply_gated_linear_units(model, non_gated_layer_bias="yes")
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        fn.apply_gated_linear_units(model, generator=0)
    assert type(model.layers[0]) is nn.TransformerEncoderLayer  # refusals changed nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn.apply_gated_linear_units(model)


# ----------------------------------------------------------------------------- frozen and meta


def test_frozen_bert_gates_inherit_frozen_state_and_warn():
    """Issue 13 #4: fine-tuning only the head of a frozen BERT: the gates of the frozen
    feed-forward blocks are frozen, join no optimizer, and a warning names the blocks."""
    torch.manual_seed(0)
    model = bert()
    model.bert.requires_grad_(False)
    head = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(head, lr=1e-3)
    with pytest.warns(
        UserWarning, match=r"these layers are frozen.*encoder\.layer\.0\.intermediate\.dense"
    ):
        fn.apply_gated_linear_units(model, opt)
    gates = [m.gate for m in model.modules() if isinstance(m, GatedLinear)]
    assert len(gates) == 2
    assert not any(p.requires_grad for g in gates for p in g.parameters())
    assert set(optimizer_ids(opt)) == {id(p) for p in model.parameters() if p.requires_grad}


def test_partial_optimizer_orphan_gates_are_named():
    torch.manual_seed(0)
    model = encoder()
    opt = torch.optim.SGD(model.layers[0].parameters(), lr=0.1)
    with pytest.warns(
        UserWarning, match=r"no optimizer passed holds these layers.*layers\.1\.linear1"
    ):
        fn.apply_gated_linear_units(model, opt)
    held = set(optimizer_ids(opt))
    assert id(model.layers[0].linear1.gate.weight) in held
    assert id(model.layers[1].linear1.gate.weight) not in held
    assert model.layers[1].linear1.gate.weight.requires_grad


def test_meta_device_model_building():
    """Issue 13 #8: no ``.item()`` on meta weights; the forward runs on meta."""
    with torch.device("meta"):
        model = encoder()
    fn.apply_gated_linear_units(model, act_fn="silu")
    assert isinstance(model.layers[0].linear1, GatedLinear)
    assert all(p.is_meta for p in model.parameters())
    assert model(torch.empty(2, 5, 8, device="meta")).shape == (2, 5, 8)


# ----------------------------------------------------------------------------- reports and sharing


def test_skipped_subclass_reported_and_the_rest_converted():
    class OwnLayer(nn.TransformerEncoderLayer):
        """A subclass with its own behaviour: left alone and named."""

    own = OwnLayer(8, 2, 16, dropout=0.0, batch_first=True)
    model = nn.Sequential(own, nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True))
    with pytest.warns(NoEffectWarning) as record:
        fn.apply_gated_linear_units(model)
    messages = [str(w.message) for w in record]
    assert messages == [
        f"apply_gated_linear_units left these layers unchanged: {OwnLayer.__qualname__} "
        "(a subclass of nn.TransformerEncoderLayer with its own behaviour)"
    ]
    assert record[0].filename == __file__  # the warning points at the caller
    assert type(model[0].linear1) is nn.Linear and isinstance(model[1].linear1, GatedLinear)
    # again: the skipped layer and the already gated one are both reported, nothing else
    with pytest.warns(NoEffectWarning) as record:
        fn.apply_gated_linear_units(model)
    assert [str(w.message) for w in record] == [
        messages[0],
        "apply_gated_linear_units changed nothing: every feed-forward block it supports is "
        "already gated",
    ]


def test_projection_shared_by_two_blocks_is_gated_once_for_both():
    first = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, activation="relu")
    second = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, activation="relu")
    second.linear1 = first.linear1  # one projection, two blocks
    model = nn.Sequential(first, second).eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fn.apply_gated_linear_units(model, opt, generator=torch.Generator().manual_seed(0))
    gated = first.linear1
    assert isinstance(gated, GatedLinear) and second.linear1 is gated
    # the activation moved onto the gate in both blocks (not applied twice in the second)
    assert isinstance(first.activation, nn.Identity) and isinstance(second.activation, nn.Identity)
    assert isinstance(second, ModularTransformerEncoderLayer)
    assert optimizer_ids(opt) == [id(p) for p in model.parameters()]
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = second.norm1(x + second._sa_block(x, None, None))
        expected = second.norm2(hidden + second.linear2(gated(hidden)))
        torch.testing.assert_close(second(x), expected)
