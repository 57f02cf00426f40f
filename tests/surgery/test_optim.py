"""Optimizers stay consistent through surgery: state kept, groups kept, order stable."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from surgery import replace_module_classes, update_params_in_optimizer
from tests.surgery.test_replace import ScaledConv, small_net, to_scaled_conv


def fresh_linear(module: nn.Module, index: int) -> nn.Module:
    return nn.Linear(module.in_features, module.out_features)


def train_step(model: nn.Module, *opts: torch.optim.Optimizer) -> None:
    for opt in opts:
        opt.zero_grad()
    model(torch.randn(2, 3, 5, 5)).square().mean().backward()
    for opt in opts:
        opt.step()


def model_param_ids(model: nn.Module) -> list[int]:
    return [id(p) for p in model.parameters()]


def opt_param_ids(opt: torch.optim.Optimizer) -> list[int]:
    return [id(p) for g in opt.param_groups for p in g["params"]]


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.Adam(ps, lr=1e-3),
        lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=False),
        lambda ps: torch.optim.RMSprop(ps, lr=1e-3),
    ],
    ids=["sgd-momentum", "adam", "adamw-loop", "rmsprop"],
)
def test_surviving_parameters_keep_their_state(make_opt):
    model = small_net()
    opt = make_opt(model.parameters())
    train_step(model, opt)
    conv = model[0]
    before = {k: v.clone() for k, v in opt.state[conv.weight].items() if torch.is_tensor(v)}
    replace_module_classes(model, {nn.Conv2d: to_scaled_conv}, optimizers=opt)
    assert isinstance(model[0], ScaledConv) and model[0].weight is conv.weight
    after = opt.state[conv.weight]
    for key, value in before.items():
        torch.testing.assert_close(after[key], value)
    assert opt_param_ids(opt) == model_param_ids(model)
    train_step(model, opt)


def test_new_parameters_join_the_group_of_the_replaced_ones():
    model = small_net()
    convs = [p for m in model.modules() if isinstance(m, nn.Conv2d) for p in m.parameters()]
    conv_ids = {id(p) for p in convs}
    rest = [p for p in model.parameters() if id(p) not in conv_ids]
    opt = torch.optim.SGD(
        [{"params": rest, "lr": 0.1}, {"params": convs, "lr": 0.01, "weight_decay": 5e-4}],
        momentum=0.9,
    )
    replace_module_classes(model, {nn.Conv2d: to_scaled_conv}, optimizers=opt)
    scales = [m.scale for m in model.modules() if isinstance(m, ScaledConv)]
    group = opt.param_groups[1]
    assert group["lr"] == 0.01 and group["weight_decay"] == 5e-4
    assert all(any(p is s for p in group["params"]) for s in scales)
    assert opt.param_groups[0]["params"] == rest
    # each scale sits right after the conv parameters it belongs to
    conv0 = model[0]
    assert group["params"][:3] == [conv0.weight, conv0.bias, conv0.scale]


def test_removed_parameters_leave_with_their_state():
    model = small_net()
    opt = torch.optim.Adam(model.parameters())
    train_step(model, opt)
    old = model[6]
    replace_module_classes(model, {nn.Linear: fresh_linear}, optimizers=opt)
    assert old.weight not in opt.state and old.bias not in opt.state
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert id(old.weight) not in held
    assert opt_param_ids(opt) == model_param_ids(model)
    train_step(model, opt)
    assert model[6].weight in opt.state


def test_parameters_a_policy_removes_as_a_side_effect_leave_with_their_state():
    """A policy that drops the old layer's bias and wraps the layer: the bias leaves the model
    without being a parameter of the wrapper or of the wrapped layer, and leaves the optimizers
    too (as it did not before: a stale parameter with its Adam moments stayed behind)."""
    model = small_net()
    opt = torch.optim.Adam(model.parameters())
    opt_bias = torch.optim.SGD([model[6].bias], lr=0.1, momentum=0.9)  # holds nothing replaced
    train_step(model, opt, opt_bias)
    bias = model[6].bias

    def wrap_without_bias(module: nn.Module, index: int) -> nn.Module:
        module.bias = None
        return nn.Sequential(module)

    replace_module_classes(model, {nn.Linear: wrap_without_bias}, optimizers=[opt, opt_bias])
    assert model[6][0].bias is None
    assert bias not in opt.state and bias not in opt_bias.state
    assert opt_param_ids(opt) == model_param_ids(model)
    assert opt_param_ids(opt_bias) == []
    train_step(model, opt)


def test_several_optimizers_each_touch_only_their_own_parameters():
    model = small_net()
    head = list(model[6].parameters())
    body = [p for p in model.parameters() if all(p is not h for h in head)]
    opt_body = torch.optim.SGD(body, lr=0.1, momentum=0.9)
    opt_head = torch.optim.Adam(head)
    train_step(model, opt_body, opt_head)
    replace_module_classes(
        model, {nn.Conv2d: to_scaled_conv, nn.Linear: fresh_linear}, optimizers=[opt_body, opt_head]
    )
    assert opt_param_ids(opt_head) == [id(p) for p in model[6].parameters()]
    body_now = [p for p in model.parameters() if all(p is not h for h in model[6].parameters())]
    assert opt_param_ids(opt_body) == [id(p) for p in body_now]
    train_step(model, opt_body, opt_head)


def test_optimizer_without_replaced_parameters_is_untouched():
    model = small_net()
    opt = torch.optim.SGD(model[6].parameters(), lr=0.1)
    before = opt_param_ids(opt)
    replace_module_classes(model, {nn.Conv2d: to_scaled_conv}, optimizers=opt)
    assert opt_param_ids(opt) == before


def test_state_dict_round_trips_after_surgery():
    model = small_net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_step(model, opt)
    replace_module_classes(
        model, {nn.Conv2d: to_scaled_conv, nn.Linear: fresh_linear}, optimizers=opt
    )
    train_step(model, opt)
    saved = opt.state_dict()
    # a fresh optimizer over the transformed model has the same layout and loads the state
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fresh.load_state_dict(saved)
    for p in model.parameters():
        for key, value in opt.state[p].items():
            torch.testing.assert_close(fresh.state[p][key], value)


def test_frozen_survivor_not_held_stays_out():
    model = small_net()
    model[0].weight.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    replace_module_classes(model, {nn.Conv2d: to_scaled_conv}, optimizers=opt)
    held = opt_param_ids(opt)
    assert id(model[0].weight) not in held
    assert id(model[0].scale) in held and id(model[0].bias) in held


def test_lbfgs_keeps_a_valid_parameter_list():
    model = small_net()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=2)
    replace_module_classes(model, {nn.Linear: fresh_linear}, optimizers=opt)
    assert opt._params is opt.param_groups[0]["params"]

    def closure():
        opt.zero_grad()
        loss = model(torch.randn(2, 3, 5, 5)).square().mean()
        loss.backward()
        return loss

    opt.step(closure)


class TestUpdateParamsInOptimizer:
    def test_replaces_keeps_survivors_and_drops_removed(self):
        a, b, c = (nn.Parameter(torch.randn(2)) for _ in range(3))
        opt = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)
        (a.sum() + b.sum()).backward()
        opt.step()
        state_a = opt.state[a]["momentum_buffer"]
        update_params_in_optimizer([a, b], [a, c], opt)
        assert opt.param_groups[0]["params"] == [a, c]
        assert opt.state[a]["momentum_buffer"] is state_a
        assert b not in opt.state

    def test_accepts_several_optimizers_and_none(self):
        a, b = nn.Parameter(torch.randn(2)), nn.Parameter(torch.randn(2))
        o1, o2 = (
            torch.optim.SGD([a], lr=0.1),
            torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1),
        )
        update_params_in_optimizer([a], [b], [o1, o2])
        assert o1.param_groups[0]["params"] == [b]
        update_params_in_optimizer([a], [b], None)

    def test_validation(self):
        a = nn.Parameter(torch.randn(2))
        opt = torch.optim.SGD([a], lr=0.1)
        with pytest.raises(TypeError, match="old_params must be an iterable"):
            update_params_in_optimizer(a, [a], opt)
        with pytest.raises(TypeError, match=r"new_params\[0\] must be a torch.Tensor"):
            update_params_in_optimizer([a], ["w"], opt)
        with pytest.raises(TypeError, match="optimizers must be"):
            update_params_in_optimizer([a], [a], "sgd")
        with pytest.raises(ValueError, match="not a leaf"):
            update_params_in_optimizer([a], [a * 2], opt)
