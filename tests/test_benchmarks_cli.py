"""`python -m benchmarks` for a newcomer (issue 22, item 4): `--help` says what each benchmark
measures and how to read a ratio, `--quick` never writes the tracked RESULTS.md, a run of some
benchmarks replaces only their sections, and every figure carries its spread."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from benchmarks import __main__ as cli
from benchmarks._harness import Table, Timing, ratio, time_interleaved

ROOT = Path(__file__).resolve().parent.parent


def _help() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    return out.getvalue()


def test_help_says_what_each_benchmark_measures_and_what_ratios_mean():
    text = _help()
    for name in cli.MODULES:
        line = next((ln for ln in text.splitlines() if ln.startswith(f"  {name} ")), None)
        assert line is not None and len(line.split()) > 5, f"{name} is not described:\n{text}"
    assert "peer time / our time" in text and "above 1 we are faster" in text
    assert "median (min-max)" in text
    assert "make peers" in cli.__doc__ and "../shared" not in text + (cli.__doc__ or "")


def _output(*argv: str) -> tuple[Path, bool]:
    parser = cli._parser()
    return cli._output(parser.parse_args(list(argv)), parser)


def test_quick_runs_never_write_the_tracked_results():
    path, merge = _output("--quick")
    assert path != cli.RESULTS and path.parent == ROOT / "benchmarks" / "out" and not merge
    assert "benchmarks/out/" in (ROOT / ".gitignore").read_text().split()
    assert _output("ops", "--quick")[0] == path
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exit_info:
        cli.main(["--quick", "--output", str(cli.RESULTS)])
    assert exit_info.value.code == 2
    assert _output() == (cli.RESULTS, True)  # a full-size run updates the tracked file


def test_a_run_of_some_benchmarks_replaces_only_their_sections():
    previous = cli.RESULTS.read_text()
    old = cli._sections(previous)
    assert {"ops", "augment", "surgery"} <= set(old)
    new_ops = "## ops\n\n_Measured now._\n\n### a table\n"
    merged = cli.merge_results(previous, {"ops": new_ops})
    sections = cli._sections(merged)
    assert sections["ops"] == new_ops
    assert all(sections[name] == text for name, text in old.items() if name != "ops")
    assert list(sections) == [n for n in cli.SECTION_ORDER if n in sections]
    assert merged.startswith(cli.HEADER)
    assert cli.merge_results(merged, {"ops": new_ops}) == merged  # idempotent


def test_timings_keep_their_spread_and_ratios_pair_repeats():
    fast = Timing([1.0, 2.0, 3.0], run="one comparison")
    slow = Timing([4.0, 2.0, 9.0], run="one comparison")
    assert float(fast) == 2.0 and fast.spread == (1.0, 2.0, 3.0)
    assert (1e3 * fast).spread == (1e3, 2e3, 3e3) and (fast / 2).samples == (0.5, 1.0, 1.5)
    assert (6 / fast).samples == (6.0, 3.0, 2.0)
    speedup = ratio(slow, fast)  # repeat by repeat: 4/1, 2/2, 9/3
    assert isinstance(speedup, Timing) and speedup.spread == (1.0, 3.0, 4.0)
    other_run = Timing([1.0, 2.0, 3.0], run="another comparison")
    assert type(slow / other_run) is float  # unrelated repeats are not paired
    table = Table("t", ["what", "s", "×", "peer"])
    table.add("row", fast, speedup, None)
    assert "| row | 2 (1–3) | 3 (1–4) | — |" in table.markdown()


def test_time_interleaved_returns_timings_of_one_comparison():
    times = time_interleaved({"a": lambda: None, "b": lambda: None}, repeats=3, warmup=0)
    assert all(isinstance(t, Timing) and len(t.samples) == 3 for t in times.values())
    assert isinstance(times["a"] / times["b"], Timing)


def test_tracked_results_record_machine_date_and_command_for_each_section():
    text = cli.RESULTS.read_text()
    for name, section in cli._sections(text).items():
        assert re.search(r"_Measured \d{4}-\d\d-\d\d", section), f"{name}: no date"
        assert "Machine:" in section or "CPU" in section, f"{name}: no machine"
