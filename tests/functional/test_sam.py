"""SAMOptimizer: the update rule against hand-computed steps, the interval rule, exact weight
restoration, optimizer plumbing (param groups, schedulers, state dicts) and mixed precision."""

from __future__ import annotations

import contextlib
import copy
import math
import warnings

import pytest
import torch
import torchvision
from torch import nn

from functional import SAMOptimizer, apply_gradient_clipping

# --------------------------------------------------------------------------------------------
# A linear least-squares problem whose gradients we can write down by hand.
# loss(w) = mean((X w - y)^2), grad(w) = 2/n · Xᵀ (X w - y)
# --------------------------------------------------------------------------------------------

X = torch.tensor(
    [[1.0, 2.0, -1.0], [0.5, -1.0, 2.0], [-2.0, 0.0, 1.0], [1.5, 1.0, 0.5], [0.0, -0.5, -1.5]],
    dtype=torch.float64,
)
Y = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64)
W0 = [0.3, -0.2, 0.1]


def grad_by_hand(w: torch.Tensor) -> torch.Tensor:
    return 2.0 / X.shape[0] * X.T @ (X @ w - Y)


def loss_by_hand(w: torch.Tensor) -> torch.Tensor:
    return ((X @ w - Y) ** 2).mean()


def regression_closure(w: nn.Parameter, opt: torch.optim.Optimizer, calls: list | None = None):
    def closure():
        if calls is not None:
            calls.append(w.detach().clone())
        opt.zero_grad()
        loss = ((X @ w - Y) ** 2).mean()
        loss.backward()
        return loss

    return closure


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_matches_hand_computed_steps(momentum):
    rho, eps, lr = 0.1, 1e-12, 0.05
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=lr, momentum=momentum), rho=rho, epsilon=eps)
    closure = regression_closure(w, opt)

    w_ref = torch.tensor(W0, dtype=torch.float64)
    buf = None
    for _ in range(3):
        g = grad_by_hand(w_ref)
        g_sam = grad_by_hand(w_ref + rho * g / (g.norm() + eps))
        buf = g_sam if buf is None or momentum == 0 else momentum * buf + g_sam
        expected_loss = loss_by_hand(w_ref)
        w_ref = w_ref - lr * buf

        loss = opt.step(closure)
        torch.testing.assert_close(loss.detach(), expected_loss, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(w.detach(), w_ref, rtol=1e-12, atol=1e-14)


def test_second_pass_runs_at_the_perturbed_point():
    rho = 0.2
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.1), rho=rho)
    calls: list[torch.Tensor] = []
    opt.step(regression_closure(w, opt, calls))
    w0 = torch.tensor(W0, dtype=torch.float64)
    g = grad_by_hand(w0)
    assert len(calls) == 2
    torch.testing.assert_close(calls[0], w0, rtol=0, atol=0)
    torch.testing.assert_close(calls[1], w0 + rho * g / (g.norm() + 1e-12), rtol=1e-12, atol=1e-14)
    # the perturbation has length rho
    assert math.isclose((calls[1] - calls[0]).norm().item(), rho, rel_tol=1e-9)


@pytest.mark.parametrize("interval", [1, 2, 3])
def test_interval_rule(interval):
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.01), interval=interval)
    counts = []
    for n in range(1, 8):
        calls: list = []
        assert opt.is_sam_step() == (n % interval == 0)
        opt.step(regression_closure(w, opt, calls))
        counts.append(len(calls))
        assert opt.global_step == n
    assert counts == [2 if n % interval == 0 else 1 for n in range(1, 8)]


def test_plain_steps_equal_the_base_optimizer():
    """interval > 1: the non-SAM steps are exactly base-optimizer steps."""
    for kwargs in ({"interval": 1000},):
        w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
        v = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
        sam = SAMOptimizer(torch.optim.SGD([w], lr=0.05, momentum=0.9), **kwargs)
        base = torch.optim.SGD([v], lr=0.05, momentum=0.9)
        for _ in range(3):
            sam.step(regression_closure(w, sam))
            base.step(regression_closure(v, base))
        assert torch.equal(w, v)


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),  # a bias before BN has ~0 gradient
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )


def cnn_closure(model, opt, x, y, record=None):
    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if record is not None:
            record.append([p.detach().clone() for p in model.parameters()])
        return loss

    return closure


def test_weights_restored_bitwise_before_the_base_step():
    torch.manual_seed(1)
    model = small_cnn()
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = SAMOptimizer(base, rho=0.5)
    seen_by_base = []
    base.register_step_pre_hook(
        lambda *_: seen_by_base.append([p.detach().clone() for p in model.parameters()])
    )
    before = [p.detach().clone() for p in model.parameters()]
    record: list = []
    opt.step(cnn_closure(model, opt, x, y, record))
    assert len(seen_by_base) == 1
    for w, seen in zip(before, seen_by_base[0], strict=True):
        assert torch.equal(w, seen)
    # Restoring by subtraction would not have been exact here, so the test can fail.
    perturbed = record[1]
    inexact = [not torch.equal((p - (p - w)), w) for p, w in zip(perturbed, before, strict=True)]
    assert any(inexact)


def test_params_without_grad_are_ignored():
    torch.manual_seed(2)
    model = small_cnn()
    unused = nn.Parameter(torch.randn(4))
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
    twin = copy.deepcopy(model)
    opt = SAMOptimizer(torch.optim.SGD([*model.parameters(), unused], lr=0.1, momentum=0.9))
    ref = SAMOptimizer(torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9))
    unused_before = unused.detach().clone()
    for _ in range(2):
        opt.step(cnn_closure(model, opt, x, y))
        ref.step(cnn_closure(twin, ref, x, y))
    assert torch.equal(unused, unused_before) and unused.grad is None
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)


def manual_sam_step(model, base, x, y, rho, eps, autocast=False):
    """Slow reference: per-parameter arithmetic, torch.autograd.grad, then the base step."""
    params = [p for p in model.parameters()]

    def loss_at():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return nn.functional.cross_entropy(model(x), y)

    loss = loss_at()
    grads = torch.autograd.grad(loss, params)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.add_(g * (rho / (norm + eps)).to(g.dtype))
    grads2 = torch.autograd.grad(loss_at(), params)
    with torch.no_grad():
        for p, w, g in zip(params, saved, grads2, strict=True):
            p.copy_(w)
            p.grad = g.clone()
    base.step()
    return loss.detach()


@pytest.mark.parametrize(
    "make_base",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    ],
    ids=["sgd-momentum", "adamw"],
)
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_matches_reference_on_a_cnn(make_base, autocast):
    torch.manual_seed(3)
    model = small_cnn()
    twin = copy.deepcopy(model)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,))
    opt = SAMOptimizer(make_base(model.parameters()), rho=0.05)
    ref_base = make_base(twin.parameters())

    def closure():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        loss = opt.step(closure)
        ref_loss = manual_sam_step(twin, ref_base, x, y, 0.05, 1e-12, autocast=autocast)
        torch.testing.assert_close(loss.detach(), ref_loss)
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # the base optimizer's state is the one being used (momentum buffers / Adam moments)
    assert len(opt.state) == len(list(model.parameters()))


def test_grad_scaler_step_equals_unscaled_step():
    """Scaling by a power of two and unscaling is exact, so the runs agree bit for bit."""
    torch.manual_seed(4)
    model = small_cnn()
    twin = copy.deepcopy(model)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=1)
    opt = SAMOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), grad_scaler=scaler
    )
    plain = SAMOptimizer(torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9))

    def scaled_closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        return loss

    for _ in range(3):
        opt.step(scaled_closure)
        scaler.update()
        plain.step(cnn_closure(twin, plain, x, y))
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        for b, c in zip(model.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(b, c, rtol=1e-6, atol=1e-7)  # both passes' statistics
    assert model[1].num_batches_tracked.item() == 6
    assert scaler.get_scale() == 2.0**15  # grew after each of the three good steps


@pytest.mark.parametrize("bad_pass", [0, 1])
def test_grad_scaler_skips_the_step_on_inf(bad_pass):
    torch.manual_seed(5)
    model = small_cnn()
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = SAMOptimizer(base, grad_scaler=scaler)
    passes = []

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if len(passes) == bad_pass:
            model[0].weight.grad[0, 0, 0, 0] = float("inf")
        passes.append(1)
        return loss

    before = [p.detach().clone() for p in model.parameters()]
    loss = opt.step(closure)
    scaler.update()
    assert torch.isfinite(loss)
    assert len(passes) == 2  # both passes run: the flags stay on the device, never read
    for p, w in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, w)
    assert len(base.state) == 0  # no momentum buffer: the base optimizer never stepped
    assert scaler.get_scale() == 2.0**9


def test_param_groups_and_state_are_shared():
    a, b = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(2))
    base = torch.optim.SGD([a], lr=0.1, momentum=0.9)
    opt = SAMOptimizer(base)
    assert opt.param_groups is base.param_groups
    assert opt.state is base.state
    assert opt.defaults is base.defaults
    opt.add_param_group({"params": [b], "lr": 0.5})
    assert len(base.param_groups) == 2 and base.param_groups[1]["params"] == [b]
    assert base.param_groups[1]["momentum"] == 0.9  # defaults filled by the base optimizer
    assert "rho" not in base.param_groups[0]  # SAM's own settings do not leak into the groups
    opt.zero_grad()
    assert "SAMOptimizer(rho=0.05" in repr(opt) and "SGD" in repr(opt)


def test_lr_scheduler_drives_it(no_warnings):
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.1))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        before = w.detach().clone()
        calls: list = []
        opt.step(regression_closure(w, opt, calls))
        lrs.append(opt.param_groups[0]["lr"])
        # the base optimizer used the scheduled rate: w moved by lr · g(w + e)
        g = grad_by_hand(before)
        g_sam = grad_by_hand(before + 0.05 * g / (g.norm() + 1e-12))
        torch.testing.assert_close(w.detach(), before - lrs[-1] * g_sam)
        sched.step()
    assert lrs == [0.1, 0.1, 0.05, 0.05, 0.025]


def test_deepcopy_and_pickle_keep_the_wrapper():
    import pickle

    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.1, momentum=0.9), rho=0.2, interval=2)
    opt.step(regression_closure(w, opt))
    opt.step(regression_closure(w, opt))  # a SAM step: scratch buffers exist now
    for clone in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        assert isinstance(clone.base_optimizer, torch.optim.SGD)
        assert (clone.rho, clone.interval, clone.global_step) == (0.2, 2, 2)
        assert clone.param_groups is clone.base_optimizer.param_groups
        (p,) = clone.param_groups[0]["params"]
        assert p is not w and torch.equal(p, w)
        assert torch.equal(clone.state[p]["momentum_buffer"], opt.state[w]["momentum_buffer"])
        clone.step(regression_closure(p, clone))
        clone.step(regression_closure(p, clone))
        assert clone.global_step == 4


def test_step_hooks_run_once_per_step():
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.1))
    seen = []
    opt.register_step_pre_hook(lambda *_: seen.append("pre"))
    opt.register_step_post_hook(lambda *_: seen.append("post"))
    opt.step(regression_closure(w, opt))
    assert seen == ["pre", "post"]


def test_state_dict_round_trip():
    torch.manual_seed(6)
    model = small_cnn()
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))

    def make(m):
        return SAMOptimizer(torch.optim.AdamW(m.parameters(), lr=1e-2), rho=0.1, interval=2)

    opt = make(model)
    for _ in range(3):
        opt.step(cnn_closure(model, opt, x, y))
    saved_model = copy.deepcopy(model.state_dict())
    saved = copy.deepcopy(opt.state_dict())
    assert saved["sam"] == {"global_step": 3, "rho": 0.1, "epsilon": 1e-12, "interval": 2}

    resumed_model = small_cnn()
    resumed_model.load_state_dict(saved_model)
    resumed = SAMOptimizer(torch.optim.AdamW(resumed_model.parameters(), lr=1.0), rho=0.7)
    resumed.load_state_dict(saved)
    assert (resumed.global_step, resumed.rho, resumed.interval) == (3, 0.1, 2)
    assert resumed.param_groups[0]["lr"] == 1e-2
    assert resumed.is_sam_step() == opt.is_sam_step()
    for _ in range(3):
        opt.step(cnn_closure(model, opt, x, y))
        resumed.step(cnn_closure(resumed_model, resumed, x, y))
    for p, q in zip(model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(p, q)

    # A SAM state dict loads into the bare base optimizer, and a bare one into SAM.
    bare = torch.optim.AdamW(small_cnn().parameters(), lr=1.0)
    bare.load_state_dict(saved)
    assert bare.param_groups[0]["lr"] == 1e-2
    fresh = make(small_cnn())
    fresh.load_state_dict(bare.state_dict())
    assert fresh.global_step == 0 and fresh.param_groups[0]["lr"] == 1e-2
    with pytest.raises(ValueError, match=r"state_dict\['sam'\]"):
        fresh.load_state_dict({**saved, "sam": {"global_step": 1}})


def test_resnet18_step_with_bf16_autocast():
    """One SAM step of a real resnet18 under bf16 autocast is the SAM update: the base step
    taken with the gradient at w + e(w), from the restored weights w.

    The model starts in a well-conditioned regime (zero-initialised residual branches, batch 4
    at 64x64, so every BatchNorm sees at least 16 values) and the global torch seed is the
    suite's (TEST_TORCH_SEED). bf16 rounding makes the gradient at w + e(w) sensitive to the
    last bits of e(w) (max-pool ties flip), so the step is compared as a whole with an
    independent float64-norm reference, within a fifth of the distance to either wrong answer:
    a plain SGD step with the gradient at w, or a step from the unrestored w + e(w).
    """
    model = torchvision.models.resnet18(num_classes=4, zero_init_residual=True)
    x, y = torch.randn(4, 3, 64, 64), torch.randint(0, 4, (4,))
    rho, lr = 0.05, 0.01

    def gradients_at(net: nn.Module) -> list[torch.Tensor]:
        net.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nn.functional.cross_entropy(net(x), y).backward()
        return [p.grad.detach().clone() for p in net.parameters()]

    twin = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    g_w = gradients_at(twin)
    g_norm = torch.stack([g.double().norm() for g in g_w]).norm()
    e = [(g.double() * (rho / g_norm)).float() for g in g_w]
    with torch.no_grad():
        for p, d in zip(twin.parameters(), e, strict=True):
            p.add_(d)
    g_sam = gradients_at(twin)

    opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9), rho=rho)

    def closure():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    after = [p.detach() for p in model.parameters()]

    def distance(target: list[torch.Tensor]) -> float:
        return float(
            torch.stack(
                [(a - t).double().norm() for a, t in zip(after, target, strict=True)]
            ).norm()
        )

    sam = [w - lr * g for w, g in zip(before, g_sam, strict=True)]  # momentum: buf = g at step 1
    plain = [w - lr * g for w, g in zip(before, g_w, strict=True)]
    unrestored = [s + d for s, d in zip(sam, e, strict=True)]
    wrong = min(distance(plain), distance(unrestored))
    assert distance(sam) < 0.2 * wrong, (distance(sam), distance(plain), distance(unrestored))


def test_closure_exception_restores_the_weights():
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.1))
    passes = []

    def closure():
        passes.append(1)
        if len(passes) == 2:
            raise RuntimeError("boom")
        return regression_closure(w, opt)()

    with pytest.raises(RuntimeError, match="boom"):
        opt.step(closure)
    assert torch.equal(w.detach(), torch.tensor(W0, dtype=torch.float64))


def test_validation():
    w = nn.Parameter(torch.zeros(2))
    sgd = torch.optim.SGD([w], lr=0.1)
    with pytest.raises(TypeError, match=r"base_optimizer must be a torch\.optim\.Optimizer"):
        SAMOptimizer([w])
    with pytest.raises(ValueError, match=r"rho must be greater than 0, got -0\.1"):
        SAMOptimizer(sgd, rho=-0.1)
    with pytest.raises(ValueError, match="rho must be greater than 0, got 0"):  # the seed's rule
        SAMOptimizer(sgd, rho=0)
    with pytest.raises(ValueError, match="rho must be a finite number > 0, got inf"):
        SAMOptimizer(sgd, rho=math.inf)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0, got 0"):
        SAMOptimizer(sgd, epsilon=0)
    with pytest.raises(ValueError, match="interval must be >= 1, got 0"):
        SAMOptimizer(sgd, interval=0)
    with pytest.raises(TypeError, match="interval must be an int"):
        SAMOptimizer(sgd, interval=1.5)
    with pytest.raises(TypeError, match=r"grad_scaler must be a torch\.amp\.GradScaler"):
        SAMOptimizer(sgd, grad_scaler=object())
    with pytest.raises(TypeError, match="already a SAMOptimizer"):
        SAMOptimizer(SAMOptimizer(sgd))
    with pytest.raises(TypeError, match="requires closure"):
        SAMOptimizer(sgd).step()


def test_no_warnings_from_a_plain_loop():
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step(regression_closure(w, opt))


# --------------------------------------------------------------------------------------------
# Non-finite gradients and the device rules (issues 12 and 13)
# --------------------------------------------------------------------------------------------


def test_one_inf_gradient_without_scaler_does_not_poison_every_weight():
    """0·inf in the perturbation used to turn every weight into NaN; now the perturbation is
    skipped and the step is the base optimizer's own step with that gradient."""
    gen = torch.Generator().manual_seed(11)
    model = small_cnn()
    twin = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 5, (4,), generator=gen)
    opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.05)
    base = torch.optim.SGD(twin.parameters(), lr=0.1)
    points = []

    def closure_for(m, o, record=None):
        def closure():
            o.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            m[0].weight.grad[0, 0, 0, 0] = float("inf")
            if record is not None:
                record.append([p.detach().clone() for p in m.parameters()])
            return loss

        return closure

    opt.step(closure_for(model, opt, points))
    base.step(closure_for(twin, base))
    assert len(points) == 2
    for first, second in zip(*points, strict=True):
        assert torch.equal(first, second)  # no perturbation: the second pass ran at w
    bad = model[0].weight[0, 0, 0, 0]
    assert torch.isinf(bad)  # the base step with an inf gradient, as SGD alone would do
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
    finite = [p for p in model.parameters() if p is not model[0].weight]
    assert all(torch.isfinite(p).all() for p in finite)


def test_steps_read_nothing_on_the_host():
    from tests.devicecheck import no_host_reads

    gen = torch.Generator().manual_seed(12)
    model = small_cnn()
    x, y = torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 5, (4,), generator=gen)
    for interval in (1, 2):
        opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), interval=interval)
        with no_host_reads():
            for _ in range(3):
                opt.step(cnn_closure(model, opt, x, y))
        assert opt.global_step == 3


@pytest.mark.parametrize("bad_pass", [None, 0, 1])
def test_grad_scaler_with_a_fused_optimizer_skips_on_the_device(bad_pass):
    """GradScaler + fused SGD: the found-inf flag goes to the fused step as ``found_inf``, so
    an overflow skips the step with no host read at all."""
    from tests.devicecheck import no_host_reads

    gen = torch.Generator().manual_seed(13)
    model = small_cnn()
    twin = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 5, (4,), generator=gen)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    opt = SAMOptimizer(base, grad_scaler=scaler)
    passes = []

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if len(passes) == bad_pass:
            model[0].weight.grad[0, 0, 0, 0] = float("inf")
        passes.append(1)
        return loss

    before = [p.detach().clone() for p in model.parameters()]
    with no_host_reads():
        opt.step(closure)
    scaler.update()
    assert len(passes) == 2
    if bad_pass is None:
        reference = SAMOptimizer(torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9))
        reference.step(cnn_closure(twin, reference, x, y))
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        assert scaler.get_scale() == 2.0**10
    else:
        for p, w in zip(model.parameters(), before, strict=True):
            assert torch.equal(p, w)
        assert scaler.get_scale() == 2.0**9


def test_seed_parameters_and_defaults():
    """The SAM seed's parameters by name, with its defaults (rho=0.05, epsilon=1e-12,
    interval=1); 'interval: SAM will run once per interval steps'."""
    import inspect

    defaults = {name: p.default for name, p in inspect.signature(SAMOptimizer).parameters.items()}
    assert (defaults["rho"], defaults["epsilon"], defaults["interval"]) == (0.05, 1e-12, 1)
    w = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.05), rho=0.05, epsilon=1e-12, interval=2)
    calls: list = []
    for _ in range(4):
        opt.step(regression_closure(w, opt, calls))
    assert len(calls) == 6  # steps 2 and 4 run the closure twice


# --------------------------------------------------------------------------------------------
# Mixed precision (issue 27): the fp16 perturbation, and an overflow under a GradScaler
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grad_norm", [1e3, 1e5, 1e6])
@pytest.mark.parametrize("layout", ["same-strides", "transposed-grad"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_perturbation_keeps_its_length(grad_norm, layout, dtype):
    """ρ·g/‖g‖ is formed in float32: rounded to float16 the factor ρ/‖g‖ is subnormal beyond
    ‖g‖ ≈ 820, 19% off at 1e6 and 0 beyond, and SAM silently became the base optimizer. Both
    the one-pass update and the per-tensor form (a gradient laid out unlike its weight) count."""
    rho, n = 0.05, 100
    w = nn.Parameter(torch.zeros(n, n, dtype=dtype))  # w + e is e: nothing rounds away
    value = grad_norm / n  # n² equal entries: ‖g‖ = value·n, each entry within float16
    opt = SAMOptimizer(torch.optim.SGD([w], lr=0.0), rho=rho)
    seen = []

    def closure():
        grad = torch.full((n, n), value, dtype=dtype)
        w.grad = grad.t().contiguous().t() if layout == "transposed-grad" else grad
        assert (w.grad.stride() == w.stride()) == (layout == "same-strides")
        seen.append(w.detach().clone())
        return torch.zeros(())

    opt.step(closure)
    perturbation = (seen[1].float() - seen[0].float()).norm()
    rtol = 2e-3 if dtype == torch.float16 else 8e-3  # one rounding of e in the weight's dtype
    torch.testing.assert_close(perturbation, torch.tensor(rho), rtol=rtol, atol=0.0)
    assert torch.equal(w, seen[0])  # restored


def _bn_training_pair():
    gen = torch.Generator().manual_seed(21)
    model = small_cnn()
    twin = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 5, (4,), generator=gen)
    return model, twin, x, y


@pytest.mark.parametrize("variant", ["foreach-sgd", "fused-sgd", "compiled-model"])
def test_overflow_under_grad_scaler_leaves_the_model_as_scaler_step_does(variant):
    """An inf gradient at w: weights, optimizer state and BatchNorm statistics end exactly as
    the base optimizer's scaler.step leaves them (the second pass used to write NaN into the
    running statistics), and the scale backs off the same way; with a fused base optimizer no
    value is read on the host. A torch.compile'd model (no module hook fires inside) too."""
    from tests.devicecheck import no_host_reads

    fused = variant == "fused-sgd"
    model, twin, x, y = _bn_training_pair()
    forward = torch.compile(model, backend="eager") if variant == "compiled-model" else model
    scalers = [torch.amp.GradScaler("cpu", init_scale=2.0**10) for _ in range(2)]
    sgd = dict(lr=0.1, momentum=0.9, fused=True) if fused else dict(lr=0.1, momentum=0.9)
    opt = SAMOptimizer(torch.optim.SGD(model.parameters(), **sgd), grad_scaler=scalers[0])
    base = torch.optim.SGD(twin.parameters(), **sgd)

    def scaled_backward(m, o, scaler, overflow, forward=None):
        o.zero_grad()
        loss = nn.functional.cross_entropy((forward or m)(x), y)
        scaler.scale(loss).backward()
        if overflow:
            m[3].weight.grad[0, 0, 0, 0] = float("inf")
        return loss

    passes = []

    def closure():
        passes.append(1)
        return scaled_backward(model, opt, scalers[0], len(passes) == 1, forward)

    with no_host_reads() if fused else contextlib.nullcontext():
        opt.step(closure)
    scalers[0].update()
    scaled_backward(twin, base, scalers[1], overflow=True)
    scalers[1].step(base)
    scalers[1].update()

    assert len(passes) == 2
    for (name, got), want in zip(
        model.state_dict().items(), twin.state_dict().values(), strict=True
    ):
        assert torch.equal(got, want), name  # weights and running statistics, bit for bit
    assert model[1].num_batches_tracked.item() == 1
    assert len(opt.state) == len(base.state)  # (fused SGD makes its buffers even when skipping)
    assert scalers[0].get_scale() == scalers[1].get_scale() == 2.0**9
    model.eval()
    assert torch.isfinite(model(x)).all()


def _clipped_sam_run(scaler: torch.amp.GradScaler | None, clip: bool) -> tuple[nn.Module, list]:
    """Two SAM steps whose true gradients are clipped to norm 0.5 in the base optimizer's step
    pre-hook (the documented recipe); returns the model and the norms the hook saw."""
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 2, generator=gen)
    opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.05, grad_scaler=scaler)
    seen: list = []

    def clip_hook(*_) -> None:
        seen.append(apply_gradient_clipping(model.parameters(), "norm", 0.5))

    if clip:
        opt.base_optimizer.register_step_pre_hook(clip_hook)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (model(x) - y).square().mean().mul(50)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        return loss

    for _ in range(2):
        opt.step(closure)
        if scaler is not None:
            scaler.update()
    return model, seen


def test_clipping_true_gradients_under_sam_with_a_grad_scaler():
    # Issue 32 §4: the old recipe (scaler.unscale_ in the closure, then clip) raised torch's
    # "unscale_() has already been called". The base optimizer's step pre-hook clips the true
    # gradients: with a scaler (a power of two, exact in float32) the run equals the unscaled one.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1000)
    scaled, scaled_norms = _clipped_sam_run(scaler, clip=True)
    plain, plain_norms = _clipped_sam_run(None, clip=True)
    unclipped, _ = _clipped_sam_run(None, clip=False)
    assert len(scaled_norms) == 2 and all(float(n) > 0.5 for n in scaled_norms)
    torch.testing.assert_close(torch.stack(scaled_norms), torch.stack(plain_norms))
    for a, b in zip(scaled.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    moved = zip(plain.parameters(), unclipped.parameters(), strict=True)
    assert any(not torch.allclose(b, c) for b, c in moved)


def test_unscaling_in_the_closure_names_the_recipe():
    model = nn.Linear(3, 1)
    scaler = torch.amp.GradScaler("cpu")
    opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), grad_scaler=scaler)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = model(torch.ones(2, 3)).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        return loss

    with pytest.raises(
        RuntimeError, match=r"unscale_\(\) was already called.*register_step_pre_hook"
    ):
        opt.step(closure)
