"""`make gpu-check` cannot rot: its dry run (same code paths, tiny sizes, no GPU) runs here, and
its time budget holds by construction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_dry_run_runs_every_section_and_writes_its_report(tmp_path):
    results = ROOT / "benchmarks" / "RESULTS.md"
    before = results.read_text()
    args = ["--device", "cpu", "--dry-run", "--output-dir", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_check-dry.json").read_text())
    assert {n: s["status"] for n, s in data["sections"].items()} == dict.fromkeys(
        gpu_check.SECTIONS, "ok"
    )
    assert data["dry_run"] and data["versions"]["torch"] == torch.__version__
    predicted = {r["op"]: r for r in data["sections"]["predicted"]["rows"]}
    assert set(gpu_check.OPS) <= set(predicted) and predicted["blur_2d"]["syncs"] == 0
    assert [r["op"] for r in data["sections"]["ops"]["rows"]] == gpu_check.OPS
    text = (tmp_path / "gpu_check-dry.md").read_text()
    assert text.startswith("## gpu_check") and "dry run" in text
    assert run.stdout.rstrip().splitlines()[-1].startswith("resnet50 step")  # the table is last
    assert results.read_text() == before  # a dry run never writes the tracked results


def test_the_sections_fit_the_budget_by_construction():
    """The estimates leave room under the default budget (450 s, inside 8 minutes) for at least
    one compiled model transform; past the budget a section is skipped and says so."""
    assert sum(gpu_check.ESTIMATES.values()) + gpu_check.COMPILE_ESTIMATE <= 450
    assert list(gpu_check.ESTIMATES) == list(gpu_check.SECTIONS)
    check = gpu_check.Check("cpu", dry_run=False, budget_s=0.0)
    check.section("limits", gpu_check.SECTIONS["limits"])
    assert check.sections["limits"]["status"] == "skipped"
    assert "budget" in check.sections["limits"]["reason"]


def test_a_full_run_needs_cuda():
    with pytest.raises(SystemExit):
        gpu_check.main(["--device", "cpu"])  # a full run measures a GPU
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            gpu_check.main(["--device", "cuda"])
