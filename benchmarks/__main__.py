"""Time this library against its peers (Composer, timm, kornia, torchvision) on this machine.

    python -m benchmarks                  # every benchmark, full sizes -> benchmarks/RESULTS.md
    python -m benchmarks ops augment      # chosen ones: their sections of RESULTS.md are replaced
    python -m benchmarks --quick          # a smoke run on tiny sizes -> benchmarks/out/
    python -m benchmarks --device cuda    # where a GPU is present

Install the peers first with ``make peers`` (into ``.peers/``, pinned in
``benchmarks/peers.txt``); a missing peer leaves its column empty and each table says so.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import re
import shlex
import sys
import textwrap
import time
from pathlib import Path

import torch

from benchmarks._harness import PEER_MODULES, machine_description, missing_peers

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
QUICK_RESULTS = HERE / "out" / "RESULTS-quick.md"

MODULES = {
    "ops": "benchmarks.ops",
    "augment": "benchmarks.augment",
    "surgery": "benchmarks.surgery",
    "models": "benchmarks.models",
    "optim": "benchmarks.optim",
    "alibi": "benchmarks.alibi_extrapolation",
    "compile": "benchmarks.compile",
    "device": "benchmarks.device",
    "methods": "benchmarks.methods",
}

# The order of RESULTS.md's sections: the benchmarks, then the GPU check's (written by
# `make gpu-check`, benchmarks/gpu_check.py, not by this command).
SECTION_ORDER = [*MODULES, "gpu_check"]

# What each benchmark measures (the module docstrings have the details).
MEASURES = {
    "ops": "batch and label ops (MixUp, CutMix, Cutout, blur, ...) and compute_ema: time per "
    "call and the fraction of the machine's copy bandwidth reached, against Composer, timm, "
    "torchvision and kornia",
    "augment": "AugMix and RandAugment: PIL images per second on one core against Composer, "
    "timm and torchvision; the batched tensor versions against torchvision v2 and kornia",
    "surgery": "the model-surgery engine: replacing every BatchNorm2d of torchvision ResNets "
    "(and of a 2,000-block model) with an optimizer kept consistent, against Composer's",
    "models": "training-step time of each vision model transform (BlurPool, SE, ghost BN, "
    "stochastic depth, ...) over the untransformed model, ours next to Composer's",
    "optim": "SAM steps and gradient clipping per call, against Composer",
    "alibi": "ALiBi length extrapolation: a tiny GPT-2 trained at length 64, its loss at "
    "64/128/256 with learned positions and with apply_alibi (quality, and step time)",
    "compile": "torch.compile on every transformed model and per-step op: graph breaks, "
    "recompiles, compile time, eager vs compiled steps/s",
    "methods": "what every method costs a training step: its overhead against the same step "
    "with no method, on a ResNet-18 and a small GPT-2 (the methods index reads these)",
    "device": "what each per-step op would cost on an accelerator, counted on meta tensors: "
    "kernel launches, host syncs and bytes moved over the op's minimum, ours beside the "
    "peers' (no GPU needed; the launch and sync counts are pinned by the tests)",
}

HOW_TO_READ = """\
how to read the tables:
  Every candidate of a table is timed in the same process, interleaved (A, B, C, A, B, C, ...)
  so that the machine's drift hits all of them alike. Each figure is printed as
  "median (min-max)" over the repeats. Ratios are peer time / our time, paired repeat by
  repeat: above 1 we are faster, below 1 slower. Overheads are relative to the plain model
  or op. Timings mean little on a machine busy with other work; --quick runs are smoke tests
  whose figures mean nothing.

output:
  A full-size run writes benchmarks/RESULTS.md (the tracked results): all of it, or only the
  sections of the benchmarks named. --quick writes benchmarks/out/RESULTS-quick.md and never
  the tracked file. --output PATH writes a whole file there instead.
"""


def _parser() -> argparse.ArgumentParser:
    benchmarks = "\n".join(f"  {name:<9} {text}" for name, text in MEASURES.items())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__.splitlines()[0],
        epilog=f"benchmarks:\n{_wrap(benchmarks)}\n\n{HOW_TO_READ}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(MODULES)}",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and few repeats, a few seconds each: checks that everything runs "
        f"(written to {QUICK_RESULTS.relative_to(HERE.parent)})",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="markdown file to write whole (default: benchmarks/RESULTS.md, whose sections "
        "not run are kept; with --quick: benchmarks/out/RESULTS-quick.md)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all cores)"
    )
    parser.add_argument(
        "--note",
        default="",
        help="a sentence recorded with each section, e.g. what else the machine was doing",
    )
    return parser


def _wrap(text: str, width: int = 96) -> str:
    """Wrap each ``  name  description`` line with its continuation under the description."""
    lines = []
    for line in text.splitlines():
        lines.extend(textwrap.wrap(line, width, subsequent_indent=" " * 12))
    return "\n".join(lines)


HEADER = """\
# Benchmark results

Written by `python -m benchmarks` (see `python -m benchmarks --help`). Each section says when,
on which machine and with which command it was measured; sections of different runs are not
comparable with each other.

Every candidate of a table is timed interleaved with the others in one process. Each figure is
`median (min–max)` over the repeats; ratios are peer time / our time (above 1: we are faster),
paired repeat by repeat. Sections measured before the spread was recorded, and figures derived
by subtracting one timing from another (the clipping table's), give medians only.
"""

_SECTION = re.compile(r"^## (\w+)\s*$", re.MULTILINE)


def _sections(text: str) -> dict[str, str]:
    """The ``## name`` sections of a results file, each with its heading."""
    starts = list(_SECTION.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)] * bool(starts)
    return {
        m.group(1): text[m.start() : end].rstrip() + "\n"
        for m, end in zip(starts, ends, strict=True)
    }


def merge_results(previous: str, sections: dict[str, str]) -> str:
    """A results file: the header, then ``sections`` in place of those of ``previous`` with the
    same names, the other sections of ``previous`` kept, in the order of :data:`SECTION_ORDER`."""
    merged = {**_sections(previous), **sections}
    ordered = [merged[n] for n in SECTION_ORDER if n in merged]
    ordered += [text for n, text in merged.items() if n not in SECTION_ORDER]
    return "\n".join([HEADER, *ordered])


def _output(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[Path, bool]:
    """Where to write, and whether to keep the sections of that file that are not run."""
    if args.output is None:
        return (QUICK_RESULTS, False) if args.quick else (RESULTS, True)
    if args.quick and args.output.resolve() == RESULTS:
        parser.error(
            "--quick figures are smoke runs and never go to benchmarks/RESULTS.md; "
            "drop --output or choose another file"
        )
    return args.output, False


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    unknown = [n for n in args.names if n not in MODULES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    names = args.names or list(MODULES)
    output, merge = _output(args, parser)

    started = time.perf_counter()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = list(sys.argv[1:] if argv is None else argv)
    if "--note" in shown:  # the note is recorded once, after the machine
        del shown[shown.index("--note") : shown.index("--note") + 2]
    shown = [a for a in shown if not a.startswith("--note=")]
    command = " ".join(["python -m benchmarks", *map(shlex.quote, shown)])
    absent = missing_peers(list(PEER_MODULES))
    measured = (
        f"_Measured {stamp} with `{command}`. Machine: {machine_description()}; "
        f"device: {args.device}. "
        + (f"Peers missing: {', '.join(absent)}." if absent else "All peers present.")
        + (f" {args.note.strip()}" if args.note.strip() else "")
        + "_"
    )
    print(measured, end="\n\n", flush=True)
    kept = output.read_text() if merge and output.exists() else ""
    sections = {}
    for name in names:
        module = importlib.import_module(MODULES[name])
        t0 = time.perf_counter()
        tables = module.run(quick=args.quick, device=args.device)
        tail = f"_{name}: {time.perf_counter() - t0:.0f} s_\n"
        text = "\n".join([f"## {name}", "", measured, "", *(t.markdown() for t in tables), tail])
        print(text, flush=True)
        sections[name] = text
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(merge_results(kept, sections))
    print(f"wrote {output} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
