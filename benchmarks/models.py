"""Training-step cost of the vision model transforms, ours next to Composer's.

For each transform, three copies of the same network are timed interleaved (forward + backward
of one batch): the untouched baseline, the network after our transform and after Composer's.
The table gives the step times, each transform's overhead over the baseline (negative: a
speed-up) and ``composer / ours``, the ratio of step times (> 1: ours is faster).

Full run: torchvision ResNet-50, batch 8 at 64x64. ``--quick``: a one-block-per-stage
Bottleneck ResNet, batch 4 at 32x32, one repeat (a smoke run: its figures mean nothing).
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable

import torch
import torch._dynamo
import torchvision
from torch import nn

import functional as F
from benchmarks._harness import Table, machine_description, main_for, peer, ratio, time_interleaved

__all__ = ["run"]

Apply = Callable[[nn.Module], object]


def _ours(ghost: int) -> dict[str, Apply]:
    return {
        "blurpool": F.apply_blurpool,
        "channels_last": F.apply_channels_last,
        "factorization": F.apply_factorization,
        "squeeze_excite": F.apply_se,
        "ghost_batchnorm": lambda m: F.apply_ghost_batchnorm(m, ghost_batch_size=ghost),
        "stochastic_depth": lambda m: F.apply_stochastic_depth(
            m, "block", "ResNetBottleneck", drop_rate=0.2, seed=0
        ),
        "weight_standardization": F.apply_weight_standardization,
    }


def _composer(cf, ghost: int) -> dict[str, Apply]:
    return {
        "blurpool": cf.apply_blurpool,
        "channels_last": cf.apply_channels_last,
        "factorization": cf.apply_factorization,
        "squeeze_excite": cf.apply_squeeze_excite,
        "ghost_batchnorm": lambda m: cf.apply_ghost_batchnorm(m, ghost_batch_size=ghost),
        "stochastic_depth": lambda m: cf.apply_stochastic_depth(
            m, target_layer_name="ResNetBottleneck", stochastic_method="block", drop_rate=0.2
        ),
        "weight_standardization": cf.apply_weight_standardization,
    }


def _model(quick: bool) -> nn.Module:
    if quick:
        return torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1])
    return torchvision.models.resnet50()


def _step(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).float().mean().backward()

    return step


def _overhead(t: float | None, base: float) -> str | None:
    return None if t is None else f"{100 * (t / base - 1):+.1f}%"


def run(*, quick: bool, device: str) -> list[Table]:
    # One CPU thread: on a shared machine two OpenMP threads fighting other jobs make step
    # times swing tenfold, while one thread gives stable ratios. Restored on the way out.
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        return [
            *_run(quick=quick, device=device),
            _stochastic_depth_paths(quick=quick, device=device),
        ]
    finally:
        torch.set_num_threads(threads)


def _run(*, quick: bool, device: str) -> list[Table]:
    torch.manual_seed(0)
    batch, size, repeats = (4, 32, 1) if quick else (8, 64, 7)
    cf = peer("composer")
    base_model = _model(quick).to(device).train()
    x = torch.randn(batch, 3, size, size, device=device)
    name = "Bottleneck ResNet [1,1,1,1]" if quick else "ResNet-50"
    table = Table(
        f"Training step (forward + backward) of {name}, batch {batch} at {size}x{size}, {device}",
        [
            "transform",
            "baseline ms",
            "ours ms",
            "composer ms",
            "our overhead",
            "composer overhead",
            "composer / ours",
        ],
    )
    ours = _ours(batch // 2)
    theirs = _composer(cf, batch // 2) if cf is not None else {}
    for transform, apply in ours.items():
        torch.manual_seed(0)
        candidates = {"baseline": _step(base_model, x)}
        ours_model = copy.deepcopy(base_model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            apply(ours_model)
        inputs = x.to(memory_format=torch.channels_last) if transform == "channels_last" else x
        candidates["ours"] = _step(ours_model, inputs)
        if transform in theirs:
            composer_model = copy.deepcopy(base_model)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs[transform](composer_model)
            candidates["composer"] = _step(composer_model, inputs)
        times = time_interleaved(candidates, repeats=repeats, warmup=1, device=device)
        base, mine, other = times["baseline"], times["ours"], times.get("composer")
        table.add(
            transform,
            1e3 * base,
            1e3 * mine,
            None if other is None else 1e3 * other,
            _overhead(mine, base),
            _overhead(other, base),
            ratio(other, mine),
        )
    table.notes.append(machine_description())
    table.notes.append(
        "Overheads are relative to the untouched network timed in the same interleaved run; "
        "channels_last and factorization are expected to be speed-ups (negative overheads), the "
        "others cost time for accuracy. composer / ours > 1 means ours is faster."
    )
    table.notes.append(
        "stochastic_depth ('block', linear rates up to 0.2): both skip dropped branches. Ours "
        "draws each decision on the host from its own generator before the branch runs (no "
        "device sync); Composer draws on the device and reads the value back (one sync per block). "
        "The saving is random (about 10% of the blocks dropped per step on average), so this row "
        "is noisier than the others."
    )
    table.notes.append(
        "factorization: ours factorizes the pretrained weights (truncated SVD); Composer "
        "re-initialises the factors randomly. Step costs are the same architecture."
    )
    table.notes.append(
        "Not timed here: the low-precision LayerNorm/GroupNorm transforms (ResNet-50 has neither "
        "norm) and freeze_layers (a schedule, not an architecture change)."
    )
    if quick:
        table.notes.append(
            "--quick: a smoke run on a tiny network, one repeat; the figures mean nothing."
        )
    if cf is None:
        table.notes.append("Composer is not installed here: its columns are empty.")
    return [table]


def _train_step(model: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor], x, y, opt):
    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(forward(x).float(), y).backward()
        opt.step()

    return step


def _stochastic_depth_paths(*, quick: bool, device: str) -> Table:
    """Stochastic depth's two decision paths, eager and compiled, in one interleaved run.

    Eager 'block' with ``skip_dropped=True`` decides on the host and skips dropped branches;
    ``skip_dropped=False`` (and every compiled model) multiplies each branch by a 0-d device
    decision; 'sample' multiplies by a per-sample mask. Training step = forward, backward,
    SGD step, fresh decisions each step.
    """
    torch.manual_seed(0)
    batch, size, repeats = (4, 32, 1) if quick else (16, 64, 9)
    rate = 0.5
    backend = "inductor"
    base = torchvision.models.resnet18(num_classes=10).to(device).train()
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    variants: dict[str, nn.Module] = {"baseline": base}
    for name, method, skip in [
        ("block, skip dropped", "block", True),
        ("block, device decision", "block", False),
        ("sample", "sample", True),
    ]:
        model = copy.deepcopy(base)
        F.apply_stochastic_depth(
            model, method, "ResNetBasicBlock", drop_rate=rate, seed=0, skip_dropped=skip
        )
        variants[name] = model
    candidates: dict[str, Callable[[], None]] = {}
    compile_seconds: dict[str, float] = {}
    torch._dynamo.reset()
    for name, model in variants.items():
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        candidates[f"eager: {name}"] = _train_step(model, model, x, y, opt)
        if quick or name == "block, skip dropped":
            continue  # compiled, it takes the device-decision path: the next row
        compiled = torch.compile(copy.deepcopy(model), backend=backend, fullgraph=True)
        copt = torch.optim.SGD(compiled.parameters(), lr=1e-3, momentum=0.9)
        step = _train_step(compiled, compiled, x, y, copt)
        start = time.perf_counter()
        step()
        compile_seconds[name] = time.perf_counter() - start
        candidates[f"compiled ({backend}): {name}"] = step
    times = time_interleaved(candidates, repeats=repeats, warmup=1, device=device)
    table = Table(
        f"Stochastic depth decision paths: training step of ResNet-18 (linear rates up to "
        f"{rate}), batch {batch} at {size}x{size}, {device}",
        ["variant", "step ms", "vs eager baseline", "first-call (compile) s"],
    )
    eager_base = times["eager: baseline"]
    for name, t in times.items():
        compiled_name = name.split(": ", 1)[1] if name.startswith("compiled") else None
        table.add(
            name,
            1e3 * t,
            f"{100 * (t / eager_base - 1):+.1f}%",
            None if compiled_name is None else compile_seconds[compiled_name],
        )
    table.notes.append(machine_description())
    table.notes.append(
        "Eager: 'block, skip dropped' (the default) saves the forward and backward of dropped "
        "branches (about a quarter of the blocks per step at these rates); the device decision "
        "runs every branch and multiplies it by 0 or 1/(1-p). Compiled models always use the "
        "device decision (a host decision would be traced once and replayed)."
    )
    if quick:
        table.notes.append("--quick: eager rows only, one repeat; the figures mean nothing.")
    return table


if __name__ == "__main__":
    main_for(run, __doc__)
