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
