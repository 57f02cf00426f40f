"""Laws every vision model transform obeys, on random convolutional stacks."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import hypothesis
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import functional as F
import surgery
from surgery import NoEffectWarning
from tests.functional._model_checks import (
    assert_dtype,
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    structure,
)
from tests.strategies import ConvStack, conv_stacks


@dataclass(frozen=True)
class Transform:
    name: str
    draw_kwargs: Callable[[st.DrawFn], dict]
    apply: Callable[..., nn.Module]
    keeps_keys: bool = True  # False: old checkpoints go through surgery.remap_state_dict

    def __repr__(self) -> str:
        return self.name


def _channels_last(model, optimizers=None):
    return F.apply_channels_last(model)


def _weight_standardization(model, optimizers=None, **kwargs):
    return F.apply_weight_standardization(model, **kwargs)


TRANSFORMS = [
    Transform(
        "blurpool",
        lambda draw: dict(
            min_channels=draw(st.sampled_from([0, 8, 16])), blur_first=draw(st.booleans())
        ),
        F.apply_blurpool,
    ),
    Transform(
        "se",
        lambda draw: dict(
            min_channels=draw(st.sampled_from([8, 16, 32])),
            latent_channels=draw(st.sampled_from([0.25, 4])),
        ),
        F.apply_se,
    ),
    Transform(
        "ghost_batchnorm",
        lambda draw: dict(ghost_batch_size=draw(st.integers(1, 5))),
        F.apply_ghost_batchnorm,
    ),
    Transform(
        "factorization",
        lambda draw: dict(
            min_channels=draw(st.sampled_from([8, 16])),
            latent_channels=draw(st.sampled_from([0.25, 2])),
        ),
        F.apply_factorization,
        keeps_keys=False,
    ),
    Transform("channels_last", lambda draw: {}, _channels_last),
    Transform(
        "weight_standardization",
        lambda draw: dict(n_last_layers_ignore=draw(st.integers(0, 2))),
        _weight_standardization,
        keeps_keys=False,
    ),
    Transform(
        "low_precision_groupnorm",
        lambda draw: dict(dtype=draw(st.sampled_from([torch.bfloat16, torch.float16]))),
        F.apply_low_precision_groupnorm,
    ),
]


def _apply_recording(
    transform: Transform, model: nn.Module, kwargs: dict, opt
) -> tuple[bool, list]:
    """Apply; return (whether the model's structure or layout changed, NoEffectWarnings)."""
    before = structure(model)
    strides = [t.stride() for t in model.parameters()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert transform.apply(model, optimizers=opt, **kwargs) is model
    changed = structure(model) != before or strides != [t.stride() for t in model.parameters()]
    return changed, [w for w in caught if issubclass(w.category, NoEffectWarning)]


@pytest.mark.parametrize("transform", TRANSFORMS, ids=repr)
@hypothesis.settings(max_examples=15)
@given(stack=conv_stacks(), data=st.data())
def test_transform_laws(transform: Transform, stack: ConvStack, data):
    model = stack.model
    kwargs = transform.draw_kwargs(data.draw)
    x = stack.example_input()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    model(x).mean().backward()
    opt.step()
    before_state = momentum_of(opt)
    model.eval()
    with torch.no_grad():
        reference = model(x)
    checkpoint = copy.deepcopy(model.state_dict())
    original = copy.deepcopy(model)

    changed, no_effect = _apply_recording(transform, model, kwargs, opt)
    # Never a silent no-op: either something changed or a NoEffectWarning says why not.
    assert changed != bool(no_effect), (changed, [str(w.message) for w in no_effect])

    # Shape, dtype and optimizer consistency.
    model.eval()
    with torch.no_grad():
        out = model(x)
    assert out.shape == reference.shape
    assert_dtype(model, torch.float32)
    assert_optimizer_matches(opt, model)
    assert_state_survives(before_state, opt, model)

    # The pre-surgery checkpoint loads strictly (keys kept, or through remap_state_dict).
    if transform.keeps_keys:
        assert set(checkpoint) <= set(model.state_dict())
    result = model.load_state_dict(surgery.remap_state_dict(checkpoint, model))
    assert not result.missing_keys and not result.unexpected_keys

    # What must hold exactly or to rounding.
    if transform.name in ("ghost_batchnorm", "low_precision_groupnorm"):
        assert torch.equal(out, reference)  # eval / no autocast: the very same computation
    if transform.name == "channels_last":
        # NCHW and NHWC convolutions sum in different orders: equal to rounding, with a
        # tolerance that holds for any CPU's kernels, scaled to the output's magnitude.
        scale = max(1.0, reference.abs().max().item())
        torch.testing.assert_close(out, reference, rtol=1e-4, atol=1e-5 * scale)
    if transform.name == "blurpool":
        expected = sum(
            1
            for m in original.modules()
            if type(m) is nn.Conv2d
            and max(m.stride) > 1
            and m.in_channels >= kwargs["min_channels"]
        )
        assert sum(isinstance(m, F.BlurConv2d) for m in model.modules()) == expected

    # A training step works after surgery.
    model.train()
    opt.zero_grad()
    model(x).mean().backward()
    opt.step()

    # Idempotence: applying again changes nothing and warns.
    changed_again, no_effect_again = _apply_recording(transform, model, kwargs, opt)
    assert not changed_again and no_effect_again


@hypothesis.settings(max_examples=10)
@given(stack=conv_stacks(), ghost=st.integers(1, 3), batch=st.integers(2, 7))
def test_ghost_batchnorm_running_statistics_are_those_of_batchnorm(stack: ConvStack, ghost, batch):
    """Every ghost batch norm updates its running statistics exactly as a plain BatchNorm fed
    the same (whole) batch does."""
    model = stack.model.double().train()
    twins = {id(m): copy.deepcopy(m) for m in model.modules() if type(m) is nn.BatchNorm2d}
    hypothesis.assume(twins)
    originals = [m for m in model.modules() if type(m) is nn.BatchNorm2d]
    F.apply_ghost_batchnorm(model, ghost_batch_size=ghost)
    ghosts = [m for m in model.modules() if isinstance(m, F.GhostBatchNorm2d)]
    pairs = [(g, twins[id(o)]) for g, o in zip(ghosts, originals, strict=True)]

    def feed(twin: nn.Module):
        def hook(_module, args):
            twin(args[0])

        return hook

    for g, twin in pairs:
        g.register_forward_pre_hook(feed(twin))
    for _ in range(2):
        with torch.no_grad():
            model(stack.example_input(batch, dtype=torch.float64))
    for g, twin in pairs:
        for a, b in zip(g.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
