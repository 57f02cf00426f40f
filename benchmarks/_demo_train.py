"""The demo's model and training runs: one :class:`Run` per (algorithms, budget), advanced in
chunks of steps so that several runs can be interleaved on the same machine load.

Every run builds the same seeded residual CNN, draws the same data order (its own generator,
untouched by the algorithms' draws, which come from a second one), and follows its own full
one-cycle LR schedule: the reference schedule, ``OneCycleLR`` over ``ref_steps``, rescaled to
the run's budget by ``F.scale_scheduler``. Only the algorithms differ.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as TF
from torch import nn
from torchvision.models.resnet import BasicBlock

import augment
import functional as F

from ._demo_data import Dataset
from ._study import Point, TimedRun

N_CLASSES = 10
# name -> what it does here (the ablation's rows, in this order)
ALGORITHMS = {
    "channels_last": "F.apply_channels_last and channels_last inputs",
    "label_smoothing": "F.smooth_labels, alpha 0.1",
    "ema": "evaluate F.compute_ema weights, half-life 2% of the run",
    "progressive_resizing": "F.resize_inputs from 0.5x, full size for the last 30%",
    "selective_backprop": "F.select_using_loss keeps the harder half, 20-70% of the run",
    "layer_freezing": "F.freeze_layers from 50% of the run, up to 50% of the layers",
    "blurpool": "F.apply_blurpool on the strided convolutions",
    "mixup": "F.mixup_batch, alpha 0.2",
    "cutmix": "F.cutmix_batch, alpha 1.0",
    "sam": "F.SAMOptimizer, rho 0.05, every 5th step",
    "stochastic_depth": "F.apply_stochastic_depth, block mode, drop rate 0.1",
    "augmix": "augment.BatchAugMix on the training batches",
    "randaugment": "augment.BatchRandAugment on the training batches",
}
FREEZE_CALLS = 8  # layer freezing is re-evaluated this many times per run


@dataclass(frozen=True)
class Config:
    """What every run of one study shares."""

    width: int = 16
    batch_size: int = 128
    lr: float = 0.2
    weight_decay: float = 5e-4
    ref_steps: int = 1000  # the length of the reference (1.0x) schedule, in steps


def resnet(width: int = 16) -> nn.Sequential:
    """A small residual CNN for 1-channel images: a stem and three torchvision BasicBlocks."""

    def block(cin: int, cout: int, stride: int) -> BasicBlock:
        down = None
        if stride != 1 or cin != cout:
            down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )
        return BasicBlock(cin, cout, stride, down)

    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        block(width, width, 1),
        block(width, 2 * width, 2),
        block(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, N_CLASSES),
    )


def _soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.sum(-targets * TF.log_softmax(logits, dim=1), dim=1).mean()


class Run(TimedRun):
    """One training run, advanced ``n`` steps at a time by :meth:`advance`.

    ``split`` is what :meth:`evaluate` reads once at the end: ``"val"`` (the held-out
    validation images) for the runs that make a choice, ``"test"`` for the final runs.
    """

    def __init__(
        self,
        arm: str,
        algorithms: tuple[str, ...],
        budget: float,
        data: Dataset,
        cfg: Config,
        *,
        seed: int = 0,
        split: str = "test",
    ) -> None:
        unknown = sorted(set(algorithms) - set(ALGORITHMS))
        if unknown:
            raise ValueError(f"unknown algorithm(s) {unknown}; choose from {sorted(ALGORITHMS)}")
        if split not in ("val", "test"):
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        self.algos = frozenset(algorithms)
        self.data, self.cfg, self.seed, self.split = data, cfg, seed, split
        self.steps_per_epoch = len(data.y_train) // cfg.batch_size
        if self.steps_per_epoch < 1:
            raise ValueError(f"{len(data.y_train)} training images < batch size {cfg.batch_size}")
        self.total_steps = max(1, math.floor(cfg.ref_steps * budget + 0.5))
        self.point = Point(arm, tuple(algorithms), budget, seed, self.total_steps)
        self.point.extra["epochs"] = self.total_steps / self.steps_per_epoch
        self.point.extra["images"] = 0
        self.step = 0
        self._build()

    # -- set-up ------------------------------------------------------------------------------

    def _build(self) -> None:
        cfg = self.cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model = resnet(cfg.width)
        base = torch.optim.SGD(
            self.model.parameters(),
            lr=cfg.lr,
            momentum=0.9,
            nesterov=True,
            weight_decay=cfg.weight_decay,
        )
        if "blurpool" in self.algos:
            F.apply_blurpool(self.model, optimizers=base, min_channels=1)
        if "stochastic_depth" in self.algos:
            F.apply_stochastic_depth(
                self.model, "block", "ResNetBasicBlock", drop_rate=0.1, seed=self.seed
            )
        if "channels_last" in self.algos:
            F.apply_channels_last(self.model)
        self.base_opt = base
        self.opt: torch.optim.Optimizer = (
            F.SAMOptimizer(base, rho=0.05, interval=5) if "sam" in self.algos else base
        )
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            base, max_lr=cfg.lr, total_steps=cfg.ref_steps, pct_start=0.25
        )
        # The budget's own full schedule: the reference one, rescaled to this run's length.
        F.scale_scheduler(self.scheduler, self.point.budget, orig_max_epochs=cfg.ref_steps)
        self.ema = copy.deepcopy(self.model) if "ema" in self.algos else None
        self.smoothing = F.ema_smoothing(half_life=max(1.0, 0.02 * self.total_steps))
        self.order_gen = torch.Generator().manual_seed(self.seed)
        self.algo_gen = torch.Generator().manual_seed(self.seed + 10_000)
        self.batch_aug: nn.Module | None = None
        if "augmix" in self.algos:
            self.batch_aug = augment.BatchAugMix(severity=3, width=3, generator=self.algo_gen)
        elif "randaugment" in self.algos:
            self.batch_aug = augment.BatchRandAugment(severity=9, depth=2, generator=self.algo_gen)
        self.order = torch.empty(0, dtype=torch.long)

    # -- one step ----------------------------------------------------------------------------

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        i = self.step % self.steps_per_epoch
        if i == 0:
            self.order = torch.randperm(len(self.data.y_train), generator=self.order_gen)
        idx = self.order[i * self.cfg.batch_size : (i + 1) * self.cfg.batch_size]
        return self.data.x_train[idx], self.data.y_train[idx]

    def _inputs(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's inputs and soft targets after the data-side algorithms."""
        progress, gen = self.step / self.total_steps, self.algo_gen
        if self.batch_aug is not None:
            x = self.batch_aug(x)
        if "progressive_resizing" in self.algos:
            scale = F.progressive_resizing_scale(progress, initial_scale=0.5, finetune_fraction=0.3)
            x, _ = F.resize_inputs(x, y, scale, generator=gen)
        if "selective_backprop" in self.algos and F.should_selective_backprop(
            progress, self.step, start=0.2, end=0.7, interrupt=2
        ):
            x, y = F.select_using_loss(x, y, self.model, TF.cross_entropy, keep=0.5, generator=gen)
        if "channels_last" in self.algos:
            x = x.contiguous(memory_format=torch.channels_last)
        if "mixup" in self.algos:
            lam = F.gen_interpolation_lambda(0.2, generator=gen)
            x, targets, _ = F.mixup_batch(x, y, lam, N_CLASSES, generator=gen)
        elif "cutmix" in self.algos:
            x, targets, _ = F.cutmix_batch(x, y, N_CLASSES, alpha=1.0, generator=gen)
        else:
            targets = TF.one_hot(y, N_CLASSES).float()
        return x, targets

    def _loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.model(x)
        if "label_smoothing" in self.algos:
            targets = F.smooth_labels(logits, targets, alpha=0.1)
        return _soft_cross_entropy(logits, targets)

    def _freeze(self) -> None:
        every = max(1, self.total_steps // FREEZE_CALLS)
        if "layer_freezing" in self.algos and self.step % every == 0:
            F.freeze_layers(
                self.model,
                self.base_opt,
                self.step,
                self.total_steps,
                freeze_start=0.5,
                freeze_level=0.5,
            )

    def _one_step(self) -> None:
        self._freeze()
        x, y = self._batch()
        x, targets = self._inputs(x, y)

        def closure() -> torch.Tensor:
            self.opt.zero_grad(set_to_none=True)
            loss = self._loss(x, targets)
            loss.backward()
            return loss

        if "sam" in self.algos:
            self.opt.step(closure)
        else:
            closure()
            self.opt.step()
        self._end_step()
        self.point.extra["images"] += len(y)

    # -- public ------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, batch: int = 1000) -> float:
        """Accuracy on ``split`` of the weights evaluated (the EMA copy when there is one)."""
        start = time.perf_counter()
        model = self.ema if self.ema is not None else self.model
        model.eval()
        x_all, y_all = (
            (self.data.x_val, self.data.y_val)
            if self.split == "val"
            else (self.data.x_test, self.data.y_test)
        )
        correct = 0
        for i in range(0, len(y_all), batch):
            x = x_all[i : i + batch]
            if "channels_last" in self.algos:
                x = x.contiguous(memory_format=torch.channels_last)
            correct += int((model(x).argmax(1) == y_all[i : i + batch]).sum())
        model.train()
        self.point.score = correct / len(y_all)
        self.point.extra[f"{self.split}_accuracy"] = self.point.score
        self.point.extra["eval_wall_s"] = time.perf_counter() - start
        return self.point.score
