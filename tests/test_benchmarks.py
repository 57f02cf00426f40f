"""The benchmark command and the demo keep working (tiny sizes; no timings are asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_python_m_benchmarks_quick_writes_results(tmp_path):
    output = tmp_path / "RESULTS.md"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--threads", "1", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    text = output.read_text()
    for section in (
        "## ops",
        "## augment",
        "## surgery",
        "## models",
        "## optim",
        "## alibi",
        "## compile",
    ):
        assert section in text
    assert "Machine:" in text and "|---|" in text


def test_unknown_benchmark_is_refused():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "nonesuch"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 2 and "unknown benchmark" in run.stderr


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path, capsys):
    from benchmarks import demo

    plot = tmp_path / "plot.png"
    assert (
        demo.main(["--epochs", "1", "--no-progress", "--train-limit", "256", "--output", str(plot)])
        == 0
    )
    assert plot.stat().st_size > 0
    table = capsys.readouterr().out
    assert "training time (s)" in table and "total wall-clock (s)" in table


def test_demo_table_says_what_each_time_is():
    """Training time excludes the evaluation passes; the total wall-clock of the run is shown
    beside it (issue 13 point 10: a column called wall-clock that left out evaluation)."""
    from benchmarks.demo import RunResult, report

    base = RunResult("baseline", [10.0, 20.0], [0.5, 0.9], images=1000, train_seconds=20.0)
    base.total_seconds = 50.0
    fast = RunResult("recipe", [8.0, 15.0], [0.9, 0.95], images=900, train_seconds=15.0)
    fast.total_seconds = 40.0
    lines = report(base, fast).splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    assert header[:3] == ["run", "training time (s)", "total wall-clock (s)"]
    assert "wall-clock (s)" not in header[1]
    rows = {r.split("|")[0].strip(): [c.strip() for c in r.split("|")] for r in lines[2:4]}
    assert rows["baseline"][1:4] == ["20.0", "50.0", "50"]  # images/s over training time
    assert rows["recipe"][1:3] == ["15.0", "40.0"]
    text = "\n".join(lines)
    assert "2 + 2 evaluation passes" in text and "2.50x sooner" in text
