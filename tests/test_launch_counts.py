"""Kernel launches and host syncs of every per-step op, pinned.

Counted by the project's own counter (``benchmarks/_counter.py``: the op runs on ``meta``
tensors, so the library takes its accelerator branches) on the cases of ``python -m benchmarks
device`` (realistic shapes: ResNet-50, 256x3x224x224 images, 64x3x224x224 uint8 for the batched
augmentations). A change that adds a per-tensor loop or a host sync changes a count and fails
here; a change that improves one updates its line (the counts are exact: they depend on the
code and on shapes, not on values or on the machine).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import device as D
from benchmarks._counter import DEVICE, count

# op: (launches, syncs). Every op: 0 syncs.
PINNED: dict[str, tuple[int, int]] = {
    # ---- batch ops
    "mixup_batch": (12, 0),
    "cutmix_batch": (23, 0),
    "cutout": (14, 0),
    "cutout per_sample": (15, 0),
    "colout_batch": (1, 0),
    "blur_2d": (5, 0),
    "blurmax_pool2d": (6, 0),
    "resize_inputs": (1, 0),
    "smooth_labels": (7, 0),
    # ---- layers' forwards (training mode)
    # 4 bottlenecks; the drop decisions hash (seed, block, draw) with int64 tensor ops, about 15
    # launches per block in eager (inductor fuses them into the branch's kernels)
    "stochastic depth 'block' forward (device decision)": (148, 0),
    "stochastic depth 'sample' forward": (160, 0),
    "BlurConv2d forward": (3, 0),
    "BlurMaxPool2d forward": (3, 0),
    "GhostBatchNorm2d forward": (21, 0),
    "SqueezeExcite conv forward": (7, 0),
    "weight-standardized conv forward": (6, 0),
    # ---- batched augmentations (device path: per layer, one table stage, one blend stage and
    # one warp stage, each on its own slots; issue 25's targets: AugMix <= 300, RandAugment
    # <= 100)
    "BatchAugMix": (281, 0),  # 3 layers of about 45, the draws, the device-side plan, the mix
    "BatchRandAugment": (96, 0),  # 2 layers of about 45; planned on the host
    # ---- training-state helpers on ResNet-50 (issue 25's targets: SAMOptimizer.step <= 30
    # launches, compute_ema with a 0-d tensor smoothing <= 10 as with a float, adaptive
    # clipping <= 60)
    "compute_ema float smoothing": (6, 0),
    "compute_ema 0-d tensor smoothing": (10, 0),  # torch's fused SGD kernel, 5 launches
    "swap_ema_weights": (24, 0),  # through a 32 MiB scratch on accelerators
    "SAMOptimizer.step": (26, 0),  # the perturbation as one fused SGD pass
    "apply_gradient_clipping norm": (15, 0),
    "apply_gradient_clipping value": (6, 0),
    "apply_gradient_clipping adaptive": (54, 0),  # 7 rounds of a 32 MiB scratch, 6 launches each
}


def test_every_per_step_op_is_pinned() -> None:
    assert sorted(D.ours()) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_launches_and_syncs_are_as_pinned(name: str) -> None:
    counts = count(D.ours()[name]()[0])
    got = (counts.launches, counts.syncs)
    top = ", ".join(f"{op} {n}" for op, n in counts.by_op.most_common(6))
    assert got == PINNED[name], (
        f"{name}: {got[0]} launches and {got[1]} syncs, pinned {PINNED[name]} (most: {top}); "
        "if the change is intended, update PINNED"
    )


# ------------------------------------------------------------------ the counter itself


def test_the_counter_sees_per_tensor_loops_syncs_and_views() -> None:
    ts = [torch.empty(1000, device=DEVICE) for _ in range(50)]

    def loop(mode: object) -> None:
        for t in ts:
            t.mul_(2.0)

    def fused(mode: object) -> None:
        torch._foreach_mul_(ts, 2.0)

    assert count(loop).launches == 50
    assert count(fused).launches == 1  # one multi-tensor apply launch for 50 small tensors
    sizes = [torch.empty(1000, device=DEVICE), torch.empty(10, 10, device=DEVICE)]
    assert count(lambda mode: torch._foreach_mul_(sizes, 2.0)).launches == 1
    dtypes = [torch.empty(1000, device=DEVICE), torch.empty(10, dtype=torch.half, device=DEVICE)]
    assert count(lambda mode: torch._foreach_mul_(dtypes, 2.0)).launches == 2  # one a tensor
    x = torch.empty(8, 8, device=DEVICE)

    def views(mode: object) -> None:
        x.view(64).t()
        x[2:].transpose(0, 1)
        torch.empty_like(x)

    assert (count(views).launches, count(views).syncs) == (0, 0)
    syncs = count(lambda mode: (x.sum().item(), x.nonzero(), x[x > 0], x.cpu()))
    assert syncs.syncs == 4
    assert count(lambda mode: x.to("cpu", non_blocking=True)).async_copies == 1
    # a blocking copy of a host tensor to the device waits for the stream; a scalar does not
    assert count(lambda mode: torch.ones(3).to(DEVICE)).syncs == 1
    assert count(lambda mode: torch.ones(3).to(DEVICE, non_blocking=True)).syncs == 0
    assert count(lambda mode: torch.tensor(2.0).to(DEVICE)).syncs == 0
    assert count(lambda mode: torch.ones(3).to(DEVICE, non_blocking=True)).uploads == 1
    # CPU tensors are the host's: not counted
    host = count(lambda mode: torch.ones(3).add(1).sum().item())
    assert (host.launches, host.syncs) == (0, 0)


def test_the_counter_counts_bytes_read_and_written() -> None:
    x = torch.empty(1000, device=DEVICE)
    counts = count(lambda mode: x.add(1.0))
    assert (counts.read, counts.written) == (4000, 4000)
    in_place = count(lambda mode: torch._foreach_mul_([x, x[:10]], 2.0))
    assert (in_place.read, in_place.written) == (4040, 4040)
    idx = torch.zeros(10, dtype=torch.int64, device=DEVICE)
    gathered = count(lambda mode: x.index_select(0, idx))
    assert gathered.read == 10 * 4 + 10 * 8 and gathered.written == 10 * 4
    # a copy writes its destination without reading it, one by one or as a multi-tensor copy
    y = torch.empty(1000, device=DEVICE)
    for copy in (lambda mode: x.copy_(y), lambda mode: torch._foreach_copy_([x], [y])):
        assert (count(copy).read, count(copy).written) == (4000, 4000)
    # writing at an index moves the index, the source and the entries written, not all of self
    src = torch.empty(10, device=DEVICE)
    put = count(lambda mode: x.index_copy_(0, idx, src))
    assert (put.read, put.written) == (10 * 8 + 10 * 4, 10 * 4)
    added = count(lambda mode: x.index_add_(0, idx, src))
    assert (added.read, added.written) == (10 * 8 + 10 * 4 + 10 * 4, 10 * 4)


def test_the_counter_runs_random_ops_without_a_meta_kernel() -> None:
    alpha = torch.empty(4, 3, device=DEVICE)
    counts = count(lambda mode: torch._sample_dirichlet(alpha))
    assert (counts.launches, counts.syncs) == (1, 0)


# Bytes ÷ minimum of the batched augmentations, with a little headroom: one operation's work per
# sample (applying every family of operations to every sample cost 10-20x more).
BYTES_AT_MOST = {"BatchAugMix": 135.0, "BatchRandAugment": 37.0}


@pytest.mark.parametrize("name", sorted(BYTES_AT_MOST))
def test_batched_augmentations_move_one_operations_bytes_per_sample(name: str) -> None:
    _, _, ratio = D.measure(D.ours()[name])
    assert ratio <= BYTES_AT_MOST[name], f"{name}: {ratio:.1f}x the minimum bytes"


@pytest.mark.parametrize("name", sorted(BYTES_AT_MOST))
def test_batched_augmentations_copy_nothing_from_the_host_per_call(name: str) -> None:
    """Their constants (tables of the level-only operations, the warp's coordinates, ...) go
    to the device once and are kept: a call uploads nothing."""
    assert count(D.ours()[name]()[0]).uploads == 0


def test_uncounted_parts_are_left_out() -> None:
    x = torch.empty(10, device=DEVICE)

    def step(mode: D.CountingMode) -> None:
        x.add(1)
        with mode.uncounted():
            x.add(2)
            x.add(3)

    assert count(step).launches == 1


def test_batched_augment_checks_a_float_batch_on_the_device_without_a_sync() -> None:
    """Float input: the [0, 1] check is one device-side assert, never a host read."""
    import augment

    x = torch.empty(4, 3, 16, 16, device=DEVICE)
    counts = count(lambda mode: augment.BatchRandAugment(depth=1)(x))
    assert counts.syncs == 0 and counts.by_op["_assert_async"] == 1
