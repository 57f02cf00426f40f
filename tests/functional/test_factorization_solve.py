"""The data-driven factorization: factorize_matrix / factorize_conv2d and set_rank.

The laws: the solution reproduces the map's outputs as well as any map of that rank can (checked
against an independent oracle), so its error never rises with the rank or with ``n_iters``;
each branch (no saving possible, rank not below the current one, a true factorization) returns
the shapes it documents; set_rank keeps optimizers consistent and refuses to grow.
"""

from __future__ import annotations

import itertools

import hypothesis
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import strategies as st
from torch import nn

from functional import (
    FactorizedConv2d,
    FactorizedLinear,
    LowRankSolution,
    factorize_conv2d,
    factorize_matrix,
)
from tests.functional._model_checks import assert_optimizer_matches


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _problem(n: int, d: int, m: int, seed: int, latent: int | None = None):
    """Inputs (n, d), a map (d, m) (or factors through ``latent``), a bias, and the outputs."""
    g = _gen(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    bias = torch.randn(m, generator=g, dtype=torch.float64)
    if latent is None:
        wa, wb = torch.randn(d, m, generator=g, dtype=torch.float64), None
        y = x @ wa + bias
    else:
        wa = torch.randn(d, latent, generator=g, dtype=torch.float64)
        wb = torch.randn(latent, m, generator=g, dtype=torch.float64)
        y = x @ wa @ wb + bias
    return x, y, wa, wb, bias


def _optimum(x: torch.Tensor, y: torch.Tensor, rank: int) -> float:
    """The least squared error of any rank-``rank`` map plus a bias (independent route: project
    the centred outputs on the inputs' span by least squares, then Eckart-Young)."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    projected = xc @ torch.linalg.lstsq(xc, yc, driver="gelsd").solution
    s = torch.linalg.svdvals(projected)
    return float((yc - projected).square().sum() + s[rank:].square().sum())


def _error(x, y, sol: LowRankSolution) -> float:
    y_hat = x @ sol.Wa if sol.Wb is None else x @ sol.Wa @ sol.Wb
    return float((y - y_hat - sol.bias).square().sum())


@hypothesis.settings(max_examples=15, deadline=None)
@hypothesis.given(
    n=st.integers(3, 40),
    d=st.integers(2, 12),
    m=st.integers(2, 12),
    seed=st.integers(0, 2**16),
    noise=st.booleans(),
)
def test_error_is_the_optimum_and_never_rises_with_rank_or_iterations(n, d, m, seed, noise):
    x, y, wa, _, bias = _problem(n, d, m, seed)
    if noise:  # outputs no linear map gives exactly
        y = y + torch.randn(y.shape, generator=_gen(seed + 1), dtype=y.dtype)
    previous = float("inf")
    for rank in range(1, min(d, m) + 1):
        sol = factorize_matrix(x, y, wa, bias=bias, rank=rank, n_iters=1)
        error = _error(x, y, sol)
        scale = float(y.square().sum()) + 1
        assert error == pytest.approx(_optimum(x, y, rank), abs=1e-8 * scale)
        assert error <= previous + 1e-8 * scale
        assert sol.nmse == pytest.approx(error / y.numel() / float(y.var()), rel=1e-6, abs=1e-12)
        previous = error
    rank = max(1, min(d, m) // 2)
    errors = [
        _error(x, y, factorize_matrix(x, y, wa, bias=bias, rank=rank, n_iters=i)) for i in range(4)
    ]
    assert all(b <= a + 1e-8 * (float(y.square().sum()) + 1) for a, b in itertools.pairwise(errors))


def test_no_iterations_is_the_truncated_svd_of_the_weight_with_the_best_bias():
    x, y, wa, _, bias = _problem(50, 10, 8, seed=1)
    sol = factorize_matrix(x, y, wa, bias=bias, rank=3, n_iters=0)
    u, s, vh = torch.linalg.svd(wa)
    torch.testing.assert_close(sol.Wa @ sol.Wb, (u[:, :3] * s[:3]) @ vh[:3])
    torch.testing.assert_close(sol.bias, (y - x @ sol.Wa @ sol.Wb).mean(0))
    assert sol.rank == 3 and sol.nmse < 1


@pytest.mark.parametrize("already_factorized", [False, True])
@pytest.mark.parametrize(
    ("d", "latent", "rank", "m"),
    [
        (16, 16, 16, 16),
        (16, 8, 16, 16),
        (16, 16, 32, 16),
        (16, 16, 16, 8),
        (32, 16, 16, 16),
        (16, 8, 4, 16),
    ],
)
def test_each_branch_returns_its_documented_shapes(d, latent, rank, m, already_factorized):
    x, y, wa, wb, bias = _problem(100, d, m, seed=2, latent=latent if already_factorized else None)
    sol = factorize_matrix(x, y, wa, wb, bias=bias, rank=rank, n_iters=2)
    assert sol.nmse < 1 and sol.bias is not None and sol.bias.shape == (m,)
    if rank >= d or rank >= m:  # nothing to save: the best single map
        assert sol.rank == -1 and sol.Wb is None and sol.Wa.shape == (d, m)
        assert sol.nmse < 1e-10  # the outputs are a linear map of the inputs here
    elif already_factorized and rank >= latent:  # not below the current rank: unchanged
        assert sol.rank == -1 and torch.equal(sol.Wa, wa)
        assert torch.equal(sol.Wb, wb) and torch.equal(sol.bias, bias)
    else:
        assert sol.rank == rank and sol.Wa.shape == (d, rank) and sol.Wb.shape == (rank, m)


def test_a_fraction_is_of_the_input_size_capped_at_the_current_rank():
    x, y, wa, wb, bias = _problem(60, 40, 30, seed=3, latent=8)
    assert factorize_matrix(x, y, wa, wb, bias, rank=0.1).rank == 4  # int(0.1 * 40)
    assert factorize_matrix(x, y, wa, wb, bias, rank=0.5).rank == -1  # min(20, 8): unchanged


def test_matrix_arguments_are_checked():
    x, y, wa, wb, bias = _problem(10, 6, 5, seed=4, latent=3)
    with pytest.raises(ValueError, match="Y must have X's 10 rows"):
        factorize_matrix(x, y[:9], wa, wb)
    with pytest.raises(ValueError, match="Wb must have 3 rows"):
        factorize_matrix(x, y, wa, wb[:2])
    with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
        factorize_matrix(x, y, wa, wb, bias[:4])
    with pytest.raises(ValueError, match="rank must be an int >= 1 or a float in"):
        factorize_matrix(x, y, wa, wb, rank=0)
    with pytest.raises(ValueError, match="n_iters must be >= 0"):
        factorize_matrix(x, y, wa, wb, n_iters=-1)
    with pytest.raises(TypeError, match="X must be a floating-point tensor"):
        factorize_matrix(x.long(), y, wa, wb)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"padding": 1},
        {"padding": 2, "padding_mode": "reflect"},
        {"padding": "same", "dilation": 2},
    ],
)
def test_conv_solution_is_read_back_as_two_convolutions(options):
    g = _gen(5)
    x = torch.randn(3, 6, 7, 8, generator=g, dtype=torch.float64)
    weight = torch.randn(10, 6, 3, 3, generator=g, dtype=torch.float64)
    bias = torch.randn(10, generator=g, dtype=torch.float64)
    sol = factorize_conv2d(x, weight, rank=4, biasA=bias, n_iters=1, **options)
    assert sol.Wa.shape == (4, 6, 3, 3) and sol.Wb.shape == (10, 4, 1, 1) and sol.rank == 4
    dense = nn.Conv2d(6, 10, 3, bias=True, **options).double()
    dense.weight.data, dense.bias.data = weight, bias
    first = nn.Conv2d(6, 4, 3, bias=False, **options).double()
    first.weight.data = sol.Wa
    with torch.no_grad():
        y, y_hat = dense(x), TF.conv2d(first(x), sol.Wb, sol.bias)
    assert float((y - y_hat).square().mean() / y.var()) == pytest.approx(sol.nmse, rel=1e-6)
    # The optimum over the patches is at least as good as the weight-space start.
    start = factorize_conv2d(x, weight, rank=4, biasA=bias, n_iters=0, **options)
    assert sol.nmse <= start.nmse + 1e-12


def test_conv_of_an_already_factorized_layer_and_arguments():
    g = _gen(6)
    x = torch.randn(1, 8, 4, 4, generator=g)
    wa, wb = torch.randn(5, 8, 3, 3, generator=g), torch.randn(12, 5, 1, 1, generator=g)
    sol = factorize_conv2d(
        x, wa, wb, rank=2, biasA=torch.randn(5, generator=g), biasB=torch.randn(12, generator=g)
    )
    assert (
        sol.Wa.shape == (2, 8, 3, 3) and sol.Wb.shape == (12, 2, 1, 1) and sol.bias.shape == (12,)
    )
    assert sol.nmse < 1
    with pytest.raises(ValueError, match="biasB needs Wb"):
        factorize_conv2d(x, wa, biasB=torch.zeros(5))
    with pytest.raises(ValueError, match="groups must be 1"):
        factorize_conv2d(x, wa, groups=2)
    with pytest.raises(TypeError, match="conv2d_kwargs may hold"):
        factorize_conv2d(x, wa, strides=2)
    with pytest.raises(ValueError, match="Wa must take X's 4 channels"):
        factorize_conv2d(x[:, :4], wa)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_set_rank_keeps_outputs_better_than_the_weight_svd_and_keeps_optimizers(kind):
    g = _gen(7)
    if kind == "linear":
        layer = FactorizedLinear(36, 40, latent_features=16)
        x = torch.randn(64, 36, generator=g)
    else:
        layer = FactorizedConv2d(12, 20, 3, latent_channels=16, padding=1)
        x = torch.randn(4, 12, 6, 6, generator=g)
    bias = layer.module1.bias
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(x).square().mean().backward()
    opt.step()
    for rank in (12, 8):
        old = [layer.module0.weight, layer.module1.weight]
        with torch.no_grad():
            before = layer(x)
        start = layer.solution_for_rank(x, rank, n_iters=0).nmse  # the weight-space factors
        assert layer.rank == 16 if rank == 12 else layer.rank == 12  # nothing applied yet
        layer.set_rank(x, rank, optimizers=opt)
        assert layer.rank == rank and layer.module0.weight is not old[0]
        assert layer.module1.bias is bias and opt.state[bias]["momentum_buffer"] is not None
        assert layer.module0.weight.shape[0] == rank and layer.module1.weight.shape[1] == rank
        assert_optimizer_matches(opt, layer)
        with torch.no_grad():
            after = layer(x)
        error = float((after - before).square().mean() / before.var())
        assert error == pytest.approx(layer.nmse, rel=1e-3, abs=1e-7)
        assert layer.nmse <= start + 1e-6 and layer.nmse < 1
    layer.zero_grad()
    layer(x).square().mean().backward()
    opt.step()  # the new factors train


def test_set_rank_refuses_to_grow_and_ignores_the_current_rank():
    layer = FactorizedLinear(8, 8, latent_features=3)
    x = torch.randn(4, 8, generator=_gen(8))
    with pytest.raises(ValueError, match="rank must be <= the current rank 3, got 4"):
        layer.set_rank(x, 4)
    weight = layer.module0.weight
    layer.set_rank(x, 3)
    assert layer.module0.weight is weight
    conv = FactorizedConv2d(12, 13, 1, latent_channels=0.3)
    with pytest.raises(ValueError, match="current rank 3"):
        conv.set_rank(torch.randn(2, 12, 8, 8, generator=_gen(9)), 5)


def test_set_rank_without_bias_fits_none():
    layer = FactorizedLinear(20, 24, bias=False, latent_features=8)
    x = torch.randn(30, 20, generator=_gen(10))
    layer.set_rank(x, 0.5)
    assert layer.rank == 4 and layer.module1.bias is None and layer.nmse < 1
