"""Gyro dropout: dropout restricted to a few pre-selected subnetworks, trained in turn.

Plain dropout draws a fresh mask for every sample at every step, so a network of ``F`` units
trains a different subnetwork almost every time and none of them for long. Gyro dropout
(Park et al., MLSys 2022) fixes ``sigma`` masks (subnetworks) once, and trains ``tau`` of them
at a time: the batch is cut into ``tau`` contiguous groups, group ``g`` uses active mask ``g``,
and a new set of ``tau`` active masks is chosen every ``iter_num`` training steps, with

.. math::

    \\text{iter\\_num} = \\left\\lfloor \\frac{\\text{iters\\_per\\_epoch} \\cdot
    \\text{max\\_epoch}}{\\sigma} \\right\\rfloor \\cdot \\tau

(at least 1), so that every pre-selected subnetwork is trained for about the same number of
samples over the run. A kept unit is scaled by :math:`1/(1-p)` as in ``nn.Dropout``.

Where the randomness comes from: each layer holds a 63-bit ``seed`` and its step counter
``training_step`` as buffers. Mask ``s`` is the pure function ``bits(seed, s, unit) >= p·2³²``
of a counter-based hash (the same integer streams as stochastic depth's device decisions), and
the ``tau`` subnetworks of cycle ``c`` are the ``tau`` smallest hashes ``bits(seed, c, s)``
over ``s < sigma``. Nothing is drawn from a ``torch.Generator`` or the global random state at
a training step, so the forward traces into one ``torch.compile`` graph, reads nothing back
on the host, gives the same masks eagerly and compiled, and a run restored from a
``state_dict`` (seed and step) continues bit for bit. The seed itself is drawn once, when the
layer is built, from ``generator=`` (or torch's default generator, as weight initialisation
is); the masks do not depend on the number of units, so any input width works.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from functional._args import check_generator, check_in_range, check_int, check_module
from functional._deploy import NotScriptable
from functional._policies import ModelT, NoEffectReport
from functional.stochastic_depth.generators import draw_bits
from surgery import (
    OptimizerArg,
    as_optimizer_list,
    fill_missing_entries,
    replace_module_classes,
)

__all__ = ["GyroDropoutLayer", "apply_gyro_dropout"]

_M32 = 0xFFFFFFFF
_SELECT_DOMAIN = 0x3C6EF372  # keeps the selection stream apart from the mask streams


def _iter_num(iters_per_epoch: int, max_epoch: int, sigma: int, tau: int) -> int:
    """Steps between two selections of active masks (Composer's formula, at least 1)."""
    return max(1, (iters_per_epoch * max_epoch // sigma) * tau)


def _draw_seed(generator: torch.Generator | None) -> int:
    return int(torch.randint(0, 2**62, (), generator=generator, dtype=torch.int64))


class GyroDropoutLayer(NotScriptable, nn.Dropout):
    """Dropout that trains ``tau`` of ``sigma`` fixed subnetworks at a time (gyro dropout).

    In training mode, sample ``i`` of a batch of ``B`` uses the active mask
    ``floor(i·tau/B)`` (contiguous groups of ``B/tau`` samples when ``tau`` divides ``B``,
    as in Composer); a mask covers the last dimension (the units) and is shared by the
    dimensions in between (a ``(B, L, F)`` sequence uses one mask per sample for every
    position). The output is :math:`x \\cdot m \\cdot 1/(1-p)` and each training forward
    advances ``training_step``; the active set changes every :attr:`iter_num` steps. In eval
    mode the layer is the identity.

    See the module docstring for where the randomness comes from and :func:`apply_gyro_dropout`
    for the arguments. ``seed`` (an int) fixes the masks; otherwise one is drawn from
    ``generator`` (or torch's default generator) when the layer is built.

    Shape:
        - Input: (B, *, F) with at least 2 dimensions.
        - Output: the input's shape, dtype and device.

    Example:
        >>> layer = GyroDropoutLayer(10, 5, 0.5, sigma=8, tau=2, seed=0)
        >>> y = layer(torch.ones(4, 6))
        >>> torch.equal(y[0], y[1]), sorted(set(y.flatten().tolist())) <= [0.0, 2.0]
        (True, True)
    """

    seed: torch.Tensor
    training_step: torch.Tensor

    def __init__(
        self,
        iters_per_epoch: int,
        max_epoch: int,
        p: float = 0.5,
        sigma: int = 256,
        tau: int = 16,
        *,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        p = check_in_range(p, "p", 0.0, 1.0, high_inclusive=False)
        super().__init__(p)
        self.iters_per_epoch = check_int(iters_per_epoch, "iters_per_epoch", minimum=1)
        self.max_epoch = check_int(max_epoch, "max_epoch", minimum=1)
        self.sigma = check_int(sigma, "sigma", minimum=1)
        self.tau = check_int(tau, "tau", minimum=1)
        if self.tau > self.sigma:
            raise ValueError(f"tau must be <= sigma ({self.sigma}), got {self.tau}")
        check_generator(generator)
        if seed is None:
            seed = _draw_seed(generator)
        seed = check_int(seed, "seed", minimum=0) & ((1 << 63) - 1)
        self.iter_num = _iter_num(self.iters_per_epoch, self.max_epoch, self.sigma, self.tau)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.int64))
        self.register_buffer("training_step", torch.zeros((), dtype=torch.int64))
        self._last_shape: tuple[int, int] | None = None

    def _keys(self, domain: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        seed = self.seed
        return (seed & _M32) ^ domain, (seed >> 31) & _M32

    def active_subnetworks(self, step: torch.Tensor | int) -> torch.Tensor:
        """The indices (in ``[0, sigma)``, shape ``(tau,)``) of the masks active at ``step``."""
        step = torch.as_tensor(step, dtype=torch.int64, device=self.seed.device)
        cycle = step // self.iter_num
        key_a, key_b = self._keys(_SELECT_DOMAIN)
        candidates = torch.arange(self.sigma, device=self.seed.device)
        scores = draw_bits(cycle * self.sigma + candidates, key_a, key_b)
        return scores.argsort(stable=True)[: self.tau]

    def preselected_masks(
        self, num_features: int, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """All ``sigma`` masks over ``num_features`` units, shape ``(sigma, num_features)``."""
        return self._masks(torch.arange(self.sigma, device=self.seed.device), num_features, dtype)

    def _masks(
        self, subnetworks: torch.Tensor, num_features: int, dtype: torch.dtype
    ) -> torch.Tensor:
        key_a, key_b = self._keys()
        unit_keys = draw_bits(subnetworks, key_a, key_b)[:, None]
        units = torch.arange(num_features, device=subnetworks.device)
        bits = draw_bits(units[None, :], unit_keys, key_b)
        return (bits >= int(self.p * 2**32)).to(dtype)

    def mask(
        self,
        step: torch.Tensor | int,
        batch_size: int,
        num_features: int,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """The ``(batch_size, num_features)`` 0/1 mask the layer applies at ``step``."""
        active = self._masks(self.active_subnetworks(step), num_features, dtype)
        group = torch.arange(batch_size, device=active.device) * self.tau // batch_size
        return active[group]

    @property
    def dropout_mask(self) -> torch.Tensor:
        """The mask of the last training forward (Composer's attribute), ``(B, F)``."""
        if self._last_shape is None:
            raise RuntimeError("dropout_mask is defined after a training forward")
        return self.mask(self.training_step - 1, *self._last_shape)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return input
        if input.ndim < 2:
            raise ValueError(
                f"input must have at least 2 dimensions (B, *, F), got shape {tuple(input.shape)}"
            )
        batch, features = input.shape[0], input.shape[-1]
        self._last_shape = (batch, features)
        mask = self.mask(self.training_step, batch, features, input.dtype).to(input.device)
        self.training_step.add_(1)
        mask = mask.view(batch, *([1] * (input.ndim - 2)), features)
        return input * mask * (1 / (1 - self.p))

    def surgery_remap_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str) -> None:
        """A checkpoint of the plain dropout model has no seed or step: this layer's fill them."""
        fill_missing_entries(state_dict, self, prefix, ("seed", "training_step"))

    def extra_repr(self) -> str:
        return f"p={self.p}, sigma={self.sigma}, tau={self.tau}, iter_num={self.iter_num}"


_REPORT = NoEffectReport("apply_gyro_dropout", "nn.Dropout", skipped="left unchanged: {names}")


def apply_gyro_dropout(
    model: ModelT,
    iters_per_epoch: int,
    max_epoch: int,
    p: float = 0.5,
    sigma: int = 256,
    tau: int = 16,
    *,
    generator: torch.Generator | None = None,
    optimizers: OptimizerArg = None,
) -> ModelT:
    """Replace every ``nn.Dropout`` of ``model`` by a :class:`GyroDropoutLayer`, in place.

    Gyro dropout pre-selects ``sigma`` dropout masks (subnetworks) and trains ``tau`` of them
    at a time, each on a contiguous group of ``B/tau`` samples of the batch; the active set
    changes every ``floor(iters_per_epoch·max_epoch/sigma)·tau`` training forwards (see the
    module docstring for the formula and the random streams). Kept units are scaled by
    ``1/(1-p)``; in eval mode the layers are the identity, so evaluation is unchanged.

    Arguments as Composer's ``apply_gyro_dropout``: ``p`` replaces each dropout's own rate.
    The layers hold no parameters; their ``seed`` and ``training_step`` buffers join the
    ``state_dict``, so a checkpoint resumes the same schedule exactly. Each forward in training
    mode is one step (two forwards per optimizer step count two).

    Args:
        model: the model to change in place.
        iters_per_epoch: training steps per epoch (``len(train_loader)``).
        max_epoch: epochs in the run.
        p: drop probability of a unit in a pre-selected mask, in [0, 1).
        sigma: number of pre-selected masks (subnetworks).
        tau: number of masks active at once, ``1 <= tau <= sigma``; the batch size should be
            a multiple of ``tau`` (otherwise the groups differ in size by one sample).
        generator: where each layer's seed is drawn from (torch's default generator if None).
        optimizers: accepted for uniformity with the other transforms; no parameter changes.

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no ``nn.Dropout`` (or only gyro dropout).

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1))
        >>> model = apply_gyro_dropout(model, 100, 10, p=0.5, sigma=16, tau=4)
        >>> type(model[1]).__name__, model[1].iter_num
        ('GyroDropoutLayer', 248)

    Reference:
        Park, Lee and Seo, "Gyro Dropout: Maximizing Ensemble Effect in Neural Network
        Training", MLSys 2022.
    """
    check_module(model)
    check_generator(generator)
    layer = functools.partial(GyroDropoutLayer, iters_per_epoch, max_epoch, p, sigma, tau)
    layer(seed=0)  # validates the arguments before any change
    already = [name for name, m in model.named_modules() if isinstance(m, GyroDropoutLayer)]

    def convert(module: nn.Module, _index: int) -> nn.Module | None:
        return layer(generator=generator)

    replaced = replace_module_classes(
        model, {nn.Dropout: convert}, optimizers=as_optimizer_list(optimizers), exact_type=True
    )
    device = _model_device(model)
    for new in replaced.values():
        new.to(device)
    _REPORT.warn(
        changed=bool(replaced),
        already=f"its dropout layers are gyro dropout already ({', '.join(already)})"
        if already
        else None,
    )
    return model


def _model_device(model: nn.Module) -> torch.device:
    """Where the model's tensors live (the layers' buffers go there; a dropout has none)."""
    for tensor in (*model.parameters(), *model.buffers()):
        if not isinstance(tensor, nn.parameter.UninitializedParameter):
            return tensor.device
    return torch.device("cpu")
