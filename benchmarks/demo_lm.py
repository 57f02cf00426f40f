"""`make demo-lm`: the language-model study: a plain GPT-2 against ALiBi and friends, on real text.

A small byte-level GPT-2 (a ``transformers`` config, ~0.4 M parameters) learns the Python 3.11
documentation's reStructuredText sources (Debian's ``python3.11-doc``; split by file into
training, validation and test sets, fixed; bytes as tokens). Two arms run at the same budgets
and seeds, interleaved, timed in process CPU time, as in the vision study
(:mod:`benchmarks._study` holds the shared machinery):

* **baseline**: GPT-2's learned positions, trained at the full context (256 bytes);
* **recipe**: ``F.apply_alibi`` trained at half the context (128 bytes, the same bytes per step
  as more, shorter rows), sequence-length warmup, and what the ``--ablation`` on validation data
  kept of GLU, low-precision LayerNorm, gradient clipping and EMA.

Measured: validation bits per byte at the full context against CPU time (both frontiers, the
speed-up at the best score both reach, its 95% bootstrap interval over seeds), ALiBi's length
extrapolation as in Press et al. (2022) (trained at L = 64, evaluated at L, 2L, 4L, beside
learned positions trained at L and at 4L), and the test bits per byte of each arm's longest
runs, read once at their end.
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from . import _study, _study_plot
from ._lm_data import DEFAULT_DIR, Text, load_text
from ._lm_train import LM_ALGORITHMS, LMConfig, LMRun

# The recipe's core (ALiBi at the short length, sequence-length warmup) and what the last
# --ablation, on validation data, kept of the rest (docs/guides/demo_lm.md).
CORE = ("alibi", "seq_length_warmup")
DEFAULT_RECIPE = (*CORE, "glu", "gradient_clipping")  # the ablation of 4 December 2026
CANDIDATES = ("glu", "low_precision_layernorm", "gradient_clipping", "ema")
ARMS = ("baseline", "recipe")
BPB = _study.Metric("validation bits per byte", higher_is_better=False, start=8.0, digits=3)
# mode -> (config changes, seeds); the default fits 12 minutes on 2 cores: about 6 minutes of
# CPU time on an idle machine (0.19 s per baseline step, 0.09 s per recipe step), estimated
MODES = {
    "default": ({}, 3),
    "quick": ({"ref_steps": 30, "eval_bytes": 8192}, 1),
    "smoke": ({"ref_steps": 8, "width": 32, "layers": 1, "eval_bytes": 2048, "batch": 2}, 1),
}
BUDGETS = (0.5, 1.0, 2.0)
DEFAULTS = LMConfig(ref_steps=100, eval_bytes=16_384)


def _mode(args: argparse.Namespace) -> str:
    return "smoke" if args.smoke else "quick" if args.quick else "default"


def run_study(args, text: Text, cfg: LMConfig) -> dict:
    points: list[_study.Point] = _study.load_points(args.merge) if args.merge else []
    for seed in () if args.merge else args.seed_list:
        for budget in args.budgets:
            last = budget == args.budgets[-1]
            group = [
                LMRun("baseline", (), budget, text, cfg, seed=seed, read_test=last),
                LMRun("recipe", args.recipe, budget, text, cfg, seed=seed, read_test=last),
            ]
            points += _study.interleave(group, progress=not args.no_progress)
            _study.write_json(args.output / "points.json", {"points": points})
    comparison = _study.compare(points, "baseline", "recipe", BPB)
    print()
    print(_study.study_table(points, ARMS, BPB))
    print()
    print(_study.claim_sentence(comparison, BPB))
    print(test_lines(points, args.budgets[-1]))
    n = len({p.seed for p in points})
    stamp = "" if _mode(args) == "default" else f"smoke: {cfg.ref_steps} reference steps, {n} seed"
    _study_plot.plot(
        points,
        ARMS,
        [comparison],
        BPB,
        title=f"byte-level GPT-2 on the Python docs: validation bits per byte against CPU "
        f"training time, mean of {n} seed(s) per budget; bars: ±1 sd\nrecipe: {', '.join(args.recipe)}",
        stamp=stamp,
        path=args.output / "lm_frontiers.png",
    )
    return {"points": points, "summaries": _study.summarise(points), "comparisons": [comparison]}


def test_lines(points: list[_study.Point], budget: float) -> str:
    lines = [f"test bits per byte (read once, at the end of the {budget:g}x runs):"]
    for arm in ARMS:
        values = [p.extra["test_bpb"] for p in points if p.arm == arm and "test_bpb" in p.extra]
        if values:
            sd = f" ± {torch.tensor(values).std().item():.3f}" if len(values) > 1 else ""
            lines.append(f"  {arm}: {sum(values) / len(values):.3f}{sd} over {len(values)} seed(s)")
    return "\n".join(lines)


def run_extrapolation(args, text: Text, cfg: LMConfig, baseline: _study.Point | None) -> dict:
    """ALiBi and learned positions trained at L = context / 4, read at L, 2L and 4L."""
    short = cfg.context // 4
    runs = [
        LMRun("alibi at L", ("alibi",), 1.0, text, cfg, train_length=short),
        LMRun("learned at L", (), 1.0, text, cfg, train_length=short),
    ]
    points = _study.interleave(runs, progress=not args.no_progress)
    if baseline is not None:
        points.append(replace(baseline, arm="learned at 4L"))
    elif not args.extrapolation_only:  # else --merge takes it from the study's runs
        points += _study.interleave([LMRun("learned at 4L", (), 1.0, text, cfg)], progress=False)
    table = extrapolation_table(points, cfg)
    composer = (
        "Composer's apply_alibi not tried in --smoke (importing Composer takes seconds)"
        if _mode(args) == "smoke"
        else _composer_note(cfg)
    )
    print(table)
    print(composer)
    return {"extrapolation": points, "composer_apply_alibi": composer}


def extrapolation_table(points: list[_study.Point], cfg: LMConfig) -> str:
    header = ["model (1x budget, seed 0)", "train length"]
    header += [f"val bpb at {n}" for n in cfg.eval_lengths]
    rows = [
        [p.arm, str(int(p.extra["train_length"]))]
        + [f"{p.extra[f'val_bpb_{n}']:.3f}" for n in cfg.eval_lengths]
        for p in points
    ]
    return f"\nALiBi extrapolation (L = {cfg.context // 4}):\n" + _study.table(header, rows)


def _composer_note(cfg: LMConfig) -> str:
    from ._lm_train import gpt2
    from .alibi_extrapolation import try_composer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return try_composer(gpt2(cfg, 0), max_sequence_length=cfg.context, vocab=256)


def run_ablation(args, text: Text, cfg: LMConfig) -> dict:
    """The core at three budgets (its frontier) and each candidate added at 1x, on validation."""
    points: list[_study.Point] = []
    for seed in args.seed_list:
        runs = [LMRun("core", CORE, b, text, cfg, seed=seed) for b in (0.5, 1.0, 2.0)]
        runs += [LMRun(f"+{c}", (*CORE, c), 1.0, text, cfg, seed=seed) for c in CANDIDATES]
        points += _study.interleave(runs, progress=not args.no_progress)
    sums = _study.summarise(points)
    curve = _study.arm_curve(sums, "core", BPB)
    rows = []
    for s in sums:
        delta = BPB.score(_study.merit_at(curve, s.cpu_s)) - s.score
        rows.append(
            [
                s.arm,
                f"{s.budget:g}x",
                f"{s.cpu_s:.1f}",
                _study.score_sd(s, BPB),
                "-" if s.arm == "core" else f"{delta:+.3f}",
            ]
        )
    print(f"\neach candidate added to {' + '.join(CORE)} at 1x, validation bits per byte:")
    print(_study.table(["arm", "budget", "CPU s", "val bpb", "better than core frontier by"], rows))
    return {"points": points, "summaries": sums}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make demo-lm",
        description=__doc__.splitlines()[0]
        + " Default: 3 seeds, 2 arms, 3 budgets of a 100-step reference and the extrapolation "
        "table: about 6 minutes of CPU time on an idle 2-core machine (one thread).",
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DIR, help="the documentation sources")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="30 reference steps, 1 seed: about 1 minute"
    )
    size.add_argument("--smoke", action="store_true", help="a tiny model, for the test suite")
    p.add_argument(
        "--ablation",
        action="store_true",
        help="each candidate added to ALiBi + warmup, on validation data",
    )
    p.add_argument(
        "--recipe",
        default=",".join(DEFAULT_RECIPE),
        help=f"comma-separated, from: {', '.join(LM_ALGORITHMS)}",
    )
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3; 1 quick)")
    p.add_argument(
        "--ref-steps",
        type=int,
        default=None,
        help=f"reference schedule length in steps (default {DEFAULTS.ref_steps})",
    )
    p.add_argument(
        "--extrapolation-only",
        action="store_true",
        help="only the ALiBi and learned-position runs at L (seed 0); --merge adds 4L",
    )
    _study.add_run_arguments(p)
    return p


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    args.recipe = tuple(a for a in args.recipe.split(",") if a)
    unknown = [a for a in args.recipe if a not in LM_ALGORITHMS]
    if unknown:
        parser.error(
            f"unknown algorithm(s) {', '.join(unknown)}; choose from {', '.join(LM_ALGORITHMS)}"
        )
    args.seed_list = _study.seed_list(parser, args, MODES[_mode(args)][1])
    args.budgets = BUDGETS
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    try:
        text = load_text(args.data, install=not args.no_install)
    except FileNotFoundError as error:
        print(error)
        return 1
    cfg = replace(DEFAULTS, **MODES[_mode(args)][0])
    if args.ref_steps:
        cfg = replace(cfg, ref_steps=args.ref_steps)
    m = _study.machine()
    print(f"machine: {_study.describe_machine(m)}")
    print(f"data: {text.describe()}")
    print(
        f"model: GPT-2, {cfg.layers} layers, width {cfg.width}, {cfg.heads} heads, context "
        f"{cfg.context}; {cfg.batch} x {cfg.context} bytes per step; reference schedule "
        f"{cfg.ref_steps} steps; budgets {', '.join(f'{b:g}x' for b in args.budgets)}; seeds "
        f"{', '.join(map(str, args.seed_list))}\ntime: process CPU time of the training steps\n"
    )
    if args.extrapolation_only:
        payload = run_extrapolation(args, text, cfg, None)
    elif args.ablation:
        payload = run_ablation(args, text, cfg)
    else:
        print(
            f"arms: baseline (learned positions at {cfg.context}); recipe = {', '.join(args.recipe)}\n"
        )
        payload = run_study(args, text, cfg)
        if args.merge:
            extrapolation = _study.load_points(args.merge, key="extrapolation")
            if extrapolation and all(p.arm != "learned at 4L" for p in extrapolation):
                base = next(
                    p
                    for p in payload["points"]
                    if p.arm == "baseline" and p.budget == 1.0 and p.seed == 0
                )
                extrapolation.append(replace(base, arm="learned at 4L"))
            payload |= {"extrapolation": extrapolation, "composer_apply_alibi": _composer_note(cfg)}
            print(extrapolation_table(extrapolation, cfg))
            print(payload["composer_apply_alibi"])
        elif 0 in args.seed_list:
            base = next(
                p
                for p in payload["points"]
                if p.arm == "baseline" and p.budget == 1.0 and p.seed == 0
            )
            payload |= run_extrapolation(args, text, cfg, base)
    payload |= {
        "mode": _mode(args),
        "machine": m,
        "data": text.describe(),
        "config": vars(cfg),
        "recipe": args.recipe,
        "total_wall_s": time.perf_counter() - start,
    }
    name = (
        "lm_ablation"
        if args.ablation
        else "lm_extrapolation"
        if args.extrapolation_only
        else "lm_study"
    )
    _study.write_json(args.output / f"{name}.json", payload)
    print(f"\nevery run: {(args.output / f'{name}.json').resolve()}")
    print(f"total wall-clock: {payload['total_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
