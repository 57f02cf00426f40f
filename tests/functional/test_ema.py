"""ema_smoothing and compute_ema (modules, state dicts, tied weights, wrappers, DTensors)."""

from __future__ import annotations

import copy
import math
import tempfile

import pytest
import torch
import torchvision
from torch import nn

import functional as F
from tests.functional import reference
from tests.test_distributed import FSDP2_ON_CPU


def test_smoothing_formula() -> None:
    assert F.ema_smoothing(10) == pytest.approx(math.exp(-math.log(2) / 10))
    assert F.ema_smoothing(10, 10) == pytest.approx(0.5)
    assert F.ema_smoothing(4, 2) == pytest.approx(2**-0.5)
    assert F.ema_smoothing(0) == 0.0
    assert F.ema_smoothing(math.inf) == 1.0
    # After half_life updates the old weights' share has halved.
    assert F.ema_smoothing(50) ** 50 == pytest.approx(0.5)


@pytest.mark.parametrize(
    "args,match",
    [
        ((-1,), "half_life must be in"),
        ((10, 0), "update_interval must be in"),
        ((10, math.inf), "update_interval must be finite"),
    ],
)
def test_smoothing_rejects_bad_arguments(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        F.ema_smoothing(*args)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)
        self.register_buffer("cache", torch.zeros(3), persistent=False)


def _perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(other.parameters()) + list(other.buffers()):
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=gen, dtype=t.dtype))
            else:
                t.add_(7)
    return other


def _state(module: nn.Module) -> dict:
    return dict(list(module.named_parameters()) + list(module.named_buffers()))


@pytest.mark.parametrize("smoothing", [0.0, 0.5, 0.99, 1.0])
def test_module_update_matches_reference(smoothing) -> None:
    ema = Net()
    model = _perturbed(ema)
    expected = reference.ema(_state(model), _state(ema), smoothing)
    F.compute_ema(model, ema, smoothing)
    for name, value in _state(ema).items():
        torch.testing.assert_close(value.double(), expected[name].double(), msg=name)
    assert ema.bn.num_batches_tracked.item() == model.bn.num_batches_tracked.item()
    assert not any(p.requires_grad is False for p in ema.parameters())  # flags untouched


def test_real_resnet_matches_reference() -> None:
    ema = torchvision.models.resnet18(num_classes=10)
    model = _perturbed(ema)
    expected = reference.ema(_state(model), _state(ema), 0.9)
    F.compute_ema(model, ema, 0.9)
    for name, value in _state(ema).items():
        torch.testing.assert_close(value.double(), expected[name].double(), msg=name)


def test_state_dict_is_updated_in_place() -> None:
    ema = Net()
    model = _perturbed(ema)
    expected = reference.ema(_state(model), _state(ema), 0.8)
    F.compute_ema(model, ema.state_dict(), 0.8)  # aliases ema's tensors
    for name, value in _state(ema).items():
        if name != "cache":  # non-persistent: not in the state dict, skipped
            torch.testing.assert_close(value.double(), expected[name].double(), msg=name)
    assert torch.equal(ema.cache, torch.zeros(3))


def test_dict_of_cloned_tensors_and_other_dtype_and_device() -> None:
    model = Net().to(torch.bfloat16)
    ema = {k: v.float().clone() for k, v in model.state_dict().items()}
    ema["bn.num_batches_tracked"] = model.bn.num_batches_tracked.clone()
    snapshot = {k: v.clone() for k, v in ema.items()}
    with torch.no_grad():
        model.fc.weight.add_(1.0)
    F.compute_ema(model, ema, 0.75)
    assert ema["fc.weight"].dtype == torch.float32
    expected = 0.75 * snapshot["fc.weight"] + 0.25 * model.fc.weight.float()
    torch.testing.assert_close(ema["fc.weight"], expected)


def test_tied_weights_are_averaged_once() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight

    ema = Tied()
    model = _perturbed(ema)
    assert model.head.weight is model.embed.weight
    expected = 0.5 * ema.embed.weight + 0.5 * model.embed.weight
    F.compute_ema(model, ema, 0.5)
    torch.testing.assert_close(ema.embed.weight, expected)
    # A dict of clones holds the tied weight under both names, as separate tensors: both move.
    ema2 = {k: v.clone() for k, v in Tied().state_dict().items()}
    F.compute_ema(model, ema2, 0.0)
    assert torch.equal(ema2["head.weight"], model.embed.weight) and torch.equal(
        ema2["embed.weight"], model.embed.weight
    )


def test_repeated_updates_follow_changes_to_either_side() -> None:
    # compute_ema reuses its checked pairing while nothing changes: every change must show.
    ema = Net()
    model = _perturbed(ema)
    for _ in range(2):
        expected = reference.ema(_state(model), _state(ema), 0.5)
        F.compute_ema(model, ema, 0.5)
        torch.testing.assert_close(ema.fc.weight.double(), expected["fc.weight"])
    model.fc.weight = nn.Parameter(torch.ones(2, 4))  # a new parameter object
    before = ema.fc.weight.detach().clone()
    F.compute_ema(model, ema, 0.5)
    torch.testing.assert_close(ema.fc.weight, 0.5 * before + 0.5)
    with torch.no_grad():
        model.fc.weight.data = torch.full((2, 4), 3.0)  # a .data swap keeps the object
    before = ema.fc.weight.detach().clone()
    F.compute_ema(model, ema, 0.5)
    torch.testing.assert_close(ema.fc.weight, 0.5 * before + 1.5)
    model.double()
    ema.double()
    before = ema.fc.weight.detach().clone()
    F.compute_ema(model, ema, 0.5)
    assert ema.fc.weight.dtype == torch.float64
    torch.testing.assert_close(ema.fc.weight, 0.5 * before + 1.5)
    # A dict EMA whose entry is replaced by a new tensor.
    state = {k: v.clone() for k, v in ema.state_dict().items()}
    F.compute_ema(model, state, 0.5)
    state["fc.weight"] = torch.zeros(2, 4, dtype=torch.float64)
    F.compute_ema(model, state, 0.5)
    torch.testing.assert_close(state["fc.weight"], torch.full((2, 4), 1.5, dtype=torch.float64))
    # A fresh EMA module after the old one is gone.
    del ema
    fresh = copy.deepcopy(model)
    with torch.no_grad():
        fresh.fc.weight.zero_()
    F.compute_ema(model, fresh, 0.5)
    torch.testing.assert_close(fresh.fc.weight, torch.full((2, 4), 1.5, dtype=torch.float64))


def test_one_fused_lerp_per_device_and_dtype(monkeypatch) -> None:
    calls = []
    original = torch._foreach_lerp_

    def spy(tensors, others, weight):
        calls.append({t.dtype for t in tensors})
        return original(tensors, others, weight)

    monkeypatch.setattr(torch, "_foreach_lerp_", spy)
    ema = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3).double(), nn.BatchNorm1d(3))
    F.compute_ema(_perturbed(ema), ema, 0.9)
    assert sorted(calls, key=str) == sorted([{torch.float32}, {torch.float64}], key=str)


def test_compiled_wrapper_is_unwrapped() -> None:
    ema = Net()
    model = _perturbed(ema)
    expected = reference.ema(_state(model), _state(ema), 0.5)
    F.compute_ema(torch.compile(model), ema, 0.5)  # building the wrapper compiles nothing
    torch.testing.assert_close(ema.fc.weight.double(), expected["fc.weight"])


def test_different_module_trees_with_the_same_tensor_names() -> None:
    # An extra tensor-free module, and a tensor held as a buffer instead of a parameter: the
    # tensors still match by name.
    model = nn.Sequential(nn.Linear(2, 2))
    ema = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    bias = ema[0].bias.detach().clone()
    del ema[0].bias
    ema[0].register_buffer("bias", bias)
    with pytest.raises(ValueError, match="missing from ema_model"):
        F.compute_ema(model, nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
    expected = 0.5 * ema[0].bias + 0.5 * model[0].bias
    F.compute_ema(model, ema, 0.5)
    torch.testing.assert_close(ema[0].bias, expected)


@pytest.mark.parametrize(
    "ema_model,error,match",
    [
        (nn.Linear(3, 3), ValueError, "missing from ema_model"),
        ({"conv.weight": torch.zeros(4, 3, 3, 3)}, ValueError, "missing from ema_model"),
        ("weights", TypeError, "ema_model must be an nn.Module or a mapping"),
    ],
)
def test_mismatches_raise(ema_model, error, match) -> None:
    with pytest.raises(error, match=match):
        F.compute_ema(Net(), ema_model)


def test_shape_mismatch_and_bad_smoothing() -> None:
    model = Net()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["fc.weight"] = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"'fc\.weight' has shape"):
        F.compute_ema(model, state)
    with pytest.raises(ValueError, match="smoothing must be in"):
        F.compute_ema(model, copy.deepcopy(model), 1.5)
    extra = dict(model.state_dict(), stray=torch.zeros(1))
    with pytest.raises(ValueError, match="not in model: \\['stray'\\]"):
        F.compute_ema(model, extra)


@pytest.mark.distributed
def test_ddp_and_fsdp2_sharded_models_update_local_shards() -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs a fresh single-process gloo group")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))

    with tempfile.NamedTemporaryFile() as store:
        dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
        try:
            # DistributedDataParallel on both sides: the inner modules are used.
            ema = build()
            model = _perturbed(ema)
            expected = reference.ema(_state(model), _state(ema), 0.9)
            ddp_model = nn.parallel.DistributedDataParallel(model)
            ddp_ema = nn.parallel.DistributedDataParallel(ema)
            F.compute_ema(ddp_model, ddp_ema, 0.9)
            for name, value in _state(ema).items():
                torch.testing.assert_close(value.double(), expected[name].double(), msg=name)
            # A state dict saved from the DDP wrapper has 'module.' keys.
            F.compute_ema(ddp_model, ddp_ema.state_dict(), 1.0)

            # FSDP2: parameters are DTensors; each rank lerps its local shard, in place.
            mesh = init_device_mesh("cpu", (1,))
            ema = build()
            model = _perturbed(ema)
            expected = reference.ema(_state(model), _state(ema), 0.9)
            fully_shard(model, mesh=mesh)
            fully_shard(ema, mesh=mesh)
            assert isinstance(ema[0].weight, DTensor)
            F.compute_ema(model, ema, 0.9)
            for name, value in _state(ema).items():
                local = value.to_local() if isinstance(value, DTensor) else value
                torch.testing.assert_close(local.double(), expected[name].double(), msg=name)
            # The sharded EMA's state dict (DTensors) is updated in place too.
            F.compute_ema(model, ema.state_dict(), 0.0)
            torch.testing.assert_close(ema[0].weight.to_local(), model[0].weight.to_local())
            # Mixing a sharded model with a plain EMA is refused with advice.
            with pytest.raises(TypeError, match="shard both the same way"):
                F.compute_ema(model, build(), 0.5)
        finally:
            dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# The EMA seed's settings: time strings, train_with_ema_weights, evaluation with EMA weights
# ---------------------------------------------------------------------------------------------


def test_seed_time_strings() -> None:
    """EMA(half_life='50ba', update_interval='1ba') and the seed's other forms."""
    assert F.ema_smoothing(half_life="50ba", update_interval="1ba") == F.ema_smoothing(50, 1)
    assert F.ema_smoothing("2ep", "1ep") == pytest.approx(2**-0.5)
    # update_interval defaults to 1 in the units of half_life.
    assert F.ema_smoothing("10ep") == F.ema_smoothing(10)
    assert F.ema_smoothing("10ba", 5) == pytest.approx(F.ema_smoothing(10, 5))
    assert F.ema_smoothing("0ba") == 0.0  # a half life of 0: no averaging


@pytest.mark.parametrize(
    "args,match",
    [
        (("50ba", "1ep"), "same unit"),
        (("1.5ba",), "integer and a unit"),
        (("50ba", "0.5ba"), "integer and a unit"),
        (("0.5dur",), "integer and a unit"),
        (("100sp",), "integer and a unit"),
        (("ba",), "integer and a unit"),
        (("-5ba",), "integer and a unit"),
        ((50, "1ba"), "half_life is a number"),
        (("50ba", "0ba"), "update_interval must be in"),
    ],
)
def test_seed_time_string_errors(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        F.ema_smoothing(*args)


def test_smoothing_as_a_tensor_and_range_check() -> None:
    ema = Net()
    model = _perturbed(ema)
    twin = copy.deepcopy(ema)
    F.compute_ema(model, ema, torch.tensor(0.75))
    F.compute_ema(model, twin, 0.75)
    for (name, a), b in zip(_state(ema).items(), _state(twin).values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\], got 1.5"):
        F.compute_ema(model, ema, torch.tensor(1.5))
    with pytest.raises(ValueError, match="0-d floating tensor"):
        F.compute_ema(model, ema, torch.tensor([0.5, 0.5]))


def test_train_with_ema_weights() -> None:
    """The seed's train_with_ema_weights: after the update the model holds the EMA weights."""
    ema = Net()
    model = _perturbed(ema)
    expected = reference.ema(_state(model), _state(ema), 0.9)
    F.compute_ema(model, ema, 0.9, train_with_ema_weights=True)
    for name, value in _state(model).items():
        torch.testing.assert_close(value.double(), expected[name].double(), msg=name)
        assert torch.equal(value, _state(ema)[name]), name
    with pytest.raises(TypeError, match="train_with_ema_weights must be a bool"):
        F.compute_ema(model, ema, 0.9, train_with_ema_weights=1)


def test_edits_between_calls_are_seen() -> None:
    """No cache: a tensor replaced through .data, or a new parameter object, is used at once."""
    model, ema = nn.Linear(3, 2), nn.Linear(3, 2)
    with torch.no_grad():
        ema.weight.zero_()
        ema.bias.zero_()
    F.compute_ema(model, ema, 0.5)
    model.weight.data = torch.full((2, 3), 4.0)
    model.bias = nn.Parameter(torch.full((2,), 8.0))
    before = ema.weight.detach().clone(), ema.bias.detach().clone()
    F.compute_ema(model, ema, 0.5)
    torch.testing.assert_close(ema.weight, 0.5 * before[0] + 2.0)
    torch.testing.assert_close(ema.bias, 0.5 * before[1] + 4.0)


def _bits(module_or_state) -> dict:
    items = (
        module_or_state.items()
        if isinstance(module_or_state, dict)
        else _state(module_or_state).items()
    )
    return {k: v.detach().clone() for k, v in items}


@pytest.mark.parametrize("as_state_dict", [False, True])
def test_swap_ema_weights_exchanges_everything_bitwise(as_state_dict) -> None:
    ema = Net()
    model = _perturbed(ema)
    model.cache.fill_(3.0)  # non-persistent: a module EMA swaps it, a state dict has none
    target = ema.state_dict() if as_state_dict else ema
    model_before, ema_before = _bits(model), _bits(ema)
    parameter_objects = [id(p) for p in model.parameters()]
    F.swap_ema_weights(model, target)
    for name, value in _state(model).items():
        if as_state_dict and name == "cache":
            assert torch.equal(value, model_before[name])
            continue
        assert torch.equal(value, ema_before[name]), name  # bit for bit, integers too
        assert torch.equal(_state(ema)[name], model_before[name]), name
    assert [id(p) for p in model.parameters()] == parameter_objects
    F.swap_ema_weights(model, target)
    for name, value in _state(model).items():
        assert torch.equal(value, model_before[name]), name
    for name, value in _state(ema).items():
        assert torch.equal(value, ema_before[name]), name


def test_swap_keeps_optimizer_state_and_handles_tied_weights() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    ema = _perturbed(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.head(model.embed(torch.tensor([1, 2]))).sum().backward()
    opt.step()
    momentum = opt.state[model.embed.weight]["momentum_buffer"].clone()
    model_w, ema_w = model.embed.weight.detach().clone(), ema.embed.weight.detach().clone()
    with F.use_ema_weights(model, ema) as inside:
        assert inside is model
        assert torch.equal(model.head.weight, ema_w)  # the tied tensor swapped once, not twice
        assert torch.equal(ema.embed.weight, model_w)
    assert torch.equal(model.embed.weight, model_w) and torch.equal(ema.embed.weight, ema_w)
    assert torch.equal(opt.state[model.embed.weight]["momentum_buffer"], momentum)


def test_use_ema_weights_evaluates_like_the_ema_and_restores_on_error() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).eval()
    ema = _perturbed(model).eval()
    ema[1].running_var.abs_().add_(0.5)  # a valid variance after the random perturbation
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, own = ema(x), model(x)
    with F.use_ema_weights(model, ema), torch.no_grad():
        assert torch.equal(model(x), want)
    with pytest.raises(RuntimeError, match="boom"), F.use_ema_weights(model, ema):
        raise RuntimeError("boom")
    with torch.no_grad():
        assert torch.equal(model(x), own)


def test_swap_refuses_other_dtypes_before_touching_anything() -> None:
    model = nn.Linear(3, 2)
    ema = copy.deepcopy(model).double()
    before = _bits(model)
    with pytest.raises(TypeError, match="same on both sides"):
        F.swap_ema_weights(model, ema)
    for name, value in _state(model).items():
        assert torch.equal(value, before[name])
    with pytest.raises(ValueError, match="swap_ema_weights: model and ema_model must have"):
        F.swap_ema_weights(model, {"weight": torch.zeros(2, 3)})


# ---------------------------------------------------------------------------------------------
# Swapping with the EMA under real torch.distributed (gloo, 2 processes; see test_distributed)
# ---------------------------------------------------------------------------------------------


def scenario_use_ema_weights_through_ddp(rank: int, world_size: int) -> None:
    """Evaluate a DDP model with its EMA weights, swap back, keep training: ranks agree."""
    from tests.test_distributed import assert_identical_across_ranks, rank_batch, small_cnn

    model = small_cnn()
    ema = copy.deepcopy(model)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train(step: int) -> None:
        x, y = rank_batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for step in range(2):
        train(step)
        F.compute_ema(ddp, ema, smoothing=0.5)
    x, _ = rank_batch(0, 99)
    ema_copy = copy.deepcopy(ema).eval()
    for buffer in ema_copy.buffers():  # DDP's forward broadcasts rank 0's buffers
        torch.distributed.broadcast(buffer, src=0)
    own = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        want = ema_copy(x)
    with F.use_ema_weights(ddp, ema), torch.no_grad():
        ddp.eval()
        torch.testing.assert_close(ddp(x), want, rtol=0, atol=0)
        ddp.train()
    for name, value in model.state_dict().items():
        assert torch.equal(value, own[name]), name
    train(2)  # DDP and the optimizer still work on the same parameter objects
    assert_identical_across_ranks(model.parameters())
    assert_identical_across_ranks(ema.parameters(), "EMA parameters")


def scenario_use_ema_weights_on_fsdp2_shards(rank: int, world_size: int) -> None:
    """fully_shard models: each rank swaps its own shards, no communication; the sharded
    model then computes what an unsharded model with the EMA's weights computes."""
    from torch.distributed.device_mesh import init_device_mesh

    from tests.test_distributed import _fully_shard

    fully_shard = _fully_shard()
    mesh = init_device_mesh("cpu", (world_size,))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ema = copy.deepcopy(model)
    with torch.no_grad():
        for p in ema.parameters():
            p.mul_(0.5)
    plain_ema = copy.deepcopy(ema)  # unsharded reference with the EMA's weights
    for m in (model, ema):
        fully_shard(m[0], mesh=mesh)
        fully_shard(m, mesh=mesh)
    full = lambda m: [p.full_tensor().clone() for p in m.parameters()]  # noqa: E731
    model_full, ema_full = full(model), full(ema)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 8, generator=gen)
    with torch.no_grad():
        want = plain_ema(x)
    with F.use_ema_weights(model, ema):
        for got, expected in zip(full(model), ema_full, strict=True):
            assert torch.equal(got, expected)
        with torch.no_grad():
            torch.testing.assert_close(model(x), want)
    for got, expected in zip(full(model), model_full, strict=True):
        assert torch.equal(got, expected)
    for got, expected in zip(full(ema), ema_full, strict=True):
        assert torch.equal(got, expected)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()  # training still works on the swapped-back shards
    opt.step()


@pytest.mark.distributed
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(scenario_use_ema_weights_through_ddp, id="ddp"),
        pytest.param(scenario_use_ema_weights_on_fsdp2_shards, id="fsdp2", marks=FSDP2_ON_CPU),
    ],
)
def test_use_ema_weights_distributed(scenario) -> None:
    from tests.test_distributed import launch

    launch(scenario)


def test_quick_and_careful_paths_agree() -> None:
    """Same tree and dtypes (the quick path), a float64 EMA module (the careful path, with
    conversion) and absent biases (None parameters) give the same averages."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.Flatten())
    ema = _perturbed(model)
    wide = copy.deepcopy(ema).double()
    expected = reference.ema(_state(model), _state(ema), 0.8)
    F.compute_ema(model, ema, 0.8)
    F.compute_ema(model, wide, 0.8)
    for name, value in _state(ema).items():
        torch.testing.assert_close(value.double(), expected[name].double(), msg=name)
        torch.testing.assert_close(_state(wide)[name].double(), expected[name].double(), msg=name)
    assert wide[0].weight.dtype == torch.float64
    with pytest.raises(ValueError, match=r"'0\.weight' has shape"):
        F.compute_ema(model, nn.Sequential(nn.Conv2d(3, 4, 1, bias=False), *ema[1:]), 0.5)


def test_children_registered_as_none() -> None:
    """A child registered as None (``register_module(name, None)``) is skipped on both sides;
    the quick path used to crash on it with AttributeError."""
    model = nn.Sequential(nn.Linear(2, 2))
    model.register_module("absent", None)
    ema = _perturbed(model)
    expected = reference.ema(_state(model), _state(ema), 0.5)
    F.compute_ema(model, ema, 0.5)
    for name, value in _state(ema).items():
        torch.testing.assert_close(value.double(), expected[name].double(), msg=name)
    with pytest.raises(ValueError, match="missing from ema_model"):
        other = nn.Sequential(nn.Linear(2, 2))
        other.register_module("absent", nn.Linear(2, 2))
        F.compute_ema(model, other, 0.5)


class _LazyCache(nn.Module):
    """A layer whose non-persistent buffer is a cache built on the first forward and grown with
    the longest input, as ALiBi's bias tables are."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("table", None, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.table is None or self.table.shape[0] < x.shape[0]:
            self.table = torch.arange(x.shape[0], dtype=x.dtype)
        return self.fc(x) + self.table[: x.shape[0], None]


@pytest.mark.parametrize("ema_length", [None, 3, 9])
def test_caches_built_after_the_copy_are_left_alone(ema_length) -> None:
    """The EMA copy made before the first forward (the order the docs give) still updates when
    a cache exists in one model only, or in both at other sizes; the weights are averaged."""
    model = _LazyCache()
    ema = copy.deepcopy(model)
    model(torch.randn(5, 4))
    if ema_length is not None:
        ema(torch.randn(ema_length, 4))
    with torch.no_grad():
        model.fc.weight.add_(1.0)
    expected = 0.5 * (ema.fc.weight + model.fc.weight)
    F.compute_ema(model, ema, 0.5)
    torch.testing.assert_close(ema.fc.weight, expected)
    assert (ema.table is None) == (ema_length is None)
