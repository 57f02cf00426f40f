"""Training-state helpers under torch.compile and the host-read detector (issue 12).

``compute_ema``, ``SAMOptimizer.step`` and ``apply_gradient_clipping`` (three modes): no
host read, ``fullgraph=True`` without a graph break, no recompile when the smoothing, the
step number or the clipping threshold change, and compiled equal to eager.

Python floats that change between calls cost dynamo one recompile (its "automatic dynamic"
step: the first graph specialises on the first value, the second takes any value) and then
none; 0-d tensors cost none. The tests pin both.

torch's own optimizers insert graph breaks around ``step`` on purpose (pytorch#104053) and
dynamo cannot trace ``loss.backward()``, so a whole training step cannot be one full graph
with torch's SGD. SAM's own work is compiled whole with a base optimizer whose step is plain
foreach code and a closure that writes the gradients of a quadratic loss analytically; a
second test compiles a real step (forward, backward, torch SGD) without ``fullgraph`` and
counts the graphs over several steps.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
from torch import nn

import functional as F
from tests.devicecheck import compile_counter, no_host_reads

VALUES = (0.9, 0.8, 0.95, 0.7, 0.85)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _perturbed(model: nn.Module, seed: int) -> nn.Module:
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in other.parameters():
            t.add_(torch.randn(t.shape, generator=gen))
        other[1].num_batches_tracked.add_(3)
    return other


# ---------------------------------------------------------------------------------------------
# compute_ema
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_tensor", [False, True], ids=["float", "tensor"])
def test_compute_ema_compiles_once_and_equals_eager(as_tensor):
    def update(model, ema, smoothing):
        F.compute_ema(model, ema, smoothing)

    ema = _model()
    model = _perturbed(ema, 1)
    eager_ema = copy.deepcopy(ema)
    torch._dynamo.reset()
    compiled, counter = compile_counter(update)
    for step, value in enumerate(VALUES):
        smoothing = torch.tensor(value) if as_tensor else value
        with torch.no_grad():  # the model moves between updates
            for p in model.parameters():
                p.mul_(1.0 + 0.01 * step)
        compiled(model, ema, smoothing)
        update(model, eager_ema, smoothing)
    # A 0-d tensor never recompiles; a float once (dynamo's automatic dynamic), then never.
    assert counter.frame_count == (1 if as_tensor else 2)
    for (name, a), b in zip(ema.state_dict().items(), eager_ema.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_compute_ema_reads_nothing_on_the_host():
    ema = _model()
    model = _perturbed(ema, 2)
    with no_host_reads():
        F.compute_ema(model, ema, 0.9)
        F.compute_ema(model, ema, torch.tensor(0.9))
        F.compute_ema(model, ema.state_dict(), 0.5)
        F.compute_ema(model, ema, 0.9, train_with_ema_weights=True)
        F.swap_ema_weights(model, ema)
        with F.use_ema_weights(model, ema):
            pass


# ---------------------------------------------------------------------------------------------
# SAMOptimizer.step
# ---------------------------------------------------------------------------------------------


class _ForeachSGD(torch.optim.Optimizer):
    """Plain SGD whose step dynamo traces (torch's optimizers break the graph on purpose)."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            torch._foreach_add_(params, [p.grad for p in params], alpha=-group["lr"])


def _quadratic(seed: int):
    """Parameters and a closure for loss = ‖w - t‖² + ‖v‖², gradients written analytically."""
    gen = torch.Generator().manual_seed(seed)
    w = nn.Parameter(torch.randn(3, generator=gen))
    v = nn.Parameter(torch.randn(2, 3, generator=gen))
    target = torch.randn(3, generator=gen)

    def closure():
        w.grad = 2 * (w.detach() - target)
        v.grad = 2 * v.detach()
        return ((w.detach() - target) ** 2).sum() + (v.detach() ** 2).sum()

    return (w, v), closure


@pytest.mark.parametrize("interval", [1, 3, 5])
def test_sam_step_compiles_without_specialising_on_the_step(interval):
    """interval=1: one graph for every step. interval>1: a SAM step and a plain step are two
    programs; the graphs stop at three (first step, then one per kind) however many steps run,
    and the compiled run keeps taking the right kind of step (compared with eager)."""
    results = []
    for compiled in (False, True):
        params, closure = _quadratic(3)
        opt = F.SAMOptimizer(_ForeachSGD(params, lr=0.1), rho=0.5, interval=interval)

        def train_step(opt=opt, closure=closure):
            return opt.step(closure)

        torch._dynamo.reset()
        run, counter = compile_counter(train_step) if compiled else (train_step, None)
        losses = [run() for _ in range(4 * interval + 1)]
        results.append((params, losses, opt.global_step))
        if compiled:
            assert counter.frame_count <= min(interval, 3)
    (eager_params, eager_losses, eager_steps), (params, losses, steps) = results
    assert steps == eager_steps == 4 * interval + 1
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses))
    for a, b in zip(params, eager_params, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_sam_real_training_step_graphs_stop_growing():
    """Forward, backward and torch SGD under torch.compile (graph breaks allowed only where
    torch puts them): the number of graphs is the same after 3 steps as after 6."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(4)
    x, y = torch.randn(6, 4, generator=gen), torch.randn(6, 2, generator=gen)

    def make(m):
        opt = F.SAMOptimizer(torch.optim.SGD(m.parameters(), lr=0.05), rho=0.1, interval=2)

        def closure():
            for p in m.parameters():
                p.grad = None
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            return loss

        return lambda: opt.step(closure)

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(make(model), backend=counter)
    eager = make(twin)
    for step in range(6):
        torch.testing.assert_close(compiled(), eager())
        if step == 2:
            graphs = counter.frame_count
    assert counter.frame_count == graphs
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q)


# ---------------------------------------------------------------------------------------------
# apply_gradient_clipping
# ---------------------------------------------------------------------------------------------


def _set_gradients(params, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = 3.0 * torch.randn(p.shape, generator=gen)


@pytest.mark.parametrize("clipping_type", ["norm", "value", "adaptive"])
@pytest.mark.parametrize("as_tensor", [False, True], ids=["float", "tensor"])
def test_gradient_clipping_compiles_once_and_equals_eager(clipping_type, as_tensor):
    model = _model()
    params = list(model.parameters())
    twin = copy.deepcopy(params)

    def clip(ps, threshold):
        return F.apply_gradient_clipping(ps, clipping_type, threshold)

    torch._dynamo.reset()
    compiled, counter = compile_counter(clip)
    for step, value in enumerate((0.5, 0.3, 0.2, 0.4)):
        threshold = torch.tensor(value) if as_tensor else value
        _set_gradients(params, step)
        _set_gradients(twin, step)
        got, want = compiled(params, threshold), clip(twin, threshold)
        if want is not None:
            torch.testing.assert_close(got, want)
        for p, q in zip(params, twin, strict=True):
            torch.testing.assert_close(p.grad, q.grad)
    assert counter.frame_count == (1 if as_tensor else 2)


@pytest.mark.parametrize("clipping_type", ["norm", "value", "adaptive"])
def test_gradient_clipping_edge_thresholds_compile_once(clipping_type):
    """Thresholds beyond float32 and ones that round to 0 in it (Python floats: dynamo's one
    automatic-dynamic recompile, then none), on zero and overflowing gradients: the same
    NaN-free result as eager."""
    model = _model()
    params = list(model.parameters())
    twin = copy.deepcopy(params)

    def clip(ps, threshold):
        return F.apply_gradient_clipping(ps, clipping_type, threshold)

    torch._dynamo.reset()
    compiled, counter = compile_counter(clip)
    for step, (value, scale) in enumerate(
        ((1e300, 1e30), (5e-324, 0.0), (1e300, 0.0), (0.5, 1e30))
    ):
        threshold = value
        for ps in (params, twin):
            _set_gradients(ps, step)
            for p in ps:
                p.grad.mul_(scale)
        got, want = compiled(params, threshold), clip(twin, threshold)
        if want is not None:
            torch.testing.assert_close(got, want)
        for p, q in zip(params, twin, strict=True):
            assert not p.grad.isnan().any()
            torch.testing.assert_close(p.grad, q.grad)
    assert counter.frame_count == 2


@pytest.mark.parametrize("clipping_type", ["norm", "value", "adaptive"])
def test_gradient_clipping_reads_nothing_on_the_host(clipping_type):
    params = list(_model().parameters())
    _set_gradients(params, 0)
    with no_host_reads():
        F.apply_gradient_clipping(params, clipping_type, 0.3)
        F.apply_gradient_clipping(params, clipping_type, torch.tensor(0.2))
    with pytest.raises(ValueError, match="clipping_threshold must be a finite number > 0"):
        F.apply_gradient_clipping(params, clipping_type, torch.tensor(-1.0))


# ---------------------------------------------------------------------------------------------
# The CUDA lane: the same calls under torch.cuda.set_sync_debug_mode("error")
# ---------------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_cuda_training_state_helpers_never_synchronise():
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))
    model = model.to(device)
    ema = copy.deepcopy(model)
    x = torch.randn(8, 16, device=device)
    y = torch.randint(0, 4, (8,), device=device)
    scaler = torch.amp.GradScaler("cuda")
    fused = F.SAMOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, fused=True), grad_scaler=scaler, interval=2
    )
    plain = F.SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))

    def closure_for(opt, scale):
        def closure():
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            (scaler.scale(loss) if scale else loss).backward()
            return loss

        return closure

    plain.step(closure_for(plain, False))  # warm-up: allocations, lazy initialisation
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            fused.step(closure_for(fused, True))
            scaler.update()
            plain.step(closure_for(plain, False))
            for kind in ("norm", "value", "adaptive"):
                F.apply_gradient_clipping(model.parameters(), kind, 1.0)
            F.compute_ema(model, ema, 0.99)
            F.compute_ema(model, ema, torch.tensor(0.9, device=device))
        with F.use_ema_weights(model, ema):
            model.eval()
            model(x)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
