"""The ResNet-50 section of the GPU check (:mod:`benchmarks.gpu_check`): a compiled training
step in bf16 autocast and channels_last, with each per-step op and each model transform as
overhead over the plain step."""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn

from benchmarks import models as bench_models
from benchmarks._harness import Table, time_interleaved
from benchmarks.gpu_check_state import COMPILE_ESTIMATE, Check, Step, row_failed, rows

Extra = Callable[[nn.Module], Callable[[], object]]  # model -> what runs after its backward


@contextlib.contextmanager
def _recompiles_allowed() -> Iterator[None]:
    """Every transformed model compiles its own graph (of the same ResNet.forward): more than
    dynamo's default limit of recompiles per code object, which would fall back to eager."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    with config.patch({name: 64}):
        yield


def _train_steps(model: nn.Module, check: Check, extras: dict[str, Extra]) -> dict[str, Step]:
    """SGD steps of ``model``, compiled once, in bf16 autocast and channels_last: the plain
    step and one with each of ``extras`` after the backward (name -> step)."""
    s, dev = check.sizes, check.device
    model = model.to(dev).to(memory_format=torch.channels_last).train()
    compiled = torch.compile(model, backend=s.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(s.step_batch, 3, s.step_size, s.step_size, device=dev)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (s.step_batch,), device=dev)

    def make(extra: Callable[[], object] | None) -> Step:
        def step() -> None:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(torch.device(dev).type, dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            if extra is not None:
                extra()
            opt.step()

        return step

    return {"plain": make(None), **{name: make(e(model)) for name, e in extras.items()}}


def _per_step_ops(check: Check) -> dict[str, Extra]:
    import functional as F

    dev, s = check.device, check.sizes
    x = torch.rand(s.step_batch, 3, s.step_size, s.step_size, device=dev)
    y = torch.randint(0, 1000, (s.step_batch,), device=dev)

    def ema(m: nn.Module) -> Callable[[], object]:
        average = copy.deepcopy(m)
        return lambda: F.compute_ema(m, average, 0.99)

    return {
        "+ compute_ema": ema,
        "+ clipping norm": lambda m: lambda: F.apply_gradient_clipping(m, "norm", 1.0),
        "+ clipping adaptive": lambda m: lambda: F.apply_gradient_clipping(m, "adaptive", 0.01),
        "+ mixup_batch": lambda m: lambda: F.mixup_batch(x, y, 0.3, n_classes=1000),
        "+ cutmix_batch": lambda m: lambda: F.cutmix_batch(x, y, 1000, alpha=1.0),
    }


def _overhead(t: float, plain: float) -> str:
    return f"{100 * (t / plain - 1):+.1f}%"


def _transform_row(
    check: Check, table: Table, base: nn.Module, name: str, apply: Callable, plain: Step
) -> None:
    model = copy.deepcopy(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply(model)
    pair = {"plain": plain, name: _train_steps(model, check, {})["plain"]}
    s = check.sizes
    tt = time_interleaved(pair, repeats=s.step_repeats, warmup=2, device=check.device)
    table.add(f"{name} (model transform)", 1e3 * tt[name], _overhead(tt[name], tt["plain"]))


def resnet50(check: Check) -> dict:
    s, dev = check.sizes, check.device
    base = bench_models._model(check.dry_run)
    what = "small Bottleneck ResNet (dry run)" if check.dry_run else "ResNet-50"
    table = Table(
        f"{what} training step, batch {s.step_batch} at {s.step_size}x{s.step_size}, bf16 "
        f"autocast, channels_last, torch.compile ({s.backend})",
        ["step", "ms", "overhead over plain"],
    )
    with _recompiles_allowed():
        steps = _train_steps(copy.deepcopy(base), check, _per_step_ops(check))
        t = time_interleaved(steps, repeats=s.step_repeats, warmup=2, device=dev)
        for name, seconds in t.items():
            table.add(
                name, 1e3 * seconds, None if name == "plain" else _overhead(seconds, t["plain"])
            )
        transforms = list(bench_models._ours(max(s.step_batch // 4, 2)).items())
        for name, apply in transforms[: s.transforms]:
            if not check.fits(COMPILE_ESTIMATE):
                table.notes.append(
                    f"{name} and the transforms after it: skipped, {check.left():.0f} s left"
                )
                break
            try:
                _transform_row(check, table, base, name, apply, steps["plain"])
            except Exception as exc:  # a transform that fails on the device is a finding
                row_failed(check, table, name, exc)
    table.notes.append(
        "Each transform is timed interleaved with the plain step; SGD with momentum."
    )
    check.summary.append(("resnet50 step", f"{1e3 * float(t['plain']):.3g} ms", "plain, compiled"))
    check.tables.append(table)
    return {"rows": rows(table)}
