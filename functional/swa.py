"""Stochastic Weight Averaging for custom training loops, on top of ``torch.optim.swa_utils``.

Paper: P. Izmailov, D. Podoprikhin, T. Garipov, D. Vetrov, A. G. Wilson, "Averaging Weights
Leads to Wider Optima and Better Generalization", UAI 2018, https://arxiv.org/abs/1803.05407.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from functional._args import (
    check_bool,
    check_in_range,
    check_int,
    check_module,
    check_one_of,
    check_positive,
)
from functional._numeric import round_half_up

__all__ = ["SWA"]


class _CallWithKeywords(nn.Module):
    """Adapter so ``update_bn`` can feed dict batches as keyword arguments: ``model(**batch)``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Mapping[str, Any]) -> Any:
        return self.module(**batch)


def _move(value: Any, device: torch.device | None) -> Any:
    if device is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, Mapping):
        return {k: _move(v, device) for k, v in value.items()}
    return value


class SWA:
    r"""Stochastic weight averaging driven from a custom loop: one ``swa.step()`` per unit.

    A *unit* is whatever you step your LR scheduler by: an epoch (``total_steps`` = number of
    epochs) or a batch (``total_steps`` = number of optimizer steps). Call :meth:`step` at the
    end of every unit *instead of* ``scheduler.step()``. With
    :math:`s = \operatorname{round}(\text{swa_start} \cdot \text{total_steps})` (halves up):

    - units :math:`0 \ldots s-1` are ordinary training: :meth:`step` steps your ``scheduler``
      (if given);
    - units :math:`s, s+1, \ldots` form the SWA phase. At the end of unit :math:`s-1` (at
      construction when :math:`s = 0`) a ``torch.optim.swa_utils.SWALR`` takes over the
      optimizer's learning rate: it anneals from the current rate to ``swa_lr`` over
      ``anneal_steps`` units (``'cos'`` or ``'linear'``; 0 switches at once), and then holds it.
      ``swa_lr=None`` keeps each param group's current rate, constant.
    - the weights are averaged (``torch.optim.swa_utils.AveragedModel``, an equal-weight running
      mean) at the end of SWA-phase units :math:`i` with
      :math:`(i - s + 1) \bmod \text{update_interval} = 0`: after units
      :math:`s + k - 1, s + 2k - 1, \ldots` for ``update_interval=k``. The averaged copy is made
      at the first average, so the pre-SWA phase costs no memory.

    After training, call :meth:`update_bn` with a training loader to recompute the averaged
    model's BatchNorm statistics (its buffers are otherwise a copy of the model's at the first
    average, unless ``use_buffers=True``), then evaluate :attr:`averaged_model` (or load
    ``swa.averaged_model.module.state_dict()`` into your model). :meth:`state_dict` and
    :meth:`load_state_dict` checkpoint the counters, the averaged weights and the SWALR state;
    checkpoint the model, optimizer and scheduler yourself as usual.

    Under ``DistributedDataParallel`` or ``torch.compile``, pass the bare module (``ddp.module``,
    the module you compiled): the average is a copy of it, and every rank holds the same one.

    Args:
        model: the model being trained.
        optimizer: its optimizer (a ``SAMOptimizer`` works too).
        total_steps: number of units in the whole run, >= 1.
        swa_start: fraction of the run before the SWA phase, in [0, 1); the SWA phase must
            contain at least one unit.
        swa_lr: the SWA learning rate (a float, or one per param group), or None to keep the
            learning rate the SWA phase starts with.
        anneal_steps: units over which SWALR anneals to ``swa_lr``, >= 0.
        anneal_strategy: ``'cos'`` or ``'linear'``.
        update_interval: average every ``update_interval`` units of the SWA phase, >= 1.
        scheduler: your LR scheduler for the pre-SWA phase, stepped by :meth:`step`; it is no
            longer stepped once the SWA phase begins.
        device: where to keep the averaged copy (default: the model's device).
        use_buffers: average the buffers too (``AveragedModel(use_buffers=True)``), which makes
            :meth:`update_bn` optional.

    Example:
        >>> import torch
        >>> from functional import SWA
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
        ...                             torch.nn.Linear(8, 1))
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        >>> swa = SWA(model, opt, total_steps=10, swa_start=0.7, swa_lr=0.05, scheduler=sched)
        >>> data = [(torch.randn(16, 4), torch.randn(16, 1)) for _ in range(3)]
        >>> for epoch in range(10):
        ...     for x, y in data:
        ...         opt.zero_grad()
        ...         torch.nn.functional.mse_loss(model(x), y).backward()
        ...         opt.step()
        ...     averaged = swa.step()
        >>> swa.n_averaged
        3
        >>> swa.update_bn(data)
        >>> prediction = swa.averaged_model(torch.randn(2, 4))
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optimizer,
        total_steps: int,
        *,
        swa_start: float = 0.8,
        swa_lr: float | list[float] | None = None,
        anneal_steps: int = 0,
        anneal_strategy: str = "cos",
        update_interval: int = 1,
        scheduler: LRScheduler | None = None,
        device: torch.device | str | None = None,
        use_buffers: bool = False,
    ) -> None:
        self.model = check_module(model)
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.total_steps = check_int(total_steps, "total_steps", minimum=1)
        self.swa_start = check_in_range(swa_start, "swa_start", 0.0, 1.0, high_inclusive=False)
        self.start_step = round_half_up(self.swa_start * self.total_steps)
        if self.start_step >= self.total_steps:
            raise ValueError(
                f"swa_start={swa_start} with total_steps={total_steps} leaves no unit for the SWA "
                f"phase (it would start at unit {self.start_step}); lower swa_start"
            )
        if swa_lr is not None:
            lrs = swa_lr if isinstance(swa_lr, (list, tuple)) else [swa_lr]
            if isinstance(swa_lr, (list, tuple)) and len(lrs) != len(optimizer.param_groups):
                raise ValueError(
                    f"swa_lr must be a float or one float per param group "
                    f"({len(optimizer.param_groups)}), got {len(lrs)} values"
                )
            for lr in lrs:
                check_positive(lr, "swa_lr", allow_zero=True)
        self.swa_lr = swa_lr
        self.anneal_steps = check_int(anneal_steps, "anneal_steps", minimum=0)
        check_one_of(anneal_strategy, "anneal_strategy", ("cos", "linear"))
        self.anneal_strategy = anneal_strategy
        self.update_interval = check_int(update_interval, "update_interval", minimum=1)
        if scheduler is not None:
            if not isinstance(scheduler, LRScheduler):
                raise TypeError(
                    f"scheduler must be a torch LR scheduler or None, got {type(scheduler).__name__}"
                )
            if scheduler.optimizer is not optimizer and not (
                getattr(optimizer, "base_optimizer", None) is scheduler.optimizer
                or getattr(scheduler.optimizer, "base_optimizer", None) is optimizer
            ):
                raise ValueError("scheduler must drive the same optimizer as the one passed to SWA")
        self.scheduler = scheduler
        check_bool(use_buffers, "use_buffers")
        self.device = None if device is None else torch.device(device)
        self.use_buffers = use_buffers
        self.steps_done = 0
        self.swa_scheduler: SWALR | None = None
        self._averaged: AveragedModel | None = None
        if self.start_step == 0:
            self._start_swa_lr()

    # ------------------------------------------------------------------------------------------
    @property
    def averaged_model(self) -> AveragedModel | None:
        """The ``AveragedModel`` (call it like the model; ``.module`` is the averaged copy), or
        None before the first average."""
        return self._averaged

    @property
    def n_averaged(self) -> int:
        """How many snapshots of the weights the average holds."""
        return 0 if self._averaged is None else int(self._averaged.n_averaged.item())

    @property
    def in_swa_phase(self) -> bool:
        """Whether the unit now being trained belongs to the SWA phase."""
        return self.steps_done >= self.start_step

    def _start_swa_lr(self) -> None:
        swa_lr = self.swa_lr
        if swa_lr is None:
            swa_lr = [float(group["lr"]) for group in self.optimizer.param_groups]
        elif isinstance(swa_lr, tuple):
            swa_lr = list(swa_lr)
        self.swa_scheduler = SWALR(
            self.optimizer,
            swa_lr=swa_lr,  # type: ignore[arg-type]
            anneal_epochs=self.anneal_steps,
            anneal_strategy=self.anneal_strategy,  # type: ignore[arg-type]
        )

    def _new_averaged_model(self) -> AveragedModel:
        return AveragedModel(self.model, device=self.device, use_buffers=self.use_buffers)

    def step(self) -> bool:
        """Close the current unit: average if due, then step the right LR scheduler.

        Returns:
            True when the weights were averaged at this call.
        """
        unit = self.steps_done
        averaged = False
        if unit >= self.start_step and (unit - self.start_step + 1) % self.update_interval == 0:
            if self._averaged is None:
                self._averaged = self._new_averaged_model()
            self._averaged.update_parameters(self.model)
            averaged = True
        self.steps_done += 1
        if self.steps_done < self.start_step:
            if self.scheduler is not None:
                self.scheduler.step()
        elif self.steps_done == self.start_step:
            self._start_swa_lr()
        elif self.swa_scheduler is not None:
            self.swa_scheduler.step()
        return averaged

    def _inputs(self, loader: Iterable[Any], input_key: str | None) -> Iterator[Any]:
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                if len(batch) == 0:
                    raise ValueError("update_bn: a batch is an empty sequence")
                batch = batch[0]
            elif isinstance(batch, Mapping) and input_key is not None:
                if input_key not in batch:
                    raise ValueError(
                        f"update_bn: input_key={input_key!r} is not in the batch keys {sorted(batch)}"
                    )
                batch = batch[input_key]
            yield _move(batch, self._average_device())

    def _average_device(self) -> torch.device | None:
        if self._averaged is None:
            return None
        for p in self._averaged.parameters():
            return p.device
        return None

    def update_bn(self, loader: Iterable[Any], *, input_key: str | None = None) -> None:
        """Recompute the BatchNorm statistics of the averaged model with one pass over ``loader``.

        Uses ``torch.optim.swa_utils.update_bn`` (cumulative averages over the batches, the
        model in train mode for the pass and restored afterwards, no gradients). Batches may be
        tensors, ``(inputs, targets, ...)`` tuples or lists (the first item is the input), or
        dicts: with ``input_key`` the model gets ``batch[input_key]``, otherwise ``model(**batch)``.
        Inputs are moved to the averaged model's device.
        """
        if self._averaged is None:
            raise RuntimeError(
                "SWA.update_bn: nothing has been averaged yet; call swa.step() at the end of "
                f"every unit until the SWA phase (unit {self.start_step} on) has averaged once"
            )
        if input_key is not None and not isinstance(input_key, str):
            raise TypeError(f"input_key must be a str or None, got {type(input_key).__name__}")
        model: nn.Module = self._averaged
        inputs = self._inputs(loader, input_key)
        try:
            first = next(inputs)
        except StopIteration:
            raise ValueError("update_bn: loader yielded no batches") from None
        if isinstance(first, Mapping):
            model = _CallWithKeywords(self._averaged.module)

        def chained() -> Iterator[Any]:
            yield first
            yield from inputs

        update_bn(chained(), model)

    # ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters, averaged weights (and buffers) and the SWALR state."""
        swa_sched = None
        if self.swa_scheduler is not None:
            swa_sched = {
                k: v for k, v in self.swa_scheduler.state_dict().items() if k != "anneal_func"
            }
        return {
            "steps_done": self.steps_done,
            "start_step": self.start_step,
            "averaged_model": None if self._averaged is None else self._averaged.state_dict(),
            "swa_scheduler": swa_sched,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`, for an ``SWA`` built with the same arguments."""
        keys = {"steps_done", "start_step", "averaged_model", "swa_scheduler"}
        if not isinstance(state_dict, Mapping) or set(state_dict) != keys:
            raise ValueError(f"state_dict must be a mapping with keys {sorted(keys)}")
        if state_dict["start_step"] != self.start_step:
            raise ValueError(
                f"state_dict was saved with the SWA phase starting at unit "
                f"{state_dict['start_step']}, this SWA starts it at {self.start_step}"
            )
        self.steps_done = check_int(state_dict["steps_done"], "state_dict['steps_done']", minimum=0)
        if state_dict["averaged_model"] is None:
            self._averaged = None
        else:
            self._averaged = self._new_averaged_model()
            self._averaged.load_state_dict(state_dict["averaged_model"])
        if state_dict["swa_scheduler"] is None:
            self.swa_scheduler = None
        else:
            if self.swa_scheduler is None:
                saved_lrs = [group["lr"] for group in self.optimizer.param_groups]
                self._start_swa_lr()
                for group, lr in zip(self.optimizer.param_groups, saved_lrs, strict=True):
                    group["lr"] = lr  # SWALR's construction may set it; the optimizer's own wins
            assert self.swa_scheduler is not None  # _start_swa_lr built it if there was none
            self.swa_scheduler.load_state_dict(dict(state_dict["swa_scheduler"]))

    def __repr__(self) -> str:
        return (
            f"SWA(total_steps={self.total_steps}, swa_start={self.swa_start} (unit "
            f"{self.start_step}), swa_lr={self.swa_lr}, anneal_steps={self.anneal_steps}, "
            f"update_interval={self.update_interval}, steps_done={self.steps_done}, "
            f"n_averaged={self.n_averaged})"
        )
