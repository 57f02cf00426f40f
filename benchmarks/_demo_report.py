"""The vision ablation's table: each algorithm alone against the baseline frontier, in
validation accuracy (the frontier arithmetic is :mod:`benchmarks._study`'s)."""

from __future__ import annotations

from collections.abc import Sequence

from . import _study

VAL = _study.Metric("validation accuracy", higher_is_better=True, start=0.1)


def ablation_table(points: Sequence[_study.Point]) -> tuple[str, list[dict]]:
    """Each algorithm alone against the baseline frontier, means over seeds.

    ``vs frontier`` is its mean accuracy minus the baseline frontier's at the same mean CPU
    time; ``equivalent speed-up`` is the time the baseline frontier needs for that accuracy
    over the algorithm's time ("beyond" when the baseline never reaches it).
    """
    sums = _study.summarise(points)
    base = [s for s in sums if s.arm == "baseline"]
    curve = _study.arm_curve(sums, "baseline", VAL)
    same_budget = {s.budget: s for s in base}
    rows, records = [], []
    for s in sums:
        if s.arm == "baseline":
            continue
        ref = same_budget[s.budget]
        delta = s.score - _study.merit_at(curve, s.cpu_s)
        t_equiv = _study.time_to_reach(curve, s.score)
        equiv = "beyond" if t_equiv is None else _study.ratio_words(t_equiv / s.cpu_s)
        rows.append(
            [
                s.arm,
                f"{s.cpu_s:.1f}",
                f"{s.cpu_s / ref.cpu_s:.2f}",
                _study.score_sd(s, VAL),
                f"{100 * (s.score - ref.score):+.2f}",
                f"{100 * delta:+.2f}",
                equiv,
            ]
        )
        records.append({"algorithm": s.arm, "vs_frontier": delta, "equivalent": equiv})
    header = [
        "algorithm",
        "CPU s",
        "time / base",
        "val accuracy",
        "acc - base (pts)",
        "vs frontier (pts)",
        "equivalent speed-up",
    ]
    base_line = "baseline: " + ", ".join(
        f"{s.budget:g}x {s.cpu_s:.1f} s {_study.score_sd(s, VAL)}" for s in base
    )
    return base_line + "\n" + _study.table(header, rows), records
