"""`make demo`: a Pareto study of training speed-up on Fashion-MNIST, honest on a busy machine.

A small residual CNN (a stem and three torchvision ``BasicBlock``\\ s, 16-64 channels) is
trained on Fashion-MNIST's 60,000 real 28x28 photographs and tested on its 10,000, twice per
budget: plainly (the *baseline*) and with a *recipe* of this library's algorithms, built only
from its public API. Each arm runs at several budgets (fractions of a reference schedule, each
with its own full one-cycle LR schedule made by ``F.scale_scheduler``), with the same model,
data order and seeds. The baseline and recipe runs of a budget are interleaved, a few steps of
one then a few of the other, so both see the same machine load.

The time that counts is the process CPU time of the training steps (``time.process_time``: all
of this process's threads, evaluation excluded). Other processes on a shared machine stretch
wall-clock time but take little from CPU time, so CPU time is the fair measure on a busy
machine; wall-clock time is shown beside it. Run with ``OMP_WAIT_POLICY=PASSIVE`` (``make demo``
does) so that threads waiting for each other sleep instead of spinning on the CPU clock.

Each run gives one point (CPU time, final test accuracy). The output: a progress bar per run,
a table of every point, both Pareto frontiers and the speed-up, read where both frontiers reach
the same accuracy (the best that both reach), a plot of the frontiers (PNG), a JSON of every
point, and the machine. ``--ablation`` trains each algorithm alone against the baseline
frontier instead: that table is how the default recipe was chosen (``docs/guides/demo.md``
records the last one measured).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ._demo_data import DEFAULT_DIR, Dataset, load_data
from ._demo_report import (
    ablation_table,
    describe_machine,
    machine,
    plot,
    study_table,
    verdict,
    write_json,
)
from ._demo_train import ALGORITHMS, Config, Point, Run

# Kept because each of them alone put its point above the baseline frontier by more than the
# noise of one seed (0.3 points) in the last --ablation run (docs/guides/demo.md); the others
# did not (AugMix: +0.03 points; the rest below the frontier).
DEFAULT_RECIPE = ("channels_last", "progressive_resizing", "layer_freezing", "label_smoothing")
# (train images, test images, reference epochs) per size; budgets are fractions of the reference
SIZES = {"full": (None, None, 2.0), "quick": (12_000, 2_000, 2.0), "smoke": (1_024, 500, 1.0)}
BUDGETS = (0.125, 0.25, 0.5, 1.0)
CHUNK = 8  # steps of one run before the next run's turn


def interleave(runs: Sequence[Run], *, progress: bool, chunk: int = CHUNK) -> list[Point]:
    """Advance ``runs`` in turns of ``chunk`` steps until all are done; evaluate each."""
    from tqdm.auto import tqdm

    bars = [
        tqdm(
            total=r.total_steps,
            desc=f"{r.point.arm} {r.point.budget:g}x",
            position=i,
            disable=not progress,
            leave=True,
            mininterval=1.0,
            dynamic_ncols=True,
        )
        for i, r in enumerate(runs)
    ]
    turn = 0
    while not all(r.done for r in runs):
        # alternate who goes first, so neither is always right after the other
        order = runs if turn % 2 == 0 else list(reversed(runs))
        for r in order:
            if not r.done:
                bars[runs.index(r)].update(r.advance(chunk))
                if r.done:
                    acc = r.evaluate()
                    bars[runs.index(r)].set_postfix(acc=f"{acc:.4f}", cpu_s=f"{r.point.cpu_s:.1f}")
        turn += 1
    for bar in bars:
        bar.close()
    return [r.point for r in runs]


def _size(args: argparse.Namespace) -> str:
    return "smoke" if args.smoke else "quick" if args.quick else "full"


def _config(args: argparse.Namespace, data: Dataset) -> Config:
    ref_epochs = args.ref_epochs or SIZES[_size(args)][2]
    steps_per_epoch = len(data.y_train) // args.batch_size
    return Config(
        batch_size=args.batch_size,
        lr=args.lr,
        ref_steps=max(4, round(ref_epochs * steps_per_epoch)),
        seed=args.seed,
    )


def run_study(args, data: Dataset, cfg: Config, recipe: tuple[str, ...]) -> dict:
    chance = 1 / 10
    base: list[Point] = []
    rec: list[Point] = []
    for i, budget in enumerate(args.budgets):
        group = [Run("baseline", (), budget, data, cfg), Run("recipe", recipe, budget, data, cfg)]
        if i == len(args.budgets) - 1 and args.extra_budget:
            # The recipe's steps are cheaper: one more doubling lets its frontier span the
            # baseline's time range, and tells when it reaches the baseline's best accuracy.
            group.append(Run("recipe", recipe, 2 * budget, data, cfg))
        points = interleave(group, progress=not args.no_progress)
        base.append(points[0])
        rec += points[1:]
    print()
    print(study_table(base, rec, chance))
    sentences, numbers = verdict(base, rec, chance)
    print()
    print(sentences)
    plot(
        {"baseline": base, f"recipe ({', '.join(recipe)})": rec},
        chance,
        f"{data.name}: test accuracy against CPU training time, one marker per budget",
        args.output / "frontiers.png",
    )
    return {"points": base + rec, "result": numbers}


def run_ablation(args, data: Dataset, cfg: Config) -> dict:
    chance = 1 / 10
    budget = args.ablation_budget
    # the baseline frontier up to twice the algorithms' budget, the algorithms at that budget
    budgets = sorted({budget, *(b for b in args.budgets if b <= 2 * budget)})
    runs = [Run("baseline", (), b, data, cfg) for b in budgets]
    runs += [Run(name, (name,), budget, data, cfg) for name in ALGORITHMS]
    points = interleave(runs, progress=not args.no_progress)
    base, alone = points[: len(budgets)], points[len(budgets) :]
    table, records = ablation_table(base, alone, chance)
    print()
    print("baseline: " + ", ".join(f"{p.budget:g}x {p.cpu_s:.1f} s {p.accuracy:.4f}" for p in base))
    print(f"each algorithm alone at budget {budget:g}x:")
    print(table)
    plot(
        {"baseline": base, **{",".join(p.algorithms): [p] for p in alone}},
        chance,
        f"{data.name}: each algorithm alone at {budget:g}x against the baseline",
        args.output / "ablation.png",
    )
    return {"points": points, "ablation": records}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DIR, help="directory of the IDX files")
    p.add_argument("--no-install", action="store_true", help="never run apt-get")
    p.add_argument("--quick", action="store_true", help="12,000 training images (under 2 min)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    p.add_argument("--ablation", action="store_true", help="each algorithm alone, not the study")
    p.add_argument("--ablation-budget", type=float, default=0.25)
    p.add_argument("--recipe", default=",".join(DEFAULT_RECIPE),
                   help=f"comma-separated, from: {', '.join(ALGORITHMS)}")  # fmt: skip
    p.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                   help="fractions of the reference schedule (default 0.125,0.25,0.5,1)")  # fmt: skip
    p.add_argument("--no-extra-budget", dest="extra_budget", action="store_false",
                   help="do not also train the recipe at twice the largest budget")  # fmt: skip
    p.add_argument("--ref-epochs", type=float, default=None, help="reference schedule length")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.2, help="peak learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--output", type=Path, default=Path("demo_out"), help="output directory")
    p.add_argument("--no-progress", action="store_true")
    return p


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    args.recipe = tuple(a for a in args.recipe.split(",") if a)
    unknown = [a for a in args.recipe if a not in ALGORITHMS]
    if unknown:
        parser.error(
            f"unknown algorithm(s) {', '.join(unknown)}; choose from {', '.join(ALGORITHMS)}"
        )
    try:
        args.budgets = tuple(sorted(float(b) for b in args.budgets.split(",")))
    except ValueError:
        parser.error(f"--budgets must be comma-separated numbers, got {args.budgets!r}")
    if len(args.budgets) < 2 or min(args.budgets) <= 0:
        parser.error(f"--budgets needs at least two positive fractions, got {args.budgets}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    n_train, n_test, _ = SIZES[_size(args)]
    data = load_data(args.data, install=not args.no_install)
    if data.note:
        print(data.note)
    data = data.subset(n_train, n_test)
    cfg = _config(args, data)
    m = machine()
    print(f"machine: {describe_machine(m)}")
    print(
        f"data: {data.describe()}; model: residual CNN, width {cfg.width}; batch "
        f"{cfg.batch_size}; reference schedule {cfg.ref_steps} steps; budgets "
        f"{', '.join(f'{b:g}x' for b in args.budgets)}"
    )
    print(
        "time: process CPU time of the training steps (all threads, evaluation excluded): other\n"
        "      processes' load stretches wall-clock time but takes little from it; wall beside it\n"
    )
    if args.ablation:
        payload = run_ablation(args, data, cfg)
    else:
        print(f"recipe: {', '.join(args.recipe)}\n")
        payload = run_study(args, data, cfg, args.recipe)
        print("\nablation (each algorithm alone): make demo DEMO_ARGS=--ablation; the last")
        print("measured table is in docs/guides/demo.md")
    payload |= {
        "machine": m,
        "data": data.describe(),
        "data_note": data.note,
        "config": vars(cfg),
        "budgets": args.budgets,
        "recipe": args.recipe,
        "total_wall_s": time.perf_counter() - start,
    }
    name = "ablation" if args.ablation else "study"
    write_json(args.output / f"{name}.json", payload)
    png = "ablation.png" if args.ablation else "frontiers.png"
    print(f"\nplot: {(args.output / png).resolve()}")
    print(f"every point: {(args.output / f'{name}.json').resolve()}")
    print(f"total wall-clock: {payload['total_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
