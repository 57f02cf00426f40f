"""The studies' figure: each arm's mean frontier, the claims on the figure, a stamp on smoke runs."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

from ._study import Metric, Point, arm_curve, claim, summarise


def plot(
    points: Sequence[Point],
    arms: Sequence[str],
    comparisons: Sequence[dict],
    metric: Metric,
    *,
    title: str,
    stamp: str,
    path: Path,
    labels: Callable[[str], str] = str,
) -> None:
    """Each arm's mean frontier with one marker per budget (error bars: the spread over seeds),
    the comparisons' claims in a box, and a marker where both frontiers of a comparison reach
    the score its ratio is read at. ``stamp`` (e.g. "smoke: 12,000 images, 1 seed") is written
    across the figure when not empty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sums = summarise(points)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colours = {}
    for arm, marker in zip(arms, itertools.cycle("osD^v"), strict=False):
        mine = sorted((s for s in sums if s.arm == arm), key=lambda s: s.cpu_s)
        curve = arm_curve(sums, arm, metric)
        line = ax.plot(
            [t for t, _ in curve[1:]],
            [metric.score(m) for _, m in curve[1:]],
            label=f"{labels(arm)} frontier",
        )[0]
        colours[arm] = line.get_color()
        ax.errorbar(
            [s.cpu_s for s in mine],
            [s.score for s in mine],
            yerr=[s.score_sd for s in mine],
            fmt=marker,
            color=line.get_color(),
            ms=4,
            capsize=2,
        )
    words = []
    for c in comparisons:
        for arm, key in ((c["base"], "base_s"), (c["other"], "other_s")):
            ax.plot([c[key]], [c["score"]], marker="*", ms=13, color=colours[arm], mec="black")
        ax.axhline(c["score"], color="grey", lw=0.6, ls=":")
        words.append(f"{labels(c['other'])} vs {labels(c['base'])}: {claim(c)}")
    words.append("★ where both frontiers reach the score the ratio is read at")
    ax.text(
        0.98,
        0.03 if metric.higher_is_better else 0.97,
        "\n".join(words),
        transform=ax.transAxes,
        ha="right",
        va="bottom" if metric.higher_is_better else "top",
        fontsize=7,
        bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "grey"},
    )
    if stamp:
        ax.text(
            0.5,
            0.5,
            stamp,
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=20,
            color="red",
            alpha=0.25,
            rotation=20,
        )
    ax.set_xlabel("training time (s of process CPU time, evaluation excluded)")
    ax.set_ylabel(metric.name + ("" if metric.higher_is_better else " (lower is better)"))
    ax.set_title(title, fontsize=9)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left" if metric.higher_is_better else "upper right", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
