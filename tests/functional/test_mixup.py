"""gen_interpolation_lambda and mixup_batch, against the reference loop."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import functional as F
from tests.functional import reference


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("alpha", [0.05, 0.2, 1.0, 4.0])
def test_lambda_follows_beta_alpha_alpha(alpha) -> None:
    lam = F.gen_interpolation_lambda(alpha, batch_size=20_000, generator=_gen())
    assert lam.dtype == torch.float32 and lam.shape == (20_000,)
    assert bool(((lam >= 0) & (lam <= 1)).all())
    assert not lam.isnan().any()
    # Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)).
    assert abs(lam.mean().item() - 0.5) < 0.02
    assert abs(lam.var().item() - 1 / (4 * (2 * alpha + 1))) < 0.01


def test_lambda_scalar_is_reproducible_float() -> None:
    a = F.gen_interpolation_lambda(0.2, generator=_gen(5))
    b = F.gen_interpolation_lambda(0.2, generator=_gen(5))
    assert isinstance(a, float) and a == b and 0.0 <= a <= 1.0
    assert F.gen_interpolation_lambda(0.0) == 0.0


@pytest.mark.parametrize(
    "alpha,error", [(-0.1, ValueError), (float("inf"), ValueError), ("1", TypeError)]
)
def test_lambda_rejects_bad_alpha(alpha, error) -> None:
    with pytest.raises(error, match="alpha"):
        F.gen_interpolation_lambda(alpha)


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("per_sample", [False, True])
def test_mixup_matches_reference(dense, per_sample) -> None:
    x = torch.randn(6, 3, 4, 5, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 2, 3, 0])
    labels = torch.nn.functional.one_hot(y, 4).double() * 0.9 + 0.025 if dense else y
    lam = torch.linspace(0, 1, 6, dtype=torch.float64) if per_sample else 0.3
    perm = torch.tensor([5, 0, 1, 3, 2, 4])
    x_mix, y_mix, used = F.mixup_batch(x, labels, lam, 4, indices=perm)
    lams = lam.tolist() if per_sample else [lam] * 6
    x_ref, y_ref = reference.mixup(x, labels, lams, perm.tolist(), 4)
    assert torch.equal(used, perm)
    torch.testing.assert_close(x_mix, x_ref)
    torch.testing.assert_close(y_mix.double(), y_ref)
    assert y_mix.is_floating_point()


def test_random_permutation_is_reproducible_and_a_permutation() -> None:
    x, y = torch.rand(16, 3), torch.arange(16) % 4
    _, _, p1 = F.mixup_batch(x, y, 0.5, 4, generator=_gen(1))
    _, _, p2 = F.mixup_batch(x, y, 0.5, 4, generator=_gen(1))
    assert torch.equal(p1, p2)
    assert sorted(p1.tolist()) == list(range(16))


def test_endpoints_are_exact() -> None:
    x, y = torch.rand(5, 7), torch.arange(5)
    perm = torch.tensor([4, 3, 2, 1, 0])
    assert torch.equal(F.mixup_batch(x, y, 0.0, 5, indices=perm)[0], x)
    assert torch.equal(F.mixup_batch(x, y, 1.0, 5, indices=perm)[0], x[perm])


def test_uint8_images_are_mixed_and_rounded() -> None:
    x = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8)
    perm = torch.tensor([1, 2, 3, 0])
    out, _, _ = F.mixup_batch(x, torch.arange(4), 0.25, 4, indices=perm)
    expected = torch.lerp(x.float(), x[perm].float(), 0.25).round().to(torch.uint8)
    assert torch.equal(out, expected)


def test_per_sample_lambda_mixes_each_row_by_its_own_weight() -> None:
    x = torch.stack([torch.zeros(3), torch.ones(3)])
    lam = torch.tensor([0.25, 0.5])
    out, y_mix, _ = F.mixup_batch(x, torch.tensor([0, 1]), lam, 2, indices=torch.tensor([1, 0]))
    torch.testing.assert_close(out, torch.tensor([[0.25] * 3, [0.5] * 3]))
    torch.testing.assert_close(y_mix, torch.tensor([[0.75, 0.25], [0.5, 0.5]]))


def _mixup_with(**kwargs):
    """``mixup_batch`` on a valid 4-sample call, with ``kwargs`` replacing its arguments."""
    args = {
        "x": torch.rand(4, 3),
        "y": torch.arange(4),
        "interpolation_lambda": 0.3,
        "n_classes": 4,
    }
    return F.mixup_batch(**{**args, **kwargs})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"interpolation_lambda": 1.5}, "interpolation_lambda must be in"),
        (
            {"interpolation_lambda": torch.tensor([0.5, 2.0, 0.1, 0.1])},
            "interpolation_lambda must be in",
        ),
        ({"interpolation_lambda": torch.rand(3)}, "shape \\(B,\\)"),
        ({"y": torch.arange(3)}, "y must have the batch size"),
        ({"y": torch.tensor([0, 1, 2, 9])}, "class indices in \\[0, 4\\)"),
        ({"y": torch.tensor([0, -1, 2, 3])}, "class indices"),
        ({"y": torch.rand(4, 3)}, "n_classes=4 columns"),
        ({"n_classes": 0}, "n_classes must be >= 1"),
        ({"indices": torch.tensor([0, 1, 2])}, "indices must have shape"),
        ({"indices": torch.tensor([0, 1, 2, 4])}, "batch positions in \\[0, 4\\)"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        _mixup_with(**kwargs)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"x": [1.0]}, "x must be a torch.Tensor"),
        ({"y": torch.rand(4)}, "integer class indices"),
        ({"indices": torch.rand(4)}, "indices must be an integer tensor"),
        ({"generator": 0}, "generator must be a torch.Generator"),
        ({"interpolation_lambda": "0.5"}, "interpolation_lambda must be a real number"),
    ],
)
def test_bad_types_raise_type_error(kwargs, match) -> None:
    with pytest.raises(TypeError, match=match):
        _mixup_with(**kwargs)


# --- issue 13 regressions ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_integer_mixing_near_the_maximum_stays_within_the_inputs_range(dtype) -> None:
    # float32 holds 2**31 - 1 as 2**31: clamped there and cast back it wrapped to -2**31.
    top = torch.iinfo(dtype).max
    x = torch.tensor([top, top - 100, top - 1, top]).to(dtype).view(4, 1, 1, 1)
    perm = torch.tensor([1, 0, 3, 2])
    for lam in (0.0, 0.3, 0.5, 1.0):
        out, _, _ = F.mixup_batch(x, torch.zeros(4, dtype=torch.long), lam, 2, indices=perm)
        low = torch.minimum(x, x[perm])
        high = torch.maximum(x, x[perm])
        assert out.dtype == dtype
        if dtype == torch.int64:  # float64 rounds beyond 2**53: within the dtype, near the inputs
            assert bool((out > 0).all())
            assert bool(((out - low).abs() <= 2048).all())
        else:
            assert bool(((out >= low) & (out <= high)).all()), (lam, out.flatten().tolist())


@given(st.floats(min_value=5e-324, max_value=1e-3, allow_subnormal=True), st.integers(0, 2**32))
def test_lambda_of_tiny_alpha_is_in_the_unit_interval(alpha, seed) -> None:
    lam = F.gen_interpolation_lambda(alpha, generator=_gen(seed))
    assert 0.0 <= lam <= 1.0  # NaN fails this
    lams = F.gen_interpolation_lambda(alpha, batch_size=64, generator=_gen(seed))
    assert bool(((lams >= 0) & (lams <= 1)).all())


def test_subnormal_alpha_gives_a_fair_coin() -> None:
    lams = F.gen_interpolation_lambda(5e-324, batch_size=4000, generator=_gen(1))
    assert bool(((lams == 0) | (lams == 1)).all())
    assert abs(lams.mean().item() - 0.5) < 0.05


@pytest.mark.parametrize("lam", [0.3, torch.tensor(0.3), torch.full((4,), 0.3)])
def test_lambda_as_float_0d_or_per_sample_tensor_agree(lam) -> None:
    x, y = torch.rand(4, 3, 5, 5), torch.tensor([0, 1, 2, 3])
    perm = torch.tensor([1, 2, 3, 0])
    want = F.mixup_batch(x, y, 0.3, 4, indices=perm)
    got = F.mixup_batch(x, y, lam, 4, indices=perm)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


@pytest.mark.parametrize("lam", [torch.tensor(1.5), torch.tensor([0.2, -0.1, 0.3, 0.4])])
def test_tensor_lambda_out_of_range_is_refused(lam) -> None:
    x, y = torch.rand(4, 3), torch.tensor([0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"interpolation_lambda must be in \[0, 1\]"):
        F.mixup_batch(x, y, lam, 4)


def test_int64_extremes_stay_between_each_pair():
    """float64 rounds int64 beyond 2**53 (found by fuzzing: λ=0 turned 2**63-1 into 2**63-1024)."""
    top = torch.iinfo(torch.int64).max
    x = torch.tensor([[top], [top - 5], [2**53 + 1], [-top]], dtype=torch.int64)
    perm = torch.tensor([1, 0, 3, 2])
    for lam in (0.0, 0.3, 1.0):
        out, _, _ = F.mixup_batch(x, torch.arange(4), lam, 4, perm)
        low, high = torch.minimum(x, x[perm]), torch.maximum(x, x[perm])
        assert ((out >= low) & (out <= high)).all(), (lam, out)
    exact = torch.tensor([[2**53], [-(2**53)], [7], [0]], dtype=torch.int64)  # float64-exact
    assert torch.equal(F.mixup_batch(exact, torch.arange(4), 0.0, 4, perm)[0], exact)


# Composer's alpha form: mixup_batch draws λ itself.


def test_mixup_alpha_draws_folded_beta_then_permutation() -> None:
    from functional._batch import sample_beta

    x, y = torch.randn(5, 3, 4, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 3, 4])
    out = F.mixup_batch(x, y, n_classes=5, alpha=0.7, generator=_gen(3))
    g = _gen(3)
    z = sample_beta(0.7, (), g)
    lam = float(torch.minimum(z, 1 - z))
    perm = torch.randperm(5, generator=g)
    expected = F.mixup_batch(x, y, lam, 5, indices=perm)
    assert torch.equal(out[2], perm)
    torch.testing.assert_close(out[0], expected[0])
    torch.testing.assert_close(out[1], expected[1])


@given(alpha=st.floats(0.01, 20.0), seed=st.integers(0, 2**16))
def test_mixup_alpha_keeps_each_sample_the_main_part(alpha, seed) -> None:
    y = torch.arange(4)
    _, y_mix, perm = F.mixup_batch(
        torch.zeros(4, 2), y, n_classes=4, alpha=alpha, generator=_gen(seed)
    )
    own = y_mix[torch.arange(4), y]
    moved = perm != torch.arange(4)
    assert bool((own[moved] >= 0.5).all()) and bool((own <= 1).all())
    torch.testing.assert_close(y_mix.sum(1), torch.ones(4))


def test_mixup_alpha_zero_is_identity() -> None:
    x = torch.randn(4, 3)
    x_mix, y_mix, _ = F.mixup_batch(x, torch.arange(4), n_classes=4, alpha=0.0, generator=_gen())
    assert torch.equal(x_mix, x) and torch.equal(y_mix, torch.eye(4))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"interpolation_lambda": 0.3, "alpha": 0.2}, "not both"),
        ({}, "got neither"),
        ({"alpha": -1.0}, "alpha"),
    ],
)
def test_mixup_lambda_or_alpha_rule(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        F.mixup_batch(torch.zeros(2, 3), torch.arange(2), n_classes=2, **kwargs)


def test_mixup_needs_n_classes() -> None:
    with pytest.raises(TypeError, match="n_classes"):
        F.mixup_batch(torch.zeros(2, 3), torch.arange(2), 0.3)
