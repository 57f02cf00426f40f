"""Batch and label ops and ``compute_ema`` against Composer, timm, torchvision and kornia.

Image ops run on a 64x3x224x224 float32 batch (``--quick``: 4x3x32x32); ``compute_ema`` on a
torchvision ResNet-50 (``--quick``: a MobileNetV3-small). Every row is timed interleaved with its peers in
one process (median of the repeats); "× faster" is peer time / our time. "% copy bw" is the
bandwidth the op reaches, counting the bytes it must move at the least (read the input once,
write the output once; EMA: read both models, write the EMA), as a fraction of this machine's
``copy_`` bandwidth.

Run: ``python -m benchmarks.ops [--quick] [--device cpu|cuda]``.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable

import torch

import functional as F
from benchmarks._harness import (
    Table,
    copy_bandwidth,
    machine_description,
    main_for,
    missing_peers,
    peer,
    ratio,
    time_interleaved,
)

N_CLASSES = 1000


def _peer_attr(module: str, name: str) -> Callable | None:
    """``module.name`` of a peer, or None when the peer is not importable."""
    root = peer(module.split(".")[0])
    if root is None:
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _add_rows(
    table: Table,
    op: str,
    candidates: dict[str, Callable[[], object]],
    nbytes: int,
    bandwidth: float,
    *,
    repeats: int,
    device: str,
) -> dict[str, float]:
    """Time ``candidates`` (first one: ours) interleaved and add one row per candidate.

    A peer that fails on this input or device is left out, with a note saying why.
    """
    working = {}
    for name, fn in candidates.items():
        try:
            fn()
        except Exception as exc:  # a peer's limitation, reported rather than fatal
            if name == "ours":
                raise
            table.notes.append(f"{op}: {name} failed here ({type(exc).__name__}: {exc})"[:200])
        else:
            working[name] = fn
    times = time_interleaved(working, repeats=repeats, device=device)
    ours = times["ours"]
    for name, seconds in times.items():
        speedup = None if name == "ours" else ratio(seconds, ours)
        table.add(op, name, seconds * 1e3, speedup, 100 * nbytes / seconds / bandwidth)
    return times


def _image_ops(quick: bool, device: str, repeats: int, bandwidth: float) -> tuple[Table, list[str]]:
    dev = torch.device(device)
    shape = (4, 3, 32, 32) if quick else (64, 3, 224, 224)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=gen).to(dev)
    y = torch.randint(0, N_CLASSES, (shape[0],), generator=gen).to(dev)
    perm = torch.randperm(shape[0], generator=gen).to(dev)
    lam = 0.3
    lams = torch.rand(shape[0], generator=gen).to(dev)
    nbytes = 2 * x.numel() * x.element_size()
    table = Table(
        f"Image batch ops, {'x'.join(map(str, shape))} float32 on {device}",
        ["op", "implementation", "ms", "ours × faster", "% copy bw"],
    )
    verdicts: list[str] = []

    tv = peer("torchvision")
    kornia = peer("kornia")
    timm_mixup = _peer_attr("timm.data", "Mixup")
    timm_erasing = _peer_attr("timm.data.random_erasing", "RandomErasing")
    c_blur = _peer_attr("composer.algorithms.blurpool", "blur_2d")
    c_blurmax = _peer_attr("composer.algorithms.blurpool", "blurmax_pool2d")
    cf = peer("composer")

    def run(op: str, candidates: dict[str, Callable[[], object] | None], out_bytes: int = nbytes):
        present = {k: v for k, v in candidates.items() if v is not None}
        return _add_rows(table, op, present, out_bytes, bandwidth, repeats=repeats, device=device)

    # blur_2d: Composer's depthwise convolution; kornia's filter2d with the same zero-padded
    # 3x3 filter; torchvision's 3x3 Gaussian blur (reflect padding) as the nearest equivalent.
    kernel = torch.outer(torch.tensor([1.0, 2.0, 1.0]), torch.tensor([1.0, 2.0, 1.0])).to(dev) / 16
    times = run(
        "blur_2d, stride 1",
        {
            "ours": lambda: F.blur_2d(x),
            "Composer": c_blur and (lambda: c_blur(x)),
            "kornia filter2d": kornia
            and (lambda: kornia.filters.filter2d(x, kernel[None], "constant")),
            "torchvision gaussian_blur": tv
            and (lambda: tv.functional.gaussian_blur(x, [3, 3], [0.85, 0.85])),
        },
    )
    if "Composer" in times:
        verdicts.append(
            _verdict(
                "blur_2d ≥ 3× Composer",
                times["Composer"] / times["ours"] >= 3,
                times["Composer"] / times["ours"],
            )
        )
    half = (x.numel() + x.numel() // 4) * x.element_size()
    run(
        "blur_2d, stride 2",
        {
            "ours": lambda: F.blur_2d(x, stride=2),
            "Composer": c_blur and (lambda: c_blur(x, stride=2)),
            "kornia blur_pool2d": kornia and (lambda: kornia.filters.blur_pool2d(x, 3, stride=2)),
        },
        half,
    )
    per_channel = kernel.expand(shape[1], 1, 3, 3)
    run(
        "blur_2d, given (C,1,3,3) filter, stride 2",
        {
            "ours": lambda: F.blur_2d(x, 2, per_channel),
            "Composer": c_blur and (lambda: c_blur(x, stride=2, filter=per_channel)),
        },
        half,
    )
    run(
        "blurmax_pool2d, k=2",
        {
            "ours": lambda: F.blurmax_pool2d(x, 2),
            "Composer": c_blurmax and (lambda: c_blurmax(x, 2)),
            "kornia max_blur_pool2d": kornia
            and (lambda: kornia.filters.max_blur_pool2d(x, 3, stride=2, max_pool_size=2)),
        },
        half,
    )

    # MixUp. timm mixes in place: its time includes the clone a pure op needs.
    timm_mix = timm_mixup and timm_mixup(mixup_alpha=0.2, cutmix_alpha=0.0, num_classes=N_CLASSES)
    tv_mix = tv and tv.MixUp(alpha=0.2, num_classes=N_CLASSES)
    times = run(
        "mixup_batch",
        {
            "ours": lambda: F.mixup_batch(x, y, lam, N_CLASSES, perm),
            "Composer": cf and (lambda: cf.mixup_batch(x, y, mixing=lam, indices=perm)),
            "timm Mixup (+clone)": timm_mix and (lambda: timm_mix(x.clone(), y)),
            "torchvision MixUp": tv_mix and (lambda: tv_mix(x, y)),
            "torch.lerp(x, x[perm], λ)": lambda: torch.lerp(x, x[perm], lam),
        },
    )
    if "Composer" in times:
        speed = times["Composer"] / times["ours"]
        verdicts.append(_verdict("mixup_batch ≥ 1.3× Composer", speed >= 1.3, speed))
    slower = times["ours"] / times["torch.lerp(x, x[perm], λ)"]
    verdicts.append(
        _verdict(
            "mixup_batch within 1.3× of torch.lerp(x, x[perm], λ)",
            slower <= 1.3,
            slower,
            "ours ÷ lerp",
        )
    )
    run(
        "mixup_batch, per-sample λ",
        {
            "ours": lambda: F.mixup_batch(x, y, lams, N_CLASSES, perm),
            "torch.lerp(x, x[perm], λ[:, None, None, None])": lambda: torch.lerp(
                x, x[perm], lams.view(-1, 1, 1, 1)
            ),
        },
    )

    # CutMix with the same fixed centred box for ours and Composer (a square with symmetric
    # corners is the same region under both box conventions); timm and torchvision draw theirs.
    height, width = shape[-2:]
    box = (width // 4, height // 4, width - width // 4, height - height // 4)
    timm_cut = timm_mixup and timm_mixup(mixup_alpha=0.0, cutmix_alpha=1.0, num_classes=N_CLASSES)
    tv_cut = tv and tv.CutMix(alpha=1.0, num_classes=N_CLASSES)
    times = run(
        f"cutmix_batch ({box[2] - box[0]}x{box[3] - box[1]} centred box)",
        {
            "ours": lambda: F.cutmix_batch(x, y, N_CLASSES, indices=perm, bbox=box),
            "Composer": cf and (lambda: cf.cutmix_batch(x, y, bbox=box, indices=perm)),
            "timm Mixup cutmix (+clone, random box)": timm_cut and (lambda: timm_cut(x.clone(), y)),
            "torchvision CutMix (random box)": tv_cut and (lambda: tv_cut(x, y)),
        },
    )
    if "Composer" in times:
        speed = times["Composer"] / times["ours"]
        verdicts.append(_no_slower("cutmix_batch", speed))

    # Cutout: one hole of half the shorter side. torchvision's RandomErasing erases one box
    # for the batch; timm's erases per sample, in place (+clone).
    side = min(height, width) // 2
    tv_erase = tv and tv.RandomErasing(p=1.0, scale=(0.25, 0.25), ratio=(1.0, 1.0), value=0)
    timm_erase = timm_erasing and timm_erasing(
        probability=1.0, min_area=0.25, max_area=0.25, mode="const", device=device
    )
    times = run(
        "cutout (1 hole)",
        {
            "ours": lambda: F.cutout(x, 1, side),
            "Composer": cf and (lambda: cf.cutout_batch(x, num_holes=1, length=0.5)),
            "torchvision RandomErasing": tv_erase and (lambda: tv_erase(x)),
        },
    )
    if "Composer" in times:
        speed = times["Composer"] / times["ours"]
        verdicts.append(_no_slower("cutout", speed))
    run(
        "cutout (1 hole per sample)",
        {
            "ours": lambda: F.cutout(x, 1, side, per_sample=True),
            "timm RandomErasing (+clone)": timm_erase and (lambda: timm_erase(x.clone())),
        },
    )

    kept = (height - int(0.15 * height)) * (width - int(0.15 * width)) / (height * width)
    times = run(
        "colout_batch (15% rows, 15% cols)",
        {
            "ours": lambda: F.colout_batch(x, 0.15, 0.15),
            "Composer": cf and (lambda: cf.colout_batch(x, 0.15, 0.15)),
        },
        int(nbytes / 2 * (1 + kept)),
    )
    if "Composer" in times:
        speed = times["Composer"] / times["ours"]
        verdicts.append(_no_slower("colout_batch", speed))
    return table, verdicts


def _float_pairs(model: torch.nn.Module, ema: torch.nn.Module) -> tuple[list, list]:
    ema_tensors, model_tensors = [], []
    for (_, e), (_, m) in zip(
        list(ema.named_parameters()) + list(ema.named_buffers()),
        list(model.named_parameters()) + list(model.named_buffers()),
        strict=True,
    ):
        if m.is_floating_point():
            ema_tensors.append(e.detach())
            model_tensors.append(m.detach())
    return ema_tensors, model_tensors


def _ema(quick: bool, device: str, repeats: int, bandwidth: float) -> tuple[Table, list[str]]:
    import torchvision

    name = "mobilenet_v3_small" if quick else "resnet50"
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10 if quick else 1000).to(device)
    ema = copy.deepcopy(model)
    ema_tensors, model_tensors = _float_pairs(model, ema)
    nbytes = 3 * sum(t.numel() * t.element_size() for t in model_tensors)
    table = Table(
        f"compute_ema on torchvision {name} ({sum(t.numel() for t in model_tensors) / 1e6:.1f}M "
        f"floats) on {device}",
        ["op", "implementation", "ms", "ours × faster", "% copy bw"],
    )
    c_ema = _peer_attr("composer.algorithms.ema", "compute_ema")
    timm_v3 = _peer_attr("timm.utils", "ModelEmaV3")
    ema_pytorch = peer("ema_pytorch")
    timm_ema = timm_v3 and timm_v3(model, decay=0.99)
    lucid = ema_pytorch and ema_pytorch.EMA(
        model,
        beta=0.99,
        update_after_step=0,
        update_every=1,
        include_online_model=False,
        use_foreach=True,
    )
    state = ema.state_dict()
    candidates = {
        "ours": lambda: F.compute_ema(model, ema, 0.99),
        "ours, ema as state_dict": lambda: F.compute_ema(model, state, 0.99),
        "Composer": c_ema and (lambda: c_ema(model, ema, 0.99)),
        "timm ModelEmaV3.update": timm_ema and (lambda: timm_ema.update(model)),
        "ema_pytorch (foreach)": lucid
        and (lambda: lucid.update_moving_average(lucid.ema_model, model, current_decay=0.99)),
        "bare torch._foreach_lerp_": lambda: torch._foreach_lerp_(ema_tensors, model_tensors, 0.01),
    }
    present = {k: v for k, v in candidates.items() if v is not None}
    times = _add_rows(
        table, "compute_ema", present, nbytes, bandwidth, repeats=repeats, device=device
    )
    verdicts = []
    if "Composer" in times:
        speed = times["Composer"] / times["ours"]
        verdicts.append(_verdict("compute_ema ≥ 2.5× Composer", speed >= 2.5, speed))
    slower = times["ours"] / times["bare torch._foreach_lerp_"]
    verdicts.append(
        _verdict(
            "compute_ema within 1.25× of bare _foreach_lerp_", slower <= 1.25, slower, "ours ÷ bare"
        )
    )
    return table, verdicts


def _verdict(target: str, ok: bool, value: float, what: str = "ratio") -> str:
    return f"target {target}: {what} {value:.2f} — {'met' if ok else 'NOT met'}"


def _no_slower(op: str, speed: float) -> str:
    """'No slower than Composer': a ratio within 3% of 1 is parity, inside the timing noise."""
    if speed >= 1.0:
        outcome = "met"
    elif speed >= 0.97:
        outcome = "parity within the ±3% timing noise"
    else:
        outcome = "NOT met"
    return f"target {op} no slower than Composer: ratio {speed:.2f} — {outcome}"


def run(*, quick: bool, device: str) -> list[Table]:
    previous_threads = torch.get_num_threads()
    # Two threads at most (the machine is shared); --quick only checks that everything runs,
    # and one thread keeps it fast on a busy machine, where every parallel region of a
    # multi-threaded op can wait milliseconds for its second thread.
    torch.set_num_threads(1 if quick else min(previous_threads, 2))
    try:
        repeats = 3 if quick else 9
        bandwidth = copy_bandwidth(nbytes=(8 if quick else 256) * 2**20, device=device)
        images, image_verdicts = _image_ops(quick, device, repeats, bandwidth)
        ema, ema_verdicts = _ema(quick, device, repeats, bandwidth)
        machine = machine_description()
    finally:
        torch.set_num_threads(previous_threads)
    missing = missing_peers(["composer", "timm", "kornia", "torchvision"])
    for table, verdicts in ((images, image_verdicts), (ema, ema_verdicts)):
        table.notes.append(machine)
        table.notes.append(f"copy bandwidth (read + write): {bandwidth / 1e9:.1f} GB/s")
        if missing:
            table.notes.append(f"peers not importable here, rows left out: {', '.join(missing)}")
        table.notes.extend(verdicts)
    images.notes.append(
        "timm's Mixup and RandomErasing work in place: their rows include the clone a pure op "
        "needs. torchvision's gaussian_blur is the nearest equivalent of blur_2d (reflect "
        "padding). Composer's mixup_batch does not mix the labels; ours does."
    )
    return [images, ema]


if __name__ == "__main__":
    main_for(run, __doc__)
