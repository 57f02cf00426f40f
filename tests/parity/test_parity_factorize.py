"""Factorization as Composer 0.32.1 defines it: what ``factorize_matrix``, ``factorize_conv2d``
and the factorized layers guarantee, checked on ours, and side by side with Composer's where it
is importable.

Where the porting guide says they agree: the weight-space start (``n_iters=0``) is the same
solution; with iterations ours is the exact optimum, so its error is never above Composer's;
both layers refuse the same latent sizes; both transforms pick the same layers.
"""

from __future__ import annotations

import itertools
import warnings
from types import ModuleType

import pytest
import torch
import torchvision
from torch import nn

import functional as F
from tests.parity._peer import composer_algorithms


@pytest.fixture
def factorize(request: pytest.FixtureRequest) -> ModuleType:
    return composer_algorithms(request).factorize


def _matrix_problem(
    seed: int = 0, n: int = 100, d: int = 32, m: int = 64, latent: int | None = None
):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    if latent is None:
        wa, wb = torch.randn(d, m, generator=g, dtype=torch.float64), None
        y = x @ wa
    else:
        wa = torch.randn(d, latent, generator=g, dtype=torch.float64)
        wb = torch.randn(latent, m, generator=g, dtype=torch.float64)
        y = x @ wa @ wb
    y = y + 0.5 * torch.randn(n, m, generator=g, dtype=torch.float64)  # not exactly linear
    return x, y, wa, wb


def _error(x: torch.Tensor, y: torch.Tensor, solution) -> float:
    """Squared output error of a solution, measured the same way for both libraries."""
    y_hat = x @ solution.Wa if solution.Wb is None else x @ solution.Wa @ solution.Wb
    return float((y - y_hat - solution.bias).square().sum())


# --- what Composer's tests guarantee, on ours ---------------------------------------------


@pytest.mark.parametrize("already_factorized", [False, True])
def test_error_falls_with_rank_and_iterations(already_factorized):
    x, y, wa, wb = _matrix_problem(latent=16 if already_factorized else None)
    by_rank = [F.factorize_matrix(x, y, wa, wb, rank=r, n_iters=2).nmse for r in (1, 4, 16, 32)]
    by_iters = [F.factorize_matrix(x, y, wa, wb, rank=8, n_iters=i).nmse for i in (0, 1, 2, 4)]
    for errors in (by_rank, by_iters):
        assert all(e < 1 for e in errors)
        assert all(b <= a + 1e-8 for a, b in itertools.pairwise(errors))


@pytest.mark.parametrize(("sizes", "kind"), [((8, 8, 4), "linear"), ((7, 5, 3), "linear"), ((10, 10, 0.5), "linear"),
                                             ((8, 8, 4), "conv"), ((7, 5, 3), "conv"), ((10, 10, 0.5), "conv")])  # fmt: skip
def test_layers_refuse_a_latent_size_that_saves_no_compute(sizes, kind):
    in_size, out_size, latent = sizes
    with pytest.raises(ValueError, match="saves no multiply-adds"):
        if kind == "linear":
            F.FactorizedLinear(in_size, out_size, latent_features=latent)
        else:
            F.FactorizedConv2d(in_size, out_size, 1, latent_channels=latent)


def test_set_rank_twice_changes_the_latent_size():
    conv = F.FactorizedConv2d(36, 40, 3, latent_channels=16)
    lin = F.FactorizedLinear(36, 40, latent_features=16)
    g = torch.Generator().manual_seed(0)
    for rank in (12, 8):
        conv.set_rank(torch.randn(2, 36, 5, 6, generator=g), rank)
        lin.set_rank(torch.randn(2, 36, generator=g), rank)
        assert conv.latent_channels == conv.module0.out_channels == conv.module1.in_channels == rank
        assert conv.module0.weight.shape[:2] == (rank, 36) and conv.module1.weight.shape[:2] == (
            40,
            rank,
        )
        assert lin.latent_features == lin.module0.out_features == lin.module1.in_features == rank
        assert lin.module0.weight.shape == (rank, 36) and lin.module1.weight.shape == (40, rank)


# --- side by side with Composer --------------------------------------------------------------


def test_side_by_side_the_weight_space_start_is_the_same_solution(factorize):
    x, y, wa, _ = _matrix_problem(seed=1)
    theirs = factorize.factorize_matrix(x, y, wa, rank=8, n_iters=0)
    ours = F.factorize_matrix(x, y, wa, rank=8, n_iters=0)
    assert ours.rank == theirs.rank == 8
    torch.testing.assert_close(ours.Wa @ ours.Wb, theirs.Wa @ theirs.Wb)
    torch.testing.assert_close(ours.bias, theirs.bias)
    assert ours.nmse == pytest.approx(theirs.nmse, rel=1e-9)


@pytest.mark.parametrize("already_factorized", [False, True])
@pytest.mark.parametrize("rank", [1, 4, 8])
def test_side_by_side_our_error_is_never_above_composers(factorize, rank, already_factorized):
    x, y, wa, wb = _matrix_problem(seed=2, latent=16 if already_factorized else None)
    for n_iters in (1, 3):
        theirs = factorize.factorize_matrix(x, y, wa, wb, rank=rank, n_iters=n_iters)
        ours = F.factorize_matrix(x, y, wa, wb, rank=rank, n_iters=n_iters)
        assert (ours.Wa.shape, ours.Wb.shape) == (theirs.Wa.shape, theirs.Wb.shape)
        assert _error(x, y, ours) <= _error(x, y, theirs) * (1 + 1e-9)


def test_side_by_side_conv_shapes_and_error(factorize):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, 6, 6, generator=g, dtype=torch.float64)
    weight = torch.randn(12, 8, 3, 3, generator=g, dtype=torch.float64)
    bias = torch.randn(12, generator=g, dtype=torch.float64)
    theirs = factorize.factorize_conv2d(x, weight, rank=4, biasA=bias, padding=1)
    ours = F.factorize_conv2d(x, weight, rank=4, biasA=bias, padding=1)
    assert (ours.Wa.shape, ours.Wb.shape, ours.bias.shape) == (
        theirs.Wa.shape, theirs.Wb.shape, theirs.bias.shape,
    )  # fmt: skip
    assert ours.nmse <= theirs.nmse + 1e-12  # no original bias passed on: same measure


@pytest.mark.parametrize(
    ("in_size", "out_size", "kernel", "latent"),
    [(8, 8, 1, 4), (8, 8, 1, 3), (7, 5, 1, 3), (10, 10, 1, 0.5), (10, 10, 1, 0.4),
     (4, 16, (3, 3), 11), (4, 16, (3, 3), 12), (16, 16, (3, 3), 0.9)],
)  # fmt: skip
def test_side_by_side_layers_refuse_the_same_latent_sizes(
    factorize, in_size, out_size, kernel, latent
):
    """Kernel sizes as pairs: Composer's check reads an int ``k`` as ``k`` taps, not ``k x k``
    (it refuses ``FactorizedConv2d(4, 16, 3, latent_channels=11)``, which saves compute)."""
    sizes = (in_size, out_size, kernel)
    assert _refuses(factorize.FactorizedConv2d, *sizes, latent_channels=latent) == _refuses(
        F.FactorizedConv2d, *sizes, latent_channels=latent
    )
    if kernel == 1:  # a 1x1 convolution costs what a linear layer does
        assert _refuses(factorize.FactorizedLinear, in_size, out_size, latent_features=latent) == (
            _refuses(F.FactorizedLinear, in_size, out_size, latent_features=latent)
        )


def _refuses(build, *args, **kwargs) -> bool:
    try:
        build(*args, **kwargs)
    except ValueError:
        return True
    return False


@pytest.mark.slow
def test_side_by_side_the_transforms_pick_the_same_layers(factorize):
    def picked(model: nn.Module) -> list[str]:
        return [n for n, m in model.named_modules() if type(m).__name__.startswith("Factorized")]

    theirs, ours = torchvision.models.resnet18(), torchvision.models.resnet18()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        factorize.apply_factorization(theirs, min_channels=256, latent_channels=0.25)
    F.apply_factorization(ours, min_channels=256, latent_channels=0.25)
    assert picked(theirs) == picked(ours) and len(picked(ours)) > 4
