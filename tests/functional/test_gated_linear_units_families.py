"""Gated linear units on RoBERTa, XLM-RoBERTa and DistilBERT (small local configs)."""

from __future__ import annotations

import pytest
import torch

import functional as fn
from functional.gated_linear_units import _FEED_FORWARD_BLOCKS, GatedLinear
from surgery import NoEffectWarning
from tests.functional._hf_models import hf_inputs, hf_logits, hf_model
from tests.functional._model_checks import assert_idempotent, assert_optimizer_matches

pytest.importorskip("transformers")

# family -> (feed-forward block class name, its first projection, its activation attribute)
_BLOCKS = {
    "roberta": ("RobertaIntermediate", "dense", "intermediate_act_fn"),
    "xlm_roberta": ("XLMRobertaIntermediate", "dense", "intermediate_act_fn"),
    "distilbert": ("FFN", "lin1", "activation"),
}


def _blocks(model: torch.nn.Module, family: str) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__ == _BLOCKS[family][0]]


@pytest.mark.parametrize("family", sorted(_BLOCKS))
def test_feed_forward_blocks_are_gated_keeping_parameters_and_optimizer_state(family):
    _name, linear_attr, act_attr = _BLOCKS[family]
    model = hf_model(family)
    inputs = hf_inputs(family, 10)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    hf_logits(model, inputs).float().logsumexp(-1).mean().backward()
    opt.step()
    model.eval()
    blocks = _blocks(model, family)
    assert len(blocks) == 2
    values = [getattr(b, linear_attr).weight for b in blocks]
    activations = [getattr(b, act_attr) for b in blocks]
    state = {id(p): opt.state[p]["exp_avg"] for p in values}
    keys = list(model.state_dict())
    fn.apply_gated_linear_units(model, opt, generator=torch.Generator().manual_seed(0))
    for block, value, activation in zip(blocks, values, activations, strict=True):
        gated = getattr(block, linear_attr)
        assert isinstance(gated, GatedLinear) and gated.weight is value
        assert gated.activation is activation  # the block's own activation moved onto the gate
        assert isinstance(getattr(block, act_attr), torch.nn.Identity)
        assert opt.state[value]["exp_avg"] is state[id(value)]
    new_keys = list(model.state_dict())
    assert set(keys) <= set(new_keys)
    assert {k for k in new_keys if k not in keys} == {
        k for k in new_keys if k.endswith(f"{linear_attr}.gate.weight")
    }
    assert_optimizer_matches(opt, model)
    x = torch.randn(3, values[0].shape[1])
    gated = getattr(blocks[0], linear_attr)
    with torch.no_grad():
        reference = activations[0](x @ gated.gate.weight.T) * (x @ gated.weight.T + gated.bias)
        torch.testing.assert_close(gated(x), reference)
    model.train()
    loss = hf_logits(model, inputs).float().logsumexp(-1).mean()
    loss.backward()
    assert all(getattr(b, linear_attr).gate.weight.grad is not None for b in blocks)
    opt.step()
    assert_idempotent(model, fn.apply_gated_linear_units, "already gated")


@pytest.mark.parametrize("family", sorted(_BLOCKS))
def test_the_blocks_are_entries_of_the_feed_forward_registry(family):
    model = hf_model(family)
    block_class = type(_blocks(model, family)[0])
    assert _FEED_FORWARD_BLOCKS[block_class] == _BLOCKS[family][1:]


def test_users_register_their_own_block_and_remove_built_ins():
    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.act = torch.nn.Linear(4, 6), torch.nn.SiLU()
            self.down = torch.nn.Linear(6, 4)

        def forward(self, x):
            return self.down(self.act(self.up(x)))

    fn.register_glu_block(MLP, "up", "act")
    try:
        assert fn.glu_block_registry()[MLP] == ("up", "act")
        with pytest.raises(ValueError, match="already has a gated-linear-unit block"):
            fn.register_glu_block(MLP, "up", "act")
        model = torch.nn.Sequential(MLP())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        fn.apply_gated_linear_units(model, opt)
        assert isinstance(model[0].up, GatedLinear) and model[0].up.activation is not None
        assert isinstance(model[0].act, torch.nn.Identity)
        assert_optimizer_matches(opt, model)
    finally:
        fn.unregister_glu_block(MLP)
    with pytest.raises(TypeError, match="linear must be an attribute name"):
        fn.register_glu_block(MLP, 3, "act")
    with pytest.raises(TypeError, match=r"block_class must be an nn\.Module subclass"):
        fn.register_glu_block(int, "up", "act")

    model = hf_model("roberta")  # a built-in removed: the blocks stay as they are
    block_class = type(_blocks(model, "roberta")[0])
    entry = fn.glu_block_registry()[block_class]
    fn.unregister_glu_block(block_class)
    try:
        with pytest.warns(NoEffectWarning, match="changed nothing"):
            fn.apply_gated_linear_units(model)
        assert not any(isinstance(m, GatedLinear) for m in model.modules())
    finally:
        fn.register_glu_block(block_class, *entry)


def test_a_registered_block_without_the_named_linear_is_reported():
    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Conv1d(4, 4, 1)
            self.act = torch.nn.ReLU()

    fn.register_glu_block(Odd, "up", "act")
    try:
        with pytest.warns(NoEffectWarning, match=r"Odd \(no nn.Linear `up`"):
            fn.apply_gated_linear_units(torch.nn.Sequential(Odd()))
    finally:
        fn.unregister_glu_block(Odd)
