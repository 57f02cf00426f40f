"""apply_channels_last."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from functional import SAMOptimizer, apply_channels_last
from tests.functional._model_checks import assert_no_effect, assert_optimizer_matches, train_step
from tests.strategies import calibrate_batchnorm


def test_resnet_weights_become_channels_last_and_nothing_else_changes():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 32, 32, generator=gen)
    # Calibrated statistics keep the outputs of unit scale on any CPU, so the tolerance below
    # bounds the difference between two convolution kernels (NCHW vs NHWC), not overflow.
    model = calibrate_batchnorm(torchvision.models.resnet18(), x).eval()
    with torch.no_grad():
        reference = model(x)
    params = list(model.parameters())
    values = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    assert apply_channels_last(model) is model
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))
    assert all(torch.equal(p, v) for p, v in zip(model.parameters(), values, strict=True))
    four_d = [p for p in model.parameters() if p.ndim == 4]
    assert four_d and all(p.is_contiguous(memory_format=torch.channels_last) for p in four_d)
    with torch.no_grad():
        out = model(x.to(memory_format=torch.channels_last))
    assert torch.isfinite(reference).all()
    torch.testing.assert_close(out, reference, rtol=1e-3, atol=1e-3 * reference.abs().max().item())
    assert_optimizer_matches(opt, model)
    train_step(model, x, opt)
    assert_no_effect(lambda: apply_channels_last(model), "outside channels-last format")


def test_no_effect_and_dtype():
    assert_no_effect(lambda: apply_channels_last(nn.Linear(3, 3)), "4-D parameters or buffers")
    conv = nn.Conv2d(3, 4, 3).to(torch.bfloat16)
    apply_channels_last(conv)
    assert conv.weight.dtype == torch.bfloat16
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


_OPTIMIZERS = {
    "SGD": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.9, **kw),
    "Adam": lambda params, **kw: torch.optim.Adam(params, lr=0.01, **kw),
    "AdamW": lambda params, **kw: torch.optim.AdamW(params, lr=0.01, **kw),
}
_FORMS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "single": {"foreach": False}}


def _build(name: str, form: str, sam: bool) -> tuple[nn.Module, torch.optim.Optimizer]:
    gen = torch.Generator()
    model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.ReLU(), nn.Conv2d(6, 4, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.2 * torch.randn(p.shape, generator=gen.manual_seed(p.numel())))
    opt: torch.optim.Optimizer = _OPTIMIZERS[name](model.parameters(), **_FORMS[form])
    return model, (SAMOptimizer(opt, rho=0.05) if sam else opt)


def _step(model: nn.Module, opt: torch.optim.Optimizer, inputs: torch.Tensor) -> None:
    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = model(inputs).square().mean()
        loss.backward()
        return loss

    if isinstance(opt, SAMOptimizer):
        opt.step(closure)
    else:
        closure()
        opt.step()


@pytest.mark.parametrize("sam", [False, True], ids=["bare", "sam"])
@pytest.mark.parametrize("form", list(_FORMS))
@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_mid_training_conversion_keeps_the_optimizer_state_paired(name, form, sam):
    # Issue 32 §3: converted mid-training, the weights move to NHWC; a fused optimizer whose
    # state stayed NCHW paired the wrong elements (off by 0.005-0.05 after 3 steps). With the
    # optimizer passed, the run equals one that never changed layout.
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    reference, reference_opt = _build(name, form, sam)
    model, opt = _build(name, form, sam)
    for i in range(4):
        _step(reference, reference_opt, x)
        _step(model, opt, x.to(memory_format=torch.channels_last) if i >= 2 else x)
        if i == 1:
            apply_channels_last(model, optimizers=opt)
            four_d = [v for s in opt.state.values() for v in s.values() if v.ndim == 4]
            assert four_d and all(
                v.is_contiguous(memory_format=torch.channels_last) for v in four_d
            )
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_optimizers_argument_is_checked():
    with pytest.raises(TypeError, match="optimizers"):
        apply_channels_last(nn.Conv2d(3, 4, 3), optimizers="sgd")  # type: ignore[arg-type]
