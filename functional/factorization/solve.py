"""Low-rank solutions of a linear map: from its weight alone, or from the outputs it gives on data.

Two problems, one for each moment a factorization is made:

- *Weight space* (:func:`svd_factors`): the rank-``r`` matrix closest to the weight ``W`` in
  Frobenius norm, the truncated SVD (Eckart-Young), split evenly between the two factors. It
  needs no data; :func:`~functional.apply_factorization` uses it.
- *Output space* (:func:`factorize_matrix`, :func:`factorize_conv2d`, Composer's functions): the
  factors ``Wa`` (``D x r``), ``Wb`` (``r x M``) and bias ``b`` that best reproduce the layer's
  outputs ``Y`` on sample inputs ``X``,

  .. math::

      \\min_{W_a, W_b, b} \\lVert X W_a W_b + \\mathbf{1} b^\\top - Y \\rVert_F^2 .

  With the bias eliminated (centre ``X`` and ``Y``) this is reduced-rank regression, solved
  exactly: with the thin SVD :math:`X_c = U S V^\\top` and the truncated SVD :math:`P_r
  \\Sigma_r Q_r^\\top` of :math:`T = U^\\top Y_c`, :math:`W_a = V S^{-1} P_r \\Sigma_r^{1/2}` and
  :math:`W_b = \\Sigma_r^{1/2} Q_r^\\top` (Eckart-Young on :math:`T`, since :math:`S V^\\top`
  maps ``Wa`` one-to-one onto the row space the data sees). It is the global optimum, so its
  error never rises with the rank. Composer reaches towards it by alternating least squares
  from the weight-space start; here ``n_iters = 0`` is that start (the weight-space factors
  with the best bias) and any ``n_iters >= 1`` the exact optimum, so the error never rises
  with ``n_iters`` either. Where the data span fewer than ``r`` directions, the remaining
  latent directions come from the part of the weight the data cannot see, so no latent unit
  starts dead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as nnf

from functional._args import check_int, check_ndim, check_pair, check_tensor
from functional._numeric import accumulation_dtype
from functional._policies import latent_size

__all__ = ["LowRankSolution", "factorize_conv2d", "factorize_matrix"]


@dataclasses.dataclass
class LowRankSolution:
    """A factorized linear map: ``Wa`` then ``Wb``, plus ``bias`` (Composer's type).

    Attributes:
        Wa: the first factor, ``(D, rank)`` for a matrix, ``(rank, C_in, k_h, k_w)`` for a
            convolution; the whole map (``(D, M)`` or ``(C_out, C_in, k_h, k_w)``) when
            ``rank`` is ``-1`` and ``Wb`` is None.
        Wb: the second factor, ``(rank, M)`` or ``(C_out, rank, 1, 1)``; None when the map is
            not factorized.
        bias: the output bias, ``(M,)``.
        rank: the latent size, or ``-1`` when no factorization was made (the requested rank
            saves nothing, or is not below the current one).
        nmse: mean squared error of the outputs on the sample inputs divided by the variance
            of the outputs (0: exact; 1: no better than predicting the mean).
    """

    Wa: torch.Tensor | None = None
    Wb: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    rank: int = -1
    nmse: float = 0.0


def max_rank_with_speedup(fan_in: int, fan_out: int) -> int:
    """The largest rank r with r·(fan_in + fan_out) < fan_in·fan_out (fewer multiply-adds)."""
    return math.ceil(fan_in * fan_out / (fan_in + fan_out)) - 1


@contextlib.contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
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


def _svd(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD, decomposing the tall orientation (LAPACK is much faster on it)."""
    wide = matrix.shape[0] < matrix.shape[1]
    with one_cpu_thread(matrix.device):
        u, s, vh = torch.linalg.svd(matrix.T if wide else matrix, full_matrices=False)
    return (vh.T, s, u.T) if wide else (u, s, vh)


def _split(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, rank: int):
    root = s[:rank].sqrt()
    return u[:, :rank] * root, root[:, None] * vh[:rank]


def svd_factors(matrix: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(U_r √S_r, √S_r V_rᵀ, relative Frobenius error) of a (out, in) matrix, in its dtype."""
    work = matrix.detach().to(accumulation_dtype(matrix.dtype))
    u, s, vh = _svd(work)
    left, right = _split(u, s, vh, rank)
    total = s.square().sum()
    error = float((s[rank:].square().sum() / total).sqrt()) if float(total) > 0 else 0.0
    return left.to(matrix.dtype), right.to(matrix.dtype), error


def _output_factors(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, rank: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rank-``rank`` (D, r), (r, M) factors minimising ‖x Wa Wb - y‖ (centred data), with the
    directions the data leave free filled from ``weight`` (D, M) projected off the data."""
    u, s, vh = _svd(x)
    seen = int((s > s[:1] * max(x.shape) * torch.finfo(s.dtype).eps).sum()) if s.numel() else 0
    u, s, vh = u[:, :seen], s[:seen], vh[:seen]
    wa, wb = x.new_zeros(x.shape[1], 0), x.new_zeros(0, y.shape[1])
    if seen:
        p, sig, qh = _svd(u.T @ y)
        left, wb = _split(p, sig, qh, rank)
        wa = vh.T @ (left / s[:, None])
    missing = rank - wa.shape[1]
    if missing:
        unseen = weight - vh.T @ (vh @ weight)  # the weight's action outside the data's span
        extra_a, extra_b = _split(*_svd(unseen), missing)
        pad = missing - extra_a.shape[1]
        wa = torch.cat([wa, extra_a, wa.new_zeros(wa.shape[0], pad)], 1)
        wb = torch.cat([wb, extra_b, wb.new_zeros(pad, wb.shape[1])], 0)
    return wa, wb


def _nmse(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    error = float((y - y_hat).square().mean())
    variance = float(y.var()) if y.numel() > 1 else 0.0
    if variance > 0:
        return error / variance
    return 0.0 if error == 0 else math.inf


def _check_matrix_args(x, y, wa, wb, bias) -> int:
    """Shapes of :func:`factorize_matrix`'s tensors; returns the output size M."""
    for value, name in ((x, "X"), (y, "Y"), (wa, "Wa")):
        check_ndim(value, name, 2)
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {value.dtype}")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"Y must have X's {x.shape[0]} rows, got shape {tuple(y.shape)}")
    if wa.shape[0] != x.shape[1]:
        raise ValueError(f"Wa must have {x.shape[1]} rows (X's columns), got {tuple(wa.shape)}")
    out = wa.shape[1]
    if wb is not None:
        check_ndim(wb, "Wb", 2)
        if wb.shape[0] != wa.shape[1]:
            raise ValueError(
                f"Wb must have {wa.shape[1]} rows (Wa's columns), got {tuple(wb.shape)}"
            )
        out = wb.shape[1]
    if y.shape[1] != out:
        raise ValueError(f"Y must have {out} columns (the map's outputs), got {tuple(y.shape)}")
    if bias is not None and (check_tensor(bias, "bias").shape != (out,)):
        raise ValueError(f"bias must have shape ({out},), got {tuple(bias.shape)}")
    return out


def solve_matrix(
    x: torch.Tensor,
    y: torch.Tensor,
    wa: torch.Tensor,
    wb: torch.Tensor | None,
    bias: torch.Tensor | None,
    rank: object,
    n_iters: object,
    *,
    intercept: bool,
) -> LowRankSolution:
    """:func:`factorize_matrix` with a switch: ``intercept=False`` fits no bias (a layer
    without one), and the solution's ``bias`` is None."""
    _check_matrix_args(x, y, wa, wb, bias)
    n_iters = check_int(n_iters, "n_iters", minimum=0)
    k = latent_size(rank, "rank", x.shape[1])
    # A fraction is of the input size, capped at the current rank (as Composer's).
    if isinstance(rank, float) and rank < 1:
        k = min(k, wa.shape[1])
    out_dtype, work = wa.dtype, accumulation_dtype(wa.dtype)
    x, y = x.detach().to(work), y.detach().to(work)
    wa_w = wa.detach().to(work)
    wb_w = None if wb is None else wb.detach().to(work)
    weight = wa_w if wb_w is None else wa_w @ wb_w
    kept_bias = None if bias is None else bias.detach().to(work)

    def finish(a: torch.Tensor, b: torch.Tensor | None, k_out: int, keep: bool = False):
        y_fit = x @ a if b is None else (x @ a) @ b
        fitted = None
        if keep and kept_bias is not None:
            fitted = kept_bias
        elif intercept:
            fitted = (y - y_fit).mean(0)
        y_hat = y_fit if fitted is None else y_fit + fitted
        return LowRankSolution(
            a.to(out_dtype),
            None if b is None else b.to(out_dtype),
            None if fitted is None else fitted.to(out_dtype),
            k_out,
            _nmse(y, y_hat),
        )

    if k >= x.shape[1] or k >= y.shape[1]:  # no rank saves anything: the best single matrix
        a, b = _output_factors(*_centred(x, y, intercept), weight, min(x.shape[1], y.shape[1]))
        return finish(a @ b, None, -1)
    if wb_w is not None and k >= wa.shape[1]:  # not below the current rank: keep it
        return finish(wa_w, wb_w, -1, keep=True)
    if n_iters == 0:  # the weight-space start: truncated SVD of W, then the best bias
        a, b = _split(*_svd(weight), k)
        return finish(a, b, k)
    a, b = _output_factors(*_centred(x, y, intercept), weight, k)
    return finish(a, b, k)


def _centred(
    x: torch.Tensor, y: torch.Tensor, intercept: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return (x - x.mean(0), y - y.mean(0)) if intercept else (x, y)


def factorize_matrix(
    X: torch.Tensor,
    Y: torch.Tensor,
    Wa: torch.Tensor,
    Wb: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    rank: int | float = 0.25,
    n_iters: int = 3,
) -> LowRankSolution:
    """The rank-``rank`` factors ``(Wa, Wb, bias)`` that best reproduce a linear map's outputs.

    Solves :math:`\\min \\lVert X W_a W_b + \\mathbf{1} b^\\top - Y \\rVert_F` over ``Wa``
    (``D x rank``), ``Wb`` (``rank x M``) and ``b`` (see the module docstring for the closed
    form), where ``Y`` is what the map gives on the sample inputs ``X``, normally
    ``X @ W + bias`` (or ``X @ Wa @ Wb + bias`` for a map factorized already, whose rank this
    lowers). Composer's signature and return type.

    - ``rank`` at or above ``D`` or ``M``: no factorization saves anything; the solution is the
      best single ``D x M`` matrix (``Wb`` None, ``rank`` -1).
    - an already factorized map (``Wb`` given) and ``rank`` not below its current rank: the
      factors come back unchanged, with ``bias`` (``rank`` -1).
    - ``n_iters=0``: the truncated SVD of the weight (Composer's start), with the bias that
      best fits ``Y``; ``n_iters >= 1``: the exact optimum (Composer iterates towards it). The
      error never rises with ``rank`` or ``n_iters``.

    Differences from Composer: the fit includes the bias exactly (Composer fits the factors
    without it, then sets it to the mean residual), and ``nmse`` is measured against ``Y``
    itself (Composer's is off by ``bias`` when one is given).

    Args:
        X: sample inputs ``(N, D)``.
        Y: the map's outputs on them ``(N, M)``.
        Wa: the weight ``(D, M)``, or the first factor ``(D, d)`` of a factorized map.
        Wb: the second factor ``(d, M)`` of a factorized map, or None.
        bias: the map's bias ``(M,)``, or None.
        rank: the latent size: an int ``>= 1``, or a fraction in (0, 1) of ``D`` (at least
            1, and at most the current rank ``d``).
        n_iters: 0 for the weight-space solution, ``>= 1`` for the output-space optimum.

    Returns:
        LowRankSolution: ``Wa``, ``Wb``, ``bias`` in ``Wa``'s dtype and device, ``rank`` and
        ``nmse`` (mean squared output error over the variance of ``Y``).

    Example:
        >>> X = torch.randn(200, 16, generator=torch.Generator().manual_seed(0))
        >>> W = torch.randn(16, 12, generator=torch.Generator().manual_seed(1))
        >>> errors = [factorize_matrix(X, X @ W, W, rank=r).nmse for r in (2, 4, 8)]
        >>> errors == sorted(errors, reverse=True) and errors[0] < 1
        True
    """
    return solve_matrix(X, Y, Wa, Wb, bias, rank, n_iters, intercept=True)


_CONV_ARGS = ("stride", "padding", "dilation", "groups", "padding_mode", "bias")


def conv_patches(
    x: torch.Tensor,
    kernel_size: tuple[int, int],
    padding: object = 0,
    dilation: object = 1,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """The ``(N·L, C·k_h·k_w)`` input patches a stride-1 convolution multiplies by its weight
    (stride only subsamples the same patches, so stride 1 gives the most data)."""
    dil = check_pair(dilation, "dilation", minimum=1)
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
        total = (
            [0, 0]
            if padding == "valid"
            else [d * (k - 1) for d, k in zip(dil, kernel_size, strict=True)]
        )
        pads = (total[1] // 2, total[1] - total[1] // 2, total[0] // 2, total[0] - total[0] // 2)
    else:
        ph, pw = check_pair(padding, "padding")
        pads = (pw, pw, ph, ph)
    if any(pads):
        mode = "constant" if padding_mode == "zeros" else padding_mode
        x = nnf.pad(x, pads, mode=mode)
    cols = nnf.unfold(x, kernel_size, dilation=dil)  # (N, C·kh·kw, L)
    return cols.transpose(1, 2).reshape(-1, cols.shape[1])


def factorize_conv2d(
    X: torch.Tensor,
    Wa: torch.Tensor,
    Wb: torch.Tensor | None = None,
    rank: int | float = 0.25,
    biasA: torch.Tensor | None = None,
    biasB: torch.Tensor | None = None,
    n_iters: int = 3,
    **conv2d_kwargs: object,
) -> LowRankSolution:
    """The ``k x k`` convolution to ``rank`` channels and the ``1 x 1`` convolution after it
    that best reproduce a convolution's outputs on the sample inputs ``X``.

    The convolution is read as a matrix on its input patches (every stride-1 position of
    ``X``), and :func:`factorize_matrix` solves it there; the factors come back as
    convolution weights. ``Wa`` is the weight ``(C_out, C_in, k_h, k_w)`` with bias
    ``biasA``, or, for a factorized convolution, its first weight ``(d, C_in, k_h, k_w)`` (bias
    ``biasA``) followed by ``Wb`` ``(C_out, d, 1, 1)`` (bias ``biasB``). Composer's signature
    and return type; unlike Composer, dilation and any padding mode are supported, and a
    stride is accepted (the patches are taken at stride 1, the same map with more data).

    Args:
        X: sample inputs ``(N, C_in, H, W)``.
        Wa: the convolution's weight, or its first factor.
        Wb: the second factor, or None.
        rank: latent channels: an int ``>= 1`` or a fraction in (0, 1) of ``C_in·k_h·k_w``.
        biasA: the bias of ``Wa``'s convolution, or None.
        biasB: the bias of ``Wb``'s convolution (only with ``Wb``), or None.
        n_iters: 0 for the weight-space solution, ``>= 1`` for the output-space optimum.
        **conv2d_kwargs: the convolution's ``padding``, ``dilation``, ``padding_mode`` (used),
            ``stride`` and ``bias`` (accepted, not needed); ``groups`` must be 1.

    Returns:
        LowRankSolution: ``Wa`` ``(rank, C_in, k_h, k_w)``, ``Wb`` ``(C_out, rank, 1, 1)``
        and ``bias`` ``(C_out,)`` (or the whole weight with ``rank`` -1, as
        :func:`factorize_matrix`).

    Example:
        >>> conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        >>> X = torch.randn(4, 8, 6, 6, generator=torch.Generator().manual_seed(0))
        >>> sol = factorize_conv2d(X, conv.weight, rank=4, biasA=conv.bias, padding=1)
        >>> sol.Wa.shape, sol.Wb.shape, sol.rank
        (torch.Size([4, 8, 3, 3]), torch.Size([16, 4, 1, 1]), 4)
    """
    return solve_conv2d(X, Wa, Wb, rank, biasA, biasB, n_iters, conv2d_kwargs, intercept=True)


def solve_conv2d(
    X: torch.Tensor,
    Wa: torch.Tensor,
    Wb: torch.Tensor | None,
    rank: object,
    biasA: torch.Tensor | None,
    biasB: torch.Tensor | None,
    n_iters: object,
    conv2d_kwargs: dict[str, object],
    *,
    intercept: bool,
) -> LowRankSolution:
    """:func:`factorize_conv2d`, with :func:`solve_matrix`'s ``intercept`` switch."""
    unknown = sorted(set(conv2d_kwargs) - set(_CONV_ARGS))
    if unknown:
        raise TypeError(f"conv2d_kwargs may hold {', '.join(_CONV_ARGS)}; got {unknown}")
    if conv2d_kwargs.get("groups", 1) != 1:
        raise ValueError(f"groups must be 1 to factorize, got {conv2d_kwargs['groups']}")
    check_ndim(X, "X", 4, "(N, C_in, H, W)")
    check_ndim(Wa, "Wa", 4, "(C, C_in, k_h, k_w)")
    if Wa.shape[1] != X.shape[1]:
        raise ValueError(f"Wa must take X's {X.shape[1]} channels, got shape {tuple(Wa.shape)}")
    if Wb is None and biasB is not None:
        raise ValueError("biasB needs Wb: it is the bias of the second convolution")
    kernel = (Wa.shape[2], Wa.shape[3])
    patches = conv_patches(
        X.detach(),
        kernel,
        conv2d_kwargs.get("padding", 0),
        conv2d_kwargs.get("dilation", 1),
        str(conv2d_kwargs.get("padding_mode", "zeros")),
    )
    wa = Wa.detach().reshape(Wa.shape[0], -1).T
    bias = None if biasA is None else biasA.detach()
    wb = None
    if Wb is not None:
        check_ndim(Wb, "Wb", 4, "(C_out, d, 1, 1)")
        if Wb.shape[1:] != (Wa.shape[0], 1, 1):
            raise ValueError(
                f"Wb must be ({Wb.shape[0]}, {Wa.shape[0]}, 1, 1), got {tuple(Wb.shape)}"
            )
        wb = Wb.detach().reshape(Wb.shape[0], -1).T
        bias = None if bias is None else bias @ wb
        if biasB is not None:
            bias = biasB.detach() if bias is None else bias + biasB.detach()
    y = patches.to(wa.dtype) @ (wa if wb is None else wa @ wb)
    if bias is not None:
        y = y + bias
    solution = solve_matrix(
        patches.to(wa.dtype), y, wa, wb, bias, rank, n_iters, intercept=intercept
    )
    assert solution.Wa is not None  # always set
    solution.Wa = solution.Wa.T.reshape(solution.Wa.shape[1], Wa.shape[1], *kernel)
    if solution.Wb is not None:
        solution.Wb = solution.Wb.T.reshape(solution.Wb.shape[1], solution.Wb.shape[0], 1, 1)
    return solution
