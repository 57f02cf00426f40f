"""The machinery both studies share (benchmarks/_study.py): per-point means and spread, the
speed-up on mean frontiers, its paired bootstrap interval over seeds, and the words that may
only say "faster" or "slower" when the interval excludes 1."""

from __future__ import annotations

import pytest

from benchmarks import _study
from benchmarks._study import Metric, Point

ACC = Metric("accuracy", higher_is_better=True, start=0.1)
BPB = Metric("bits per byte", higher_is_better=False, start=8.0)


def _points(arm: str, seeds_times_scores: dict[int, list[tuple[float, float]]]) -> list[Point]:
    out = []
    for seed, pairs in seeds_times_scores.items():
        for budget, (t, score) in zip((0.5, 1.0, 2.0), pairs, strict=True):
            out.append(Point(arm, (), budget, seed, 10, cpu_s=t, score=score))
    return out


def test_summaries_are_means_and_sample_spread_over_seeds():
    pts = _points("a", {0: [(1, 0.5), (2, 0.6), (4, 0.7)], 1: [(3, 0.7), (2, 0.8), (4, 0.9)]})
    first = _study.summarise(pts)[0]
    assert (first.arm, first.budget, first.n) == ("a", 0.5, 2)
    assert first.cpu_s == pytest.approx(2.0) and first.score == pytest.approx(0.6)
    assert first.score_sd == pytest.approx(0.1414, abs=1e-4)


def test_a_consistent_speed_up_gets_an_interval_that_excludes_1_and_the_word_faster():
    # the other arm takes half the time at every budget, seeds differ a little in score
    base = _points(
        "base", {s: [(2, 0.6 + s / 100), (4, 0.7 + s / 100), (8, 0.8)] for s in range(4)}
    )
    fast = _points(
        "fast", {s: [(1, 0.6 + s / 100), (2, 0.7 + s / 100), (4, 0.8)] for s in range(4)}
    )
    c = _study.compare(base + fast, "base", "fast", ACC)
    assert c["ratio"] == pytest.approx(2.0)
    low, high = c["ci95"]
    assert 1 < low <= 2.0 <= high
    assert _study.claim(c).startswith("2.00x faster (95% interval")
    slow = _study.compare(base + fast, "fast", "base", ACC)
    assert "x slower" in _study.claim(slow)


def test_seeds_that_disagree_give_an_interval_across_1_and_no_verdict():
    base = _points("base", {0: [(2, 0.6), (4, 0.7), (8, 0.8)], 1: [(2, 0.6), (4, 0.7), (8, 0.8)]})
    other = _points(
        "other", {0: [(1, 0.6), (2, 0.7), (4, 0.8)], 1: [(4, 0.6), (8, 0.7), (16, 0.8)]}
    )
    c = _study.compare(base + other, "base", "other", ACC)
    low, high = c["ci95"]
    assert low < 1 < high
    words = _study.claim(c)
    assert "not measurably different" in words and "faster" not in words and "slower" not in words


def test_one_seed_has_no_interval_and_says_so():
    base = _points("base", {0: [(2, 0.6), (4, 0.7), (8, 0.8)]})
    fast = _points("fast", {0: [(1, 0.6), (2, 0.7), (4, 0.8)]})
    c = _study.compare(base + fast, "base", "fast", ACC)
    assert c["ci95"] is None and _study.claim(c) == "2.00x (one seed: no interval)"


def test_lower_is_better_scores_read_the_same_way():
    base = _points("base", {s: [(2, 4.0), (4, 3.5), (8, 3.0 + s / 100)] for s in range(3)})
    fast = _points("fast", {s: [(1, 4.0), (2, 3.5), (4, 3.0 + s / 100)] for s in range(3)})
    c = _study.compare(base + fast, "base", "fast", BPB)
    assert c["ratio"] == pytest.approx(2.0) and c["score"] == pytest.approx(3.01)
    assert "faster" in _study.claim(c)
    table = _study.study_table(base + fast, ["base", "fast"], BPB)
    assert "3.0100 ± 0.0100" in table


class _Counting(_study.TimedRun):
    def __init__(self, arm: str, steps: int) -> None:
        self.point, self.total_steps, self.step = Point(arm, (), 1.0, 0, steps), steps, 0

    def _one_step(self) -> None:
        self.step += 1

    def evaluate(self) -> float:
        self.point.score = float(self.step)
        return self.point.score


def test_interleave_runs_every_run_to_its_end_and_logs_plain_lines(capsys):
    points = _study.interleave([_Counting("a", 5), _Counting("b", 12)], progress=True, chunk=4)
    assert [p.score for p in points] == [5.0, 12.0]
    out = capsys.readouterr().out  # not a terminal: one plain line per finished run
    assert "a 1x seed 0: 5 steps" in out and "\r" not in out
