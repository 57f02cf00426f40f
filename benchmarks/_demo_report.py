"""The demo's arithmetic and output: Pareto frontiers, the speed-up, tables, plot, JSON.

A frontier is the set of points (training time, accuracy) that no faster point beats, starting
at the untrained model's chance accuracy at time 0, joined by straight lines. The time at which
a frontier reaches an accuracy is read off those lines. A learning curve bends upward between
measured points (it is concave), so the straight chord reaches a given accuracy later than the
run would: the reading errs on the slow side, alike for both arms.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from ._demo_train import Point
from ._harness import cpu_model

Curve = list[tuple[float, float]]


def frontier(points: Sequence[tuple[float, float]], chance: float) -> Curve:
    """The Pareto frontier of ``(time, accuracy)`` points, from ``(0, chance)``."""
    curve = [(0.0, chance)]
    for t, acc in sorted(points):
        if acc > curve[-1][1]:
            curve.append((t, acc))
    return curve


def time_to_reach(curve: Curve, accuracy: float) -> float | None:
    """The time at which the frontier reaches ``accuracy`` (linear in between), or ``None``."""
    for (t0, a0), (t1, a1) in itertools.pairwise(curve):
        if a1 >= accuracy:
            if accuracy <= a0:
                return t0
            return t0 + (t1 - t0) * (accuracy - a0) / (a1 - a0)
    return None


def accuracy_at(curve: Curve, t: float) -> float:
    """The frontier's accuracy at time ``t`` (linear in between, flat after its last point)."""
    for (t0, a0), (t1, a1) in itertools.pairwise(curve):
        if t <= t1:
            return a0 + (a1 - a0) * (t - t0) / (t1 - t0)
    return curve[-1][1]


def ratio_words(ratio: float) -> str:
    """``2.0`` -> "2.00x faster", ``0.5`` -> "2.00x slower"."""
    if ratio >= 1:
        return f"{ratio:.2f}x faster"
    return f"{1 / ratio:.2f}x slower"


def speedup(base: Curve, recipe: Curve) -> dict[str, float | None]:
    """The two frontiers compared at the best accuracy both reach.

    ``ratio`` is baseline time / recipe time at that accuracy (> 1: the recipe is faster);
    ``to_baseline_best`` the same ratio at the baseline's best accuracy (``None`` when the
    recipe never reaches it).
    """
    target = min(base[-1][1], recipe[-1][1])
    t_base, t_recipe = time_to_reach(base, target), time_to_reach(recipe, target)
    assert t_base is not None and t_recipe is not None  # both reach their own best
    best = base[-1][1]
    t_best = time_to_reach(recipe, best)
    return {
        "accuracy": target,
        "baseline_s": t_base,
        "recipe_s": t_recipe,
        "ratio": t_base / t_recipe,
        "baseline_best": best,
        "baseline_best_s": base[-1][0],
        "recipe_to_baseline_best_s": t_best,
        "to_baseline_best": None if t_best is None else base[-1][0] / t_best,
    }


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def study_table(base: list[Point], recipe: list[Point], chance: float) -> str:
    """One row per budget: both arms' times and accuracies, and where the recipe's point
    stands against the baseline frontier at the same CPU time."""
    base_curve = frontier([(p.cpu_s, p.accuracy) for p in base], chance)
    same_budget = {p.budget: p for p in base}
    rows = []
    for r in recipe:
        b = same_budget.get(r.budget)
        delta = r.accuracy - accuracy_at(base_curve, r.cpu_s)
        rows.append(
            [
                f"{r.budget:g}x ({r.epochs:.2f} ep)",
                "-" if b is None else f"{b.cpu_s:.1f}",
                "-" if b is None else f"{b.wall_s:.1f}",
                "-" if b is None else f"{b.accuracy:.4f}",
                f"{r.cpu_s:.1f}",
                f"{r.wall_s:.1f}",
                f"{r.accuracy:.4f}",
                f"{100 * delta:+.2f}" + (" *" if r.cpu_s < base_curve[1][0] else ""),
            ]
        )
    header = [
        "budget",
        "base CPU s",
        "base wall s",
        "base acc",
        "recipe CPU s",
        "recipe wall s",
        "recipe acc",
        "recipe vs base frontier (pts)",
    ]
    table = _table(header, rows)
    if any(r.cpu_s < base_curve[1][0] for r in recipe):
        table += (
            "\n* faster than the baseline's fastest point: compared with the straight line from "
            "chance accuracy at 0 s to that point, which is below the real curve"
        )
    return table


def verdict(base: list[Point], recipe: list[Point], chance: float) -> tuple[str, dict]:
    """The sentences that state the result, and the numbers behind them."""
    base_curve = frontier([(p.cpu_s, p.accuracy) for p in base], chance)
    rec_curve = frontier([(p.cpu_s, p.accuracy) for p in recipe], chance)
    s = speedup(base_curve, rec_curve)
    above = [r.accuracy > accuracy_at(base_curve, r.cpu_s) for r in recipe]
    lines = [
        f"At {s['accuracy']:.4f} test accuracy (the best both frontiers reach), the recipe is "
        f"{ratio_words(s['ratio'])} than the baseline in CPU time "
        f"({s['recipe_s']:.1f} s vs {s['baseline_s']:.1f} s)."
    ]
    if s["to_baseline_best"] is None:
        lines.append(
            f"The recipe never reached the baseline's best accuracy ({s['baseline_best']:.4f})."
        )
    else:
        lines.append(
            f"It reaches the baseline's best accuracy ({s['baseline_best']:.4f}) "
            f"{ratio_words(s['to_baseline_best'])} "
            f"({s['recipe_to_baseline_best_s']:.1f} s vs {s['baseline_best_s']:.1f} s)."
        )
    n_above = sum(above)
    n_early = sum(r.cpu_s < base_curve[1][0] for r in recipe)
    early = f", {n_early} of them faster than the baseline's fastest point (*)" if n_early else ""
    lines.append(
        f"The recipe's point is above the baseline frontier at {n_above} of its {len(above)} "
        f"budgets{early}" + ("." if n_above == len(above) else " (see the table).")
    )
    return "\n".join(lines), {**s, "recipe_above_baseline_frontier": above}


def ablation_table(base: list[Point], runs: list[Point], chance: float) -> tuple[str, list[dict]]:
    """Each algorithm alone against the baseline frontier.

    ``vs frontier`` is its accuracy minus the baseline frontier's at the same CPU time;
    ``equivalent speed-up`` is the time the baseline frontier needs for that accuracy over
    the algorithm's time ("beyond" when the baseline never reaches it).
    """
    base_curve = frontier([(p.cpu_s, p.accuracy) for p in base], chance)
    same_budget = {p.budget: p for p in base}
    rows, records = [], []
    for p in runs:
        ref = same_budget.get(p.budget)
        delta = p.accuracy - accuracy_at(base_curve, p.cpu_s)
        t_equiv = time_to_reach(base_curve, p.accuracy)
        equiv = "beyond" if t_equiv is None else ratio_words(t_equiv / p.cpu_s)
        time_ratio = p.cpu_s / ref.cpu_s if ref else float("nan")
        acc_delta = p.accuracy - ref.accuracy if ref else float("nan")
        rows.append(
            [
                ",".join(p.algorithms),
                f"{p.cpu_s:.1f}",
                f"{time_ratio:.2f}",
                f"{p.accuracy:.4f}",
                f"{100 * acc_delta:+.2f}",
                f"{100 * delta:+.2f}",
                equiv,
                "helps" if delta > 0 else "does not help",
            ]
        )
        records.append({"algorithms": p.algorithms, "vs_frontier": delta, "equivalent": equiv})
    header = [
        "algorithm",
        "CPU s",
        "time / base",
        "accuracy",
        "acc - base (pts)",
        "vs frontier (pts)",
        "equivalent speed-up",
        "verdict",
    ]
    return _table(header, rows), records


def machine() -> dict[str, str | int]:
    """The CPU model, its threads, torch's threads and versions."""
    cpu = cpu_model()
    return {
        "cpu": cpu,
        "cpu_threads": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def describe_machine(m: dict[str, str | int]) -> str:
    return (
        f"{m['cpu']}, {m['cpu_threads']} hardware threads; torch {m['torch']} using "
        f"{m['torch_threads']} threads; Python {m['python']}"
    )


def plot(curves: dict[str, list[Point]], chance: float, title: str, path: Path) -> None:
    """Accuracy against CPU training time: each arm's points (one marker per budget, labelled)
    and its frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    lows = []
    for (name, points), marker in zip(
        curves.items(), itertools.cycle("osD^vP<>Xhp*"), strict=False
    ):
        curve = frontier([(p.cpu_s, p.accuracy) for p in points], chance)
        line = ax.plot(
            *zip(*curve[1:], strict=True),
            marker=marker,
            label=f"{name} frontier" if len(points) > 1 else name,
        )[0]
        ax.scatter(
            [p.cpu_s for p in points], [p.accuracy for p in points], color=line.get_color(), s=12
        )
        for p in points if len(points) > 1 else ():
            ax.annotate(f"{p.budget:g}x", (p.cpu_s, p.accuracy), fontsize=7, xytext=(4, -10),
                        textcoords="offset points")  # fmt: skip
        lows += [p.accuracy for p in points]
    ax.set_xlabel("training time (s of process CPU time, evaluation excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(left=0)
    ax.set_ylim(min(lows) - 0.01, max(lows) + 0.005)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8 if len(curves) <= 3 else 6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def write_json(path: Path, payload: dict) -> None:
    def encode(obj: object) -> object:
        if isinstance(obj, Point):
            return asdict(obj)
        raise TypeError(type(obj).__name__)

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=encode) + "\n")
