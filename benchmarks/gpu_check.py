"""One command that proves the GPU path: the CUDA test lane, then every figure against the device.

    make gpu-check                                         # python -m benchmarks.gpu_check
    python -m benchmarks.gpu_check --device cpu --dry-run  # same code paths, tiny sizes (< 1 min)

Sections, in this order (each skipped, and the report says so, once the time budget of
``--budget-s`` seconds, default 450, no longer holds its estimate; the CUDA run fits in 8
minutes by construction: the estimates below add up to under 450 s):

1. ``predicted`` (~15 s): what the counter of ``python -m benchmarks device`` predicts for the
   ops timed below, on ``meta`` tensors: launches, syncs, bytes moved over the minimum.
2. ``tests`` (<= 180 s, a hard timeout): ``pytest -m cuda tests`` (the GPU lane: batched
   augmentations and the device path against the CPU path, compiled ops, training state, AMP
   steps without syncs). Dry run: the same selection, collected only.
3. ``limits`` (~5 s): copy bandwidth (a 2 GiB device-to-device copy, read + write) and the
   bf16 matmul rate (8192 x 8192 x 8192).
4. ``ops`` (~20 s): blur_2d, compute_ema, swap_ema_weights, SAMOptimizer.step, the three
   clipping modes, cutmix_batch and mixup_batch, at the counter's shapes (images 256x3x224x224
   float32, ResNet-50 state), 15 repeats of 5 calls: the minimum bytes over the time, as a
   fraction of the measured copy bandwidth, beside the prediction. Dry run: on ``meta`` tensors.
5. ``peers`` (~60 s): ``benchmarks.ops`` and ``benchmarks.optim`` on the device (Composer, timm,
   kornia, torch beside ours), and the batched transforms at 224x224 uint8, batch 256, 5
   repeats, against torchvision v2 (one chain per batch, and a loop over the samples) and kornia.
6. ``resnet50`` (~200 s, compiles included): a training step (SGD, bf16 autocast,
   channels_last, ``torch.compile``), batch 128 at 224x224, 10 repeats: the plain step, each
   per-step op on top of it, then each model transform (one compile each, skipped by the budget
   first), as overhead over the plain step. Dry run: a small Bottleneck ResNet, batch 2 at
   32x32, ``backend="eager"``.

Output: ``benchmarks/out/gpu_check.json`` and ``benchmarks/out/gpu_check.md`` (dry run:
``gpu_check-dry.*``); a full run also writes its ``## gpu_check`` section of RESULTS.md (date,
GPU, torch, CUDA). A short table is printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from benchmarks import augment as bench_augment
from benchmarks import device as bench_device
from benchmarks import models as bench_models
from benchmarks._counter import DEVICE as META
from benchmarks._counter import count
from benchmarks._harness import ROOT, Table, copy_bandwidth, machine_description, time_interleaved

OUT = ROOT / "benchmarks" / "out"
OPS = [
    "blur_2d",
    "compute_ema float smoothing",
    "swap_ema_weights",
    "SAMOptimizer.step",
    "apply_gradient_clipping norm",
    "apply_gradient_clipping value",
    "apply_gradient_clipping adaptive",
    "cutmix_batch",
    "mixup_batch",
]
ESTIMATES = {"predicted": 15, "tests": 180, "limits": 5, "ops": 20, "peers": 60, "resnet50": 90}
COMPILE_ESTIMATE = 45  # seconds per further compiled transform row of the resnet50 section


Step = Callable[[], None]


@dataclass(frozen=True)
class Sizes:
    copy_bytes: int
    matmul: int
    op_repeats: int
    op_number: int
    aug_size: int
    aug_batch: int
    aug_repeats: int
    step_batch: int
    step_size: int
    step_repeats: int
    backend: str
    transforms: int  # model transforms timed at most (each compiles its own graph)


FULL = Sizes(2**31, 8192, 15, 5, 224, 256, 5, 128, 224, 10, "inductor", 7)
DRY = Sizes(8 * 2**20, 128, 2, 1, 32, 4, 1, 2, 32, 1, "eager", 1)


class _Uncounted:
    """The ``mode`` argument of the counter's steps, outside the counter: counts nothing."""

    @staticmethod
    def uncounted() -> contextlib.nullcontext:
        return contextlib.nullcontext()


@dataclass
class Check:
    """The run's state: where, how big, the time left, and what each section found."""

    device: str
    dry_run: bool
    budget_s: float
    started: float = field(default_factory=time.perf_counter)
    sections: dict[str, dict] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    summary: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def sizes(self) -> Sizes:
        return DRY if self.dry_run else FULL

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def fits(self, estimate: float) -> bool:
        return self.dry_run or self.left() >= estimate

    def section(self, name: str, run: Callable[[Check], dict]) -> None:
        if not self.fits(ESTIMATES[name]):
            why = f"skipped: {self.left():.0f} s left of the budget, the section takes ~{ESTIMATES[name]} s"
            self.sections[name] = {"status": "skipped", "reason": why}
            self.summary.append((name, "skipped", why))
            return
        t0 = time.perf_counter()
        try:
            found = {"status": "ok", **run(self)}
        except Exception as exc:  # reported, and the other sections still run
            found = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}
            self.summary.append((name, "FAILED", found["error"][:120]))
        found["seconds"] = round(time.perf_counter() - t0, 1)
        self.sections[name] = found
        print(f"[gpu_check] {name}: {found['status']} in {found['seconds']} s", flush=True)


def _rows(table: Table) -> list[dict]:
    """A table's rows as JSON objects (a timing as its median)."""
    cell = lambda v: float(v) if isinstance(v, float) else v  # noqa: E731
    return [dict(zip(table.columns, map(cell, row), strict=True)) for row in table.rows]


def _predicted(check: Check) -> dict:
    table = Table(
        "Predicted by the counter (meta tensors, benchmarks/_counter.py)",
        ["op", "launches", "syncs", "bytes ÷ min"],
    )
    cases = bench_device.ours()
    for name in OPS + list(bench_device._batched()):
        table.add(name, *bench_device._row(cases[name]))
    check.tables.append(table)
    return {"rows": _rows(table)}


def _tests(check: Check) -> dict:
    args = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider"]
    args += (
        ["--collect-only", "tests/augment/test_batched_paths.py"] if check.dry_run else ["tests"]
    )
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=180)
    tail = done.stdout.strip().splitlines()[-1:] or [done.stderr.strip()[-200:]]
    status = "passed" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
    check.summary.append(("tests", status, tail[0]))
    if done.returncode != 0:
        print(done.stdout[-6000:], done.stderr[-3000:], sep="\n")
        raise RuntimeError(f"pytest -m cuda: {tail[0]}")
    return {"command": " ".join(args[2:]), "result": tail[0]}


def _limits(check: Check) -> dict:
    dev, n = check.device, check.sizes.matmul
    bandwidth = copy_bandwidth(check.sizes.copy_bytes, dev)
    a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
    t = time_interleaved({"mm": lambda: a @ b}, repeats=5, number=3, device=dev)["mm"]
    flops = 2 * n**3 / float(t)
    check.summary.append(("copy bandwidth", f"{bandwidth / 1e9:.0f} GB/s", "read + write"))
    check.summary.append(("bf16 matmul", f"{flops / 1e12:.1f} TFLOP/s", f"{n}^3"))
    return {"copy_bandwidth_bytes_per_s": bandwidth, "bf16_matmul_flops_per_s": flops}


def _ops(check: Check) -> dict:
    bandwidth = check.sections["limits"]["copy_bandwidth_bytes_per_s"]
    where = META if check.dry_run else torch.device(check.device)
    predicted = {r["op"]: r for r in check.sections.get("predicted", {}).get("rows", [])}
    table = Table(
        f"Per-step ops on {where}: measured against the copy bandwidth and the prediction",
        ["op", "ms", "min bytes / time ÷ copy bw", "predicted bytes ÷ min", "predicted launches"],
    )
    cases = bench_device.ours()
    for name in OPS:
        torch.manual_seed(0)
        step, minimum = cases[name](where)
        if where == META:  # dry run: the counter's mode answers what meta cannot compute
            call = lambda step=step: count(step, warmup=False)  # noqa: E731
        else:
            call = lambda step=step: step(_Uncounted())  # noqa: E731
        run = {"ours": call}
        s = check.sizes
        t = time_interleaved(run, repeats=s.op_repeats, number=s.op_number, device=check.device)
        guess = predicted.get(name, {})
        share = minimum / float(t["ours"]) / bandwidth
        table.add(name, 1e3 * t["ours"], share, guess.get("bytes ÷ min"), guess.get("launches"))
        check.summary.append((name, f"{share:.2f} of copy bw", f"{1e3 * float(t['ours']):.3g} ms"))
    table.notes.append(
        "min bytes / time ÷ copy bw: 1 is the hardware limit for a pass over the minimum bytes; "
        "the prediction's bytes ÷ min bounds it at 1 / (bytes ÷ min) if every byte moves at the "
        "copy bandwidth. Launch-bound ops fall short of both."
    )
    check.tables.append(table)
    return {"rows": _rows(table)}


def _peers(check: Check) -> dict:
    from benchmarks import ops, optim

    quick, dev, s = check.dry_run, check.device, check.sizes
    tables = [*ops.run(quick=quick, device=dev), *optim.run(quick=quick, device=dev)]
    for kind, name in (("augmix", "BatchAugMix"), ("randaugment", "BatchRandAugment")):
        table = bench_augment._batched_table(
            kind, [s.aug_size], s.aug_batch, s.aug_repeats, dev, per_sample_loop=True
        )
        tables.append(table)
        row = dict(zip(table.columns, table.rows[0], strict=True))
        check.summary.append((f"{name} img/s", f"{float(row['ours img/s']):,.0f}", _vs(row)))
    check.tables.extend(tables)
    return {"tables": [{"title": t.title, "rows": _rows(t)} for t in tables]}


Extra = Callable[[nn.Module], Callable[[], object]]  # model -> what runs after its backward


@contextlib.contextmanager
def _recompiles_allowed() -> Iterator[None]:
    """Every transformed model compiles its own graph (of the same ResNet.forward): more than
    dynamo's default limit of recompiles per code object, which would fall back to eager."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    with config.patch({name: 64}):
        yield


def _vs(row: dict) -> str:
    """The ratios of a batched augment row, as text (ours over each peer, in img/s)."""
    return ", ".join(
        f"{k[5:]} {float(v):.2f}" for k, v in row.items() if k.startswith("x vs") and v
    )


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


def _resnet50(check: Check) -> dict:
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
            model = copy.deepcopy(base)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                apply(model)
            pair = {"plain": steps["plain"], name: _train_steps(model, check, {})["plain"]}
            tt = time_interleaved(pair, repeats=s.step_repeats, warmup=2, device=dev)
            table.add(f"{name} (model transform)", 1e3 * tt[name], _overhead(tt[name], tt["plain"]))
    table.notes.append(
        "Each transform is timed interleaved with the plain step; SGD with momentum."
    )
    check.summary.append(("resnet50 step", f"{1e3 * float(t['plain']):.3g} ms", "plain, compiled"))
    check.tables.append(table)
    return {"rows": _rows(table)}


SECTIONS: dict[str, Callable[[Check], dict]] = {
    "predicted": _predicted,
    "tests": _tests,
    "limits": _limits,
    "ops": _ops,
    "peers": _peers,
    "resnet50": _resnet50,
}


def _versions(device: str) -> dict[str, str]:
    cuda = torch.cuda.is_available() and torch.device(device).type == "cuda"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": torch.cuda.get_device_name() if cuda else "none",
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda) if cuda else "none",
        "python": platform.python_version(),
        "machine": machine_description(),
    }


def report(check: Check) -> str:
    """The markdown report: versions, then every section's tables and status."""
    meta = _versions(check.device)
    head = (
        f"_gpu_check {meta['date']}: GPU {meta['gpu']}, torch {meta['torch']}, CUDA {meta['cuda']}"
        f"; device {check.device}{' (dry run: tiny sizes, figures mean nothing)' if check.dry_run else ''}"
        f"; {time.perf_counter() - check.started:.0f} s of a {check.budget_s:.0f} s budget._"
    )
    status = [
        f"- {name}: {s['status']} {s.get('reason', s.get('error', ''))}"
        for name, s in check.sections.items()
    ]
    return "\n".join(
        ["## gpu_check", "", head, "", *status, "", *(t.markdown() for t in check.tables)]
    )


def summary_table(check: Check) -> str:
    width = max(len(r[0]) for r in check.summary)
    return "\n".join(f"{a:<{width}}  {b:<22}  {c}" for a, b, c in check.summary)


def _write_results(text: str) -> None:
    from benchmarks.__main__ import RESULTS, merge_results

    previous = RESULTS.read_text() if RESULTS.exists() else ""
    RESULTS.write_text(merge_results(previous, {"gpu_check": text}))


def _predict_only(budget_s: float) -> int:
    check = Check("meta", False, budget_s)
    check.section("predicted", _predicted)
    pending = (
        "_Not measured yet: no GPU run so far. `make gpu-check` on a CUDA machine replaces this "
        "section with the measured figures beside these predictions._"
    )
    text = report(check).replace("\n\n", f"\n\n{pending}\n\n", 1)
    _write_results(text)
    print(text)
    return 0 if check.sections["predicted"]["status"] == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu with --dry-run")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny sizes: checks that everything runs"
    )
    parser.add_argument(
        "--budget-s", type=float, default=450.0, help="sections that no longer fit are skipped"
    )
    parser.add_argument("--output-dir", type=Path, default=OUT)
    parser.add_argument(
        "--predict-only",
        action="store_true",
        help="only the counter's predictions (no device needed), written to RESULTS.md's "
        "gpu_check section until a GPU run replaces it",
    )
    args = parser.parse_args(argv)
    if args.predict_only:
        return _predict_only(args.budget_s)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error(
            "no CUDA device here: run `python -m benchmarks.gpu_check --device cpu --dry-run`"
        )
    if not args.dry_run and torch.device(args.device).type != "cuda":
        parser.error("a full run measures a GPU: pass --device cuda, or --dry-run")
    check = Check(args.device, args.dry_run, args.budget_s)
    for name, run in SECTIONS.items():
        check.section(name, run)
    text = report(check)
    stem = "gpu_check-dry" if args.dry_run else "gpu_check"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    data = {"versions": _versions(args.device), "dry_run": args.dry_run, "sections": check.sections}
    (args.output_dir / f"{stem}.json").write_text(json.dumps(data, indent=1, default=str))
    (args.output_dir / f"{stem}.md").write_text(text)
    if not args.dry_run:
        _write_results(text)
    print(text, "", summary_table(check), sep="\n")
    failed = [n for n, s in check.sections.items() if s["status"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
