"""apply_channels_last."""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from functional import apply_channels_last
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
