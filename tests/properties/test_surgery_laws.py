"""Laws of the surgery engine on random module trees (shared submodules included)."""

from __future__ import annotations

import copy

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from surgery import count_module_instances, replace_module_classes, replace_modules
from tests.strategies import module_trees
from tests.surgery.test_replace import ScaledConv, to_scaled_conv


class KeptBatchNorm(nn.BatchNorm2d):
    """BatchNorm subclass reusing every tensor of the module it replaces."""


def to_kept_batchnorm(module: nn.Module, index: int) -> nn.Module | None:
    if isinstance(module, KeptBatchNorm):
        return None
    new = KeptBatchNorm(module.num_features, device="meta")
    new.weight, new.bias = module.weight, module.bias
    new.running_mean, new.running_var = module.running_mean, module.running_var
    new.num_batches_tracked = module.num_batches_tracked
    return new


class FreshLinear(nn.Linear):
    """A Linear with brand-new parameters (the old ones leave the model)."""


def to_fresh_linear(module: nn.Module, index: int) -> nn.Module | None:
    if isinstance(module, FreshLinear):
        return None
    return FreshLinear(module.in_features, module.out_features, bias=module.bias is not None)


FUNCTION_PRESERVING = {nn.Conv2d: to_scaled_conv, nn.BatchNorm2d: to_kept_batchnorm}
ALL_POLICIES = {**FUNCTION_PRESERVING, nn.Linear: to_fresh_linear}


@given(module_trees())
def test_function_preserving_policies_keep_the_forward(tree):
    model = tree.model.eval()
    x = tree.example_input()
    with torch.no_grad():
        expected = model(x)
    assert torch.isfinite(expected).all()  # small trees, default init: a well-defined regime
    replace_module_classes(model, FUNCTION_PRESERVING)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected)


@given(module_trees())
def test_every_match_replaced_once_even_when_shared(tree):
    model = tree.model
    convs = {id(m) for m in model.modules() if type(m) is nn.Conv2d}
    calls = []

    def counting(module, index):
        calls.append(id(module))
        return to_scaled_conv(module, index)

    mapping = replace_module_classes(model, {nn.Conv2d: counting})
    assert sorted(calls) == sorted(convs)
    assert len(mapping) == len(convs)
    assert count_module_instances(model, ScaledConv) == len(convs)
    assert not any(type(m) is nn.Conv2d for m in model.modules())


@given(module_trees())
def test_idempotent(tree):
    model = tree.model
    replace_module_classes(model, ALL_POLICIES)
    modules = list(model.modules())
    assert replace_module_classes(model, ALL_POLICIES) == {}
    assert list(model.modules()) == modules


@given(module_trees(), st.sampled_from(["sgd", "adam"]))
def test_optimizer_holds_exactly_the_models_parameters(tree, kind):
    model = nn.Sequential(tree.model, nn.Conv2d(tree.channels, tree.channels, 1))
    make = {
        "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        "adam": lambda ps: torch.optim.Adam(ps),
    }[kind]
    opt = make(model.parameters())
    replace_module_classes(model, ALL_POLICIES, optimizers=opt)
    held = [id(p) for g in opt.param_groups for p in g["params"]]
    assert held == [id(p) for p in model.parameters()]
    assert all(p in dict.fromkeys(model.parameters()) for p in opt.state)
    model(tree.example_input()).sum().backward()
    opt.step()


@given(module_trees())
def test_dry_run_changes_nothing(tree):
    model = nn.Sequential(tree.model, nn.Conv2d(tree.channels, tree.channels, 1))
    modules = list(model.named_modules(remove_duplicate=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = [list(g["params"]) for g in opt.param_groups]
    mapping = replace_module_classes(model, ALL_POLICIES, optimizers=opt, dry_run=True)
    assert set(mapping) == {m for m in model.modules() if type(m) in ALL_POLICIES}
    assert list(model.named_modules(remove_duplicate=False)) == modules
    assert [list(g["params"]) for g in opt.param_groups] == params


@given(module_trees(), st.data())
def test_replace_modules_by_copies_keeps_the_forward_and_the_optimizer_exact(tree, data):
    """Replacing any set of submodules (shared or nested ones included) by copies of themselves:
    the forward is kept, no key is left in the model, and the optimizer holds exactly the
    model's parameters, each once."""
    model = nn.Sequential(tree.model, nn.Conv2d(tree.channels, tree.channels, 1)).eval()
    candidates = list(model.modules())[1:]
    keys = data.draw(st.lists(st.sampled_from(candidates), unique_by=id, max_size=6))
    x = tree.example_input()
    with torch.no_grad():
        expected = model(x)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    replace_modules(model, {key: copy.deepcopy(key) for key in keys}, optimizers=opt)
    modules = list(model.modules())
    assert not any(m is key for key in keys for m in modules)
    # (the order may differ from model.parameters(): a surviving parameter keeps its place in
    # the optimizer while its first appearance in the model can move, e.g. a module shared
    # between a copied parent and another one)
    held = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(held) == sorted(id(p) for p in model.parameters())
    assert len(set(held)) == len(held)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected)
