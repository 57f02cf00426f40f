"""Model transforms compose in any order (issue 32 §1; STYLE.md, "Surgery policies").

Every pair of the model transforms that apply to a model runs in both orders on a torchvision
ResNet, a timm ConvNeXt, Hugging Face BERT and GPT-2 (tiny configurations). Both orders must convert
the same layers into the same kinds (same module tree, same state_dict keys and shapes, same
memory format), compute the same function once one's state dict is loaded into the other, and
train; or the second transform must refuse, naming the first and the order that works.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import functional as F
from surgery import NoEffectWarning
from tests.functional._hf_models import hf_inputs, hf_logits, hf_model
from tests.functional._model_checks import assert_optimizer_matches

Transform = Callable[[nn.Module, torch.optim.Optimizer], object]


def _vision(width: int, block: str, **factorization) -> dict[str, Transform]:
    """The convolutional transforms, with thresholds that pick some layers of a model whose
    widths start at ``width``, and stochastic depth on its ``block``."""
    return {
        "blurpool": lambda m, o: F.apply_blurpool(m, min_channels=width, optimizers=o),
        "squeeze_excite": lambda m, o: F.apply_se(
            m, latent_channels=0.25, min_channels=2 * width, optimizers=o
        ),
        "weight_standardization": lambda m, o: F.apply_weight_standardization(m, optimizers=o),
        "factorization": lambda m, o: F.apply_factorization(m, optimizers=o, **factorization),
        "channels_last": lambda m, o: F.apply_channels_last(m, optimizers=o),
        "stochastic_depth": lambda m, o: F.apply_stochastic_depth(
            m, "block", block, drop_rate=0.2, optimizers=o
        ),
    }


_RESNET: dict[str, Transform] = {
    **_vision(64, "ResNetBasicBlock", min_channels=256, factorize_linears=False),
    "ghost_batchnorm": lambda m, o: F.apply_ghost_batchnorm(m, ghost_batch_size=2, optimizers=o),
}
_CONVNEXT: dict[str, Transform] = {
    **_vision(8, "TimmConvNeXtBlock", min_channels=16, min_features=32, latent_features=0.25),
    "low_precision_layernorm": lambda m, o: F.apply_low_precision_layernorm(
        m, torch.bfloat16, optimizers=o
    ),
}
_BERT: dict[str, Transform] = {
    "alibi": lambda m, o: F.apply_alibi(m, 32, optimizers=o),
    "gated_linear_units": lambda m, o: F.apply_gated_linear_units(m, optimizers=o),
    "factorization": lambda m, o: F.apply_factorization(
        m, min_features=16, latent_features=4, optimizers=o
    ),
    "low_precision_layernorm": lambda m, o: F.apply_low_precision_layernorm(
        m, torch.bfloat16, optimizers=o
    ),
    "gyro_dropout": lambda m, o: F.apply_gyro_dropout(
        m, 10, 2, p=0.1, sigma=8, tau=2, generator=torch.Generator().manual_seed(0), optimizers=o
    ),
}
# GPT-2's projections are transformers' Conv1D, which factorization and GLU do not convert.
_GPT2 = {name: _BERT[name] for name in ("alibi", "low_precision_layernorm", "gyro_dropout")}

# (first, second) -> what the second transform's refusal says: the pairs that cannot stack in
# that order. The other order must work.
_REFUSED = {
    ("factorization", "gated_linear_units"): (
        r"apply_gated_linear_units cannot convert .*apply_factorization; apply "
        r"apply_gated_linear_units first"
    ),
    ("weight_standardization", "factorization"): (
        r"apply_factorization cannot convert .*apply_weight_standardization.*apply "
        r"apply_factorization first"
    ),
}


def _resnet() -> nn.Module:
    from torchvision.models.resnet import BasicBlock, ResNet

    torch.manual_seed(0)  # torchvision initialises from the global generator
    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=4)


def _convnext() -> nn.Module:
    from timm.models.convnext import ConvNeXt

    torch.manual_seed(0)
    return ConvNeXt(depths=(1, 1, 1, 1), dims=(8, 16, 16, 32), num_classes=4)


_FAMILIES: dict[str, tuple[dict[str, Transform], Callable[[], nn.Module], Callable]] = {
    "resnet": (_RESNET, _resnet, lambda: torch.randn(2, 3, 32, 32, generator=_gen())),
    "convnext": (_CONVNEXT, _convnext, lambda: torch.randn(2, 3, 32, 32, generator=_gen())),
    "bert": (_BERT, lambda: hf_model("bert"), lambda: hf_inputs("bert")),
    "gpt2": (_GPT2, lambda: hf_model("gpt2"), lambda: hf_inputs("gpt2")),
}


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1)


def _pairs() -> list:
    return [
        pytest.param(family, a, b, id=f"{family}-{a}-{b}")
        for family, (transforms, _, _) in _FAMILIES.items()
        for a, b in itertools.combinations(transforms, 2)
    ]


def _kind(module: nn.Module) -> str:
    """A module's class name as the transforms made it, its parametrizations and the memory
    format of its own 4-D tensors."""
    cls = type(module)
    parametrized = parametrize.is_parametrized(module)
    name = (cls.__bases__[0] if parametrized else cls).__name__
    own = [*module._parameters.values(), *module._buffers.values()]
    nhwc = any(
        t is not None
        and t.ndim == 4
        and t.is_contiguous(memory_format=torch.channels_last)
        and not t.is_contiguous()
        for t in own
    )
    return name + (" parametrized" if parametrized else "") + (" NHWC" if nhwc else "")


def _layout(model: nn.Module) -> tuple[list, list]:
    modules = sorted((name, _kind(m)) for name, m in model.named_modules())
    state = sorted((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items())
    return modules, state


def _apply(family: str, order: tuple[str, ...]) -> tuple[nn.Module, torch.optim.Optimizer]:
    transforms, build, _ = _FAMILIES[family]
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    with warnings.catch_warnings():
        # Each transform applies to these models in either order: nothing may go unconverted.
        warnings.simplefilter("error", NoEffectWarning)
        # ... except the true report of layers left dense on purpose (BERT's decoder is tied to
        # the word embeddings): the rest of the model is still converted.
        warnings.filterwarnings(
            "ignore", "apply_factorization left these layers dense", NoEffectWarning
        )
        for name in order:
            transforms[name](model, opt)
    return model, opt


def _outputs(model: nn.Module, inputs) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return hf_logits(model, inputs) if isinstance(inputs, dict) else model(inputs)


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, inputs) -> None:
    model.train()
    opt.zero_grad()
    out = hf_logits(model, inputs) if isinstance(inputs, dict) else model(inputs)
    loss = out.float().square().mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert_optimizer_matches(opt, model)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "first", "second"), _pairs())
def test_both_orders_convert_the_same_layers(family, first, second):
    refused = [(a, b) for a, b in ((first, second), (second, first)) if (a, b) in _REFUSED]
    for a, b in refused:
        with pytest.raises(ValueError, match=_REFUSED[(a, b)]):
            _apply(family, (a, b))
    if refused:
        model, opt = _apply(family, tuple(reversed(refused[0])))
        _train_step(model, opt, _FAMILIES[family][2]())
        return
    one, one_opt = _apply(family, (first, second))
    other, other_opt = _apply(family, (second, first))
    assert _layout(one) == _layout(other)
    inputs = _FAMILIES[family][2]()
    other.load_state_dict(one.state_dict())  # strict: the same keys, shapes and dtypes
    torch.testing.assert_close(_outputs(other, inputs), _outputs(one, inputs))
    _train_step(one, one_opt, inputs)
    _train_step(other, other_opt, inputs)


def test_the_reported_cases():
    """Issue 32 §1's cases on a torchvision ResNet: blurpool and squeeze-excite in either order
    give every layer both; after weight standardization both still convert."""
    counts = {}
    for order in (("blurpool", "squeeze_excite"), ("squeeze_excite", "blurpool")):
        model, _ = _apply("resnet", order)
        blur = {m for m in model.modules() if isinstance(m, F.BlurConv2d)}
        excite = {m for m in model.modules() if isinstance(m, F.SqueezeExciteConv2d)}
        counts[order] = (len(blur), len(excite), len(blur & excite))
    # Strided convs from 64 input channels: 6; convs at least 128 wide both ways: 7; both: 4.
    assert counts[("blurpool", "squeeze_excite")] == (6, 7, 4)
    assert counts[("squeeze_excite", "blurpool")] == (6, 7, 4)
    model, _ = _apply("resnet", ("weight_standardization", "blurpool", "squeeze_excite"))
    blurred = [m for m in model.modules() if isinstance(m, F.BlurConv2d)]
    excited = [m for m in model.modules() if isinstance(m, F.SqueezeExciteConv2d)]
    assert len(blurred) == 6 and len(excited) == 7
    assert all(parametrize.is_parametrized(m, "weight") for m in blurred + excited)


def test_a_combined_layer_pickles_and_copies():
    """A layer both blurred and squeeze-excited has a class made for it (as torch's
    parametrize makes one); the whole model still saves with torch.save and deep-copies."""
    import copy
    import io

    model, _ = _apply("resnet", ("squeeze_excite", "blurpool"))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(2, 3, 32, 32, generator=_gen())
    for other in (loaded, copy.deepcopy(model)):
        layer = other.layer3[0].conv1
        assert isinstance(layer, F.BlurConv2d) and isinstance(layer, F.SqueezeExciteConv2d)
        torch.testing.assert_close(_outputs(other, x), _outputs(model, x))
