"""`make demo`: a Pareto study of training speed-up on Fashion-MNIST, honest on a busy machine.

A small residual CNN (a stem and three torchvision ``BasicBlock``\\ s, 16-64 channels) is
trained on Fashion-MNIST's real 28x28 photographs in three *arms*: plainly (the *baseline*),
with only the channels-last memory layout (*channels_last*, the free change any CPU user can
make alone), and with the *recipe* of this library's algorithms, built only from its public
API. Every arm runs at the same budgets (fractions of a reference schedule, each with its own
full one-cycle LR schedule made by ``F.scale_scheduler``, 2x included) and the same seeds; a
seed fixes the initial weights and the data order, shared by the arms. The runs of one seed and
budget are interleaved, a few steps of one then a few of another, so all see the same load.

Validation: 10,000 images drawn once by a fixed seed are held out of the 60,000 training
images. Every choice (the ablation that picked the recipe, any hyperparameter) is read on them;
the test set is read once, at the end of each final run of the study.

The time that counts is the process CPU time of the training steps (``time.process_time``: all
of this process's threads, evaluation excluded); other processes on a shared machine stretch
wall-clock time but take little from CPU time. Run with ``OMP_WAIT_POLICY=PASSIVE`` (``make
demo`` does) and one thread (the default) so that no thread spins waiting for another.

Output: a table of each arm's mean CPU time and test accuracy ± spread per budget, the speed-ups
with their 95% bootstrap intervals over seeds (``benchmarks/_study.py`` states the method), a
plot that carries the claim (PNG), and a JSON of every run. ``--ablation`` trains each
algorithm alone against the baseline frontier in validation accuracy instead: that table is
how the default recipe was chosen (``docs/guides/demo.md`` records the last one measured).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from . import _study, _study_plot
from ._demo_data import DEFAULT_DIR, Dataset, load_data
from ._demo_report import ablation_table
from ._demo_train import ALGORITHMS, Config, Run

# Kept because each of them alone put its point above the baseline frontier in *validation*
# accuracy by more than 0.3 points in the --ablation runs of all 13 algorithms
# (docs/guides/demo.md, 4 December 2026: seven in one run, the other six in a second one, each
# against its own baseline); label smoothing, in the recipe before, fell 1.9 points below it
# and was dropped.
DEFAULT_RECIPE = ("channels_last", "progressive_resizing", "layer_freezing", "stochastic_depth")
ARMS = ("baseline", "channels_last", "recipe")
N_VAL = 10_000
# mode -> (train images, test images, reference epochs, seeds); budgets are fractions of the
# reference schedule. The default fits 12 minutes on 2 cores: 3 seeds of a quarter-epoch
# reference (98 steps), so budgets of 25 to 195 steps. Measured on an idle 2-core machine from a
# fresh clone (4 December 2026): about 6 minutes of training CPU time, a 575 s study, 650 s for
# `make demo` with the install; --quick (a half-epoch reference of 12,000 images) 68 s.
# --help says the same.
MODES = {
    "full": (None, None, 2.0, 3),
    "default": (None, None, 0.25, 3),
    "quick": (12_000, 2_000, 0.5, 1),
    "smoke": (1_024, 500, 1.0, 1),
}
BUDGETS = (0.25, 0.5, 1.0, 2.0)


def _mode(args: argparse.Namespace) -> str:
    return (
        next(m for m in ("smoke", "quick", "full") if getattr(args, m))
        if (args.smoke or args.quick or args.full)
        else "default"
    )


def _config(args: argparse.Namespace, data: Dataset) -> Config:
    ref_epochs = args.ref_epochs or MODES[_mode(args)][2]
    steps_per_epoch = len(data.y_train) // args.batch_size
    return Config(
        batch_size=args.batch_size,
        lr=args.lr,
        ref_steps=max(4, round(ref_epochs * steps_per_epoch)),
    )


def _arm_algorithms(arm: str, recipe: tuple[str, ...]) -> tuple[str, ...]:
    return {"baseline": (), "channels_last": ("channels_last",), "recipe": recipe}[arm]


def run_study(args, data: Dataset, cfg: Config, recipe: tuple[str, ...]) -> dict:
    metric = _study.Metric("test accuracy", higher_is_better=True, start=0.1)
    points: list[_study.Point] = _study.load_points(args.merge) if args.merge else []
    for seed in () if args.merge else args.seed_list:
        for budget in args.budgets:
            group = [
                Run(arm, _arm_algorithms(arm, recipe), budget, data, cfg, seed=seed) for arm in ARMS
            ]
            points += _study.interleave(group, progress=not args.no_progress)
            _study.write_json(args.output / "points.json", {"points": points})
    comparisons = [
        _study.compare(points, "baseline", "recipe", metric),
        _study.compare(points, "channels_last", "recipe", metric),
        _study.compare(points, "baseline", "channels_last", metric),
    ]
    print()
    print(_study.study_table(points, ARMS, metric))
    print()
    for c in comparisons:
        print(_study.claim_sentence(c, metric))
    n_seeds = len({p.seed for p in points})
    stamp = (
        ""
        if _mode(args) in ("default", "full")
        else (f"smoke: {len(data.y_train):,} images, {n_seeds} seed{'s' * (n_seeds > 1)}")
    )
    _study_plot.plot(
        points,
        ARMS,
        comparisons[:2],
        metric,
        title=f"{data.name}: test accuracy against CPU training time, mean of {n_seeds} seed(s) "
        f"per budget ({', '.join(sorted({f'{p.budget:g}x' for p in points}))}); bars: ±1 sd\n"
        f"recipe: {', '.join(recipe)}",
        stamp=stamp,
        path=args.output / "frontiers.png",
    )
    return {
        "points": points,
        "summaries": _study.summarise(points),
        "comparisons": comparisons,
        "metric": metric,
    }


def run_ablation(args, data: Dataset, cfg: Config) -> dict:
    budget = args.ablation_budget
    # the baseline frontier up to twice the algorithms' budget, the algorithms at that budget
    budgets = sorted({budget / 2, budget, 2 * budget})
    points: list[_study.Point] = []
    for seed in args.seed_list:
        runs = [Run("baseline", (), b, data, cfg, seed=seed, split="val") for b in budgets]
        runs += [
            Run(name, (name,), budget, data, cfg, seed=seed, split="val")
            for name in args.algorithms
        ]
        points += _study.interleave(runs, progress=not args.no_progress)
    text, records = ablation_table(points)
    print()
    print(f"each algorithm alone at budget {budget:g}x, in validation accuracy:")
    print(text)
    return {"points": points, "summaries": _study.summarise(points), "ablation": records}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make demo",
        description=__doc__.splitlines()[0]
        + " Default: 3 seeds, 3 arms, 4 budgets of a 98-step reference: about 10 minutes of "
        "wall-clock time on an idle 2-core machine (one thread), more on a busy one.",
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DIR, help="directory of the IDX files")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        action="store_true",
        help="12,000 training images, a half-epoch reference (47 steps), 1 seed: about 1 minute "
        "on an idle 2-core machine (a smoke run)",
    )
    size.add_argument(
        "--full",
        action="store_true",
        help="reference schedule of 2 epochs, 3 seeds: about 35 minutes",
    )
    size.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    p.add_argument(
        "--ablation",
        action="store_true",
        help="each algorithm alone, in validation accuracy, not the study",
    )
    p.add_argument("--ablation-budget", type=float, default=1.0)
    p.add_argument(
        "--algorithms",
        default=",".join(ALGORITHMS),
        help="the ablation's algorithms (default: all)",
    )
    p.add_argument(
        "--recipe",
        default=",".join(DEFAULT_RECIPE),
        help=f"comma-separated, from: {', '.join(ALGORITHMS)}",
    )
    p.add_argument(
        "--budgets",
        default=",".join(map(str, BUDGETS)),
        help="fractions of the reference schedule (default 0.25,0.5,1,2)",
    )
    p.add_argument(
        "--seeds", type=int, default=None, help="number of seeds (default: 3; 1 with --quick)"
    )
    p.add_argument(
        "--ref-epochs",
        type=float,
        default=None,
        help="reference schedule length (default 0.25 epoch; 2 with --full)",
    )
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.2, help="peak learning rate")
    _study.add_run_arguments(p)
    return p


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    args.recipe = tuple(a for a in args.recipe.split(",") if a)
    args.algorithms = tuple(a for a in args.algorithms.split(",") if a)
    unknown = [a for a in (*args.recipe, *args.algorithms) if a not in ALGORITHMS]
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
    args.seed_list = _study.seed_list(parser, args, MODES[_mode(args)][3])
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    n_train, n_test, _, _ = MODES[_mode(args)]
    data = load_data(args.data, install=not args.no_install)
    if data.note:
        print(data.note)
    data = data.hold_out(min(N_VAL, len(data.y_train) // 5)).subset(n_train, n_test)
    cfg = _config(args, data)
    m = _study.machine()
    print(f"machine: {_study.describe_machine(m)}")
    print(
        f"data: {data.describe()}; model: residual CNN, width {cfg.width}; batch "
        f"{cfg.batch_size}; reference schedule {cfg.ref_steps} steps; budgets "
        f"{', '.join(f'{b:g}x' for b in args.budgets)}; seeds {', '.join(map(str, args.seed_list))}"
    )
    print(
        "time: process CPU time of the training steps (all threads, evaluation excluded): other\n"
        "      processes' load stretches wall-clock time but takes little from it\n"
    )
    if args.ablation:
        payload = run_ablation(args, data, cfg)
    else:
        print(f"arms: baseline; channels_last alone; recipe = {', '.join(args.recipe)}\n")
        payload = run_study(args, data, cfg, args.recipe)
        print(
            "\nablation (each algorithm alone, validation accuracy): make demo "
            "DEMO_ARGS=--ablation;\nthe last measured table is in docs/guides/demo.md"
        )
    payload |= {
        "mode": _mode(args),
        "machine": m,
        "data": data.describe(),
        "data_note": data.note,
        "config": vars(cfg),
        "budgets": args.budgets,
        "seeds": args.seed_list,
        "recipe": args.recipe,
        "total_wall_s": time.perf_counter() - start,
    }
    name = "ablation" if args.ablation else "study"
    _study.write_json(args.output / f"{name}.json", payload)
    if not args.ablation:
        print(f"\nplot: {(args.output / 'frontiers.png').resolve()}")
    print(f"every run: {(args.output / f'{name}.json').resolve()}")
    print(f"total wall-clock: {payload['total_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
