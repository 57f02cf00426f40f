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

The run's state (sizes, estimates, the budget) is in :mod:`benchmarks.gpu_check_state`, the
ResNet-50 section in :mod:`benchmarks.gpu_check_step`; the cases, peers and timing are those
of ``benchmarks/device.py``, ``ops.py``, ``optim.py``, ``augment.py``, ``models.py`` and
``_harness.py``.

Output: ``benchmarks/out/gpu_check.json`` and ``benchmarks/out/gpu_check.md`` (dry run:
``gpu_check-dry.*``); a full run also writes its ``## gpu_check`` section of RESULTS.md (date,
GPU, torch, CUDA). A short table is printed last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import augment as bench_augment
from benchmarks import device as bench_device
from benchmarks._counter import DEVICE as META
from benchmarks._counter import count
from benchmarks._harness import ROOT, Table, copy_bandwidth, machine_description, time_interleaved
from benchmarks.gpu_check_state import (
    COMPILE_ESTIMATE,
    DRY,
    ESTIMATES,
    FULL,
    Check,
    Uncounted,
    row_failed,
    rows,
)
from benchmarks.gpu_check_step import resnet50

__all__ = ["COMPILE_ESTIMATE", "DRY", "ESTIMATES", "FULL", "OPS", "SECTIONS", "Check", "main"]

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


def _predicted(check: Check) -> dict:
    table = Table(
        "Predicted by the counter (meta tensors, benchmarks/_counter.py)",
        ["op", "launches", "syncs", "bytes ÷ min"],
    )
    cases = bench_device.ours()
    for name in OPS + list(bench_device._batched()):
        table.add(name, *bench_device._row(cases[name]))
    check.tables.append(table)
    return {"rows": rows(table)}


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
    where = META if check.dry_run else torch.device(check.device)
    predicted = {r["op"]: r for r in check.sections.get("predicted", {}).get("rows", [])}
    table = Table(
        f"Per-step ops on {where}: measured against the copy bandwidth and the prediction",
        ["op", "ms", "min bytes / time ÷ copy bw", "predicted bytes ÷ min", "predicted launches"],
    )
    cases = bench_device.ours()
    for name in OPS:
        try:
            _op_row(check, table, name, cases[name], where, predicted.get(name, {}))
        except Exception as exc:  # a failing op is a finding; the other rows still run
            row_failed(check, table, name, exc)
    table.notes.append(
        "min bytes / time ÷ copy bw: 1 is the hardware limit for a pass over the minimum bytes; "
        "the prediction's bytes ÷ min bounds it at 1 / (bytes ÷ min) if every byte moves at the "
        "copy bandwidth. Launch-bound ops fall short of both."
    )
    check.tables.append(table)
    return {"rows": rows(table)}


def _op_row(
    check: Check, table: Table, name: str, case: Callable, where: torch.device, guess: dict
) -> None:
    torch.manual_seed(0)
    step, minimum = case(where)
    if where == META:  # dry run: the counter's mode answers what meta cannot compute
        call = lambda: count(step, warmup=False)  # noqa: E731
    else:
        call = lambda: step(Uncounted())  # noqa: E731
    s, bandwidth = check.sizes, check.sections["limits"]["copy_bandwidth_bytes_per_s"]
    t = time_interleaved(
        {"ours": call}, repeats=s.op_repeats, number=s.op_number, device=check.device
    )
    share = minimum / float(t["ours"]) / bandwidth
    table.add(name, 1e3 * t["ours"], share, guess.get("bytes ÷ min"), guess.get("launches"))
    check.summary.append((name, f"{share:.2f} of copy bw", f"{1e3 * float(t['ours']):.3g} ms"))


def _peers(check: Check) -> dict:
    from benchmarks import ops, optim

    quick, dev, s = check.dry_run, check.device, check.sizes
    failures = Table("Peer tables that failed", ["table"])
    tables: list[Table] = []
    for module in (ops, optim):
        try:
            tables += module.run(quick=quick, device=dev)
        except Exception as exc:  # the other tables still run
            row_failed(check, failures, module.__name__, exc)
    for kind, name in (("augmix", "BatchAugMix"), ("randaugment", "BatchRandAugment")):
        try:
            table = bench_augment._batched_table(
                kind, [s.aug_size], s.aug_batch, s.aug_repeats, dev, per_sample_loop=True
            )
        except Exception as exc:
            row_failed(check, failures, name, exc)
            continue
        tables.append(table)
        row = dict(zip(table.columns, table.rows[0], strict=True))
        check.summary.append((f"{name} img/s", f"{float(row['ours img/s']):,.0f}", _vs(row)))
    tables += [failures] if failures.notes else []
    check.tables.extend(tables)
    return {"tables": [{"title": t.title, "rows": rows(t)} for t in tables]}


def _vs(row: dict) -> str:
    """The ratios of a batched augment row, as text (ours over each peer, in img/s)."""
    return ", ".join(
        f"{k[5:]} {float(v):.2f}" for k, v in row.items() if k.startswith("x vs") and v
    )


SECTIONS: dict[str, Callable[[Check], dict]] = {
    "predicted": _predicted,
    "tests": _tests,
    "limits": _limits,
    "ops": _ops,
    "peers": _peers,
    "resnet50": resnet50,
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


def report(check: Check, command: str = "make gpu-check") -> str:
    """The markdown report: when, the machine and versions, then every section's tables."""
    meta = _versions(check.device)
    dry = " (dry run: tiny sizes, figures mean nothing)" if check.dry_run else ""
    head = (
        f"_Measured {meta['date']} with `{command}`. Machine: {meta['machine']}; GPU "
        f"{meta['gpu']}, torch {meta['torch']}, CUDA {meta['cuda']}; device {check.device}{dry}; "
        f"{time.perf_counter() - check.started:.0f} s of a {check.budget_s:.0f} s budget._"
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
    text = report(check, "python -m benchmarks.gpu_check --predict-only")
    text = text.replace("\n\n", f"\n\n{pending}\n\n", 1)
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
