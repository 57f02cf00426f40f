"""The state of a GPU check run (:mod:`benchmarks.gpu_check`): sizes, time estimates, the budget,
and what each section found."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks._harness import Table

ESTIMATES = {"predicted": 15, "tests": 180, "limits": 5, "ops": 20, "peers": 60, "resnet50": 90}
COMPILE_ESTIMATE = 45  # seconds per further compiled transform row of the resnet50 section


Step = Callable[[], None]


@dataclass(frozen=True)
class Sizes:
    copy_bytes: int
    matmul: int
    op_repeats: int
    op_number: int
    aug_size: int
    aug_batch: int
    aug_repeats: int
    step_batch: int
    step_size: int
    step_repeats: int
    backend: str
    transforms: int  # model transforms timed at most (each compiles its own graph)


FULL = Sizes(2**31, 8192, 15, 5, 224, 256, 5, 128, 224, 10, "inductor", 7)
DRY = Sizes(8 * 2**20, 128, 2, 1, 32, 4, 1, 2, 32, 1, "eager", 1)


class Uncounted:
    """The ``mode`` argument of the counter's steps, outside the counter: counts nothing."""

    @staticmethod
    def uncounted() -> contextlib.nullcontext:
        return contextlib.nullcontext()


@dataclass
class Check:
    """The run's state: where, how big, the time left, and what each section found."""

    device: str
    dry_run: bool
    budget_s: float
    started: float = field(default_factory=time.perf_counter)
    sections: dict[str, dict] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    summary: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def sizes(self) -> Sizes:
        return DRY if self.dry_run else FULL

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def fits(self, estimate: float) -> bool:
        return self.dry_run or self.left() >= estimate

    def section(self, name: str, run: Callable[[Check], dict]) -> None:
        if not self.fits(ESTIMATES[name]):
            why = f"skipped: {self.left():.0f} s left of the budget, the section takes ~{ESTIMATES[name]} s"
            self.sections[name] = {"status": "skipped", "reason": why}
            self.summary.append((name, "skipped", why))
            return
        t0 = time.perf_counter()
        try:
            found = {"status": "ok", **run(self)}
        except Exception as exc:  # reported, and the other sections still run
            found = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}
            self.summary.append((name, "FAILED", found["error"][:120]))
        found["seconds"] = round(time.perf_counter() - t0, 1)
        self.sections[name] = found
        print(f"[gpu_check] {name}: {found['status']} in {found['seconds']} s", flush=True)


def row_failed(check: Check, table: Table, what: str, exc: Exception) -> None:
    """One row (or peer table) that failed: noted in its table and the summary; the rest runs."""
    error = f"{type(exc).__name__}: {exc}"[:300]
    table.notes.append(f"{what} FAILED: {error}")
    check.summary.append((what, "FAILED", error[:120]))


def rows(table: Table) -> list[dict]:
    """A table's rows as JSON objects (a timing as its median)."""
    cell = lambda v: float(v) if isinstance(v, float) else v  # noqa: E731
    return [dict(zip(table.columns, map(cell, row), strict=True)) for row in table.rows]
