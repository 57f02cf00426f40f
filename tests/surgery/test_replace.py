"""The contract of ``surgery.replace_module_classes``, ``replace_modules`` and
``count_module_instances``."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torchvision
from torch import nn

import surgery
from surgery import count_module_instances, replace_module_classes, replace_modules
from tests.strategies import calibrate_batchnorm


class TaggedReLU(nn.ReLU):
    """A distinguishable replacement for ReLU."""

    def __init__(self, tag: object = None) -> None:
        super().__init__()
        self.tag = tag


class ScaledConv(nn.Conv2d):
    """A conv subclass that reuses the original parameters and adds one scale parameter."""

    @classmethod
    def from_conv(cls, conv: nn.Conv2d) -> ScaledConv:
        new = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
            groups=conv.groups,
            bias=conv.bias is not None,
            device="meta",
        )
        new.weight = conv.weight
        new.bias = conv.bias
        new.scale = nn.Parameter(torch.ones(()))
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


def to_scaled_conv(module: nn.Module, index: int) -> nn.Module | None:
    return None if isinstance(module, ScaledConv) else ScaledConv.from_conv(module)


def small_net() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 2),
    )


class TestMatching:
    def test_first_matching_policy_that_returns_a_module_wins(self):
        model = small_net()
        calls = []

        def declines(module, index):
            calls.append("declines")
            return None

        def accepts(module, index):
            calls.append("accepts")
            return TaggedReLU("second")

        def never(module, index):
            calls.append("never")
            return TaggedReLU("third")

        replace_module_classes(model, {nn.ReLU: declines, nn.Module: accepts, nn.ReLU6: never})
        assert isinstance(model[2], TaggedReLU) and model[2].tag == "second"
        assert "never" not in calls

    def test_none_passes_the_module_on_in_mapping_order(self):
        model = nn.Sequential(nn.ReLU())
        order = []

        def first(module, index):
            order.append(1)

        def second(module, index):
            order.append(2)
            return TaggedReLU()

        replace_module_classes(model, {nn.ReLU: first, nn.Module: second})
        assert order == [1, 2]
        assert isinstance(model[0], TaggedReLU)

    def test_isinstance_matching_includes_subclasses(self):
        model = nn.Sequential(nn.ReLU(), TaggedReLU("old"))
        replace_module_classes(model, {nn.ReLU: lambda m, i: TaggedReLU("new")})
        assert [m.tag for m in model] == ["new", "new"]

    def test_exact_type_skips_subclasses(self):
        model = nn.Sequential(nn.ReLU(), TaggedReLU("old"))
        replace_module_classes(model, {nn.ReLU: lambda m, i: TaggedReLU("new")}, exact_type=True)
        assert [m.tag for m in model] == ["new", "old"]

    def test_returning_the_same_module_is_no_replacement(self):
        model = small_net()
        mapping = replace_module_classes(model, {nn.ReLU: lambda m, i: m})
        assert mapping == {}

    def test_root_is_never_replaced(self):
        model = nn.ReLU()
        assert replace_module_classes(model, {nn.ReLU: lambda m, i: TaggedReLU()}) == {}


class TestIndices:
    def test_indices_count_per_policy_class_in_traversal_order(self):
        model = nn.Sequential(nn.ReLU(), nn.Linear(2, 2), nn.ReLU(), nn.Sequential(nn.ReLU()))
        seen = []

        def policy(module, index):
            seen.append((type(module).__name__, index))
            return None

        replace_module_classes(model, {nn.ReLU: policy, nn.Linear: policy})
        assert seen == [("ReLU", 0), ("Linear", 0), ("ReLU", 1), ("ReLU", 2)]

    def test_indices_continue_from_and_update_the_given_dict(self):
        model = nn.Sequential(nn.ReLU(), nn.ReLU())
        indices = {nn.ReLU: 5}
        got = []
        replace_module_classes(model, {nn.ReLU: lambda m, i: got.append(i)}, indices=indices)
        assert got == [5, 6]
        assert indices[nn.ReLU] == 7

    def test_bad_indices_type(self):
        with pytest.raises(TypeError, match="indices"):
            replace_module_classes(small_net(), {nn.ReLU: lambda m, i: None}, indices=[0])


class TestStructure:
    def test_returns_old_to_new_mapping_in_traversal_order(self):
        model = small_net()
        old = [model[2], model[3][1]]
        mapping = replace_module_classes(model, {nn.ReLU: lambda m, i: TaggedReLU(i)})
        assert list(mapping) == old
        assert list(mapping.values()) == [model[2], model[3][1]]

    def test_shared_module_replaced_once_in_every_parent(self):
        shared = nn.ReLU()
        inner = nn.Sequential(shared)
        model = nn.Sequential(shared, inner, nn.ModuleList([shared]))
        calls = []

        def policy(module, index):
            calls.append(index)
            return TaggedReLU()

        mapping = replace_module_classes(model, {nn.ReLU: policy})
        assert calls == [0]
        assert len(mapping) == 1
        new = mapping[shared]
        assert model[0] is new and model[1][0] is new and model[2][0] is new

    def test_no_recursion_into_replacements_by_default(self):
        model = nn.Sequential(nn.Linear(2, 2))

        def wrap(module, index):
            if isinstance(module, nn.Linear):
                return nn.Sequential(nn.Linear(2, 2), nn.ReLU())
            return TaggedReLU()

        replace_module_classes(model, {nn.Linear: wrap, nn.ReLU: wrap})
        assert type(model[0][1]) is nn.ReLU

    def test_recurse_on_replacements(self):
        model = nn.Sequential(nn.Linear(2, 2))

        def wrap(module, index):
            if type(module) is nn.Linear:
                return nn.Sequential(nn.Identity(), nn.ReLU())
            return TaggedReLU()

        replace_module_classes(
            model, {nn.Linear: wrap, nn.ReLU: wrap}, recurse_on_replacements=True, exact_type=True
        )
        assert isinstance(model[0][1], TaggedReLU)

    def test_replacement_wrapping_the_original_does_not_loop(self):
        model = nn.Sequential(nn.ReLU())

        def wrap(module, index):
            return nn.Sequential(module, nn.Identity()) if type(module) is nn.ReLU else None

        mapping = replace_module_classes(model, {nn.ReLU: wrap}, recurse_on_replacements=True)
        assert len(mapping) == 1
        assert type(model[0][0]) is nn.ReLU

    def test_dry_run_changes_nothing(self):
        model = small_net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(2, 3, 5, 5)).sum().backward()
        opt.step()
        before_modules = list(model.modules())
        before_params = [list(g["params"]) for g in opt.param_groups]
        before_state = {id(p): s["momentum_buffer"].clone() for p, s in opt.state.items()}
        indices: dict = {}
        mapping = replace_module_classes(
            model, {nn.Conv2d: to_scaled_conv}, optimizers=opt, dry_run=True, indices=indices
        )
        assert len(mapping) == 2 and all(isinstance(v, ScaledConv) for v in mapping.values())
        assert list(model.modules()) == before_modules
        assert [list(g["params"]) for g in opt.param_groups] == before_params
        for p, s in opt.state.items():
            torch.testing.assert_close(s["momentum_buffer"], before_state[id(p)])


class TestAdoption:
    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.float16])
    def test_replacement_takes_the_floating_dtype(self, dtype):
        model = small_net().to(dtype)
        replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(4, 2)})
        assert model[6].weight.dtype == dtype
        assert model(torch.randn(2, 3, 5, 5, dtype=dtype)).dtype == dtype

    def test_parameterless_module_takes_the_models_dtype(self):
        class WithBuffer(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("scale", torch.ones(1))
                self.register_buffer("count", torch.zeros(1, dtype=torch.long))

            def forward(self, x):
                return x * self.scale

        model = small_net().to(torch.bfloat16)
        replace_module_classes(model, {nn.ReLU: lambda m, i: WithBuffer()})
        assert model[2].scale.dtype == torch.bfloat16
        assert model[2].count.dtype == torch.long  # integer buffers keep their dtype

    def test_replacement_moves_to_the_device(self):
        model = small_net().to("meta")
        replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(4, 2)})
        assert model[6].weight.device.type == "meta"

    def test_train_eval_mode_carried(self):
        model = small_net().eval()
        replace_module_classes(model, {nn.BatchNorm2d: lambda m, i: nn.BatchNorm2d(4)})
        assert not model[1].training

    def test_hooks_move_to_the_replacement(self):
        model = small_net()
        log = []
        target = model[6]
        h1 = target.register_forward_hook(lambda m, a, out: log.append("fwd"))
        target.register_forward_pre_hook(lambda m, a: log.append("pre"))
        target.register_forward_hook(lambda m, a, kw, out: log.append("kw"), with_kwargs=True)
        mapping = replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(4, 2)})
        model(torch.randn(2, 3, 5, 5))
        assert log == ["pre", "fwd", "kw"]
        # the user's handles still work on the replacement, and the old module has none left
        h1.remove()
        log.clear()
        model(torch.randn(2, 3, 5, 5))
        assert log == ["pre", "kw"]
        assert mapping[target] is model[6]
        assert not target._forward_hooks and not target._forward_pre_hooks


class TestRefusals:
    def test_bad_policy_return_value(self):
        with pytest.raises(TypeError, match=r"policy for ReLU returned int.*nn\.Module or None"):
            replace_module_classes(small_net(), {nn.ReLU: lambda m, i: 3})

    def test_policies_must_be_a_mapping_of_module_classes(self):
        with pytest.raises(TypeError, match="policies must be a mapping"):
            replace_module_classes(small_net(), [(nn.ReLU, lambda m, i: None)])
        with pytest.raises(TypeError, match=r"keys must be nn\.Module subclasses"):
            replace_module_classes(small_net(), {int: lambda m, i: None})
        with pytest.raises(TypeError, match="must be callable"):
            replace_module_classes(small_net(), {nn.ReLU: "gelu"})

    def test_model_must_be_a_module(self):
        with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
            replace_module_classes("resnet", {nn.ReLU: lambda m, i: None})

    def test_optimizers_type_checked(self):
        with pytest.raises(TypeError, match="optimizers"):
            replace_module_classes(small_net(), {nn.ReLU: lambda m, i: None}, optimizers=[1])

    def test_torch_compile_wrapper_refused(self):
        compiled = torch.compile(small_net())
        with pytest.raises(TypeError, match=r"torch\.compile.*_orig_mod"):
            replace_module_classes(compiled, {nn.ReLU: lambda m, i: None})

    def test_in_place_compiled_module_refused(self):
        model = small_net()
        model.compile()
        with pytest.raises(TypeError, match="before compiling"):
            replace_module_classes(model, {nn.ReLU: lambda m, i: None})


def held(opt: torch.optim.Optimizer) -> list[int]:
    return [id(p) for g in opt.param_groups for p in g["params"]]


def train_step(model: nn.Module, *opts: torch.optim.Optimizer) -> None:
    gen = torch.Generator().manual_seed(0)
    for opt in opts:
        opt.zero_grad()
    model(torch.randn(2, 3, 5, 5, generator=gen)).square().mean().backward()
    for opt in opts:
        opt.step()


class TestReplaceModules:
    """``replace_modules``: instance-keyed replacement with every guarantee of the class engine."""

    def test_replaces_exactly_the_given_instances(self):
        model = small_net()
        first, second = model[2], model[3][1]
        new = TaggedReLU("new")
        mapping = replace_modules(model, {second: new})
        assert mapping == {second: new}
        assert model[2] is first and model[3][1] is new

    def test_mapping_in_traversal_order_whatever_the_key_order(self):
        model = small_net()
        keys = [model[6], model[0], model[2]]
        mapping = replace_modules(model, {k: TaggedReLU(i) for i, k in enumerate(keys)})
        assert list(mapping) == [keys[1], keys[2], keys[0]]

    def test_shared_module_replaced_in_every_parent(self):
        shared = nn.ReLU()
        model = nn.Sequential(shared, nn.Sequential(shared), nn.ModuleList([shared]))
        new = TaggedReLU()
        assert replace_modules(model, {shared: new}) == {shared: new}
        assert model[0] is new and model[1][0] is new and model[2][0] is new
        assert not any(m is shared for m in model.modules())

    def test_key_reused_by_another_replacement_is_replaced_there(self):
        inner = nn.Linear(2, 2)
        block = nn.Sequential(inner, nn.ReLU())
        model = nn.Sequential(block)
        new_block = nn.Sequential(nn.Identity(), inner)
        new_inner = nn.Linear(2, 2)
        mapping = replace_modules(model, {block: new_block, inner: new_inner})
        assert model[0] is new_block and new_block[1] is new_inner
        assert mapping == {block: new_block, inner: new_inner}

    def test_key_left_behind_inside_a_replaced_module_is_not_reached(self):
        inner = nn.Linear(2, 2)
        block = nn.Sequential(inner)
        model = nn.Sequential(block)
        new_block = nn.Sequential(nn.Linear(2, 2))
        mapping = replace_modules(model, {block: new_block, inner: nn.Linear(2, 2)})
        assert mapping == {block: new_block}
        assert model[0] is new_block

    def test_replacement_wrapping_the_original_does_not_loop(self):
        model = nn.Sequential(nn.ReLU())
        relu = model[0]
        wrapper = nn.Sequential(relu, nn.Identity())
        assert replace_modules(model, {relu: wrapper}) == {relu: wrapper}
        assert model[0] is wrapper and wrapper[0] is relu

    def test_same_replacement_for_several_modules_and_key_mapped_to_itself(self):
        model = small_net()
        one = nn.GELU()
        mapping = replace_modules(model, {model[2]: one, model[3][1]: one, model[6]: model[6]})
        assert len(mapping) == 2 and model[2] is one and model[3][1] is one
        assert type(model[6]) is nn.Linear

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
    def test_replacement_takes_the_device_and_floating_dtype(self, dtype):
        model = small_net().to(dtype)
        replace_modules(model, {model[6]: nn.Linear(4, 2)})
        assert model[6].weight.dtype == dtype
        assert model(torch.randn(2, 3, 5, 5, dtype=dtype)).dtype == dtype
        meta = small_net().to("meta")
        replace_modules(meta, {meta[6]: nn.Linear(4, 2)})
        assert meta[6].weight.device.type == "meta"

    def test_train_eval_mode_and_hooks_move(self):
        model = small_net().eval()
        target = model[6]
        log = []
        handle = target.register_forward_hook(lambda m, a, out: log.append("fwd"))
        target.register_forward_pre_hook(lambda m, a: log.append("pre"))
        target.register_full_backward_hook(lambda m, gi, go: log.append("bwd"))
        mapping = replace_modules(model, {target: nn.Linear(4, 2)})
        assert not model[6].training and mapping[target] is model[6]
        model(torch.randn(2, 3, 5, 5, requires_grad=True)).sum().backward()
        assert log == ["pre", "fwd", "bwd"]
        handle.remove()  # the user's handle still works on the replacement
        log.clear()
        model(torch.randn(2, 3, 5, 5))
        assert log == ["pre"]
        assert not target._forward_hooks and not target._forward_pre_hooks

    def test_optimizer_state_and_groups(self):
        model = small_net()
        conv, linear = model[0], model[6]
        convs = list(conv.parameters())
        rest = [p for p in model.parameters() if all(p is not c for c in convs)]
        opt = torch.optim.SGD(
            [{"params": rest, "lr": 0.1}, {"params": convs, "lr": 0.01}], momentum=0.9
        )
        train_step(model, opt)
        momentum = opt.state[conv.weight]["momentum_buffer"].clone()
        scaled = ScaledConv.from_conv(conv)
        replace_modules(model, {conv: scaled, linear: nn.Linear(4, 2)}, optimizers=opt)
        # survivors keep their state; the new scale joins their group, right after them
        torch.testing.assert_close(opt.state[conv.weight]["momentum_buffer"], momentum)
        assert opt.param_groups[1]["params"] == [conv.weight, conv.bias, scaled.scale]
        # the removed linear's parameters left, with their state
        assert linear.weight not in opt.state and linear.bias not in opt.state
        # the new linear's parameters took the old ones' place in the other group
        assert [id(p) for p in opt.param_groups[0]["params"]] == [
            id(p) for p in model.parameters() if all(p is not c for c in scaled.parameters())
        ]
        train_step(model, opt)

    def test_several_optimizers_each_touch_only_their_own_parameters(self):
        model = small_net()
        head = list(model[6].parameters())
        body = [p for p in model.parameters() if all(p is not h for h in head)]
        opt_body = torch.optim.SGD(body, lr=0.1, momentum=0.9)
        opt_head = torch.optim.Adam(head)
        train_step(model, opt_body, opt_head)
        old_head = model[6]
        replace_modules(
            model,
            {model[0]: ScaledConv.from_conv(model[0]), old_head: nn.Linear(4, 2)},
            optimizers=[opt_body, opt_head],
        )
        assert held(opt_head) == [id(p) for p in model[6].parameters()]
        assert not opt_head.state  # Adam's moments of the removed head left with it
        head_now = list(model[6].parameters())
        assert held(opt_body) == [
            id(p) for p in model.parameters() if all(p is not h for h in head_now)
        ]
        train_step(model, opt_body, opt_head)

    def test_dry_run_changes_nothing(self):
        model = small_net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train_step(model, opt)
        modules = list(model.named_modules(remove_duplicate=False))
        params = [list(g["params"]) for g in opt.param_groups]
        new = nn.Linear(4, 2)
        mapping = replace_modules(model, {model[6]: new}, optimizers=opt, dry_run=True)
        assert mapping == {model[6]: new}
        assert list(model.named_modules(remove_duplicate=False)) == modules
        assert [list(g["params"]) for g in opt.param_groups] == params
        assert len(opt.state) == len(list(model.parameters()))

    def test_a_refused_replacement_changes_nothing(self):
        model = small_net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train_step(model, opt)
        modules = list(model.named_modules())
        params = held(opt)
        log = []
        model[2].register_forward_hook(lambda m, a, o: log.append("hook"))
        on_meta = nn.Linear(4, 2, device="meta")  # no data to move to the cpu
        with pytest.raises(ValueError, match="meta device"):
            replace_modules(model, {model[2]: nn.GELU(), model[6]: on_meta}, optimizers=opt)
        assert list(model.named_modules()) == modules and held(opt) == params
        model(torch.randn(2, 3, 5, 5))
        assert log == ["hook"]  # the hook stayed with the original
        legacy = nn.Linear(4, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            legacy.register_backward_hook(lambda m, gi, go: None)
        model[6].register_full_backward_hook(lambda m, gi, go: None)
        with pytest.raises(ValueError, match="backward hook"):
            replace_modules(model, {model[2]: nn.GELU(), model[6]: legacy}, optimizers=opt)
        assert list(model.named_modules()) == modules and held(opt) == params

    def test_errors(self):
        model = small_net()
        stranger = nn.Linear(4, 2)
        with pytest.raises(
            ValueError,
            match=re.escape(
                "key Linear(in_features=4, out_features=2, bias=True) is not a submodule"
            ),
        ):
            replace_modules(model, {stranger: nn.Linear(4, 2)})
        with pytest.raises(ValueError, match=r"cannot replace the model itself.*in place"):
            replace_modules(model, {model: nn.Sequential()})
        with pytest.raises(ValueError, match="both a key of replacements and the replacement"):
            replace_modules(model, {model[2]: model[3][1], model[3][1]: nn.GELU()})
        with pytest.raises(ValueError, match="inside itself"):
            replace_modules(model, {model[2]: model})
        with pytest.raises(TypeError, match=r"replacements keys must be nn\.Modules, got str"):
            replace_modules(model, {"2": nn.GELU()})
        with pytest.raises(TypeError, match=r"replacements\[ReLU\(\)\] must be an nn.Module, got"):
            replace_modules(model, {model[2]: None})
        with pytest.raises(TypeError, match="replacements must be a mapping"):
            replace_modules(model, [(model[2], nn.GELU())])
        with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
            replace_modules("model", {})
        with pytest.raises(TypeError, match="optimizers"):
            replace_modules(model, {model[2]: nn.GELU()}, optimizers=[1])
        with pytest.raises(TypeError, match=r"torch\.compile.*_orig_mod"):
            replace_modules(torch.compile(model), {model[2]: nn.GELU()})
        assert type(model[2]) is nn.ReLU  # nothing changed along the way

    def test_empty_mapping_is_a_no_op(self):
        model = small_net()
        modules = list(model.modules())
        assert replace_modules(model, {}) == {}
        assert list(model.modules()) == modules


class TestCount:
    def test_counts_distinct_instances_including_root(self):
        relu = nn.ReLU()
        model = nn.Sequential(relu, nn.Sequential(relu, nn.ReLU()))
        assert count_module_instances(model, nn.ReLU) == 2
        assert count_module_instances(model, nn.Sequential) == 2
        assert count_module_instances(model, (nn.ReLU, nn.Sequential)) == 4

    def test_bad_class(self):
        with pytest.raises(TypeError, match="module_class"):
            count_module_instances(small_net(), "ReLU")


class TestTorchvision:
    def test_resnet18_batchnorm_swap_keeps_function_and_trains(self):
        gen = torch.Generator().manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10)
        x = torch.randn(2, 3, 32, 32, generator=gen)
        calibrate_batchnorm(model, torch.randn(8, 3, 32, 32, generator=gen)).eval()
        with torch.no_grad():
            expected = model(x)
        assert torch.isfinite(expected).all()

        class MyBN(nn.BatchNorm2d):
            pass

        def policy(module, index):
            if isinstance(module, MyBN):
                return None
            new = MyBN(module.num_features, device="meta")
            new.weight, new.bias = module.weight, module.bias
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                setattr(new, name, getattr(module, name))
            return new

        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        mapping = replace_module_classes(model, {nn.BatchNorm2d: policy}, optimizers=opt)
        assert len(mapping) == 20 == count_module_instances(model, MyBN)
        with torch.no_grad():
            torch.testing.assert_close(model(x), expected)  # the same tensors, the same math
        assert replace_module_classes(model, {nn.BatchNorm2d: policy}) == {}  # idempotent
        model.train()
        loss = model(x).logsumexp(1).mean()
        assert torch.isfinite(loss)
        loss.backward()
        opt.step()
        assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for p in model.parameters()}

    def test_mobilenet_conv_policy_adds_parameters_into_the_right_group(self):
        model = torchvision.models.mobilenet_v3_small(num_classes=10)
        head = list(model.classifier.parameters())
        head_ids = {id(p) for p in head}
        opt = torch.optim.AdamW(
            [
                {"params": [p for p in model.parameters() if id(p) not in head_ids], "lr": 1e-3},
                {"params": head, "lr": 1e-2},
            ]
        )
        n_conv = count_module_instances(model, nn.Conv2d)
        replace_module_classes(model, {nn.Conv2d: to_scaled_conv}, optimizers=opt)
        body = opt.param_groups[0]["params"]
        assert sum(1 for p in body if p.ndim == 0) == n_conv
        assert opt.param_groups[1]["params"] == head
        out = model(torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
        assert torch.isfinite(out).all()
        out.sum().backward()
        opt.step()


def test_linear_cost_on_a_3000_block_model():
    """A deep model with an optimizer: every block replaced, optimizer consistent."""
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.ReLU()) for _ in range(3000)])
    opt = torch.optim.Adam(model.parameters())
    mapping = replace_module_classes(
        model,
        {nn.Linear: lambda m, i: nn.Linear(2, 2) if type(m) is nn.Linear else None},
        optimizers=opt,
        exact_type=True,
    )
    assert len(mapping) == 3000
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in model.parameters()]


def test_public_names():
    assert surgery.NoEffectWarning.__mro__[1] is UserWarning
