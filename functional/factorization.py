"""Low-rank factorization of convolutions and linear layers.

A ``k×k`` convolution with ``C_in → C_out`` channels becomes a ``k×k`` convolution to ``r``
channels followed by a ``1×1`` convolution to ``C_out``; a linear layer ``d_in → d_out`` becomes
two linear layers through ``r`` features. The factors are the truncated SVD of the original
weight, split evenly (:math:`U_r\\sqrt{S_r}` and :math:`\\sqrt{S_r}V_r^\\top`), so the factorized
layer is the best rank-``r`` approximation of the original one (Eckart–Young) rather than a
random re-initialisation, and exactly the original layer when ``r`` reaches its rank.
"""

# Long file: one algorithm, kept whole: the SVD core, the two factorized layers built on it and
# the transform (about a third of the lines are docstrings with the maths); split it into a
# subpackage, as blurpool, when it grows further.

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from functional._args import check_bool, check_int, check_module
from functional._composition import carry_decorations, layer_kind, refuse_parametrized
from functional._numeric import accumulation_dtype
from functional._policies import ModelT, latent_size, replace_chosen, settle_new_parameters
from surgery import OptimizerArg, as_optimizer_list

__all__ = ["FactorizedConv2d", "FactorizedLinear", "apply_factorization"]


def _max_rank_with_speedup(fan_in: int, fan_out: int) -> int:
    """The largest rank r with r·(fan_in + fan_out) < fan_in·fan_out (fewer multiply-adds)."""
    return math.ceil(fan_in * fan_out / (fan_in + fan_out)) - 1


@contextlib.contextmanager
def _one_cpu_thread(device: torch.device):
    """Run a CPU decomposition on one thread: LAPACK's SVD gains little from a few threads and
    slows down by an order of magnitude when the cores are oversubscribed."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _svd_factors(matrix: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(U_r √S_r, √S_r V_rᵀ, relative Frobenius error) of a (out, in) matrix, in its dtype."""
    work = matrix.detach().to(accumulation_dtype(matrix.dtype))
    wide = work.shape[0] < work.shape[1]
    with _one_cpu_thread(work.device):
        # Decompose the tall orientation (LAPACK is much faster on it), then transpose back.
        u, s, vh = torch.linalg.svd(work.T if wide else work, full_matrices=False)
    if wide:
        u, vh = vh.T, u.T
    root = s[:rank].sqrt()
    left = u[:, :rank] * root
    right = root[:, None] * vh[:rank]
    total = s.square().sum()
    dropped = s[rank:].square().sum()
    error = float((dropped / total).sqrt()) if float(total) > 0 else 0.0
    return left.to(matrix.dtype), right.to(matrix.dtype), error


class _Factorized(nn.Module):
    """Shared parts of the factorized layers: rank reporting and the checkpoint hooks."""

    # A composite (functional/_composition.py): other transforms see one layer, its two parts.
    _see_through = ("module0", "module1")

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
        left, right, error = _svd_factors(weight.reshape(weight.shape[0], -1), self.latent_size)
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
        left, right, _ = _svd_factors(dense.reshape(dense.shape[0], -1), self.latent_size)
        w0 = self.module0.weight
        w1 = self.module1.weight
        state_dict[prefix + "module0.weight"] = right.reshape(w0.shape).to(w0.dtype)
        state_dict[prefix + "module1.weight"] = left.reshape(w1.shape).to(w1.dtype)
        bias = state_dict.pop(prefix + "bias", None)
        if bias is not None:
            state_dict[prefix + "module1.bias"] = bias

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
        self.latent_size = latent_size(
            latent_channels, "latent_channels", min(in_channels, out_channels)
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
        >>> fact = FactorizedLinear.from_linear(lin, latent_features=32)
        >>> torch.allclose(fact(torch.ones(2, 32)), lin(torch.ones(2, 32)), atol=1e-5)
        True
    """

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
        self.latent_size = latent_size(
            latent_features, "latent_features", min(in_features, out_features)
        )
        self.module0 = nn.Linear(
            in_features, self.latent_size, bias=False, device=device, dtype=dtype
        )
        self.module1 = nn.Linear(
            self.latent_size, out_features, bias=bias, device=device, dtype=dtype
        )
        self.approximation_error = math.nan

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

    def _dense_weight(self) -> torch.Tensor:
        return self.module1.weight @ self.module0.weight

    def extra_repr(self) -> str:
        return f"rank={self.latent_size}, approximation_error={self.approximation_error:.4g}"


# Why a standardized (parametrized) weight is refused, and the order that works.
_WS_ORDER = (
    "the factors of a standardized weight would train unstandardized; apply "
    "apply_factorization first, then apply_weight_standardization (which standardizes each "
    "factor)"
)


def apply_factorization(
    model: ModelT,
    factorize_convs: bool = True,
    factorize_linears: bool = True,
    min_channels: int = 512,
    latent_channels: float = 0.25,
    min_features: int = 512,
    latent_features: float = 0.25,
    optimizers: OptimizerArg = None,
) -> ModelT:
    """Replace wide convolutions and linear layers of ``model`` by low-rank factorizations, in place.

    An exact ``nn.Conv2d`` (``groups == 1``) with ``min(in_channels, out_channels) >=
    min_channels`` becomes a :class:`FactorizedConv2d`, an exact ``nn.Linear`` with
    ``min(in_features, out_features) >= min_features`` a :class:`FactorizedLinear`, whenever the
    rank ``r`` lowers the number of multiply-adds (:math:`r(f_{in} + f_{out}) < f_{in} f_{out}`
    with :math:`f_{in} = C_{in}k_hk_w`). The factors come from the truncated SVD of the original
    weight: the new layer is the closest rank-``r`` layer to the original in Frobenius norm.
    Each replacement reports ``rank`` and ``approximation_error`` (relative Frobenius error of
    the weight). The bias ``Parameter`` is reused; the factors are new parameters and take the
    place of the dense weight in its optimizer param group.

    Frozen layers stay frozen: the factors inherit the dense weight's ``requires_grad``, and the
    factors of a frozen weight join no optimizer, even one that holds the layer's trainable bias.
    On the ``meta`` device (shape-only model building) the layers are replaced with meta factors
    and no decomposition runs (``approximation_error`` is NaN).

    Autocast: the factor layers are plain ``nn.Conv2d``/``nn.Linear`` and follow autocast's
    rules for them (the autocast dtype); the latent activation between them is in that dtype
    too, so the output dtype is the one the dense layer would give.

    The state_dict keys change (``weight`` becomes ``module0.weight``/``module1.weight``,
    ``bias`` becomes ``module1.bias``): load a checkpoint of the dense model with
    ``model.load_state_dict(surgery.remap_state_dict(checkpoint, model))``, which factorizes it
    the same way; ``dense_state_dict()`` on a factorized layer gives the dense layout back.

    Args:
        model: the model to change in place.
        factorize_convs: factorize convolutions.
        factorize_linears: factorize linear layers.
        min_channels: minimum ``min(in_channels, out_channels)`` of a factorized convolution.
        latent_channels: rank of a factorized convolution: an int, or a fraction in (0, 1) of
            ``min(in_channels, out_channels)``.
        min_features: minimum ``min(in_features, out_features)`` of a factorized linear layer.
        latent_features: rank of a factorized linear layer: an int, or a fraction in (0, 1) of
            ``min(in_features, out_features)``.
        optimizers: optimizers holding ``model``'s parameters (kept consistent).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when no layer qualifies.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
        >>> model = apply_factorization(model, latent_features=64)
        >>> model[0].rank, type(model[2]).__name__
        (64, 'Linear')

    Reference:
        Composer's Factorize method card; Eckart and Young, "The approximation of one matrix by
        another of lower rank", Psychometrika 1936.
    """
    check_module(model)
    check_bool(factorize_convs, "factorize_convs")
    check_bool(factorize_linears, "factorize_linears")
    min_channels = check_int(min_channels, "min_channels", minimum=1)
    min_features = check_int(min_features, "min_features", minimum=1)
    latent_size(latent_channels, "latent_channels", 1)  # validates the values
    latent_size(latent_features, "latent_features", 1)

    opts = as_optimizer_list(optimizers)
    names = {id(m): name for name, m in model.named_modules()}
    skipped: list[str] = []
    # The factors of an earlier factorization are plain layers: never factorize them again.
    factors = {id(m) for f in model.modules() if isinstance(f, _Factorized) for m in f.modules()}

    def convert_conv(conv: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(conv, nn.Conv2d)
        if id(conv) in factors or not layer_kind(conv, nn.Conv2d):
            skipped.extend(
                [] if id(conv) in factors else [f"{names[id(conv)]} ({type(conv).__name__})"]
            )
            return None
        if conv.groups != 1 or min(conv.in_channels, conv.out_channels) < min_channels:
            return None
        fan_in = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
        rank = latent_size(
            latent_channels, "latent_channels", min(conv.in_channels, conv.out_channels)
        )
        if rank > _max_rank_with_speedup(fan_in, conv.out_channels):
            return None
        refuse_parametrized(conv, names[id(conv)], "apply_factorization", _WS_ORDER)
        new = FactorizedConv2d.from_conv2d(conv, latent_channels=rank)
        new.module0, new.module1 = carry_decorations(conv, new.module0, new.module1)
        return new

    def convert_linear(linear: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(linear, nn.Linear)
        if id(linear) in factors or not layer_kind(linear, nn.Linear):
            skipped.extend(
                [] if id(linear) in factors else [f"{names[id(linear)]} ({type(linear).__name__})"]
            )
            return None
        if min(linear.in_features, linear.out_features) < min_features:
            return None
        rank = latent_size(
            latent_features, "latent_features", min(linear.in_features, linear.out_features)
        )
        if rank > _max_rank_with_speedup(linear.in_features, linear.out_features):
            return None
        refuse_parametrized(linear, names[id(linear)], "apply_factorization", _WS_ORDER)
        return FactorizedLinear.from_linear(linear, latent_features=rank)

    replaced = replace_chosen(
        model,
        "apply_factorization",
        [
            (
                factorize_convs,
                nn.Conv2d,
                convert_conv,
                f"nn.Conv2d (groups=1) with min(in_channels, out_channels) >= {min_channels}",
            ),
            (
                factorize_linears,
                nn.Linear,
                convert_linear,
                f"nn.Linear with min(in_features, out_features) >= {min_features}",
            ),
        ],
        opts,
        qualifier=" whose factorization at the requested rank saves multiply-adds",
        none_chosen="layer to factorize (factorize_convs and factorize_linears are both False)",
        skipped=skipped,
    )
    settle_new_parameters(names, replaced, opts, "apply_factorization", new_function=False)
    return model
