"""The factorized layers: a convolution or a linear layer as two thinner ones through ``r``
latent channels or features.

Built from a dense layer (``from_conv2d``/``from_linear``) with the truncated SVD of its
weight, the best rank-``r`` layer in Frobenius norm; :meth:`set_rank` lowers the rank later
from data, keeping the outputs on sample inputs as close as possible
(:func:`~functional.factorize_matrix`). A rank that saves no multiply-adds is refused, as
Composer's layers refuse it: the two thin layers would cost more than the dense one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from functional._policies import latent_size
from functional.factorization.solve import (
    LowRankSolution,
    max_rank_with_speedup,
    solve_conv2d,
    solve_matrix,
    svd_factors,
)
from surgery import OptimizerArg, update_params_in_optimizer

__all__ = ["FactorizedConv2d", "FactorizedLinear"]


def _checked_rank(value: object, name: str, reference: int, limit: int, layer: str) -> int:
    """The latent size ``value`` gives, refused where it saves no multiply-adds."""
    rank = latent_size(value, name, reference)
    if rank > limit:
        raise ValueError(
            f"{name}={value} gives rank {rank}, which saves no multiply-adds for {layer}: "
            f"r·(fan_in + fan_out) must be below fan_in·fan_out, so {name} must be <= {limit}"
        )
    return rank


class _Factorized(nn.Module):
    """Shared parts of the factorized layers: rank reporting and the checkpoint hooks."""

    # A composite (functional/_composition.py): other transforms see one layer, its two parts.
    _see_through = ("module0", "module1")

    if TYPE_CHECKING:  # for type checkers only: TorchScript infers attributes from the instance
        latent_size: int
        approximation_error: float
        module0: nn.Conv2d | nn.Linear
        module1: nn.Conv2d | nn.Linear

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.module1(self.module0(input))

    @property
    def rank(self) -> int:
        """The rank of the factorization (the latent width)."""
        return self.latent_size

    def _dense_weight(self) -> torch.Tensor:
        raise NotImplementedError

    def _adopt(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Fill a layer built on the meta device from the dense ``weight``; reuse ``bias``.

        The factors inherit ``weight``'s ``requires_grad``: factorizing a frozen layer keeps
        it frozen. A ``weight`` on the meta device gives meta factors (shapes only).
        """
        for factor in (self.module0, self.module1):
            factor.weight = nn.Parameter(
                torch.empty_like(factor.weight, device=weight.device),
                requires_grad=weight.requires_grad,
            )
        self.module1.bias = bias
        if not weight.is_meta:
            self._set_from_dense(weight)

    def _set_from_dense(self, weight: torch.Tensor) -> None:
        left, right, error = svd_factors(weight.reshape(weight.shape[0], -1), self.latent_size)
        with torch.no_grad():
            self.module0.weight.copy_(right.reshape(self.module0.weight.shape))
            self.module1.weight.copy_(left.reshape(self.module1.weight.shape))
        self.approximation_error = error

    def surgery_remap_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str) -> None:
        """Translate a checkpoint of the dense layer (``weight``/``bias``) into the factors.

        The dense weight is factorized by the same truncated SVD the transform uses; its bias
        becomes ``module1.bias``. A checkpoint already in the factorized layout is left alone.
        """
        key = prefix + "weight"
        if key not in state_dict:
            return
        dense = state_dict.pop(key)
        left, right, _ = svd_factors(dense.reshape(dense.shape[0], -1), self.latent_size)
        w0 = self.module0.weight
        w1 = self.module1.weight
        state_dict[prefix + "module0.weight"] = right.reshape(w0.shape).to(w0.dtype)
        state_dict[prefix + "module1.weight"] = left.reshape(w1.shape).to(w1.dtype)
        bias = state_dict.pop(prefix + "bias", None)
        if bias is not None:
            state_dict[prefix + "module1.bias"] = bias

    def _solve(self, input: torch.Tensor, rank: int, n_iters: int) -> LowRankSolution:
        raise NotImplementedError

    def _factor_weights(self, solution: LowRankSolution) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _set_latent(self, rank: int) -> None:
        raise NotImplementedError

    def solution_for_rank(
        self, input: torch.Tensor, rank: int, *, n_iters: int = 3
    ) -> LowRankSolution:
        """The rank-``rank`` factors that best keep this layer's outputs on ``input``.

        Solved by :func:`~functional.factorize_matrix` (or ``factorize_conv2d``) from the
        current factors and the outputs the layer gives on ``input`` now; nothing changes
        until :meth:`apply_solution`, so several ranks can be compared first (``nmse``).
        """
        return self._solve(input, rank, n_iters)

    def apply_solution(self, solution: LowRankSolution, *, optimizers: OptimizerArg = None) -> None:
        """Take the factors and bias of ``solution`` (from :meth:`solution_for_rank`).

        The two factor weights become new parameters (same ``requires_grad``, device and dtype)
        and take the old ones' place in ``optimizers``, whose state for them is dropped (it
        had the old shapes); the bias keeps its ``Parameter`` and is overwritten in place.
        """
        if solution.rank < 1 or solution.Wa is None or solution.Wb is None:
            raise ValueError(
                f"solution must be a factorization (rank >= 1 with Wa and Wb), got rank {solution.rank}"
            )
        w0, w1 = self._factor_weights(solution)
        old = [self.module0.weight, self.module1.weight]
        new = [
            nn.Parameter(w.detach().to(p.device, p.dtype), requires_grad=p.requires_grad)
            for w, p in zip((w0, w1), old, strict=True)
        ]
        update_params_in_optimizer(old, new, optimizers)
        self.module0.weight, self.module1.weight = new
        bias = self.module1.bias
        if bias is not None and solution.bias is not None:
            with torch.no_grad():
                bias.copy_(solution.bias)
        self._set_latent(solution.rank)
        self.latent_size = solution.rank
        self.approximation_error = math.nan
        self.nmse = solution.nmse

    def set_rank(
        self,
        input: torch.Tensor,
        rank: int | float,
        *,
        n_iters: int = 3,
        optimizers: OptimizerArg = None,
    ) -> None:
        """Lower the latent size to ``rank``, keeping the outputs on ``input`` as close as possible.

        ``input`` is a batch the layer would see (its own inputs, e.g. captured with a forward
        hook); the new factors and bias minimise the squared error between the new and the
        current outputs on it (see :func:`~functional.factorize_matrix`), and ``nmse`` reports
        that error. ``rank`` is an int or a fraction in (0, 1) of the current rank; the current
        rank itself changes nothing, a larger one is refused (the factors cannot grow from data
        they never saw). ``optimizers`` holding the layer are kept consistent; their state for
        the two factor weights is dropped. ``approximation_error`` (a weight-space measure)
        becomes NaN.

        Raises:
            ValueError: ``rank`` above the current rank.
        """
        new_rank = latent_size(rank, "rank", self.latent_size)
        if new_rank > self.latent_size:
            raise ValueError(f"rank must be <= the current rank {self.latent_size}, got {rank}")
        if new_rank == self.latent_size:
            return
        self.apply_solution(self._solve(input, new_rank, n_iters), optimizers=optimizers)

    def dense_state_dict(self) -> dict[str, torch.Tensor]:
        """This layer as the dense layer's ``weight`` (the product of the factors) and ``bias``."""
        out = {"weight": self._dense_weight().detach()}
        bias = getattr(self.module1, "bias", None)
        if bias is not None:
            out["bias"] = bias.detach()
        return out


class FactorizedConv2d(_Factorized):
    """A ``Conv2d`` as a rank-``r`` ``k×k`` convolution followed by a ``1×1`` convolution.

    ``module0`` (``C_in → r``, the original kernel size, stride, padding, dilation and
    padding mode, no bias) and ``module1`` (``r → C_out``, ``1×1``, the original bias). Built
    from a convolution by :meth:`from_conv2d` with the truncated-SVD factors; ``rank`` and
    ``approximation_error`` (the relative Frobenius error of the weight) report the result.

    Shape:
        - Input: (B, C_in, H, W)
        - Output: (B, C_out, H_out, W_out), as the original convolution.

    Example:
        >>> conv = torch.nn.Conv2d(16, 32, 3, padding=1)
        >>> fact = FactorizedConv2d.from_conv2d(conv, latent_channels=16)
        >>> fact.rank, fact(torch.randn(2, 16, 8, 8)).shape
        (16, torch.Size([2, 32, 8, 8]))
    """

    if TYPE_CHECKING:  # for type checkers only: TorchScript reads submodules from the instance
        module0: nn.Conv2d
        module1: nn.Conv2d

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        latent_channels: float = 0.25,
        *,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.latent_size = _checked_rank(
            latent_channels,
            "latent_channels",
            min(in_channels, out_channels),
            self.max_allowed_latent_channels(in_channels, out_channels, (kh, kw)),
            f"a {kh}x{kw} convolution {in_channels} -> {out_channels}",
        )
        self.module0 = nn.Conv2d(
            in_channels,
            self.latent_size,
            kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            bias=False,
            # torch's Conv2d.__init__ annotates padding_mode as a Literal but stores (and
            # reports as conv.padding_mode) a plain str; Conv2d checks the value itself.
            padding_mode=padding_mode,  # type: ignore[arg-type]
            device=device,
            dtype=dtype,
        )
        self.module1 = nn.Conv2d(
            self.latent_size, out_channels, 1, bias=bias, device=device, dtype=dtype
        )
        self.approximation_error = math.nan
        self.nmse = math.nan

    @staticmethod
    def max_allowed_latent_channels(
        in_channels: int, out_channels: int, kernel_size: int | tuple[int, int]
    ) -> int:
        """The largest latent size that saves multiply-adds for such a convolution."""
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        return max_rank_with_speedup(in_channels * kh * kw, out_channels)

    @property
    def in_channels(self) -> int:
        return self.module0.in_channels

    @property
    def out_channels(self) -> int:
        return self.module1.out_channels

    @property
    def latent_channels(self) -> int:
        return self.latent_size

    @classmethod
    def from_conv2d(
        cls, conv: nn.Conv2d, module_index: int | None = None, *, latent_channels: float = 0.25
    ) -> FactorizedConv2d:
        """The rank-``r`` factorization of ``conv`` (its bias ``Parameter`` is reused).

        ``module_index`` is unused: it makes the method a surgery policy ``(module, index)``.
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        if conv.groups != 1:
            raise ValueError(f"conv.groups must be 1 to factorize, got {conv.groups}")
        new = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,  # type: ignore[arg-type]
            latent_channels,
            stride=conv.stride,  # type: ignore[arg-type]
            padding=conv.padding,  # type: ignore[arg-type]
            dilation=conv.dilation,  # type: ignore[arg-type]
            bias=False,
            padding_mode=conv.padding_mode,
            device="meta",
            dtype=conv.weight.dtype,
        )
        new._adopt(conv.weight, conv.bias)
        return new

    def _solve(self, input: torch.Tensor, rank: int, n_iters: int) -> LowRankSolution:
        conv = self.module0
        options = {"padding": conv.padding, "dilation": conv.dilation}
        return solve_conv2d(
            input,
            conv.weight,
            self.module1.weight,
            rank,
            None,
            self.module1.bias,
            n_iters,
            {**options, "padding_mode": conv.padding_mode},
            intercept=self.module1.bias is not None,
        )

    def _factor_weights(self, solution: LowRankSolution) -> tuple[torch.Tensor, torch.Tensor]:
        assert solution.Wa is not None and solution.Wb is not None
        return solution.Wa, solution.Wb

    def _set_latent(self, rank: int) -> None:
        self.module0.out_channels = rank
        self.module1.in_channels = rank

    def _dense_weight(self) -> torch.Tensor:
        w0 = self.module0.weight
        w1 = self.module1.weight.flatten(1)
        return (w1 @ w0.flatten(1)).reshape(w1.shape[0], *w0.shape[1:])

    def extra_repr(self) -> str:
        return f"rank={self.latent_size}, approximation_error={self.approximation_error:.4g}"


class FactorizedLinear(_Factorized):
    """A ``Linear`` as two linear layers through ``r`` features.

    ``module0`` (``d_in → r``, no bias) and ``module1`` (``r → d_out``, the original bias),
    built by :meth:`from_linear` from the truncated SVD of the weight; ``rank`` and
    ``approximation_error`` report the result.

    Shape:
        - Input: (*, d_in)
        - Output: (*, d_out)

    Example:
        >>> lin = torch.nn.Linear(32, 64)
        >>> fact = FactorizedLinear.from_linear(lin, latent_features=16)
        >>> fact.rank, fact(torch.ones(2, 32)).shape, 0 < fact.approximation_error < 1
        (16, torch.Size([2, 64]), True)
    """

    if TYPE_CHECKING:  # for type checkers only: TorchScript reads submodules from the instance
        module0: nn.Linear
        module1: nn.Linear

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        latent_features: float = 0.25,
        *,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.latent_size = _checked_rank(
            latent_features,
            "latent_features",
            min(in_features, out_features),
            self.max_allowed_latent_features(in_features, out_features),
            f"a linear layer {in_features} -> {out_features}",
        )
        self.module0 = nn.Linear(
            in_features, self.latent_size, bias=False, device=device, dtype=dtype
        )
        self.module1 = nn.Linear(
            self.latent_size, out_features, bias=bias, device=device, dtype=dtype
        )
        self.approximation_error = math.nan
        self.nmse = math.nan

    @staticmethod
    def max_allowed_latent_features(in_features: int, out_features: int) -> int:
        """The largest latent size that saves multiply-adds for such a linear layer."""
        return max_rank_with_speedup(in_features, out_features)

    @property
    def in_features(self) -> int:
        return self.module0.in_features

    @property
    def out_features(self) -> int:
        return self.module1.out_features

    @property
    def latent_features(self) -> int:
        return self.latent_size

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, module_index: int | None = None, *, latent_features: float = 0.25
    ) -> FactorizedLinear:
        """The rank-``r`` factorization of ``linear`` (its bias ``Parameter`` is reused).

        ``module_index`` is unused: it makes the method a surgery policy ``(module, index)``.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        new = cls(
            linear.in_features,
            linear.out_features,
            False,
            latent_features,
            device="meta",
            dtype=linear.weight.dtype,
        )
        new._adopt(linear.weight, linear.bias)
        return new

    def _solve(self, input: torch.Tensor, rank: int, n_iters: int) -> LowRankSolution:
        x = input.reshape(-1, self.in_features)
        with torch.no_grad():
            y = self(x)
        bias = self.module1.bias
        w0, w1 = self.module0.weight, self.module1.weight
        return solve_matrix(x, y, w0.T, w1.T, bias, rank, n_iters, intercept=bias is not None)

    def _factor_weights(self, solution: LowRankSolution) -> tuple[torch.Tensor, torch.Tensor]:
        assert solution.Wa is not None and solution.Wb is not None
        return solution.Wa.T, solution.Wb.T

    def _set_latent(self, rank: int) -> None:
        self.module0.out_features = rank
        self.module1.in_features = rank

    def _dense_weight(self) -> torch.Tensor:
        return self.module1.weight @ self.module0.weight

    def extra_repr(self) -> str:
        return f"rank={self.latent_size}, approximation_error={self.approximation_error:.4g}"
