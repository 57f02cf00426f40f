"""Training-state helpers: SAM step cost and adaptive gradient clipping, against Composer.

Tables:
1. SAM step on torchvision resnet18 (SGD with momentum): the base optimizer's step (one
   forward/backward), our ``SAMOptimizer`` and Composer's ``SAMOptimizer``; the SAM overhead over
   the base step is about 2x by construction (two forward/backward passes).
2. SAM's own arithmetic (gradient norm, perturbation, restoration) without forward/backward,
   on resnet50-sized gradients: where the implementations differ (foreach kernels vs Python loops).
3. ``apply_gradient_clipping`` per call on resnet18 / resnet50 gradients ('adaptive' and 'norm'),
   ours vs ``composer.functional.apply_gradient_clipping``.

EMA costs are in ``benchmarks/ops.py``.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from benchmarks._harness import (
    Table,
    main_for,
    missing_peers,
    peer,
    ratio,
    time_interleaved,
)
from functional import SAMOptimizer, apply_gradient_clipping


def _composer_sam():
    if peer("composer") is None:
        return None
    try:
        from composer.algorithms.sam import SAMOptimizer as ComposerSAM
    except Exception:
        return None
    return ComposerSAM


class _NoOpOptimizer(torch.optim.Optimizer):
    """A base optimizer whose step does nothing, to time SAM's own work in isolation."""

    def __init__(self, params) -> None:
        super().__init__(params, {})

    def step(self, closure=None):
        return None


def _tiny_cnn(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def _sam_step_table(*, quick: bool, device: str) -> Table:
    torch.manual_seed(0)
    if quick:
        name, model, batch, size = "tiny CNN", _tiny_cnn(), 4, 16
    else:
        name, model, batch, size = "resnet18", torchvision.models.resnet18(num_classes=10), 8, 64
    model = model.to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    ComposerSAM = _composer_sam()

    def sgd(m):
        return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

    def make_closure(m, opt):
        def closure(**_):  # Composer calls closure(ddp_sync=False) and closure(loss_dict=...)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            return loss

        return closure

    # Every candidate trains the same model (each with its own optimizer state): on CPU, where
    # a model's memory happens to sit (huge pages or not) moves timings by tens of percent.
    candidates = {}
    base = sgd(model)
    base_closure = make_closure(model, base)
    candidates["base SGD step"] = lambda: base.step(base_closure)
    ours = SAMOptimizer(sgd(model), rho=0.05)
    ours_closure = make_closure(model, ours)
    candidates["ours"] = lambda: ours.step(ours_closure)
    ours2 = SAMOptimizer(sgd(model), rho=0.05, interval=2)
    ours2_closure = make_closure(model, ours2)

    def two_steps() -> None:  # one SAM step and one plain step; reported per step below
        ours2.step(ours2_closure)
        ours2.step(ours2_closure)

    candidates["ours, interval=2"] = two_steps
    if ComposerSAM is not None:
        comp = ComposerSAM(sgd(model), rho=0.05)
        comp_closure = make_closure(model, comp)
        candidates["composer"] = lambda: comp.step(comp_closure)

    t = time_interleaved(candidates, repeats=3 if quick else 9, warmup=1, device=device)
    table = Table(
        f"SAM step, {name}, batch {batch} at {size}x{size}, SGD momentum ({device})",
        ["candidate", "ms / step", "x base step", "composer / candidate"],
    )
    t["ours, interval=2"] /= 2
    for label, seconds in t.items():
        table.add(
            label,
            seconds * 1e3,
            seconds / t["base SGD step"],
            ratio(t.get("composer"), seconds) if label.startswith("ours") else None,
        )
    table.notes.append(
        "a SAM step runs forward/backward twice, so ~2x the base step is the floor; "
        "interval=2 averages one SAM step and one plain step (~1.5x)"
    )
    if ComposerSAM is None:
        table.notes.append("composer SAMOptimizer not importable: its row is missing")
    return table


def _fill_grads(model: nn.Module, scale: float = 1.0) -> None:
    """Random gradients, the same for every call (generator-seeded)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=g) * scale).to(p.device)


def _sam_arithmetic_table(*, quick: bool, device: str) -> Table:
    torch.manual_seed(0)
    name, make = ("tiny CNN", _tiny_cnn) if quick else ("resnet50", torchvision.models.resnet50)
    model = make().to(device)
    ComposerSAM = _composer_sam()
    candidates = {}

    _fill_grads(model)  # both work on these gradients and weights (see _sam_step_table)
    ours = SAMOptimizer(_NoOpOptimizer(model.parameters()), rho=0.05)
    zero = torch.zeros((), device=device)
    # The closure leaves the gradients alone: the step is norm + save + perturb + restore.
    candidates["ours"] = lambda: ours.step(lambda: zero)
    if ComposerSAM is not None:
        comp = ComposerSAM(_NoOpOptimizer(model.parameters()), rho=0.05)
        candidates["composer"] = lambda: comp.step(lambda **_: torch.ones((), device=device))
    t = time_interleaved(candidates, repeats=3 if quick else 9, warmup=1, device=device)
    n_params = sum(p.numel() for p in model.parameters())
    table = Table(
        f"SAM arithmetic only (norm, perturb, restore; no forward/backward), {name} "
        f"gradients, {n_params / 1e6:.1f}M params ({device})",
        ["candidate", "ms / step", "composer / ours"],
    )
    table.add(
        "ours (foreach, bitwise restore)", t["ours"] * 1e3, ratio(t.get("composer"), t["ours"])
    )
    if "composer" in t:
        table.add(
            "composer (per-parameter loops, restore by subtraction)", t["composer"] * 1e3, None
        )
    else:
        table.notes.append("composer SAMOptimizer not importable: its row is missing")
    return table


def _clipping_rows(table: Table, name: str, model: nn.Module, *, quick: bool, device: str) -> None:
    composer = peer("composer")
    size = 16 if quick else 64
    x = torch.randn(8, 3, size, size, device=device)
    y = torch.randint(0, 1000, (8,), device=device)
    nn.functional.cross_entropy(model(x), y).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    grads = [p.grad for p in params]
    original = [g.clone() for g in grads]

    def restore() -> None:  # every call clips the same, freshly restored gradients
        torch._foreach_copy_(grads, original)

    for kind, threshold in (("adaptive", 0.01), ("norm", 1.0)):

        def ours(k: str = kind, th: float = threshold) -> None:
            restore()
            apply_gradient_clipping(params, k, th)

        candidates = {"restore only": restore, "ours": ours}
        if composer is not None:

            def theirs(k: str = kind, th: float = threshold) -> None:
                restore()
                composer.apply_gradient_clipping(model, k, th, fsdp_enabled=False)

            candidates["composer"] = theirs
        t = time_interleaved(candidates, repeats=5 if quick else 15, warmup=1, device=device)
        t = {k: max(v - t["restore only"], 1e-9) for k, v in t.items() if k != "restore only"}
        peer_ms = t["composer"] * 1e3 if "composer" in t else None
        table.add(name, kind, t["ours"] * 1e3, peer_ms, ratio(t.get("composer"), t["ours"]))


def _clipping_table(*, quick: bool, device: str) -> Table:
    models = [("tiny CNN", lambda: _tiny_cnn(1000))]
    if not quick:
        models = [
            ("resnet18", torchvision.models.resnet18),
            ("resnet50", torchvision.models.resnet50),
        ]
    table = Table(
        f"apply_gradient_clipping per call, gradients of one real backward pass ({device})",
        ["model", "type", "ours ms", "composer ms", "composer / ours"],
    )
    for name, make in models:
        torch.manual_seed(0)
        _clipping_rows(table, name, make().to(device), quick=quick, device=device)
    table.notes.append(
        "each call restores the gradients first; the time of the restore alone is subtracted"
    )
    table.notes.append(
        "'norm': ours is its own foreach norm and multiply (torch's clip_grad_norm_ reads a "
        "tensor threshold on the host), Composer calls torch's clip_grad_norm_. 'adaptive' "
        "(AGC, lambda=0.01) is memory-bound in both (read W, read G, read+write G); on CPU ours "
        "rescales each large gradient right after its norm, while in cache, as Composer's loop "
        "happens to; on accelerators ours batches the launches (foreach norms of the 0-D/1-D "
        "tensors, one foreach multiply), which this CPU run cannot show. Composer lacks the "
        "paper's 1e-3 floor on the weight norm: zero-initialised weights get no gradient"
    )
    if peer("composer") is None:
        table.notes.append("composer not importable: its columns are empty")
    return table


def run(*, quick: bool, device: str) -> list[Table]:
    # One intra-op thread: on the shared 2-core machine, two OpenMP threads competing with other
    # processes spin-wait and turn a 1 ms step into hundreds of ms, drowning every comparison.
    torch.set_num_threads(1)
    tables = [
        _sam_step_table(quick=quick, device=device),
        _sam_arithmetic_table(quick=quick, device=device),
        _clipping_table(quick=quick, device=device),
    ]
    missing = missing_peers(["composer"])
    if missing:
        tables[0].notes.append(f"missing peers: {', '.join(missing)}")
    return tables


if __name__ == "__main__":
    main_for(run, __doc__)
