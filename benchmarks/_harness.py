"""Shared benchmark machinery: peers, interleaved timing with medians, tables.

Every benchmark module exposes ``run(*, quick: bool, device: str) -> list[Table]``;
``python -m benchmarks`` runs them and writes ``benchmarks/RESULTS.md``, and
``python -m benchmarks.<name>`` runs one (its command line is :func:`main_for`).

Timing rule: the candidates of one comparison are timed in the same process, interleaved
(candidate A, B, C, A, B, C, ...) so that drift in the machine's speed hits all of them alike.
Each time is a :class:`Timing`: a float worth the median of the repeats that keeps the repeats,
so that tables print every figure as ``median (min–max)``. A ratio of two timings of one
comparison is taken repeat by repeat (A and B of the same round), then summarised the same way.
Ratios are ``peer_time / our_time`` (> 1: we are faster).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = ROOT / ".peers"

# The peers live in .peers/ (`make peers`, pinned in benchmarks/peers.txt); appended, not
# prepended, so the project's own environment always wins over anything installed there.
if PEERS_DIR.is_dir() and str(PEERS_DIR) not in sys.path:
    sys.path.append(str(PEERS_DIR))

PEER_MODULES = {
    "composer": "composer.functional",
    "timm": "timm",
    "kornia": "kornia",
    "torchvision": "torchvision.transforms.v2",
}


def peer(name: str):
    """The peer's module, or None when it is not importable here."""
    try:
        return importlib.import_module(PEER_MODULES.get(name, name))
    except Exception:
        return None


def missing_peers(names: list[str]) -> list[str]:
    return [n for n in names if peer(n) is None]


def synchronize(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class Timing(float):
    """A measured figure: a float worth the median of its repeats, which it keeps (in order).

    Scaling by a number (``1e3 * t``, ``t / n``, ``n / t``) maps every repeat; dividing two
    timings of the same comparison (``run``: one :func:`time_interleaved` call) divides them
    repeat by repeat, so a ratio's spread is that of paired measurements. Anything else gives a
    plain float. :meth:`Table.markdown` prints a timing as ``median (min–max)``.
    """

    samples: tuple[float, ...]
    run: object

    def __new__(cls, samples: Iterable[float], run: object = None) -> Timing:
        values = tuple(float(s) for s in samples)
        timing = super().__new__(cls, statistics.median(values))
        timing.samples = values
        timing.run = run
        return timing

    @property
    def spread(self) -> tuple[float, float, float]:
        """``(min, median, max)`` of the repeats."""
        return min(self.samples), float(self), max(self.samples)

    def _map(self, fn: Callable[[float], float]) -> Timing:
        return Timing((fn(s) for s in self.samples), self.run)

    def __mul__(self, other: object) -> float:
        if isinstance(other, Timing):
            return float(self) * float(other)
        if isinstance(other, (int, float)):
            return self._map(lambda s: s * other)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> float:
        if isinstance(other, Timing):
            if self.run is None or other.run is not self.run:
                return float(self) / float(other)
            pairs = zip(self.samples, other.samples, strict=True)
            return Timing((a / b for a, b in pairs), self.run)
        if isinstance(other, (int, float)):
            return self._map(lambda s: s / other)
        return NotImplemented

    def __rtruediv__(self, other: object) -> float:
        if isinstance(other, (int, float)) and not isinstance(other, Timing):
            return self._map(lambda s: other / s)
        return NotImplemented


def time_interleaved(
    candidates: dict[str, Callable[[], object]],
    *,
    repeats: int = 7,
    number: int = 1,
    warmup: int = 1,
    device: str = "cpu",
    setup: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Seconds per call of each candidate (median and repeats), timed interleaved in one process.

    With ``setup``, every timed call gets a fresh ``setup()`` result as its only argument (built
    outside the timed region): for operations that consume their input, such as model surgery.
    ``clock`` is wall time by default; ``time.process_time`` counts only the CPU time this
    process was given, which on a machine shared with other jobs measures the work itself
    (CPU-only candidates: a device's time is not the process's).
    """

    for fn in candidates.values():
        for _ in range(warmup):
            fn(setup()) if setup is not None else fn()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            fn = candidates[name]
            total = 0.0
            for _ in range(number):
                arg = setup() if setup is not None else None
                synchronize(device)
                start = clock()
                fn(arg) if setup is not None else fn()
                synchronize(device)
                total += clock() - start
            samples[name].append(total / number)
    run = object()  # this comparison: its timings divide repeat by repeat
    return {name: Timing(v, run) for name, v in samples.items()}


def copy_bandwidth(nbytes: int = 256 * 2**20, device: str = "cpu") -> float:
    """The machine's copy bandwidth in bytes/s (bytes read + bytes written per second)."""
    n = nbytes // 4
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    t = time_interleaved({"copy": lambda: dst.copy_(src)}, repeats=7, device=device)["copy"]
    return float(2 * src.numel() * src.element_size() / t)  # the median, a constant


@dataclass
class Table:
    """A titled markdown table plus free-form notes (missing peers, targets)."""

    title: str
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *row: object) -> None:
        self.rows.append(list(row))

    def markdown(self) -> str:
        def fmt(v: object) -> str:
            if isinstance(v, Timing) and len(v.samples) > 1:
                low, median, high = v.spread
                return f"{fmt(median)} ({fmt(low)}–{fmt(high)})"
            if isinstance(v, float):
                return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
            return "—" if v is None else str(v)

        lines = [f"### {self.title}", ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
        if self.notes:
            lines.append("")
            lines.extend(f"- {n}" for n in self.notes)
        return "\n".join(lines) + "\n"


def ratio(peer_time: float | None, ours: float) -> float | None:
    """How many times faster we are than the peer (None when the peer is missing); repeat by
    repeat when both are :class:`Timing`s of one comparison."""
    return None if peer_time is None else peer_time / ours


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_description() -> str:
    cpu = cpu_model()
    parts = [
        f"CPU: {cpu}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}",
        f"Python {platform.python_version()}, torch {torch.__version__}",
    ]
    if torch.cuda.is_available():
        parts.append(f"GPU: {torch.cuda.get_device_name()}")
    return "; ".join(parts)


def main_for(
    run: Callable[..., list[Table]],
    doc: str | None,
    *,
    device_help: str = "cpu or cuda",
    add_arguments: Callable[[argparse.ArgumentParser], object] | None = None,
    argv: Sequence[str] | None = None,
) -> None:
    """The command line of one benchmark module: ``--quick`` and ``--device``, plus what
    ``add_arguments`` adds (passed on to ``run`` by name); torch threads capped at 2; prints the
    machine, then each table's markdown. ``doc``'s first line describes the command."""
    description = doc.strip().splitlines()[0] if doc else None
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--device", default="cpu", help=device_help)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    print(machine_description(), end="\n\n")
    for table in run(**vars(args)):
        print(table.markdown())
