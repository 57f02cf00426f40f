"""Composer's model transforms: what they guarantee, checked here, and side by side with
Composer 0.32.1 (the ``composer`` fixture): each is applied to its own copy of one small model
and the results compared where the porting guide says they agree.
"""

from __future__ import annotations

import copy
import warnings
from types import ModuleType

import pytest
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

import functional as F
from tests.functional._hf_models import hf_inputs, hf_logits, hf_model


def _init(model: nn.Module, seed: int = 0) -> nn.Module:
    """Fill every floating parameter from a seeded generator (no global RNG)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model


def _pair(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    return model, copy.deepcopy(model)


def _convnet() -> nn.Module:
    return _init(
        nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 16, 3, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 8, 1),
        )
    )


def _x(seed: int = 1, n: int = 8, c: int = 3, side: int = 8) -> torch.Tensor:
    return torch.randn(n, c, side, side, generator=torch.Generator().manual_seed(seed))


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# --- blurpool -----------------------------------------------------------------------------


def test_blurpool_replaces_the_strided_convs_and_max_pools_keeping_shapes() -> None:
    model = _convnet().eval()
    before = model(_x())
    F.apply_blurpool(model)
    kinds = [type(m).__name__ for m in model]
    assert kinds[1] == "BlurMaxPool2d" and kinds[2] == "BlurConv2d"
    assert kinds[0] == "Conv2d" and kinds[5] == "Conv2d"  # stride 1: left alone
    assert model(_x()).shape == before.shape


@pytest.mark.parametrize("blur_first", [True, False])
def test_blurpool_matches_composer(composer: ModuleType, blur_first: bool) -> None:
    ours, theirs = _pair(_convnet().eval())
    F.apply_blurpool(ours, blur_first=blur_first)
    composer.apply_blurpool(theirs, blur_first=blur_first)
    torch.testing.assert_close(ours(_x()), theirs(_x()))
    from composer.algorithms.blurpool import blur_2d

    x = _x(2)
    torch.testing.assert_close(F.blur_2d(x, stride=2), blur_2d(x, stride=2))


# --- squeeze-excite -----------------------------------------------------------------------


def test_squeeze_excite_follows_the_wide_enough_convs() -> None:
    model = _convnet()
    F.apply_squeeze_excite(model, latent_channels=0.5, min_channels=16)
    converted = [m for m in model if isinstance(m, F.SqueezeExciteConv2d)]
    # in and out channels >= 16: only the middle conv (the stem has 3 inputs, the head 8 outputs)
    assert len(converted) == 1 and converted[0] is model[2]
    assert model(_x()).shape == (8, 8, 2, 2)


def test_squeeze_excite_converts_what_composer_converts(composer: ModuleType) -> None:
    ours, theirs = _pair(_convnet())
    F.apply_squeeze_excite(ours, latent_channels=0.5, min_channels=16)
    composer.apply_squeeze_excite(theirs, latent_channels=0.5, min_channels=16)
    sizes = [
        [p.shape for name, p in m.named_parameters() if name.endswith("weight")]
        for model in (ours, theirs)
        for m in model.modules()
        if type(m).__name__ == "SqueezeExcite2d"
    ]
    # the same block, the same widths (its linear layers have biases here, none in Composer)
    assert sizes == [[(8, 16), (16, 8)]] * 2


# --- stochastic depth ---------------------------------------------------------------------


def _resnet_blocks() -> nn.Module:
    return _init(nn.Sequential(*[BasicBlock(8, 8) for _ in range(4)]))


def test_stochastic_depth_rates_rise_linearly_and_eval_is_the_plain_model() -> None:
    model = _resnet_blocks().eval()
    plain = model(_x(c=8))
    F.apply_stochastic_depth(
        model, stochastic_method="block", target_layer_name="ResNetBasicBlock", drop_rate=0.4
    )
    assert [round(float(b.drop_rate), 6) for b in model] == [0.1, 0.2, 0.3, 0.4]
    torch.testing.assert_close(model.eval()(_x(c=8)), plain)  # inverted scaling


def test_stochastic_depth_names_composers_argument_order_when_given_it() -> None:
    with pytest.raises(ValueError, match=r"look swapped\. Composer's order is"):
        F.apply_stochastic_depth(_resnet_blocks(), "ResNetBasicBlock", "block")


def test_stochastic_depth_rates_match_composer(composer: ModuleType) -> None:
    kwargs = {"target_layer_name": "ResNetBottleneck", "drop_rate": 0.4}
    for distribution in ("linear", "uniform"):
        ours, theirs = _pair(nn.Sequential(*[Bottleneck(16, 4) for _ in range(3)]))
        F.apply_stochastic_depth(
            ours, stochastic_method="block", drop_distribution=distribution, **kwargs
        )
        composer.apply_stochastic_depth(
            theirs, stochastic_method="block", drop_distribution=distribution, **kwargs
        )
        assert [round(float(b.drop_rate), 6) for b in ours] == [
            round(float(b.drop_rate), 6) for b in theirs
        ]


# --- channels_last ------------------------------------------------------------------------


def test_channels_last_matches_composer(composer: ModuleType) -> None:
    ours, theirs = _pair(_convnet())
    F.apply_channels_last(ours)
    composer.apply_channels_last(theirs)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        if a.ndim == 4:
            assert a.is_contiguous(memory_format=torch.channels_last)
        assert a.stride() == b.stride() and torch.equal(a, b)


# --- weight standardization ---------------------------------------------------------------


def test_weight_standardization_standardizes_all_but_the_last_convs() -> None:
    model = _convnet()
    F.apply_weight_standardization(model, n_last_layers_ignore=1)
    w = model[2].weight.flatten(1)
    torch.testing.assert_close(w.mean(1), torch.zeros(16), atol=1e-5, rtol=0)
    assert not hasattr(model[5], "parametrizations")  # the last conv keeps its weights


@pytest.mark.parametrize("ignore", [0, 1])
def test_weight_standardization_matches_composer(composer: ModuleType, ignore: int) -> None:
    ours, theirs = _pair(_convnet().eval())
    F.apply_weight_standardization(ours, n_last_layers_ignore=ignore)
    composer.apply_weight_standardization(theirs, n_last_layers_ignore=ignore)
    torch.testing.assert_close(ours(_x()), theirs(_x()), rtol=1e-4, atol=1e-5)


# --- ghost batchnorm ----------------------------------------------------------------------


def test_ghost_batchnorm_normalizes_each_ghost_batch_and_keeps_eval() -> None:
    model = _init(nn.Sequential(nn.BatchNorm2d(3)))
    x = _x(3)
    eval_before = model.eval()(x)
    F.apply_ghost_batchnorm(model, ghost_batch_size=4)
    assert torch.equal(model.eval()(x), eval_before)  # evaluation is unchanged
    out = model.train()(x)
    for chunk in out.split(4):  # each ghost batch is normalized on its own
        centred = (chunk - model[0].bias.view(1, 3, 1, 1)).mean((0, 2, 3))
        torch.testing.assert_close(centred, torch.zeros(3), atol=1e-5, rtol=0)


def test_ghost_batchnorm_matches_composer_in_training(composer: ModuleType) -> None:
    ours, theirs = _pair(_init(nn.Sequential(nn.BatchNorm2d(3))))
    F.apply_ghost_batchnorm(ours, ghost_batch_size=4)
    composer.apply_ghost_batchnorm(theirs, ghost_batch_size=4)
    torch.testing.assert_close(ours.train()(_x(4)), theirs.train()(_x(4)))


# --- low-precision norms ------------------------------------------------------------------


def _normnet() -> nn.Module:
    return _init(
        nn.Sequential(nn.Conv2d(3, 8, 1), nn.GroupNorm(2, 8), nn.Flatten(2), nn.LayerNorm(64))
    )


def test_low_precision_norms_compute_in_bf16_under_autocast_only() -> None:
    model = _normnet()
    plain = model(_x())
    F.apply_low_precision_layernorm(model, torch.bfloat16)
    F.apply_low_precision_groupnorm(model, torch.bfloat16)
    assert torch.equal(model(_x()), plain)  # outside autocast: exactly the plain layers
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(_x())
    torch.testing.assert_close(out.float(), plain, atol=0.1, rtol=0.05)


def test_low_precision_norms_convert_what_composer_converts(composer: ModuleType) -> None:
    """The same layers are converted and, outside autocast, both compute the plain model.
    (Composer's layers follow CUDA autocast only, so on CPU they are compared structurally.)"""
    from composer.core import Precision

    ours, theirs = _pair(_normnet())
    F.apply_low_precision_layernorm(ours, Precision.AMP_BF16)  # Composer's setting, ported as is
    F.apply_low_precision_groupnorm(ours, torch.bfloat16)
    assert ours[3].low_precision_dtype == torch.bfloat16
    _quiet(composer.apply_low_precision_layernorm, theirs, Precision.AMP_BF16)
    _quiet(composer.apply_low_precision_groupnorm, theirs, Precision.AMP_BF16)
    assert [type(m).__name__[-9:] for m in ours] == [type(m).__name__[-9:] for m in theirs]
    torch.testing.assert_close(ours(_x()), theirs(_x()))


# --- gated linear units -------------------------------------------------------------------


def test_gated_linear_units_match_composers_shape_on_bert(composer: ModuleType) -> None:
    """Both replace BERT's feed-forward blocks by gated ones of the same sizes (the gates'
    random initial values differ: each library draws its own)."""
    ours, theirs = _pair(hf_model("bert"))
    bias = {"gated_layer_bias": False, "non_gated_layer_bias": False}
    F.apply_gated_linear_units(ours, None, generator=torch.Generator().manual_seed(0), **bias)
    _quiet(composer.apply_gated_linear_units, theirs, None, **bias)
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in theirs.parameters())
    inputs = hf_inputs("bert")
    assert hf_logits(ours, inputs).shape == hf_logits(theirs, inputs).shape


# --- alibi --------------------------------------------------------------------------------


def test_alibi_ignores_position_embeddings_and_bounds_the_length() -> None:
    model = hf_model("gpt2").eval()
    F.apply_alibi(model, max_sequence_length=16)
    inputs = hf_inputs("gpt2", length=12)
    before = hf_logits(model, inputs)
    with torch.no_grad():
        model.transformer.wpe.weight.normal_(generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(hf_logits(model, inputs), before)  # positions come from the bias
    with pytest.raises(ValueError, match="max_sequence_length=16"):
        hf_logits(model, hf_inputs("gpt2", length=20))


@pytest.mark.parametrize("heads", [4, 6, 12])
def test_alibi_slopes_match_composer(composer: ModuleType, heads: int) -> None:
    """Composer's ALiBi cannot patch the installed transformers' attention classes (its GPT-2
    and BERT surgery fail there), so the slopes are what is compared."""
    from composer.algorithms.alibi.attention_surgery_functions.utils import (
        _get_alibi_head_slopes,
    )

    theirs = torch.as_tensor(_get_alibi_head_slopes(heads), dtype=torch.float32).flatten()
    torch.testing.assert_close(F.alibi_slopes(heads), theirs)
