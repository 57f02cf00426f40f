"""Throughput of ``augment.AugMix`` / ``augment.RandAugment`` against the peers' PIL pipelines.

Images per second in one process with one torch thread (as in a ``DataLoader`` worker), on
224x224 and 32x32 RGB PIL images, all candidates timed interleaved in one run (median of the
repeats). Peers, configured to do the same work:

* Composer ``composer.functional.augmix_image`` / ``randaugment_image`` (bilinear geometric ops,
  not configurable);
* timm ``augment_and_mix_transform('augmix-m3-w3')`` and ``rand_augment_transform('rand-m9-n2-p1')``
  with nearest-neighbour resampling (timm's RandAugment applies each op with probability 0.5 by
  default; ``p1`` makes it apply both, as the others do);
* torchvision ``v2.AugMix(severity=3, mixture_width=3)`` and ``v2.RandAugment(num_ops=2,
  magnitude=9)`` called on PIL images (nearest neighbour by default).

Ours: ``AugMix(severity=3, depth=-1, width=3, alpha=1.0)`` and ``RandAugment(severity=9, depth=2)``,
``augmentation_set='all'``. Ratios are peer_time / our_time (> 1: we are faster).

Batched section: ``augment.BatchAugMix`` / ``augment.BatchRandAugment`` (same parameters) on a
batch of 256 uint8 ``N x 3 x S x S`` tensors, every sample drawing its own chain, with the
benchmark's torch threads (2 on CPU), against torchvision v2's ``AugMix`` / ``RandAugment`` on
the same batch (one chain for the whole batch), kornia's ``auto.RandAugment(n=2, m=9)`` (float
input, its native form; it picks the ops once per batch) and our PIL transforms on the same 256 images on one core.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

from benchmarks._harness import Table, machine_description, main_for, peer, ratio, time_interleaved

PEERS = ("Composer", "timm", "torchvision")


def _image(size: int, seed: int = 0) -> Image.Image:
    """A smooth image with noise: a histogram and edges like a photo, not flat noise."""
    rs = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / max(size - 1, 1)
    base = np.stack([200 * xx, 160 * yy, 120 * (1 - xx * yy)], axis=-1) + 30
    noisy = base + rs.normal(0, 12, base.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def _peer_transforms(kind: str) -> tuple[dict[str, Callable | None], list[str]]:
    notes: list[str] = []
    fns: dict[str, Callable | None] = {}
    cf = peer("composer")
    if cf is not None:
        fns["Composer"] = cf.augmix_image if kind == "augmix" else cf.randaugment_image
    else:
        fns["Composer"] = None
        notes.append("Composer is not importable here: its column is empty.")
    try:
        from timm.data import auto_augment as taa  # appended to sys.path by the harness

        hp = dict(taa._HPARAMS_DEFAULT)
        hp["interpolation"] = Image.Resampling.NEAREST
        if kind == "augmix":
            fns["timm"] = taa.augment_and_mix_transform("augmix-m3-w3", hp)
        else:
            fns["timm"] = taa.rand_augment_transform("rand-m9-n2-p1", hp)
    except Exception as e:  # pragma: no cover - depends on the peers installed
        fns["timm"] = None
        notes.append(f"timm is not importable here ({type(e).__name__}): its column is empty.")
    v2 = peer("torchvision")
    if v2 is not None:
        if kind == "augmix":
            fns["torchvision"] = v2.AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0)
        else:
            fns["torchvision"] = v2.RandAugment(num_ops=2, magnitude=9)
    else:  # pragma: no cover
        fns["torchvision"] = None
        notes.append("torchvision.transforms.v2 is not importable: its column is empty.")
    return fns, notes


def _table(kind: str, sizes: list[tuple[int, int]], repeats: int) -> Table:
    import augment

    ours: Callable = (
        augment.AugMix(severity=3, depth=-1, width=3, alpha=1.0)
        if kind == "augmix"
        else augment.RandAugment(severity=9, depth=2)
    )
    peers, notes = _peer_transforms(kind)
    name = "AugMix" if kind == "augmix" else "RandAugment"
    table = Table(
        title=f"{name}: images per second (single process, RGB PIL images)",
        columns=[
            "size",
            "ours img/s",
            *(f"{p} img/s" for p in PEERS),
            *(f"x vs {p}" for p in PEERS),
        ],
        notes=notes,
    )
    for size, n_images in sizes:
        images = [_image(size, seed) for seed in range(n_images)]

        def loop(fn: Callable, images: list[Image.Image] = images) -> Callable[[], None]:
            def go() -> None:
                for img in images:
                    fn(img)

            return go

        candidates = {"ours": loop(ours)}
        candidates.update({p: loop(fn) for p, fn in peers.items() if fn is not None})
        times = time_interleaved(candidates, repeats=repeats)
        per_img = {k: t / n_images for k, t in times.items()}
        ips = {k: 1.0 / t for k, t in per_img.items()}
        table.add(
            f"{size}x{size}",
            ips["ours"],
            *(ips.get(p) for p in PEERS),
            *(ratio(per_img.get(p), per_img["ours"]) for p in PEERS),
        )
    table.notes.append(
        "Composer resamples its geometric ops bilinearly (not configurable); timm, torchvision "
        "and ours use nearest neighbour."
    )
    return table


def _threads(n: int, fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` run with ``n`` torch threads (so candidates with different settings interleave)."""

    def go() -> None:
        torch.set_num_threads(n)
        fn()

    return go


def _batched_peers(kind: str, device: str) -> tuple[Callable | None, Callable | None]:
    """torchvision v2's transform (one chain per batch) and kornia's RandAugment, or None."""
    v2 = peer("torchvision")
    tv = None
    if v2 is not None:
        tv = (
            v2.AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0)
            if kind == "augmix"
            else v2.RandAugment(num_ops=2, magnitude=9)
        )
    kra = None
    if kind == "randaugment" and peer("kornia") is not None:
        from kornia.augmentation.auto import RandAugment as KorniaRandAugment

        kra = KorniaRandAugment(n=2, m=9).to(device)
    return tv, kra


def _batched_table(
    kind: str,
    sizes: list[int],
    batch: int,
    repeats: int,
    device: str,
    per_sample_loop: bool = False,
) -> Table:
    """Images per second of our batched transform against the peers on ``device``; with
    ``per_sample_loop``, torchvision v2's transform also in a loop over the samples (each its
    own chain, as ours), the column ``torchvision v2 (loop)``."""
    import augment

    threads = torch.get_num_threads()
    on_cuda = torch.device(device).type == "cuda"
    gen = torch.Generator(device=device).manual_seed(0)
    if kind == "augmix":
        ours = augment.BatchAugMix(severity=3, depth=-1, width=3, alpha=1.0, generator=gen)
        pil = augment.AugMix(severity=3, depth=-1, width=3, alpha=1.0, rng=random.Random(0))
    else:
        ours = augment.BatchRandAugment(severity=9, depth=2, generator=gen)
        pil = augment.RandAugment(severity=9, depth=2, rng=random.Random(0))
    tv, kra = _batched_peers(kind, device)
    name = "AugMix" if kind == "augmix" else "RandAugment"
    peers = ["torchvision v2 (1 chain/batch)"] + (["kornia"] if kind == "randaugment" else [])
    if per_sample_loop and tv is not None:
        peers.append("torchvision v2 (loop)")
    peers.append("our PIL, 1 core")
    table = Table(
        title=f"Batched {name}: images per second, batch of {batch} uint8 tensors, "
        f"{'CUDA' if on_cuda else f'CPU, {threads} torch threads'}",
        columns=[
            "size",
            "ours img/s",
            *(f"{p} img/s" for p in peers),
            *(f"x vs {p}" for p in peers),
        ],
    )
    load = [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []
    for size in sizes:
        x = torch.from_numpy(np.stack([np.asarray(_image(size, s)) for s in range(batch)]))
        x = x.permute(0, 3, 1, 2).contiguous().to(device)
        xf = x.float() / 255
        images = [_image(size, s) for s in range(batch)] if not on_cuda else []

        def pil_loop(images: list[Image.Image] = images) -> None:
            for img in images:
                pil(img)

        calls: dict[str, Callable[[], object] | None] = {
            "ours": lambda x=x: ours(x),
            peers[0]: tv and (lambda x=x: tv(x)),
            "kornia": kra and (lambda xf=xf: kra(xf)),
            "torchvision v2 (loop)": per_sample_loop and tv and (lambda x=x: [tv(u) for u in x]),
        }
        candidates = {k: _threads(threads, fn) for k, fn in calls.items() if fn}
        if not on_cuda:
            candidates[peers[-1]] = _threads(1, pil_loop)
        reps = repeats if size >= 128 else 10 * repeats
        times = time_interleaved(candidates, repeats=reps, device=device)
        torch.set_num_threads(threads)
        ips = {k: batch / t for k, t in times.items()}
        table.add(
            f"{size}x{size}",
            ips["ours"],
            *(ips.get(p) for p in peers),
            *(ratio(times.get(p), times["ours"]) for p in peers),
        )
    if load:
        load.append(os.getloadavg()[0])
        table.notes.append(
            f"Load average (1 min) of the {os.cpu_count()}-core machine at start and end: "
            f"{load[0]:.1f}, {load[1]:.1f}."
        )
    table.notes.append(
        "Ours draws every sample's chain (ops, levels, directions, weights); torchvision v2 "
        "applies one chain to the whole batch and kornia picks its ops once per batch "
        "(rand_selector), so both do less work per image. kornia gets float in [0, 1]."
    )
    return table


def run(*, quick: bool, device: str = "cpu") -> list[Table]:
    """The AugMix and RandAugment throughput tables: PIL (one process, one thread, on CPU) and
    batched tensors (on ``device``, with the benchmark's torch threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in DataLoader workers, which torch runs single-threaded
    random.seed(0)
    np.random.seed(0)  # noqa: NPY002 - the peers draw from NumPy's global generator
    torch.manual_seed(0)
    if quick:
        sizes, repeats = [(32, 8)], 3
    else:
        sizes, repeats = [(224, 10), (32, 100)], 41
    tables = [_table("augmix", sizes, repeats), _table("randaugment", sizes, repeats)]
    torch.set_num_threads(threads)
    # a 32x32 batch takes milliseconds: more repeats for a stable median
    b_sizes, batch, b_repeats = ([32], 32, 3) if quick else ([224, 32], 256, 5)
    for dev in ["cpu"] + (["cuda"] if torch.device(device).type == "cuda" else []):
        tables.append(_batched_table("augmix", b_sizes, batch, b_repeats, dev))
        tables.append(_batched_table("randaugment", b_sizes, batch, b_repeats, dev))
    tables[-1].notes.append(machine_description())
    return tables


if __name__ == "__main__":
    main_for(run, __doc__, device_help="cpu, or cuda to add the batched transforms' CUDA rows")
