"""Adversarial cases for the surgery engine: situations from real training and deployment code
(failing policies, backward hooks, meta-device and complex tensors, TorchScript, inference
mode, frozen parameters, parameters no optimizer holds, empty and cyclic models)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from surgery import (
    count_module_instances,
    remap_state_dict,
    replace_module_classes,
    update_params_in_optimizer,
)
from tests.surgery.test_replace import small_net


def fresh_linear(module: nn.Module, index: int) -> nn.Module | None:
    if type(module) is not nn.Linear:
        return None
    return nn.Linear(module.in_features, module.out_features)


def held_ids(opt: torch.optim.Optimizer) -> list[int]:
    return [id(p) for g in opt.param_groups for p in g["params"]]


class TestFailingPolicy:
    """A policy that raises (or returns garbage) halfway leaves model and optimizers untouched."""

    @pytest.mark.parametrize("failure", ["raises", "bad-return"])
    def test_model_and_optimizer_unchanged(self, failure):
        model = nn.Sequential(*[nn.Sequential(nn.Linear(3, 3), nn.ReLU()) for _ in range(4)])
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        modules = list(model.named_modules())
        params = held_ids(opt)
        hook_calls = []
        model[0][0].register_forward_hook(lambda m, a, o: hook_calls.append(1))

        def policy(module, index):
            if index == 2:
                if failure == "raises":
                    raise RuntimeError("policy failed on the third layer")
                return "not a module"
            return nn.Linear(3, 3)

        error = RuntimeError if failure == "raises" else TypeError
        with pytest.raises(error):
            replace_module_classes(model, {nn.Linear: policy}, optimizers=opt)
        assert list(model.named_modules()) == modules
        assert held_ids(opt) == params
        model(torch.ones(1, 3))
        assert hook_calls == [1]  # the hook was not taken away from the original


class TestBackwardHooks:
    def test_full_backward_hooks_fire_on_the_replacement(self):
        model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        log = []
        model[0].register_full_backward_hook(lambda m, gi, go: log.append("full"))
        model[0].register_full_backward_pre_hook(lambda m, go: log.append("pre"))
        replace_module_classes(model, {nn.Linear: fresh_linear})
        model(torch.ones(2, 3, requires_grad=True)).sum().backward()
        assert sorted(log) == ["full", "pre"]

    def test_legacy_backward_hook_fires_on_the_replacement(self):
        model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        log = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model[0].register_backward_hook(lambda m, gi, go: log.append("legacy"))
            replace_module_classes(model, {nn.Linear: fresh_linear})
            model(torch.ones(2, 3, requires_grad=True)).sum().backward()
        assert log == ["legacy"]

    def test_conflicting_backward_hook_kinds_are_refused(self):
        model = nn.Sequential(nn.Linear(3, 3))
        model[0].register_full_backward_hook(lambda m, gi, go: None)
        new = nn.Linear(3, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            new.register_backward_hook(lambda m, gi, go: None)
        with pytest.raises(ValueError, match="backward hook"):
            replace_module_classes(model, {nn.Linear: lambda m, i: new if m is not new else None})
        assert model[0] is not new


class TestDevicesAndDtypes:
    def test_meta_replacement_for_a_real_module_is_a_clear_error(self):
        model = nn.Sequential(nn.Linear(2, 2))

        def on_meta(module, index):
            return nn.Linear(2, 2, device="meta") if type(module) is nn.Linear else None

        with pytest.raises(
            ValueError,
            match=r"replacement Linear for a Linear on cpu holds tensors on the meta device",
        ):
            replace_module_classes(model, {nn.Linear: on_meta})
        assert type(model[0]) is nn.Linear and model[0].weight.device.type == "cpu"

    def test_meta_model_takes_real_replacements_to_meta(self):
        model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2)).to("meta")
        replace_module_classes(model, {nn.Linear: fresh_linear})
        assert all(p.device.type == "meta" for p in model.parameters())
        assert model(torch.empty(4, 3, device="meta")).shape == (4, 2)

    def test_complex_tensors_of_the_replacement_are_not_cast_to_real(self):
        class WithComplex(nn.Module):
            def __init__(self):
                super().__init__()
                self.phase = nn.Parameter(torch.full((2,), 1 + 2j, dtype=torch.complex64))
                self.scale = nn.Parameter(torch.ones(2))

        model = nn.Sequential(nn.Linear(2, 2)).double()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch warns when it drops imaginary parts
            replace_module_classes(model, {nn.Linear: lambda m, i: WithComplex()})
        assert model[0].phase.dtype == torch.complex64
        assert torch.equal(model[0].phase.detach(), torch.full((2,), 1 + 2j))
        assert model[0].scale.dtype == torch.float64

    def test_module_with_only_integer_tensors_gives_the_models_floating_dtype(self):
        class Counter(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("count", torch.zeros((), dtype=torch.long))

        model = nn.Sequential(Counter(), nn.Linear(2, 2)).to(torch.float16)
        replace_module_classes(
            model, {Counter: lambda m, i: nn.Linear(2, 2) if type(m) is Counter else None}
        )
        assert model[0].weight.dtype == torch.float16

    def test_surgery_in_inference_mode_on_an_inference_built_model(self):
        with torch.inference_mode():
            model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
            replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})
            out = model(torch.ones(2, 3))
        assert out.shape == (2, 3) and torch.isfinite(out).all()


class TestRefusals:
    def test_torchscript_module_refused(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.script is deprecated
            scripted = torch.jit.script(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
        with pytest.raises(TypeError, match=r"TorchScript.*before scripting"):
            replace_module_classes(scripted, {nn.ReLU: lambda m, i: nn.GELU()})

    def test_new_parameters_without_old_ones_have_no_group_to_join(self):
        a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([a], lr=0.1)
        with pytest.raises(ValueError, match=r"old_params is empty.*add_param_group"):
            update_params_in_optimizer([], [b], opt)
        assert held_ids(opt) == [id(a)]
        update_params_in_optimizer([], [], opt)  # nothing to do is fine


class TestModelsOfEveryShape:
    @pytest.mark.parametrize("model", [nn.Module(), nn.Sequential(), nn.ModuleList()])
    def test_empty_models(self, model):
        assert replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()}) == {}
        assert count_module_instances(model, nn.ReLU) == 0
        assert remap_state_dict({}, model) == {}

    def test_none_children_and_cycles(self):
        model = nn.Sequential(nn.ReLU())
        model.register_module("missing", None)
        model.add_module("itself", model)
        mapping = replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})
        assert len(mapping) == 1 and isinstance(model[0], nn.GELU)
        assert model.itself is model and model.missing is None

    def test_shared_module_with_frozen_and_unheld_parameters(self):
        """A shared layer, a frozen layer and a layer no optimizer holds, in one model."""
        shared = nn.Linear(3, 3)
        frozen = nn.Linear(3, 3).requires_grad_(False)
        unheld = nn.Linear(3, 3)
        model = nn.Sequential(shared, nn.ReLU(), shared, frozen, unheld)
        opt = torch.optim.Adam([*shared.parameters()])
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
        mapping = replace_module_classes(model, {nn.Linear: fresh_linear}, optimizers=opt)
        assert len(mapping) == 3
        assert model[0] is model[2]
        # the optimizer now holds exactly the replacement of the layer it held, once
        assert held_ids(opt) == [id(p) for p in model[0].parameters()]
        assert not opt.state  # the removed parameters' state left with them
        # layers no optimizer held stay out of it
        assert all(
            id(p) not in held_ids(opt) for p in (*model[3].parameters(), *model[4].parameters())
        )

    def test_same_replacement_object_for_several_modules(self):
        model = small_net()
        one = nn.GELU()
        mapping = replace_module_classes(model, {nn.ReLU: lambda m, i: one})
        assert len(mapping) == 2 and model[2] is one and model[3][1] is one
