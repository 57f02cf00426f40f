"""What both studies share: runs advanced in turns, seeds, frontiers, the speed-up and its interval.

A *study* trains several arms (the plain baseline, a recipe, ...) at several budgets and seeds.
Every finished run is one :class:`Point`: its process CPU time and its *score*, the quality the
frontiers are drawn in (test accuracy for the vision study, test bits per byte for the language
one; :class:`Metric` says which way is better). The arithmetic below works on a *merit*, the
score with its sign turned so that higher is better, and shows the score.

* **Per point**: the runs of one (arm, budget) over the seeds give a mean CPU time, a mean score
  and the score's spread (sample standard deviation).
* **Frontier**: the points no faster point beats, from the untrained model's score at time 0,
  joined by straight lines. A learning curve bends upward between measured points, so the chord
  reads a given score a little late: the reading errs on the slow side, alike for every arm.
* **Speed-up**: read where both mean frontiers reach the same score (the best both reach): the
  baseline's time over the other arm's time at that score.
* **Interval**: a paired percentile bootstrap over seeds. Seed ``s`` of every arm shares its
  initial weights and data order, so a resample draws seeds with replacement and takes all the
  arms' runs of each drawn seed; the speed-up is recomputed on the resample's mean frontiers
  (again at the best score both reach), and the 2.5th and 97.5th percentiles of 2,000
  resamples bound the 95% interval. With ``k`` seeds a resample has at most ``k`` distinct
  seeds, so with 3 seeds the interval is coarse: it shows the seed-to-seed spread, not more.
* **Words**: "x faster" or "x slower" only when the interval excludes 1; otherwise the
  difference is not measurable at this number of seeds, and the words say so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

import functional as F

from ._harness import cpu_model

Curve = list[tuple[float, float]]
CHUNK = 8  # steps of one run before the next run's turn
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Metric:
    """The score a study's frontiers are drawn in."""

    name: str  # "test accuracy"
    higher_is_better: bool
    start: float  # the untrained model's score: the frontier's point at time 0
    digits: int = 4

    def merit(self, score: float) -> float:
        return score if self.higher_is_better else -score

    def score(self, merit: float) -> float:
        return merit if self.higher_is_better else -merit

    def fmt(self, score: float) -> str:
        return f"{score:.{self.digits}f}"


@dataclass
class Point:
    """One finished run."""

    arm: str
    algorithms: tuple[str, ...]
    budget: float  # fraction of the reference schedule
    seed: int
    steps: int
    cpu_s: float = 0.0  # process CPU time of the training steps (all threads)
    wall_s: float = 0.0  # wall-clock time of the same steps
    score: float = float("nan")  # the study's metric, read once at the end of the run
    extra: dict[str, float] = field(default_factory=dict)  # other readings (validation, ...)


class Run(Protocol):
    """What :func:`interleave` needs of a training run."""

    point: Point
    total_steps: int

    @property
    def done(self) -> bool: ...

    def advance(self, n: int) -> int: ...

    def evaluate(self) -> float: ...


# -- command line ------------------------------------------------------------------------------


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options both studies' command lines share."""
    p.add_argument("--no-install", action="store_true", help="never run apt-get")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--output", type=Path, default=Path("demo_out"), help="output directory")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--first-seed", type=int, default=0, help="seeds run: first-seed, first-seed+1, ..."
    )
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="train nothing: report on the runs of these JSON files together (seeds run "
        "as separate processes)",
    )


def seed_list(parser: argparse.ArgumentParser, args: argparse.Namespace, default: int) -> tuple:
    """The seeds to run: ``--seeds`` (else ``default``) of them from ``--first-seed``."""
    n_seeds = default if args.seeds is None else args.seeds
    if n_seeds < 1:
        parser.error(f"--seeds must be at least 1, got {n_seeds}")
    return tuple(range(args.first_seed, args.first_seed + n_seeds))


# -- running -----------------------------------------------------------------------------------


class TimedRun:
    """A run advanced a few steps at a time, its steps' CPU and wall time added to its point.

    Subclasses set ``point`` and ``total_steps`` and define ``_one_step`` and ``evaluate``.
    """

    point: Point
    total_steps: int
    step: int = 0
    model: torch.nn.Module
    ema: torch.nn.Module | None
    smoothing: float
    scheduler: torch.optim.lr_scheduler.LRScheduler

    @property
    def done(self) -> bool:
        return self.step >= self.total_steps

    def _one_step(self) -> None:
        raise NotImplementedError

    def _end_step(self) -> None:
        """Count the step, move the LR schedule on and update the EMA copy, if any."""
        self.step += 1
        if self.step < self.total_steps:  # OneCycleLR refuses a step past its end
            self.scheduler.step()
        if self.ema is not None:
            F.compute_ema(self.model, self.ema, smoothing=self.smoothing)

    def evaluate(self) -> float:
        raise NotImplementedError

    def advance(self, n: int) -> int:
        """Train up to ``n`` more steps; their CPU and wall time are added to the point."""
        n = min(n, self.total_steps - self.step)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            self._one_step()
        self.point.cpu_s += time.process_time() - cpu
        self.point.wall_s += time.perf_counter() - wall
        return n


def interleave(runs: Sequence[Run], *, progress: bool, chunk: int = CHUNK) -> list[Point]:
    """Advance ``runs`` in turns of ``chunk`` steps until all are done; evaluate each.

    Who goes first alternates, so that no run always follows the same other run. With
    ``progress`` and a terminal, one progress bar per run; otherwise (a log file) one plain line
    per finished run, so that a log reads cleanly.
    """
    bars = _bars(runs) if progress and sys.stdout.isatty() else None
    turn = 0
    while not all(r.done for r in runs):
        for i, r in enumerate(runs) if turn % 2 == 0 else reversed(list(enumerate(runs))):
            if r.done:
                continue
            n = r.advance(chunk)
            if bars is not None:
                bars[i].update(n)
            if r.done:
                r.evaluate()
                if bars is not None:
                    bars[i].set_postfix_str(_done_line(r.point))
                elif progress:
                    print(f"  {_done_line(r.point)}", flush=True)
        turn += 1
    for bar in bars or ():
        bar.close()
    return [r.point for r in runs]


def _bars(runs: Sequence[Run]) -> list:
    from tqdm import tqdm

    return [
        tqdm(total=r.total_steps, desc=_label(r.point), position=i, leave=True, mininterval=1.0)
        for i, r in enumerate(runs)
    ]


def _label(p: Point) -> str:
    return f"{p.arm} {p.budget:g}x seed {p.seed}"


def _done_line(p: Point) -> str:
    return f"{_label(p)}: {p.steps} steps, {p.cpu_s:.1f} s CPU, score {p.score:.4f}"


# -- per point ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """The runs of one (arm, budget) over seeds."""

    arm: str
    budget: float
    n: int
    cpu_s: float
    wall_s: float
    score: float
    score_sd: float  # sample standard deviation over seeds (0 with one seed)


def summarise(points: Sequence[Point]) -> list[Summary]:
    """One :class:`Summary` per (arm, budget), in the order they first appear."""
    groups: dict[tuple[str, float], list[Point]] = {}
    for p in points:
        groups.setdefault((p.arm, p.budget), []).append(p)
    return [
        Summary(
            arm,
            budget,
            len(ps),
            statistics.fmean(p.cpu_s for p in ps),
            statistics.fmean(p.wall_s for p in ps),
            statistics.fmean(p.score for p in ps),
            statistics.stdev(p.score for p in ps) if len(ps) > 1 else 0.0,
        )
        for (arm, budget), ps in groups.items()
    ]


# -- frontiers (in merit: higher is better) ----------------------------------------------------


def frontier(points: Sequence[tuple[float, float]], start: float) -> Curve:
    """The Pareto frontier of ``(time, merit)`` points, from ``(0, start)``."""
    curve = [(0.0, start)]
    for t, m in sorted(points):
        if m > curve[-1][1]:
            curve.append((t, m))
    return curve


def time_to_reach(curve: Curve, merit: float) -> float | None:
    """The time at which the frontier reaches ``merit`` (linear in between), or ``None``."""
    for (t0, m0), (t1, m1) in itertools.pairwise(curve):
        if m1 >= merit:
            if merit <= m0:
                return t0
            return t0 + (t1 - t0) * (merit - m0) / (m1 - m0)
    return None


def merit_at(curve: Curve, t: float) -> float:
    """The frontier's merit at time ``t`` (linear in between, flat after its last point)."""
    for (t0, m0), (t1, m1) in itertools.pairwise(curve):
        if t <= t1:
            return m0 + (m1 - m0) * (t - t0) / (t1 - t0)
    return curve[-1][1]


def speedup(base: Curve, other: Curve) -> dict[str, float]:
    """Two frontiers compared at the best merit both reach: ``ratio`` is the baseline's time
    over the other's (> 1: the other is faster)."""
    target = min(base[-1][1], other[-1][1])
    t_base, t_other = time_to_reach(base, target), time_to_reach(other, target)
    assert t_base is not None and t_other is not None  # each reaches its own best
    return {"merit": target, "base_s": t_base, "other_s": t_other, "ratio": t_base / t_other}


def arm_curve(summaries: Sequence[Summary], arm: str, metric: Metric) -> Curve:
    return frontier(
        [(s.cpu_s, metric.merit(s.score)) for s in summaries if s.arm == arm],
        metric.merit(metric.start),
    )


# -- the speed-up with its interval ------------------------------------------------------------


def compare(points: Sequence[Point], base: str, other: str, metric: Metric) -> dict:
    """``other`` against ``base``: the speed-up on the mean frontiers and its bootstrap interval."""
    s = speedup(
        arm_curve(summarise(points), base, metric), arm_curve(summarise(points), other, metric)
    )
    seeds = sorted({p.seed for p in points})
    low = high = None
    if len(seeds) > 1:
        by_seed = {
            s_: [p for p in points if p.seed == s_ and p.arm in (base, other)] for s_ in seeds
        }
        rng = np.random.default_rng(0)
        ratios = []
        for _ in range(BOOTSTRAP):
            drawn = rng.choice(len(seeds), size=len(seeds), replace=True)
            sample = [p for i in drawn for p in by_seed[seeds[i]]]
            sums = summarise(sample)
            ratios.append(
                speedup(arm_curve(sums, base, metric), arm_curve(sums, other, metric))["ratio"]
            )
        low, high = (float(v) for v in np.percentile(ratios, [2.5, 97.5]))
    return {
        "base": base,
        "other": other,
        "score": metric.score(s["merit"]),
        "base_s": s["base_s"],
        "other_s": s["other_s"],
        "ratio": s["ratio"],
        "ci95": None if low is None else [low, high],
        "seeds": seeds,
        "method": f"paired percentile bootstrap over seeds, {BOOTSTRAP} resamples",
    }


def ratio_words(ratio: float) -> str:
    """``2.0`` -> "2.00x faster", ``0.5`` -> "2.00x slower"."""
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def claim(c: dict) -> str:
    """The comparison in words: "x faster/slower" only when the interval excludes 1."""
    if c["ci95"] is None:
        return f"{c['ratio']:.2f}x (one seed: no interval)"
    low, high = c["ci95"]
    interval = f"95% interval {low:.2f}-{high:.2f}x"
    if low > 1 or high < 1:
        return f"{ratio_words(c['ratio'])} ({interval})"
    return f"{c['ratio']:.2f}x, not measurably different ({interval} includes 1x)"


def claim_sentence(c: dict, metric: Metric) -> str:
    return (
        f"{c['other']} against {c['base']}: at {metric.fmt(c['score'])} {metric.name} (the best "
        f"both mean frontiers reach), {claim(c)} in CPU time ({c['other_s']:.1f} s vs "
        f"{c['base_s']:.1f} s, mean over {len(c['seeds'])} seed(s))."
    )


# -- output ------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def study_table(points: Sequence[Point], arms: Sequence[str], metric: Metric) -> str:
    """One row per budget: each arm's mean CPU time and mean score ± its spread over seeds."""
    sums = {(s.arm, s.budget): s for s in summarise(points)}
    budgets = sorted({b for _, b in sums})
    rows = []
    for b in budgets:
        row = [f"{b:g}x"]
        for arm in arms:
            s = sums.get((arm, b))
            row += ["-", "-"] if s is None else [f"{s.cpu_s:.1f}", score_sd(s, metric)]
        rows.append(row)
    header = ["budget"] + [h for arm in arms for h in (f"{arm} CPU s", f"{arm} {metric.name}")]
    return table(header, rows)


def score_sd(s: Summary, metric: Metric) -> str:
    text = metric.fmt(s.score)
    return text + (f" ± {s.score_sd:.{metric.digits}f}" if s.n > 1 else "")


def machine() -> dict[str, str | int]:
    """The CPU model, its threads, torch's threads and versions."""
    return {
        "cpu": cpu_model(),
        "cpu_threads": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else -1,
    }


def describe_machine(m: dict) -> str:
    return (
        f"{m['cpu']}, {m['cpu_threads']} hardware threads; torch {m['torch']} using "
        f"{m['torch_threads']} thread(s); Python {m['python']}; load average "
        f"{m['load_average_1min']} at the start"
    )


def load_points(paths: Sequence[Path], key: str = "points") -> list[Point]:
    """The runs recorded under ``key`` in the JSON files ``paths`` (written by :func:`write_json`):
    seeds run as separate processes are reported together this way."""
    points = []
    for path in paths:
        for p in json.loads(Path(path).read_text()).get(key, []):
            points.append(Point(**{**p, "algorithms": tuple(p["algorithms"])}))
    return points


def write_json(path: Path, payload: dict) -> None:
    def encode(obj: object) -> object:
        if isinstance(obj, Point | Summary | Metric):
            return asdict(obj)
        raise TypeError(type(obj).__name__)

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=encode) + "\n")
