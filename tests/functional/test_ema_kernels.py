"""compute_ema and swap_ema_weights at multi-tensor granularity (a 0-d tensor smoothing in one
fused kernel per group, the swap through a bounded scratch), low-precision EMAs (stochastic
rounding, the warning), and state_dict() calls inside use_ema_weights."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import functional as F
import functional.ema.swap as swap_module
from functional.ema.pairing import _memory_order


class _AtenCalls(TorchDispatchMode):
    """Every aten call made inside the block: its name, and for multi-tensor ops whether CUDA's
    fast route would group it (every list the same length; the tensors at one position alike in
    shape, strides, dtype and device; each dense), else it runs one kernel per tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bool]] = []
        self.allocated: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        lists = [
            a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)
        ]
        self.calls.append((name, _fast_route(lists)))
        out = func(*args, **kwargs)
        if name in ("empty", "empty_like", "empty_strided") and isinstance(out, torch.Tensor):
            self.allocated.append(out.numel() * out.element_size())
        return out

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def _fast_route(lists: list) -> bool:
    if not lists:
        return True
    ref = lists[0]
    for lst in lists:
        if len(lst) != len(ref):
            return False
        for t, r in zip(lst, ref, strict=True):
            if (t.shape, t.stride(), t.dtype, t.device) != (r.shape, r.stride(), r.dtype, r.device):
                return False
            if _memory_order(t) is None:  # not dense
                return False
    return True


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)


def _pair(dtype=torch.float32, seed=0, memory_format=torch.contiguous_format):
    torch.manual_seed(seed)
    ema = ConvNet().to(dtype=dtype, memory_format=memory_format)
    model = copy.deepcopy(ema)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=gen).to(dtype))
            else:
                t.add_(3)
    return model, ema


def _tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# ---------------------------------------------------------------------------------------------
# compute_ema with a 0-d tensor smoothing
# ---------------------------------------------------------------------------------------------


def test_tensor_smoothing_is_one_grouped_kernel_per_group() -> None:
    model, ema = _pair()
    with _AtenCalls() as calls:
        F.compute_ema(model, ema, torch.tensor(0.99))
    multi = [(n, fast) for n, fast in calls.calls if n.startswith(("_foreach", "_fused"))]
    # one update of the floating group, one copy of the integer buffers, all on the fast route
    assert [n for n, _ in multi] == ["_fused_sgd_", "_foreach_copy_"]
    assert all(fast for _, fast in multi), multi
    assert "lerp_" not in calls.names()  # no kernel per tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("smoothing", [0.0, 0.3, 0.99, 1.0])
def test_tensor_smoothing_matches_float_smoothing(dtype, smoothing) -> None:
    model, ema = _pair(dtype, memory_format=torch.channels_last)
    model_before, ema_float = _tensors(model), copy.deepcopy(ema)
    versions = [p._version for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the low-precision warning, tested below
        F.compute_ema(model, ema, torch.tensor(smoothing))
        F.compute_ema(model, ema_float, smoothing)
    tol = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-3}[dtype]
    for (name, got), want in zip(_tensors(ema).items(), _tensors(ema_float).values(), strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=name)
    for name, value in _tensors(model).items():  # the "gradients" of the fused kernel
        assert torch.equal(value, model_before[name]), name
    assert [p._version for p in model.parameters()] == versions


def test_tensor_smoothing_with_other_layouts_falls_back_correctly() -> None:
    """Pairs that differ in strides, or do not fill their memory, leave the fused kernel (it
    walks memory) and still get the exact EMA."""
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    ema = copy.deepcopy(model)
    with torch.no_grad():
        ema.weight = nn.Parameter(ema.weight.detach().t().contiguous().t())  # other strides
        model.bias = nn.Parameter(torch.randn(8)[::2])  # not dense
        ema.bias = nn.Parameter(torch.randn(8)[::2])
    want = {k: torch.lerp(ema.state_dict()[k], v, 0.25) for k, v in model.state_dict().items()}
    F.compute_ema(model, ema, torch.tensor(0.75))
    for name, value in ema.state_dict().items():
        torch.testing.assert_close(value, want[name], msg=name)


# ---------------------------------------------------------------------------------------------
# Low-precision EMAs
# ---------------------------------------------------------------------------------------------


def _train_ema(dtype, generator, steps=300, smoothing=0.999):
    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    start = copy.deepcopy(model)
    ema = copy.deepcopy(model).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            F.compute_ema(model, ema, smoothing, generator=generator)
    return start, model, ema


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_ema_with_a_generator_follows_the_float32_ema(dtype) -> None:
    start, _, ema32 = _train_ema(torch.float32, None)
    _, _, rounded = _train_ema(dtype, None)
    _, _, stochastic = _train_ema(dtype, torch.Generator().manual_seed(2))
    for name, want in ema32.named_parameters():
        moved = (want - start.get_parameter(name)).abs().mean()
        assert moved > 0.015  # 1 - 0.999**300 = 26% of a 0.08 mean distance
        error = stochastic.get_parameter(name).float() - want
        assert error.abs().mean() < 0.1 * moved, name  # a few units in the last place
        assert error.mean().abs() < 0.02 * moved, name  # unbiased
        # round to nearest lags far behind (bfloat16: 74% of the way, float16: 9%)
        lag = (rounded.get_parameter(name).float() - want).abs().mean()
        assert lag > 5 * error.abs().mean(), name


def test_stochastic_rounding_is_reproducible_and_exact_where_representable() -> None:
    a = _train_ema(torch.bfloat16, torch.Generator().manual_seed(5), steps=5)[2]
    b = _train_ema(torch.bfloat16, torch.Generator().manual_seed(5), steps=5)[2]
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    model = nn.Linear(3, 3).bfloat16()
    ema = copy.deepcopy(model)
    F.compute_ema(model, ema, 0.9, generator=torch.Generator())  # the same values: no change
    assert all(torch.equal(x, y) for x, y in zip(model.parameters(), ema.parameters(), strict=True))


def test_low_precision_ema_without_a_generator_warns_with_the_fixes() -> None:
    model = nn.Linear(3, 3)
    with pytest.warns(UserWarning, match=r"torch.bfloat16 tensors.*float32.*generator="):
        F.compute_ema(model, copy.deepcopy(model).bfloat16(), 0.999)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.compute_ema(model, copy.deepcopy(model), 0.999)  # float32: no warning
        F.compute_ema(model.bfloat16(), copy.deepcopy(model), 1.0)  # no update to round
        F.compute_ema(model, copy.deepcopy(model), 0.9, generator=torch.Generator())
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        F.compute_ema(model, copy.deepcopy(model), 0.9, generator=0)


# ---------------------------------------------------------------------------------------------
# swap_ema_weights through a bounded scratch
# ---------------------------------------------------------------------------------------------


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
        self.bn = nn.BatchNorm2d(8)
        self.low = nn.Linear(40, 7).bfloat16()
        self.register_buffer("flags", torch.tensor([True, False, True]))


def _swap_pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = Mixed()
    ema = copy.deepcopy(model)
    with torch.no_grad():
        for t in list(ema.parameters()) + list(ema.buffers()):
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape).to(t.dtype))
            else:
                t.copy_(~t if t.dtype == torch.bool else t + 5)
        ema.low.weight[0, :3] = torch.tensor([float("nan"), -0.0, float("inf")])
    return model, ema


def _bits(module: nn.Module) -> dict[str, torch.Tensor]:
    def bits(t):
        return (
            t.view(torch.int16 if t.element_size() == 2 else torch.int32)
            if t.is_floating_point()
            else t
        )

    return {k: bits(v.detach()).clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("scratch_bytes", [64, 1000, 32 * 2**20])
def test_swap_through_a_bounded_scratch_is_bitwise(monkeypatch, scratch_bytes) -> None:
    """The accelerators' path (the CPU swaps by XORs: launches cost nothing there)."""
    monkeypatch.setattr(swap_module, "_XOR_DEVICE_TYPES", ())
    monkeypatch.setattr(swap_module, "_SCRATCH_BYTES", scratch_bytes)
    model, ema = _swap_pair()
    model_bits, ema_bits = _bits(model), _bits(ema)
    with _AtenCalls() as calls:
        F.swap_ema_weights(model, ema)
    for name in model_bits:
        assert torch.equal(_bits(model)[name], ema_bits[name]), name
        assert torch.equal(_bits(ema)[name], model_bits[name]), name
    copies = [fast for name, fast in calls.calls if name == "_foreach_copy_"]
    assert copies and all(copies)  # grouped copies only: no per-tensor XORs
    assert "bitwise_xor_" not in calls.names()
    assert max(calls.allocated) <= scratch_bytes  # the only extra memory: the scratch
    F.swap_ema_weights(model, ema)
    for name in model_bits:
        assert torch.equal(_bits(model)[name], model_bits[name]), name


def test_swap_of_strided_or_differently_laid_out_pairs_uses_xor_in_place(monkeypatch) -> None:
    monkeypatch.setattr(swap_module, "_XOR_DEVICE_TYPES", ())
    model = nn.Linear(6, 4)
    ema = copy.deepcopy(model)
    with torch.no_grad():
        ema.weight = nn.Parameter(torch.randn(6, 4).t())  # other strides than the model's
        model.bias = nn.Parameter(torch.randn(8)[::2])  # not dense
        ema.bias = nn.Parameter(torch.randn(8)[::2])
    before_model, before_ema = _tensors(model), _tensors(ema)
    with _AtenCalls() as calls:
        F.swap_ema_weights(model, ema)
    assert calls.names().count("bitwise_xor_") == 6 and not calls.allocated
    for name in before_model:
        assert torch.equal(model.state_dict()[name], before_ema[name])
        assert torch.equal(ema.state_dict()[name], before_model[name])


@pytest.mark.parametrize("xor_devices", [("cpu",), ()], ids=["xor", "scratch"])
def test_swap_with_itself_changes_nothing(monkeypatch, xor_devices) -> None:
    monkeypatch.setattr(swap_module, "_XOR_DEVICE_TYPES", xor_devices)
    model = nn.Linear(3, 2)
    before = _tensors(model)
    F.swap_ema_weights(model, model.state_dict())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_cpu_swap_is_xor_in_place_without_scratch() -> None:
    model, ema = _swap_pair()
    model_bits, ema_bits = _bits(model), _bits(ema)
    with _AtenCalls() as calls:
        F.swap_ema_weights(model, ema)
    assert not calls.allocated and "_foreach_copy_" not in calls.names()
    for name in model_bits:
        assert torch.equal(_bits(model)[name], ema_bits[name]), name
        assert torch.equal(_bits(ema)[name], model_bits[name]), name


# ---------------------------------------------------------------------------------------------
# state_dict() inside use_ema_weights
# ---------------------------------------------------------------------------------------------


def test_checkpoint_inside_use_ema_weights_warns_with_the_fix() -> None:
    model, ema = _pair()
    training, averaged = _tensors(model), _tensors(ema)
    with F.use_ema_weights(model, ema):
        with pytest.warns(UserWarning, match=r"model.state_dict\(\) was called inside"):
            saved = copy.deepcopy(model.state_dict())
        with pytest.warns(UserWarning, match="Save training checkpoints outside the block"):
            ema.state_dict()
        with pytest.warns(UserWarning, match="holds the EMA weights"):
            torch.compile(model).state_dict()  # through a wrapper
    assert torch.equal(saved["fc.weight"], averaged["fc.weight"])  # what was warned about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outside = model.state_dict()  # the hooks are gone
    assert all(torch.equal(v, training[k]) for k, v in outside.items())


def test_checkpoint_inside_use_ema_weights_can_be_refused() -> None:
    model, ema = _pair()
    training = _tensors(model)
    with pytest.raises(RuntimeError, match="resume from the EMA weights"):
        with F.use_ema_weights(model, ema, on_state_dict="raise"):
            model.state_dict()
    assert all(torch.equal(v, training[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="on_state_dict must be one of"):
        with F.use_ema_weights(model, ema, on_state_dict="ignore"):
            pass
    assert all(torch.equal(v, training[k]) for k, v in model.state_dict().items())


def test_exporting_the_ema_weights_inside_use_ema_weights() -> None:
    model, ema = _pair()
    averaged = _tensors(ema)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with F.use_ema_weights(model, ema, on_state_dict="allow"):
            exported = copy.deepcopy(model.state_dict())
    fresh = ConvNet()
    fresh.load_state_dict(exported)  # loads into a plain model: no extra keys
    assert all(torch.equal(v, averaged[k]) for k, v in fresh.state_dict().items())
