"""Checkpoints saved before surgery load after it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from surgery import remap_state_dict, replace_module_classes
from surgery.checkpoint import fill_missing_entries
from tests.surgery.test_replace import small_net, to_scaled_conv


class TwoFactorLinear(nn.Module):
    """A replacement whose weights live under new keys: W = up @ down (full rank here)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.down = nn.Parameter(torch.eye(linear.in_features))
        self.up = nn.Parameter(linear.weight.detach().clone())
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.up @ self.down, self.bias)

    def surgery_remap_state_dict(self, state_dict: dict, prefix: str) -> None:
        old = state_dict.pop(prefix + "weight", None)
        if old is not None:
            state_dict[prefix + "up"] = old
            state_dict[prefix + "down"] = torch.eye(old.shape[1], dtype=old.dtype)


def test_preserved_keys_load_as_they_are():
    model = small_net()
    checkpoint = {k: v.clone() for k, v in model.state_dict().items()}
    replace_module_classes(model, {nn.Conv2d: to_scaled_conv})
    missing, unexpected = model.load_state_dict(checkpoint, strict=False)
    assert unexpected == []
    assert missing == ["0.scale", "3.0.scale"]  # only the tensors surgery added


def test_remap_translates_changed_keys():
    model = small_net()
    checkpoint = model.state_dict()
    x = torch.randn(2, 3, 5, 5)
    expected = model.eval()(x)
    replace_module_classes(model, {nn.Linear: lambda m, i: TwoFactorLinear(m)})
    with torch.no_grad():
        model[6].up.zero_()
    remapped = remap_state_dict(checkpoint, model)
    model.load_state_dict(remapped)  # strict
    torch.testing.assert_close(model(x), expected)
    assert "6.weight" in checkpoint  # the input is not modified


def test_remap_is_idempotent_on_new_layout():
    model = small_net()
    replace_module_classes(model, {nn.Linear: lambda m, i: TwoFactorLinear(m)})
    current = model.state_dict()
    assert list(remap_state_dict(current, model)) == list(current)


def test_metadata_is_kept():
    model = small_net()
    checkpoint = model.state_dict()
    assert remap_state_dict(checkpoint, model)._metadata == checkpoint._metadata


def test_fill_missing_entries_uses_current_values():
    model = small_net()
    checkpoint = model.state_dict()
    replace_module_classes(model, {nn.Conv2d: to_scaled_conv})
    filled = dict(checkpoint)
    fill_missing_entries(filled, model[0], "0.", ["scale", "weight"])
    assert torch.equal(filled["0.scale"], model[0].scale.detach())
    assert filled["0.weight"] is checkpoint["0.weight"]


def test_validation():
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        remap_state_dict([1], small_net())
    with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
        remap_state_dict({}, "model")
