"""Batched AugMix / RandAugment: the grouped CPU path (each operation on the samples that chose
it, sorted by host reads) against the device path (each operation on its slots, sizes known on
the host: the accelerator/compile path): the same draws give the same values, whatever the
groups."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import augment
from augment.batched import grouped as G
from augment.batched import ops as B
from augment.batched import paths as BP
from augment.batched import transforms as AB
from tests.augment.test_batched import _batch


def test_same_generator_seed_same_output_and_chunking_does_not_matter(monkeypatch) -> None:
    x = torch.randint(0, 256, (10, 3, 20, 20), dtype=torch.uint8)
    a = augment.batch_augment_and_mix(x, generator=torch.Generator().manual_seed(9))
    monkeypatch.setattr(BP, "GROUPED_CHUNK", 1)  # one sample at a time
    b = augment.batch_augment_and_mix(x, generator=torch.Generator().manual_seed(9))
    assert torch.equal(a, b)
    c = augment.batch_augment_and_mix(x, generator=torch.Generator().manual_seed(10))
    assert not torch.equal(a, c)
    monkeypatch.setattr(BP, "GROUPED", False)  # the device (slot) path, the whole batch
    assert torch.equal(
        augment.batch_augment_and_mix(x, generator=torch.Generator().manual_seed(9)), a
    )


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
@pytest.mark.parametrize("augmentation_set", ["all", "safe", "original"])
def test_grouped_path_equals_all_families_path(monkeypatch, dtype, augmentation_set) -> None:
    """Eager CPU sorts the samples by operation (host reads); the device/compile path gathers
    each operation's slots: the same draws give the same values."""
    rs = np.random.default_rng(21)
    for c, h, w in [(3, 20, 24), (1, 9, 11), (3, 2, 5), (3, 16, 16)]:
        x = _batch(rs, 12, c, h, w)
        if dtype != torch.uint8:
            x = x.to(dtype) / 255
        outs = []
        for grouped in (True, False):
            monkeypatch.setattr(BP, "GROUPED", grouped)
            monkeypatch.setattr(BP, "GROUPED_CHUNK", 7 * c * h * w)  # groups: 7 (AugMix: 2)
            g = torch.Generator().manual_seed(c * h + w)
            am = augment.batch_augment_and_mix(x, augmentation_set=augmentation_set, generator=g)
            ra = augment.batch_randaugment(x, 7, 3, augmentation_set, generator=g)
            outs.append((am, ra))
        (am, ra), (am_ref, ra_ref) = outs
        assert am.dtype == ra.dtype == dtype
        assert torch.equal(am, am_ref), (c, h, w)
        assert torch.equal(ra, ra_ref), (c, h, w)


def test_apply_grouped_equals_apply_plan_per_layer() -> None:
    """One layer of every operation (and none: -1), grouped on uint8 against every family."""
    kinds = AB._kinds("all")
    g = torch.Generator().manual_seed(3)
    x = _batch(np.random.default_rng(4), 28, 3, 13, 17)
    op = torch.arange(-1, len(kinds)).repeat(2)
    level = torch.rand(28, generator=g, dtype=torch.float64) * 10
    sign = torch.where(torch.rand(28, generator=g) < 0.5, -1.0, 1.0)
    plan = B.plan_ops(op, level, sign, kinds, 13, 17)
    want = B.apply_plan(B.to_levels(x), plan, kinds)
    got = B.apply_grouped(x.clone(), op, level, sign, kinds)
    assert got.dtype == torch.uint8
    assert torch.equal(got.float(), want)
    assert torch.equal(got[op == -1], x[op == -1])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_channels_last_input_gives_the_same_result(dtype) -> None:
    x = _batch(np.random.default_rng(8), 6, 3, 12, 16)
    x = x if dtype == torch.uint8 else x.to(dtype) / 255
    cl = x.to(memory_format=torch.channels_last)
    for fn in (augment.batch_augment_and_mix, augment.batch_randaugment):
        want = fn(x, generator=torch.Generator().manual_seed(6))
        assert torch.equal(fn(cl, generator=torch.Generator().manual_seed(6)), want), fn.__name__


@pytest.mark.parametrize("kind", ["augmix", "randaugment"])
def test_the_modules_reused_buffers_change_nothing(monkeypatch, kind) -> None:
    """A module keeps its CPU working buffers between batches: larger, smaller and float
    batches, several groups each, give the functions' results, and an earlier result is not
    touched by later calls."""
    monkeypatch.setattr(BP, "GROUPED_CHUNK", 9 * 3 * 10 * 12)  # groups of 3 (AugMix) / 9
    rs = np.random.default_rng(4)
    batches = [_batch(rs, n, 3, 10, 12) for n in (7, 20, 5)]
    batches.append(batches[1].float() / 255)
    if kind == "augmix":
        module = augment.BatchAugMix(generator=torch.Generator().manual_seed(1))
        fn = augment.batch_augment_and_mix
    else:
        module = augment.BatchRandAugment(generator=torch.Generator().manual_seed(1))
        fn = augment.batch_randaugment
    g = torch.Generator().manual_seed(1)
    outs, wants = [], []
    for x in batches:
        outs.append(module(x))
        wants.append(fn(x, generator=g))
        kept = [o.clone() for o in outs]
    for got, want, again in zip(outs, wants, kept, strict=True):
        assert torch.equal(got, want) and torch.equal(got, again)
    assert module._workspace._buffers  # the buffers were kept


def test_a_busy_workspace_gives_fresh_buffers_to_a_concurrent_call() -> None:
    """Two threads on one workspace: each result equals the one without a workspace."""
    import threading

    kinds = AB._kinds("all")
    x = _batch(np.random.default_rng(6), 12, 3, 16, 16)
    workspace = G.Workspace()

    def run(seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return BP.augmix_run(x, kinds, 3.0, -1, 3, 1.0, g, workspace)

    want = {
        seed: BP.augmix_run(x, kinds, 3.0, -1, 3, 1.0, torch.Generator().manual_seed(seed))
        for seed in range(8)
    }
    got: dict[int, list[torch.Tensor]] = {seed: [] for seed in range(8)}

    def worker(seeds: range) -> None:
        for _ in range(3):
            for seed in seeds:
                got[seed].append(run(seed))

    threads = [threading.Thread(target=worker, args=(r,)) for r in (range(0, 4), range(4, 8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for seed, outs in got.items():
        assert all(torch.equal(o, want[seed]) for o in outs), seed
    with workspace.hold() as first, workspace.hold() as second:
        assert first is workspace and second is None


def test_copies_and_pickles_of_a_module_start_without_buffers() -> None:
    import copy
    import pickle

    aug = augment.BatchRandAugment(generator=torch.Generator().manual_seed(0))
    aug(torch.zeros(4, 3, 64, 64, dtype=torch.uint8))
    assert aug._workspace._buffers
    for other in (copy.deepcopy(aug), pickle.loads(pickle.dumps(aug))):
        assert other._workspace is not aug._workspace and not other._workspace._buffers
        assert other(torch.zeros(2, 3, 8, 8, dtype=torch.uint8)).shape == (2, 3, 8, 8)
    assert len(pickle.dumps(aug)) < 10_000


def _on(draws: tuple, device: str) -> tuple:
    """Draws made on the CPU, moved to ``device`` (a Slots' host ints stay as they are)."""
    moved = [
        t.to(device)
        if isinstance(t, torch.Tensor)
        else _on(t, device)
        if isinstance(t, tuple)
        else t
        for t in draws
    ]
    return type(draws)(*moved) if hasattr(draws, "_fields") else tuple(moved)


def _device_path_against_grouped(device: str, dtype: torch.dtype) -> None:
    kinds = AB._kinds("all")
    x = _batch(np.random.default_rng(5), 24, 3, 21, 19)
    x = x if dtype == torch.uint8 else x.float() / 255
    scale = 1.0 if dtype == torch.uint8 else 255.0  # differences in grey levels
    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(6)
    draws = BP._augmix_slots(24, kinds, 3.0, -1, 3, 1.0, g, cpu)
    want = BP._augmix_grouped(x, kinds, 3, draws, None)
    got = BP._augmix_slotted(x.to(device), kinds, 3, _on(draws, device)).cpu()
    assert (scale * (got.double() - want.double())).abs().max() <= 1.0 + 1e-6
    slots = BP._randaugment_slots(24, kinds, 2, 9.0, g, cpu)
    rows = BP.row_draws(slots)
    plan = BP.plan_ops(*rows, kinds, 21, 19, only=BP.NOT_LUT)
    want = B.from_levels8(G.apply_layers(BP._levels8(x), rows, plan, kinds), x)
    xd = x.to(device)
    got = B.from_levels8(BP.run_slots(BP._levels8(xd), 1, _on(slots, device), kinds)[:24], xd)
    assert (scale * (got.cpu().double() - want.double())).abs().max() <= 1.0 + 1e-6


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_cuda_device_path_equals_the_cpu_grouped_path(dtype) -> None:
    """The device path on CUDA against the eager CPU path, from the same draws (made on the CPU
    and moved): within one grey level (a fused multiply-add in a blend), AugMix and RandAugment."""
    _device_path_against_grouped("cuda", dtype)
