"""Run every benchmark (or chosen ones) and write ``benchmarks/RESULTS.md``.

    python -m benchmarks                 # everything, full sizes
    python -m benchmarks ops augment     # chosen modules
    python -m benchmarks --quick         # a short pass on tiny sizes
    python -m benchmarks --device cuda   # where a GPU is present

Peers (Composer, timm, kornia) are used when ``.peers/`` holds them
(``../shared/tools/install_peers.sh .peers``); each table says which were missing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import sys
import time
from pathlib import Path

import torch

from benchmarks._harness import PEER_MODULES, machine_description, missing_peers

MODULES = {
    "ops": "benchmarks.ops",
    "augment": "benchmarks.augment",
    "surgery": "benchmarks.surgery",
    "models": "benchmarks.models",
    "optim": "benchmarks.optim",
    "alibi": "benchmarks.alibi_extrapolation",
    "compile": "benchmarks.compile",
    "device": "benchmarks.device",
}
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(MODULES)}",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds each")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS,
        help="markdown file to write (default: benchmarks/RESULTS.md)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all cores)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    unknown = [n for n in args.names if n not in MODULES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    names = args.names or list(MODULES)

    started = time.perf_counter()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        "# Benchmark results",
        "",
        f"Measured {stamp} with `python -m benchmarks {' '.join(sys.argv[1:] if argv is None else argv)}`.",
        "",
        f"Machine: {machine_description()}; device: {args.device}.",
        "",
        "Ratios are peer time / our time (above 1: we are faster); candidates of one table are",
        "timed interleaved in one process and medians of the repeats are reported.",
    ]
    absent = missing_peers(list(PEER_MODULES))
    header.append("")
    header.append(f"Peers missing: {', '.join(absent)}." if absent else "All peers present.")
    sections = ["\n".join(header) + "\n"]
    print(sections[0])
    for name in names:
        module = importlib.import_module(MODULES[name])
        t0 = time.perf_counter()
        tables = module.run(quick=args.quick, device=args.device)
        section = [f"## {name}", ""] + [t.markdown() for t in tables]
        section.append(f"_{name}: {time.perf_counter() - t0:.0f} s_\n")
        text = "\n".join(section)
        print(text, flush=True)
        sections.append(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(sections))
    print(f"wrote {args.output} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
