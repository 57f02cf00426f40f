"""BlurPool and stochastic depth under ``torch.compile``, the host-read detector and AMP (issue 12).

- The blur ops and every Blur layer trace with ``fullgraph=True`` (a graph break raises), build
  one graph over calls with new values, and agree with eager; they read no tensor value on the
  host (:func:`tests.devicecheck.no_host_reads`).
- A compiled training step (forward, backward, SGD step) of a small torchvision ResNet after
  ``apply_blurpool`` and after ``apply_stochastic_depth`` in both modes: one graph over several
  steps with fresh data each step, and the same losses and weights as eager (stochastic depth
  compared at the deterministic rates 0 and 1, and in eval mode).
- Stochastic depth's compiled ``'block'`` decisions change from step to step (they were drawn
  once while tracing and replayed before), and a new drop rate does not recompile.
- Stochastic blocks inside ``torch.utils.checkpoint`` under ``torch.compile`` are refused
  while tracing (the compiled recompute would draw other decisions); the named fix, the
  region kept eager with ``torch.compiler.disable``, trains as without checkpointing.
- bf16 autocast on the CPU trains; the CUDA lane runs bf16 and fp16 with ``GradScaler`` under
  ``torch.cuda.set_sync_debug_mode("error")``.

Backend ``aot_eager`` keeps the file fast; one ``slow`` test compares inductor with eager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import torch
import torch._dynamo
import torch.nn.functional as TF
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock

import functional as F
from functional.stochastic_depth import StochasticBasicBlock
from functional.stochastic_depth.generators import _DropGenerators
from tests.devicecheck import compile_counter, no_host_reads

pytestmark = pytest.mark.compile

STEPS = 3


def _data(
    n: int, *, device: str = "cpu", seed: int = 1234
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(4, 3, 32, 32, generator=g).to(device),
            torch.randint(0, 10, (4,), generator=g).to(device),
        )
        for _ in range(n)
    ]


def resnet(seed: int = 0) -> nn.Module:
    """torchvision's ResNet with one BasicBlock per stage, 10 classes, from a fixed seed."""
    torch.manual_seed(seed)
    return torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10).train()


def blurpooled(seed: int = 0) -> nn.Module:
    model = resnet(seed)
    F.apply_blurpool(model, min_channels=0)  # the stem too: every Blur layer type is in it
    return model


def stochastic(method: str, rate: float = 0.5, **kwargs) -> Callable[[int], nn.Module]:
    def build(seed: int = 0) -> nn.Module:
        model = resnet(seed)
        F.apply_stochastic_depth(
            model, method, "ResNetBasicBlock", drop_rate=rate, seed=7, **kwargs
        )
        return model

    return build


def train(
    model: nn.Module,
    forward: Callable[[torch.Tensor], torch.Tensor],
    data: list[tuple[torch.Tensor, torch.Tensor]],
    *,
    between: Callable[[int], object] | None = None,
    autocast: bool = False,
    momentum: float = 0.9,
) -> list[torch.Tensor]:
    """SGD (with momentum by default), one step per batch; returns the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum)
    losses = []
    for i, (x, y) in enumerate(data):
        if between is not None:
            between(i)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            out = forward(x)
        loss = TF.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def assert_same_training(
    build: Callable[[int], nn.Module],
    *,
    backend: str = "aot_eager",
    between: Callable[[nn.Module, int], object] | None = None,
    steps: int = STEPS,
    eager_build: Callable[[int], nn.Module] | None = None,
    buffers: bool = True,
    loss_tol: float = 1e-4,
    weight_tol: float = 1e-4,
    momentum: float = 0.9,
) -> None:
    """Compiled and eager training from the same start agree; one graph for every step.

    ``eager_build`` builds the eager model when it differs (same weights, another code path);
    ``buffers=False`` compares parameters only; weights and buffers agree to ``weight_tol``.
    """
    data = _data(steps)
    eager = (eager_build or build)(0)
    hook = None if between is None else (lambda i: between(eager, i))
    eager_losses = train(eager, eager, data, between=hook, momentum=momentum)

    torch._dynamo.reset()
    model = build(0)
    compiled, counter = compile_counter(model, backend=backend)
    hook = None if between is None else (lambda i: between(model, i))
    losses = train(model, compiled, data, between=hook, momentum=momentum)

    assert counter.frame_count == 1, f"{counter.frame_count} graphs over {steps} steps"
    rtol, atol = (loss_tol, loss_tol / 10) if backend == "aot_eager" else (1e-3, 1e-4)
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses), rtol=rtol, atol=atol)
    state = model.state_dict() if buffers else dict(model.named_parameters())
    eager_state = eager.state_dict() if buffers else dict(eager.named_parameters())
    for (name, a), (_, b) in zip(state.items(), eager_state.items(), strict=True):
        if name.endswith("._extra_state"):
            continue  # draw counts: skipped eager branches count host draws, compiled device ones
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=weight_tol, atol=weight_tol, msg=name)
        else:
            assert torch.equal(a, b), name


# --------------------------------------------------------------------------- blur ops and layers


def test_blur_ops_compile_once_and_equal_eager() -> None:
    def ops(x: torch.Tensor, f: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            F.blur_2d(x),
            F.blur_2d(x, 2, f),
            F.blurmax_pool2d(x, 2),
            F.blurmax_pool2d(x, 3, 2, 1, ceil_mode=True, filter=f),
        )

    torch._dynamo.reset()
    compiled, counter = compile_counter(ops)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):  # new images and new filter values: the same graph
        x, f = torch.rand(2, 3, 20, 20, generator=g), torch.rand(3, 3, generator=g)
        for got, want in zip(compiled(x, f), ops(x, f), strict=True):
            torch.testing.assert_close(got, want)
    assert counter.frame_count == 1


def _blur_layers() -> nn.Module:
    return nn.Sequential(
        F.BlurConv2d(3, 8, 3, 2, 1),
        F.BlurMaxPool2d(2, ceil_mode=True),
        F.BlurPool2d(channels=8),
        F.BlurConv2d(8, 8, 3, 2, 1, blur_first=False),
    )


@pytest.mark.slow
def test_blur_layers_compile_once_and_equal_eager_forward_and_backward() -> None:
    torch.manual_seed(0)
    layers = _blur_layers()
    torch._dynamo.reset()
    compiled, counter = compile_counter(layers)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = torch.rand(2, 3, 40, 40, generator=g, requires_grad=True)
        out = compiled(x)
        (grad,) = torch.autograd.grad(out.square().sum(), x)
        want = layers(x)
        (want_grad,) = torch.autograd.grad(want.square().sum(), x)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(grad, want_grad)
    with torch.no_grad():  # a new filter value: the same graph, the new filter used
        for layer in layers:
            layer.blur_taps.copy_(torch.tensor([0.5, 0.0, 0.5]))
    torch.testing.assert_close(compiled(x), layers(x))
    assert counter.frame_count == 1


def test_blur_layers_read_no_host_value() -> None:
    torch.manual_seed(0)
    layers = _blur_layers()
    x = torch.rand(2, 3, 40, 40, requires_grad=True)  # planes >= 256 px: the CPU kernel
    with no_host_reads():
        layers(x).sum().backward()
        with torch.no_grad():
            layers(x)
    assert x.grad is not None


@pytest.mark.slow
def test_blurpool_training_step_compiled_equals_eager() -> None:
    """Eager CPU blurs run the shift-and-add kernel, the compiled graph a depthwise convolution:
    other rounding, which three SGD steps carry into the weights (the last stage normalises 4
    values per channel, which amplifies it): weights agree to 1e-3 (they are ~0.1)."""
    assert_same_training(blurpooled, loss_tol=1e-4, weight_tol=1e-3)


@pytest.mark.slow
def test_blur_layers_inductor_equal_eager() -> None:
    """Inductor's generated code for every Blur layer agrees with eager (forward)."""
    torch.manual_seed(0)
    layers = _blur_layers()
    torch._dynamo.reset()
    compiled, counter = compile_counter(layers, backend="inductor")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(2):
            x = torch.rand(2, 3, 40, 40, generator=g)
            torch.testing.assert_close(compiled(x), layers(x), rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 1


# --------------------------------------------------------------------------- stochastic depth


@pytest.mark.slow
@pytest.mark.parametrize("method", ["block", "block_skip", "sample"])
def test_stochastic_depth_training_step_one_graph_across_rates(method: str) -> None:
    """Uniform rates 0 and 1 make every decision deterministic (keep all / drop all), so
    compiled and eager training must agree; switching between them mid-training (the warm-up's
    ``set_stochastic_depth_drop_rate``) reuses the one graph. ``block_skip``: the eager model
    skips dropped branches, so their BatchNorm statistics are not updated and their
    parameters get no gradient (``None``), while the compiled model runs the branch, multiplies
    it by 0 and gives zero gradients, which momentum still applies: compared with plain SGD,
    on losses and parameters (statistics differ by design)."""

    def set_rate(model: nn.Module, step: int) -> None:
        F.set_stochastic_depth_drop_rate(model, [0.0, 1.0, 0.0, 1.0][step])

    mode = "sample" if method == "sample" else "block"
    build = stochastic(mode, drop_distribution="uniform", skip_dropped=method == "block_skip")
    skip = method == "block_skip"
    assert_same_training(
        build, between=set_rate, steps=4, buffers=not skip, momentum=0.0 if skip else 0.9
    )


@pytest.mark.parametrize("method", ["block", "sample"])
def test_stochastic_depth_eval_compiled_is_the_original(method: str) -> None:
    plain = resnet(0).eval()
    model = stochastic(method)(0).eval()
    torch._dynamo.reset()
    compiled, counter = compile_counter(model)
    for x, _ in _data(2):
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), plain(x), rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1


class _Parallel(nn.Module):
    """Four independent stochastic blocks applied to the same input: each output shows whether
    that block dropped its branch (output == relu(x)) in this step. With a ``seed``, the blocks
    draw from the streams ``apply_stochastic_depth`` would give them (else from torch's
    default generator)."""

    def __init__(self, method: str, seed: int | None = None, **kwargs) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            StochasticBasicBlock(4, 4, drop_rate=0.5, stochastic_method=method, **kwargs)
            for _ in range(4)
        )
        if seed is not None:
            streams = _DropGenerators(seed, shared=True)
            for index, block in enumerate(self.blocks):
                block._attach_streams(streams, index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([block(x) for block in self.blocks])


def _dropped(out: torch.Tensor, x: torch.Tensor) -> tuple[bool, ...]:
    """Per block (and sample): did the output equal relu(x), i.e. was the branch dropped?"""
    same = (out - torch.relu(x)).abs().flatten(2).amax(dim=2) < 1e-6  # (blocks, batch)
    return tuple(same.flatten().tolist())


@pytest.mark.parametrize("method", ["block", "sample"])
def test_compiled_decisions_change_every_step(method: str) -> None:
    """Issue 12: under compile, 'block' mode drew its host decision once while tracing and then
    dropped the same blocks at every step. 24 compiled steps must show fresh decisions: each
    block both dropped and kept, and many distinct patterns (16 possible in 'block' mode)."""
    torch.manual_seed(0)
    model = _Parallel(method).train()
    torch._dynamo.reset()
    compiled, counter = compile_counter(model)
    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0))
    patterns = []
    for _ in range(24):
        with torch.no_grad():
            patterns.append(_dropped(compiled(x), x))
    assert counter.frame_count == 1
    per_slot = list(zip(*patterns, strict=True))
    assert all(any(slot) and not all(slot) for slot in per_slot), "a decision never changed"
    assert len(set(patterns)) >= 8, f"only {len(set(patterns))} distinct decisions in 24 steps"
    if method == "block":  # a block decision covers the whole batch
        assert all(p[0::2] == p[1::2] for p in patterns)
    rates = [sum(slot) / len(slot) for slot in per_slot]
    assert 0.15 < sum(rates) / len(rates) < 0.85


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", ["block", "sample"])
def test_compiled_draws_are_the_eager_ones_and_ignore_torch_rng(method: str, backend: str) -> None:
    """Issue 24: with the model's streams, a decision is a function of (seed, block, draw
    number) computed on the device, eager or compiled: 24 compiled steps drop exactly what the
    eager device path drops (and, in 'block' mode, what the eager host path drops), whatever
    torch's global generator is seeded with between steps; one graph; fresh decisions.
    Inductor: its generated integer code hashes as eager does."""
    torch.manual_seed(0)
    model = _Parallel(method, seed=11).train()
    eager = [_Parallel(method, seed=11, skip_dropped=False).train()]
    if method == "block":
        eager.append(_Parallel(method, seed=11).train())  # host decisions (skip_dropped=True)
    for other in eager:
        other.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    compiled, counter = compile_counter(model, backend=backend)
    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0))
    patterns = []
    with torch.no_grad():
        for step in range(24):
            torch.manual_seed(step)
            patterns.append(_dropped(compiled(x), x))
            torch.manual_seed(1000 + step)
            assert [_dropped(other(x), x) for other in eager] == [patterns[-1]] * len(eager)
    assert counter.frame_count == 1
    assert len(set(patterns)) >= 8, f"only {len(set(patterns))} distinct decisions in 24 steps"
    assert all(int(block.drop_draws) == 24 for block in model.blocks)


def test_eager_device_draws_read_nothing_on_the_host() -> None:
    """The eager device decisions ('sample', and 'block' with skip_dropped=False) hash and count
    on the device: no tensor value is read on the host."""
    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0))
    for model in (_Parallel("sample", seed=3), _Parallel("block", seed=3, skip_dropped=False)):
        with no_host_reads():
            model.train()(x)
        assert all(int(block.drop_draws) == 1 for block in model.blocks)


def test_new_rates_do_not_recompile_and_are_used() -> None:
    """A compiled model reads the rate from a 0-d buffer: new rates reuse the graph and take
    effect at once (rate 1: everything dropped; rate 0: everything kept)."""
    torch.manual_seed(0)
    model = _Parallel("block").train()
    torch._dynamo.reset()
    compiled, counter = compile_counter(model)
    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for rate in (0.0, 1.0, 0.3, 0.0, 1.0, 0.77):
            F.set_stochastic_depth_drop_rate(model, rate)
            pattern = _dropped(compiled(x), x)
            if rate in (0.0, 1.0):
                assert set(pattern) == {rate == 1.0}
    assert counter.frame_count == 1


@pytest.mark.parametrize("method", ["block", "sample"])
@pytest.mark.parametrize("skip_dropped", [True, False])
def test_stochastic_depth_trains_under_cpu_bf16_autocast(method: str, skip_dropped: bool) -> None:
    """Under autocast the branch runs in bf16 (conv) and the decision factor is cast to the
    branch's dtype; the block's output has the dtype of ``shortcut + branch``."""
    model = stochastic(method, skip_dropped=skip_dropped)(0)
    losses = train(model, model, _data(2), autocast=True)
    assert all(torch.isfinite(loss) for loss in losses)
    block = model.layer3[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = block(torch.randn(2, 128, 8, 8))
    assert out.dtype == torch.bfloat16


def test_blurpool_trains_under_cpu_bf16_autocast() -> None:
    """BlurConv2d's blur keeps the incoming dtype (float32 from the stem's input, bf16 after an
    autocast conv) and its convolution follows autocast (bf16); BlurMaxPool2d and BlurPool2d
    keep the incoming dtype."""
    model = blurpooled()
    losses = train(model, model, _data(2), autocast=True)
    assert all(torch.isfinite(loss) for loss in losses)
    x32 = torch.randn(2, 8, 20, 20)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.BlurConv2d(8, 8, 3, 2, 1)(x32).dtype == torch.bfloat16
        assert F.BlurMaxPool2d(2)(x32).dtype == torch.float32
        assert F.BlurPool2d()(x32.bfloat16()).dtype == torch.bfloat16


@pytest.mark.slow
def test_stochastic_decisions_from_compiled_model_follow_torch_seed() -> None:
    """Compiled draws come from torch's default generator: the same seed, the same decisions."""
    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0))

    def run() -> list[tuple[bool, ...]]:
        torch.manual_seed(0)
        model = _Parallel("block").train()
        torch._dynamo.reset()
        compiled, _ = compile_counter(model)
        torch.manual_seed(123)
        with torch.no_grad():
            return [_dropped(compiled(x), x) for _ in range(6)]

    assert run() == run()


class _Checkpointed(nn.Module):
    """Runs ``inner`` under non-reentrant ``torch.utils.checkpoint.checkpoint``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=False)


def test_checkpointed_stochastic_blocks_refused_at_trace_time() -> None:
    """Compiled, a checkpointed region would recompute other decisions than its forward drew
    (torch recomputes from the counter the forward advanced): refused while tracing, with the
    fix named, rather than training with wrong gradients."""
    model = stochastic("sample")()
    model.layer2 = _Checkpointed(model.layer2)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    with pytest.raises(
        RuntimeError, match=r"checkpoint under torch.compile.*torch.compiler.disable"
    ):
        compiled(torch.randn(2, 3, 32, 32))
    model.eval()  # no decisions in evaluation: nothing to refuse
    torch._dynamo.reset()
    assert torch.compile(model, backend="aot_eager")(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.slow
def test_checkpointed_region_kept_eager_trains_as_uncheckpointed() -> None:
    """The named fix: the checkpointed region left eager inside the compiled model replays its
    forward's decisions, so the gradients equal those of the model without checkpointing."""
    data = _data(2)
    plain = stochastic("sample")()
    expected = []
    for x, y in data:
        plain.zero_grad()
        TF.cross_entropy(plain(x), y).backward()
        expected.append([p.grad.clone() for p in plain.parameters()])
    model = stochastic("sample")()
    model.layer2 = torch.compiler.disable(_Checkpointed(model.layer2))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    for (x, y), step_expected in zip(data, expected, strict=True):
        model.zero_grad()
        TF.cross_entropy(compiled(x), y).backward()
        for e, p in zip(step_expected, model.parameters(), strict=True):
            torch.testing.assert_close(p.grad, e)


# --------------------------------------------------------------------------- CUDA lane


@contextlib.contextmanager
def sync_debug_error() -> Iterator[None]:
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


CUDA_BUILDS = {
    "blurpool": blurpooled,
    "stochastic_block": stochastic("block"),
    "stochastic_block_device": stochastic("block", skip_dropped=False),
    "stochastic_sample": stochastic("sample"),
}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(CUDA_BUILDS))
def test_cuda_amp_training_without_syncs(name: str, dtype: torch.dtype) -> None:
    """bf16, and fp16 with ``GradScaler``: finite training; forward and backward never
    synchronise (the scaler's own inf check in ``step`` does, by design, so it stays outside)."""
    model = CUDA_BUILDS[name](0).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    for i, (x, y) in enumerate(_data(3, device="cuda")):
        opt.zero_grad(set_to_none=True)
        guard = sync_debug_error() if i > 0 else contextlib.nullcontext()  # 1st: cuDNN setup
        with guard:
            F.set_stochastic_depth_drop_rate(model, 0.1 * i) if "stochastic" in name else None
            with torch.autocast("cuda", dtype=dtype):
                out = model(x)
            loss = TF.cross_entropy(out.float(), y)
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        assert torch.isfinite(loss)


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(CUDA_BUILDS))
def test_cuda_compiled_training_step_one_graph(name: str) -> None:
    torch._dynamo.reset()
    model = CUDA_BUILDS[name](0).cuda()
    compiled, counter = compile_counter(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(_data(STEPS, device="cuda")):
        if "stochastic" in name:
            F.set_stochastic_depth_drop_rate(model, 0.1 * i)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = TF.cross_entropy(compiled(x).float(), y)
        loss.backward()
        opt.step()
    assert counter.frame_count == 1


@pytest.mark.cuda
def test_cuda_blur_ops_without_syncs() -> None:
    x = torch.rand(2, 3, 40, 40, device="cuda", requires_grad=True)
    f = torch.rand(3, 3, device="cuda")
    layers = _blur_layers().cuda()
    F.blur_2d(x)  # warm-up outside the guard (first-call library setup)
    with sync_debug_error():
        outs = [F.blur_2d(x), F.blur_2d(x, 2, f), F.blurmax_pool2d(x, 2), layers(x)]
        sum(o.float().sum() for o in outs).backward()
