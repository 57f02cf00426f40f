"""Exact resume of every stateful helper (issue 24).

Each test trains ``STEPS`` steps straight through, and separately ``STEPS // 2`` steps, a
checkpoint (``torch.save`` to memory, ``torch.load(..., weights_only=True)``), FRESH objects
(model initialised from another seed, new optimizer, new helper) loaded from the checkpoint,
and the remaining steps; the final weights (and the helper's averages) must be equal bit for
bit. Batches come from per-step generators; the global RNG is reseeded differently before the
resumed half, as a new process would be, so nothing may rely on it unless it is saved.
What to save for each helper is what ``docs/guides/checkpointing.md`` lists.
"""

from __future__ import annotations

import copy
import io
import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchvision
from torch import nn
from torch.nn import functional as nnf
from torchvision.models.resnet import BasicBlock

import augment
import functional as F

STEPS = 6
Objects = dict[str, Any]


def _batch(step: int, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(8, 3, size, size, generator=g), torch.randint(0, 10, (8,), generator=g)


def small_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1),  # strided: something for blur pooling
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    )


def small_resnet(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)


def sgd_step(objs: Objects, x: torch.Tensor, y: torch.Tensor) -> None:
    model, opt = objs["model"], objs["opt"]
    model.train()
    opt.zero_grad(set_to_none=True)
    nnf.cross_entropy(model(x), y).backward()
    opt.step()


def _roundtrip(checkpoint: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def assert_resumes_exactly(
    make: Callable[[int], Objects],
    step: Callable[[Objects, int], None],
    save: Callable[[Objects], dict[str, Any]],
    load: Callable[[Objects, dict[str, Any]], None],
    compare: Callable[[Objects], dict[str, torch.Tensor]] = lambda o: o["model"].state_dict(),
    steps: int = STEPS,
) -> None:
    """Straight through == first half + checkpoint + fresh objects + second half, bit for bit."""
    torch.manual_seed(1)
    straight = make(0)
    for i in range(steps):
        step(straight, i)
    torch.manual_seed(1)
    first = make(0)
    for i in range(steps // 2):
        step(first, i)
    checkpoint = _roundtrip(save(first))
    del first
    torch.manual_seed(987)  # a new process: another global RNG state, another initialisation
    resumed = make(1)
    load(resumed, checkpoint)
    for i in range(steps // 2, steps):
        step(resumed, i)
    want, got = compare(straight), compare(resumed)
    assert list(want) == list(got)
    for name, value in want.items():
        assert torch.equal(value, got[name]), f"{name} differs after resuming"


def _model_and_opt(objs: Objects) -> dict[str, Any]:
    return {"model": objs["model"].state_dict(), "opt": objs["opt"].state_dict()}


def _load_model_and_opt(objs: Objects, ck: dict[str, Any]) -> None:
    objs["model"].load_state_dict(ck["model"])
    objs["opt"].load_state_dict(ck["opt"])


# --------------------------------------------------------------------------- optimizers, schedules


@pytest.mark.parametrize("interval", [1, 3])
def test_sam(interval: int) -> None:
    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        base = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return {"model": model, "opt": F.SAMOptimizer(base, rho=0.05, interval=interval)}

    def step(objs: Objects, i: int) -> None:
        model, opt = objs["model"], objs["opt"]
        x, y = _batch(i)

        def closure() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = nnf.cross_entropy(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)

    assert_resumes_exactly(make, step, _model_and_opt, _load_model_and_opt, steps=8)


def test_scaled_lr_scheduler() -> None:
    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[4, 8], gamma=0.5)
        F.scale_scheduler(sched, 0.5)  # on the fresh scheduler, before loading its state
        return {"model": model, "opt": opt, "sched": sched}

    def step(objs: Objects, i: int) -> None:
        sgd_step(objs, *_batch(i))
        objs["sched"].step()

    def save(objs: Objects) -> dict[str, Any]:
        return {**_model_and_opt(objs), "sched": objs["sched"].state_dict()}

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        _load_model_and_opt(objs, ck)
        objs["sched"].load_state_dict(ck["sched"])

    assert_resumes_exactly(make, step, save, load)


def test_swa() -> None:
    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
        swa = F.SWA(model, opt, total_steps=STEPS, swa_start=0.34, swa_lr=0.05, scheduler=sched)
        return {"model": model, "opt": opt, "sched": sched, "swa": swa}

    def step(objs: Objects, i: int) -> None:
        sgd_step(objs, *_batch(i))
        objs["swa"].step()

    def save(objs: Objects) -> dict[str, Any]:
        return {
            **_model_and_opt(objs),
            "sched": objs["sched"].state_dict(),
            "swa": objs["swa"].state_dict(),
        }

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        _load_model_and_opt(objs, ck)
        objs["sched"].load_state_dict(ck["sched"])
        objs["swa"].load_state_dict(ck["swa"])

    def compare(objs: Objects) -> dict[str, torch.Tensor]:
        averaged = objs["swa"].averaged_model.state_dict()
        return {**objs["model"].state_dict(), **{f"swa.{k}": v for k, v in averaged.items()}}

    assert_resumes_exactly(make, step, save, load, compare)


@pytest.mark.parametrize("form", ["module", "state_dict"])
def test_ema(form: str) -> None:
    """The EMA kept as a module or as a state dict; saved outside ``use_ema_weights``."""

    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        ema: Any = copy.deepcopy(model)
        if form == "state_dict":
            ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {"model": model, "opt": opt, "ema": ema}

    def step(objs: Objects, i: int) -> None:
        sgd_step(objs, *_batch(i))
        F.compute_ema(objs["model"], objs["ema"], 0.8)

    def save(objs: Objects) -> dict[str, Any]:
        ema = objs["ema"]
        return {**_model_and_opt(objs), "ema": ema if form == "state_dict" else ema.state_dict()}

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        _load_model_and_opt(objs, ck)
        if form == "state_dict":
            objs["ema"] = ck["ema"]
        else:
            objs["ema"].load_state_dict(ck["ema"])

    def compare(objs: Objects) -> dict[str, torch.Tensor]:
        ema = objs["ema"] if form == "state_dict" else objs["ema"].state_dict()
        return {**objs["model"].state_dict(), **{f"ema.{k}": v for k, v in ema.items()}}

    assert_resumes_exactly(make, step, save, load, compare)


# --------------------------------------------------------------------------- model transforms


def test_ghost_batchnorm() -> None:
    def make(seed: int) -> Objects:
        model = F.apply_ghost_batchnorm(small_cnn(seed), ghost_batch_size=4)
        return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)}

    assert_resumes_exactly(
        make, lambda o, i: sgd_step(o, *_batch(i)), _model_and_opt, _load_model_and_opt
    )


@pytest.mark.parametrize("surgery", ["blurpool", "squeeze_excite"])
def test_surgery_mid_training_with_adam_state(surgery: str) -> None:
    """A transform applied at step 1 with ``optimizers=``: the resumed run builds the model,
    applies the same transform, then builds the optimizer and loads both states."""

    def transform(model: nn.Module, opt: torch.optim.Optimizer | None) -> None:
        if surgery == "blurpool":
            F.apply_blurpool(model, min_channels=0, optimizers=opt)
        else:
            F.apply_se(model, latent_channels=4, min_channels=8, optimizers=opt)

    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        return {"model": model, "opt": torch.optim.Adam(model.parameters(), lr=1e-2)}

    def step(objs: Objects, i: int) -> None:
        if i == 1:
            before = len(list(objs["model"].modules()))
            transform(objs["model"], objs["opt"])
            assert len(list(objs["model"].modules())) > before or surgery == "blurpool"
            assert any(type(m).__name__.startswith("Blur") for m in objs["model"].modules()) or (
                surgery != "blurpool"
            )
        sgd_step(objs, *_batch(i))

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        transform(objs["model"], None)
        objs["opt"] = torch.optim.Adam(objs["model"].parameters(), lr=1e-2)
        _load_model_and_opt(objs, ck)

    assert_resumes_exactly(make, step, _model_and_opt, load)


@pytest.mark.parametrize("method", ["block", "sample"])
@pytest.mark.parametrize("skip_dropped", [True, False])
def test_stochastic_depth(method: str, skip_dropped: bool) -> None:
    """Issue 24: the drop decisions and the rate set from the loop resume from the model's
    ``state_dict()`` alone; the resumed model is converted with another seed (``seed=None``:
    derived from torch's initial seed, which differs in the new process)."""

    def make(seed: int) -> Objects:
        model = small_resnet(seed)
        F.apply_stochastic_depth(
            model, method, "ResNetBasicBlock", drop_rate=0.5, skip_dropped=skip_dropped
        )
        return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)}

    def step(objs: Objects, i: int) -> None:
        if i % 2 == 0:  # the warm-up, set from the loop every other step (not at the resume)
            F.set_stochastic_depth_drop_rate(objs["model"], 0.2 + 0.1 * i)
        sgd_step(objs, *_batch(i))

    assert_resumes_exactly(make, step, _model_and_opt, _load_model_and_opt, steps=7)


def test_stochastic_depth_timm_vit() -> None:
    timm = pytest.importorskip("timm")

    def make(seed: int) -> Objects:
        torch.manual_seed(seed)
        model = timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=16, depth=2
        )
        F.apply_stochastic_depth(model, "block", "TimmViTBlock", drop_rate=0.5)
        return {"model": model, "opt": torch.optim.AdamW(model.parameters(), lr=1e-3)}

    assert_resumes_exactly(
        make, lambda o, i: sgd_step(o, *_batch(i)), _model_and_opt, _load_model_and_opt
    )


@pytest.mark.slow
@pytest.mark.compile
@pytest.mark.parametrize("method", ["block", "sample"])
def test_stochastic_depth_compiled(method: str) -> None:
    """Compiled, the decisions hash (seed, block, draw count) on the device: the model's
    ``state_dict()`` alone resumes them (torch's RNG state is not saved, and the harness
    reseeds it differently before the resumed half)."""
    torch._dynamo.reset()

    def make(seed: int) -> Objects:
        model = small_resnet(seed)
        F.apply_stochastic_depth(model, method, "ResNetBasicBlock", drop_rate=0.5)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        forward = torch.compile(model, backend="aot_eager", fullgraph=True)
        return {"model": model, "forward": forward, "opt": opt}

    def step(objs: Objects, i: int) -> None:
        x, y = _batch(i)
        objs["model"].train()
        objs["opt"].zero_grad(set_to_none=True)
        nnf.cross_entropy(objs["forward"](x), y).backward()
        objs["opt"].step()

    assert_resumes_exactly(make, step, _model_and_opt, _load_model_and_opt, steps=4)


def test_layer_freezing() -> None:
    """``freeze_layers`` is a function of the epoch: the resumed run calls it for the current
    epoch before loading the optimizer state (which was saved without the frozen layers)."""
    epochs = 6

    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)}

    def step(objs: Objects, i: int) -> None:
        F.freeze_layers(objs["model"], objs["opt"], i, epochs, freeze_start=0.3, freeze_level=0.6)
        sgd_step(objs, *_batch(i))

    def save(objs: Objects) -> dict[str, Any]:
        return {**_model_and_opt(objs), "epoch": epochs // 2}

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        objs["model"].load_state_dict(ck["model"])
        F.freeze_layers(
            objs["model"], objs["opt"], ck["epoch"] - 1, epochs, freeze_start=0.3, freeze_level=0.6
        )
        objs["opt"].load_state_dict(ck["opt"])

    assert_resumes_exactly(make, step, save, load, steps=epochs)


# --------------------------------------------------------------------------- data-side randomness


def test_selective_backprop_and_progressive_resizing_with_saved_generator() -> None:
    """Both are functions of the step and of the generator passed: saving the generator's
    state resumes them (sequence length warm-up draws nothing: nothing to save)."""

    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return {"model": model, "opt": opt, "gen": torch.Generator().manual_seed(seed + 5)}

    def step(objs: Objects, i: int) -> None:
        x, y = _batch(i)
        x, y = F.resize_inputs(x, y, 0.75, mode="crop", generator=objs["gen"])
        x, y = F.select_using_loss(
            x, y, objs["model"], nnf.cross_entropy, keep=0.5, generator=objs["gen"]
        )
        sgd_step(objs, x, y)

    def save(objs: Objects) -> dict[str, Any]:
        return {**_model_and_opt(objs), "gen": objs["gen"].get_state()}

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        _load_model_and_opt(objs, ck)
        objs["gen"].set_state(ck["gen"])

    assert_resumes_exactly(make, step, save, load)


def test_batched_augmentation_generator() -> None:
    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        gen = torch.Generator().manual_seed(seed + 11)
        return {
            "model": model,
            "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            "gen": gen,
            "augmix": augment.BatchAugMix(severity=3, width=2, generator=gen),
            "randaugment": augment.BatchRandAugment(severity=5, depth=2, generator=gen),
        }

    def step(objs: Objects, i: int) -> None:
        x, y = _batch(i)
        x = torch.sigmoid(x)  # images in [0, 1]
        x = objs["augmix"](x) if i % 2 else objs["randaugment"](x)
        sgd_step(objs, x, y)

    def save(objs: Objects) -> dict[str, Any]:
        return {**_model_and_opt(objs), "gen": objs["gen"].get_state()}

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        _load_model_and_opt(objs, ck)
        objs["gen"].set_state(ck["gen"])

    assert_resumes_exactly(make, step, save, load)


def test_pil_augmentation_rng() -> None:
    """The PIL transforms draw from the ``rng`` they were given (in the main process): saving
    ``rng.getstate()`` resumes them."""

    def make(seed: int) -> Objects:
        model = small_cnn(seed)
        rng = random.Random(seed + 21)
        return {
            "model": model,
            "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            "rng": rng,
            "augmix": augment.AugMix(severity=3, width=2, rng=rng),
            "randaugment": augment.RandAugment(severity=5, depth=2, rng=rng),
        }

    def step(objs: Objects, i: int) -> None:
        x, y = _batch(i)
        images = (torch.sigmoid(x) * 255).to(torch.uint8)
        transform = objs["augmix"] if i % 2 else objs["randaugment"]
        x = torch.stack([transform(image) for image in images])
        x = x.float() / 255 if x.dtype == torch.uint8 else x
        sgd_step(objs, x, y)

    def save(objs: Objects) -> dict[str, Any]:
        return {**_model_and_opt(objs), "rng": objs["rng"].getstate()}

    def load(objs: Objects, ck: dict[str, Any]) -> None:
        _load_model_and_opt(objs, ck)
        objs["rng"].setstate(ck["rng"])

    assert_resumes_exactly(make, step, save, load)


# --------------------------------------------------------------------------- per rank (2 gloo ranks)


def _ddp_stochastic_depth_resume(rank: int, world_size: int, method: str) -> None:
    """Rank 0 saves; every rank loads rank 0's checkpoint into fresh objects (converted with
    another seed) and must continue exactly as it would have without the interruption, with
    rank-specific streams (``'sample'``; ``'block'`` with ``use_same_gpu_seed=False``)."""
    import torch.distributed as dist

    from tests.test_distributed import rank_batch, tiny_resnet

    def build(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module]:
        model = tiny_resnet()
        F.apply_stochastic_depth(
            model, method, "ResNetBasicBlock", drop_rate=0.5, use_same_gpu_seed=False, seed=seed
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=method == "block")
        return model, opt, ddp

    def train(ddp: nn.Module, opt: torch.optim.Optimizer, steps: range) -> None:
        for step in steps:
            x, y = rank_batch(rank, step)
            opt.zero_grad(set_to_none=True)
            nnf.cross_entropy(ddp(x), y).backward()
            opt.step()

    model, opt, ddp = build(5)
    train(ddp, opt, range(4))
    straight = [p.detach().clone() for p in model.parameters()]
    model, opt, ddp = build(5)
    train(ddp, opt, range(2))
    box: list[Any] = [None]
    if rank == 0:
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
        box[0] = buffer.getvalue()
    dist.broadcast_object_list(box, src=0)
    model, opt, ddp = build(77)
    checkpoint = torch.load(io.BytesIO(box[0]), weights_only=True)
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["opt"])
    train(ddp, opt, range(2, 4))
    for want, got in zip(straight, model.parameters(), strict=True):
        assert torch.equal(want, got), f"rank {rank}: the resumed weights differ"


def scenario_resume_stochastic_depth_sample(rank: int, world_size: int) -> None:
    _ddp_stochastic_depth_resume(rank, world_size, "sample")


def scenario_resume_stochastic_depth_block_per_rank(rank: int, world_size: int) -> None:
    _ddp_stochastic_depth_resume(rank, world_size, "block")


def scenario_device_draws_per_rank_under_ddp(rank: int, world_size: int) -> None:
    """DDP broadcasts rank 0's buffers (the draw counters and seed keys among them) before
    every forward: the device draws must still be the rank's own for ``'sample'`` and for
    unshared ``'block'`` streams, and equal on every rank for shared ones."""
    import torch.distributed as dist

    from tests.test_distributed import gather_flat, rank_batch, tiny_resnet

    for method, shared in (("sample", True), ("block", False), ("block", True)):
        model = tiny_resnet()
        F.apply_stochastic_depth(
            model, method, "ResNetBasicBlock", drop_rate=0.5, use_same_gpu_seed=shared, seed=4
        )
        ddp = nn.parallel.DistributedDataParallel(model)
        ddp.train()(rank_batch(rank, 0)[0])  # the broadcast of rank 0's buffers
        blocks = [m for m in model.modules() if isinstance(m, F.StochasticBlock)]
        ones = torch.ones(16, 1, 1, 1)
        draws = torch.stack([b.device_scale(ones).flatten() for b in blocks for _ in range(4)])
        gathered = gather_flat([draws])
        same = all(torch.equal(g, gathered[0]) for g in gathered[1:])
        assert same == (method == "block" and shared), f"{method}, shared={shared}: same={same}"
    dist.barrier()


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(
    "scenario",
    [
        scenario_resume_stochastic_depth_sample,
        scenario_resume_stochastic_depth_block_per_rank,
        scenario_device_draws_per_rank_under_ddp,
    ],
    ids=["sample", "block_per_rank", "device_draws_per_rank"],
)
def test_stochastic_depth_under_ddp(scenario: Callable[[int, int], None]) -> None:
    from tests.test_distributed import launch

    launch(scenario)
