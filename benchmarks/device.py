"""What each per-step op would cost on an accelerator: launches, syncs, bytes ÷ minimum.

    python -m benchmarks device          # the table, ours and the peers' (when importable)

Counted with the project's own counter (:mod:`benchmarks._counter`: the op runs on ``meta``
tensors, so the library takes its accelerator branches and nothing is computed) at realistic
shapes: images 256x3x224x224 float32, ResNet-50 for the training-state helpers, layers at batch
32, 64x3x224x224 uint8 for the batched augmentations. Bytes ÷ min: device bytes read and
written over the op's minimum (inputs read once, outputs written once). The per-op launch and
sync counts of ours are pinned in ``tests/test_launch_counts.py``.

Each case builds on ``meta`` by default; ``case(torch.device("cuda"))`` builds the same step on
a real device (inputs filled with valid values), which ``benchmarks/gpu_check.py`` times
beside the count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from benchmarks._counter import DEVICE, CountingMode, count
from benchmarks._harness import Table, main_for, peer

B, C, H, W = 256, 3, 224, 224
N_CLASSES = 1000
AUG_BATCH = 64
LAYER_BATCH = 32

Step = Callable[[CountingMode], object]
Case = Callable[..., tuple[Step, int]]  # (device=meta) -> the step and its minimum bytes


def _nbytes(*ts: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _images(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(B, C, H, W, device=device)  # values in [0, 1) where the device holds values
    return x, torch.randint(0, N_CLASSES, (B,), device=device)


def _resnet50(device: torch.device) -> nn.Module:
    import torchvision

    with torch.device(device):
        return torchvision.models.resnet50()


def _state_bytes(m: nn.Module) -> int:
    return _nbytes(*m.parameters(), *m.buffers())


def _with_grads(m: nn.Module) -> list[torch.Tensor]:
    params = list(m.parameters())
    for p in params:
        p.grad = torch.empty_like(p)
    return params


# ----------------------------------------------------------------------------- batch ops


def _batch_op(op: Callable[[torch.Tensor, torch.Tensor], object], labels: bool = True) -> Case:
    def build(device: torch.device = DEVICE) -> tuple[Step, int]:
        x, y = _images(device)
        extra = _nbytes(y) + B * N_CLASSES * 4 if labels else 0
        return (lambda mode: op(x, y)), 2 * _nbytes(x) + extra

    return build


def _ours_batch_ops() -> dict[str, Case]:
    import functional as F

    return {
        "mixup_batch": _batch_op(lambda x, y: F.mixup_batch(x, y, 0.3, n_classes=N_CLASSES)),
        "cutmix_batch": _batch_op(lambda x, y: F.cutmix_batch(x, y, N_CLASSES, alpha=1.0)),
        "cutout": _batch_op(lambda x, y: F.cutout(x, n_holes=1, length=0.5), labels=False),
        "cutout per_sample": _batch_op(
            lambda x, y: F.cutout(x, n_holes=1, length=0.5, per_sample=True), labels=False
        ),
        "colout_batch": _batch_op(lambda x, y: F.colout_batch(x, 0.15, 0.15), labels=False),
        "blur_2d": _batch_op(lambda x, y: F.blur_2d(x, stride=1), labels=False),
        "blurmax_pool2d": _batch_op(
            lambda x, y: F.blurmax_pool2d(x, 3, stride=2, padding=1), labels=False
        ),
        "resize_inputs": _batch_op(lambda x, y: F.resize_inputs(x, y, 0.5, mode="resize")),
        "smooth_labels": _smooth_labels(F),
    }


def _smooth_labels(F: Any) -> Case:
    def build(device: torch.device = DEVICE) -> tuple[Step, int]:
        logits = torch.empty(B, N_CLASSES, device=device)
        y = torch.zeros(B, dtype=torch.int64, device=device)
        return (lambda mode: F.smooth_labels(logits, y, 0.1)), _nbytes(logits, y)

    return build


# ------------------------------------------------------------------------ training state


def _ema(smoothing_tensor: bool) -> Case:
    def build(device: torch.device = DEVICE) -> tuple[Step, int]:
        import functional as F

        m, ema = _resnet50(device), _resnet50(device)
        s: float | torch.Tensor = torch.tensor(0.99, device=device) if smoothing_tensor else 0.99
        return (lambda mode: F.compute_ema(m, ema, s)), 3 * _state_bytes(m)

    return build


def _swap(device: torch.device = DEVICE) -> tuple[Step, int]:
    import functional as F

    m, ema = _resnet50(device), _resnet50(device)
    return (lambda mode: F.swap_ema_weights(m, ema)), 4 * _state_bytes(m)


def _sam(device: torch.device = DEVICE) -> tuple[Step, int]:
    import functional as F

    m = _resnet50(device)
    params = _with_grads(m)
    base = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    sam = F.SAMOptimizer(base, rho=0.05)
    inner = base.step
    loss = torch.ones((), device=device)

    def step(mode: CountingMode) -> object:
        def base_step(*a: Any, **k: Any) -> object:
            with mode.uncounted():
                return inner(*a, **k)

        def closure() -> torch.Tensor:
            with mode.uncounted():
                for p in params:
                    p.grad = torch.empty_like(p)
                return loss

        base.step = base_step  # type: ignore[method-assign]
        return sam.step(closure)

    return step, 7 * _nbytes(*params)


def _clip(kind: str) -> Case:
    threshold = {"norm": 1.0, "value": 1e-3, "adaptive": 0.01}[kind]

    def build(device: torch.device = DEVICE) -> tuple[Step, int]:
        import functional as F

        m = _resnet50(device)
        params = _with_grads(m)
        reads = 3 if kind == "adaptive" else 2
        return (lambda mode: F.apply_gradient_clipping(m, kind, threshold)), reads * _nbytes(
            *params
        )

    return build


# ---------------------------------------------------------------------------------- layers


def _forward(make: Callable[[], nn.Module], shape: tuple[int, ...]) -> Case:
    """A layer's forward (training mode) on ``shape``; minimum: read the input and weights,
    write an output the input's size."""

    def build(device: torch.device = DEVICE) -> tuple[Step, int]:
        with torch.device(device):
            layer = make().train()
        x = torch.empty(shape, device=device)
        return (lambda mode: layer(x)), 2 * _nbytes(x) + _state_bytes(layer)

    return build


def _ours_layers() -> dict[str, Case]:
    import functional as F

    def blurconv() -> nn.Module:
        m = nn.Sequential(nn.Conv2d(128, 128, 3, stride=2, padding=1, bias=False))
        return F.apply_blurpool(m, replace_maxpools=False)

    def blurmax() -> nn.Module:
        return F.apply_blurpool(nn.Sequential(nn.MaxPool2d(3, 2, 1)), replace_convs=False)

    def ghost() -> nn.Module:
        return F.apply_ghost_batchnorm(nn.Sequential(nn.BatchNorm2d(64)), ghost_batch_size=32)

    def se() -> nn.Module:
        m = nn.Sequential(nn.Conv2d(256, 256, 3, padding=1, bias=False))
        return F.apply_se(m, latent_channels=64, min_channels=128)

    def wstd() -> nn.Module:
        m = nn.Sequential(nn.Conv2d(256, 256, 3, padding=1, bias=False), nn.Identity())
        return F.apply_weight_standardization(m)

    def stochastic(method: str, skip_dropped: bool) -> Callable[[], nn.Module]:
        def make() -> nn.Module:
            import torchvision

            blocks = [torchvision.models.resnet.Bottleneck(1024, 256) for _ in range(4)]
            return F.apply_stochastic_depth(
                nn.Sequential(*blocks),
                method,
                "ResNetBottleneck",
                drop_rate=0.5,
                drop_distribution="uniform",
                seed=0,
                skip_dropped=skip_dropped,
            )

        return make

    sd_shape = (2, 1024, 14, 14)
    return {
        "stochastic depth 'block' forward (device decision)": _forward(
            stochastic("block", False), sd_shape
        ),
        "stochastic depth 'sample' forward": _forward(stochastic("sample", True), sd_shape),
        "BlurConv2d forward": _forward(blurconv, (LAYER_BATCH, 128, 56, 56)),
        "BlurMaxPool2d forward": _forward(blurmax, (LAYER_BATCH, 64, 112, 112)),
        "GhostBatchNorm2d forward": _forward(ghost, (256, 64, 28, 28)),
        "SqueezeExcite conv forward": _forward(se, (LAYER_BATCH, 256, 14, 14)),
        "weight-standardized conv forward": _forward(wstd, (LAYER_BATCH, 256, 14, 14)),
    }


# --------------------------------------------------------------------------------- augment


def _augment(make: Callable[[], Callable[[torch.Tensor], object]], dtype: torch.dtype) -> Case:
    def build(device: torch.device = DEVICE) -> tuple[Step, int]:
        t = make()
        if dtype == torch.uint8:
            x = torch.randint(0, 256, (AUG_BATCH, 3, H, W), dtype=dtype, device=device)
        else:
            x = torch.rand(AUG_BATCH, 3, H, W, dtype=dtype, device=device)
        return (lambda mode: t(x)), 2 * _nbytes(x)

    return build


def ours() -> dict[str, Case]:
    """Every per-step op of ours: name -> case."""

    cases = _ours_batch_ops()
    cases.update(
        {
            "compute_ema float smoothing": _ema(False),
            "compute_ema 0-d tensor smoothing": _ema(True),
            "swap_ema_weights": _swap,
            "SAMOptimizer.step": _sam,
            "apply_gradient_clipping norm": _clip("norm"),
            "apply_gradient_clipping value": _clip("value"),
            "apply_gradient_clipping adaptive": _clip("adaptive"),
        }
    )
    cases.update(_ours_layers())
    cases.update({name: _augment(make, torch.uint8) for name, make in _batched().items()})
    return cases


def _batched() -> dict[str, Callable[[], Callable[[torch.Tensor], object]]]:
    """Our batched augmentations, at the peers' settings: name -> a maker of the transform."""
    import augment

    return {
        "BatchAugMix": lambda: augment.BatchAugMix(severity=3, width=3),
        "BatchRandAugment": lambda: augment.BatchRandAugment(severity=9, depth=2),
    }


def variants() -> dict[str, list[tuple[str, Case]]]:
    """Ours on other inputs, beside the peers that take them: row name -> [(label, case)]."""
    return {
        name: [("ours (float32 input)", _augment(make, torch.float32))]
        for name, make in _batched().items()
    }


PEER_CALLS = 8  # the peers draw their operations per call: their figures are averages


def peers() -> dict[str, list[tuple[str, Case]]]:
    """The peers' equivalents that are importable here: row name -> [(peer, case)]."""
    out: dict[str, list[tuple[str, Case]]] = {}
    v2 = peer("torchvision")
    if v2 is not None:
        out.setdefault("BatchAugMix", []).append(
            ("torchvision v2 AugMix", _augment(lambda: v2.AugMix(severity=3), torch.uint8))
        )
        out.setdefault("BatchRandAugment", []).append(
            ("torchvision v2 RandAugment", _augment(lambda: v2.RandAugment(2, 9), torch.uint8))
        )
        cutmix = v2.CutMix(num_classes=N_CLASSES)
        out.setdefault("cutmix_batch", []).append(
            ("torchvision v2 CutMix", _batch_op(lambda x, y: cutmix(x, y)))
        )
    cf = peer("composer")
    if cf is not None:
        out.setdefault("cutmix_batch", []).append(
            ("composer", _batch_op(lambda x, y: cf.cutmix_batch(x, y, alpha=1.0)))
        )
        out.setdefault("mixup_batch", []).append(
            ("composer", _batch_op(lambda x, y: cf.mixup_batch(x, y, mixing=0.3)))
        )
    kornia = peer("kornia")
    if kornia is not None:
        from kornia.augmentation.auto import RandAugment

        out.setdefault("BatchRandAugment", []).append(
            (
                "kornia RandAugment (float32 input)",
                _augment(lambda: RandAugment(n=2, m=9), torch.float32),
            )
        )
    return out


def measure(case: Case, calls: int = 1) -> tuple[float, float, float]:
    """(launches, syncs, bytes ÷ min) of a call of the case, averaged over ``calls`` calls
    (torch's global generator seeded first: the same figures on every run)."""
    torch.manual_seed(0)
    step, minimum = case()
    runs = [count(step, warmup=i == 0) for i in range(calls)]
    return (
        sum(c.launches for c in runs) / calls,
        sum(c.syncs for c in runs) / calls,
        sum(c.bytes for c in runs) / calls / max(minimum, 1),
    )


def run(*, quick: bool = False, device: str = "cpu") -> list[Table]:
    """The table (``quick`` and ``device`` change nothing: counts, not timings)."""
    table = Table(
        "Accelerator cost per call, counted on meta tensors (launches, syncs, bytes ÷ minimum)",
        ["op", "implementation", "launches", "syncs", "bytes ÷ min"],
    )
    others, all_peers = variants(), peers()
    for name, case in ours().items():
        table.add(name, "ours", *_row(case))
        for side, other in others.get(name, []):
            table.add(name, side, *_row(other))
        for side, peer_case in all_peers.get(name, []):
            table.add(name, side, *_row(peer_case, PEER_CALLS))
    table.notes.append(
        "Counted by benchmarks/_counter.py: one aten op on the device is one launch (views and "
        "allocations none; _foreach_* grouped as CUDA's multi-tensor apply), every host wait a "
        "sync; an op that writes at an index (index_copy_, index_add_, scatter_) moves its "
        "index and source and the entries it writes. Peers run on the same meta tensors, "
        f"averaged over {PEER_CALLS} calls (they draw their operations per call); a dash: the "
        "peer cannot run there."
    )
    return [table]


def _row(case: Case, calls: int = 1) -> tuple[object, object, object]:
    try:
        launches, syncs, ratio = measure(case, calls)
    except Exception:  # a peer (or its import) that cannot run on meta tensors
        return None, None, None
    return _figure(launches), _figure(syncs), math.floor(ratio * 100) / 100


def _figure(value: float) -> int | float:
    """A count, or an average to one decimal."""
    return int(value) if value == int(value) else round(value, 1)


if __name__ == "__main__":
    main_for(run, __doc__)
