"""Batched AugMix / RandAugment: per-primitive equality with the PIL kernels, the whole AugMix
chain against a per-sample PIL oracle, per-sample draws against the PIL transform's, device
readiness (no host reads, one compile), arguments."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import augment
from augment.batched import ops as B
from augment.batched import paths as BP
from augment.batched import transforms as AB
from tests.devicecheck import assert_compiles_once, compile_counter, no_host_reads

GEOMETRIC = ["rotate", "shear_x", "shear_y", "translate_x", "translate_y"]
POINT = ["autocontrast", "equalize", "posterize", "solarize"]
BLENDS = ["color", "contrast", "brightness", "sharpness"]
ORIGINAL = [f"{b}_original" for b in BLENDS]
SIGNED = set(GEOMETRIC) | set(BLENDS)


class FixedDraw(random.Random):
    """A source whose every draw is ``value``: < 0.5 picks the negative direction."""

    def __init__(self, value: float) -> None:
        self.value = value

    def seed(self, *args: object, **kwargs: object) -> None:
        pass

    def random(self) -> float:
        return self.value


def _pil(kind: str, img: torch.Tensor, level: float, sign: float) -> torch.Tensor:
    return getattr(augment, kind)(img, level, rng=FixedDraw(0.25 if sign < 0 else 0.75))


def _batch(rs: np.random.Generator, n: int, c: int, h: int, w: int) -> torch.Tensor:
    x = torch.from_numpy(rs.integers(0, 256, (n, c, h, w), dtype=np.uint8))
    x[1] = x[1] // 5 + 90  # a narrow range: autocontrast and equalize stretch it
    x[2] = 128  # flat: autocontrast and equalize leave it alone
    return x


def _kernel(kind: str, x: torch.Tensor, levels: torch.Tensor, signs: torch.Tensor):
    fn = getattr(B, kind)
    return fn(x, levels, signs) if kind in SIGNED else fn(x, levels)


# -------------------------------------------------------------------- per-primitive equality


@pytest.mark.parametrize("kind", GEOMETRIC + POINT + BLENDS + ORIGINAL)
def test_batched_kernel_matches_pil_primitive(kind) -> None:
    rs = np.random.default_rng(7)
    for c, (h, w) in [(3, (13, 31)), (3, (40, 17)), (1, (24, 24)), (3, (2, 5))]:
        n = 8
        x = _batch(rs, n, c, h, w)
        levels = torch.tensor([10.0, 0.0, 5.0, *rs.uniform(0.0, 10.0, n - 3)])
        signs = torch.tensor(rs.choice([-1.0, 1.0], n))
        signs[:2] = torch.tensor([1.0, -1.0])
        out = _kernel(kind, x, levels, signs)
        assert out.dtype == torch.uint8 and out.shape == x.shape
        ref = torch.stack([_pil(kind, x[i], float(levels[i]), float(signs[i])) for i in range(n)])
        diff = (out.int() - ref.int()).abs()
        if kind in BLENDS or kind in ORIGINAL:
            # float32 blends, truncated: within one grey level (documented)
            assert diff.max() <= 1, (kind, c, h, w)
            assert (diff > 0).float().mean() < 0.01
        else:
            assert diff.max() == 0, (kind, c, h, w, (diff > 0).sum())


@pytest.mark.parametrize("kind", ["rotate", "equalize", "contrast", "sharpness"])
def test_float_input_is_the_uint8_result_over_255(kind) -> None:
    rs = np.random.default_rng(3)
    x = _batch(rs, 4, 3, 12, 16)
    levels, signs = torch.tensor([9.0, 4.0, 2.0, 7.0]), torch.tensor([1.0, -1.0, 1.0, -1.0])
    u8 = _kernel(kind, x, levels, signs)
    for dtype in (torch.float32, torch.float64):
        f = _kernel(kind, x.to(dtype) / 255, levels, signs)
        assert f.dtype == dtype
        torch.testing.assert_close(f, (u8.to(dtype) / 255), atol=1e-6, rtol=0)


def test_level_zero_of_identity_ops_is_exact_identity() -> None:
    x = _batch(np.random.default_rng(0), 4, 3, 9, 11)
    for kind in [*GEOMETRIC, "solarize", *BLENDS]:
        assert torch.equal(_kernel(kind, x, torch.zeros(4), torch.ones(4)), x), kind


# ----------------------------------------------------------------- whole-chain oracle


def _augmix_reference(x, kinds, draws) -> torch.Tensor:
    """Per sample, the PIL primitives chained with the drawn parameters and mixed in float32."""
    weights, m, ops, levels, signs = draws
    out = []
    for i in range(x.shape[0]):
        base = x[i].to(torch.float32)
        acc = base * (1.0 - m[i])
        for j in range(weights.shape[1]):
            img = x[i]
            for k in range(ops.shape[2]):
                o = int(ops[i, j, k])
                if o >= 0:
                    img = _pil(kinds[o], img, float(levels[i, j, k]), float(signs[i, j, k]))
            acc = acc + img.to(torch.float32) * (m[i] * weights[i, j])
        out.append((acc + 0.5).to(torch.uint8))
    return torch.stack(out)


@pytest.mark.parametrize("augmentation_set", ["all", "safe", "augmentations_original"])
def test_batch_augmix_equals_per_sample_pil_chains(augmentation_set) -> None:
    x = _batch(np.random.default_rng(11), 6, 3, 20, 24)
    kinds = AB._kinds(augmentation_set)
    draws = BP.augmix_draws(6, kinds, 3.0, -1, 3, 1.0, torch.Generator().manual_seed(5))
    out = augment.batch_augment_and_mix(
        x, 3, -1, 3, 1.0, augmentation_set, generator=torch.Generator().manual_seed(5)
    )
    ref = _augmix_reference(x, kinds, draws)
    # each op within 1 grey level of PIL (blends), mixed: within 2
    assert (out.int() - ref.int()).abs().max() <= 2
    assert ((out.int() - ref.int()).abs() > 0).float().mean() < 0.02


def test_batch_randaugment_equals_per_sample_pil_chains() -> None:
    x = _batch(np.random.default_rng(12), 8, 3, 16, 20)
    kinds = AB._kinds("all")
    ops, signs = BP.randaugment_draws(8, kinds, 3, torch.Generator().manual_seed(2))
    out = augment.batch_randaugment(x, 7, 3, generator=torch.Generator().manual_seed(2))
    for i in range(8):
        img = x[i]
        for k in range(3):
            img = _pil(kinds[int(ops[i, k])], img, 7.0, float(signs[i, k]))
        assert (out[i].int() - img.int()).abs().max() <= 1


# ------------------------------------------------------------- per-sample randomness
# Tests at the 0.1% level, written out (no SciPy in the test dependencies).
CHI2_999 = {2: 13.82, 12: 32.91}  # chi-square quantiles 0.999 by degrees of freedom


def _homogeneous(a: np.ndarray, b: np.ndarray) -> bool:
    """Chi-square test that two count vectors come from one distribution."""
    table = np.stack([a, b]).astype(float)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    return stat < CHI2_999[len(a) - 1]


def _fits(sample: np.ndarray, cdf) -> bool:
    """Kolmogorov-Smirnov test of ``sample`` against ``cdf`` (critical value at 0.1%)."""
    x = np.sort(sample)
    n = len(x)
    f = cdf(x)
    d = max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max())
    return d < 1.949 / np.sqrt(n)


def _binomial_ok(k: int, n: int, p: float) -> bool:
    return abs(k - n * p) / np.sqrt(n * p * (1 - p)) < 3.29


def _pil_choices(augmentation_set: str, n: int, depth: int) -> list[str]:
    """The operations the PIL RandAugment picks for ``n`` images (recorded by wrappers)."""
    picked: list[str] = []

    def recorder(op):
        def rec(img, level):
            picked.append(op.__name__)
            return img

        rec.__name__ = op.__name__
        return rec

    ops = [recorder(op) for op in augment.augmentation_sets[augmentation_set]]
    ra = augment.RandAugment(severity=9, depth=depth, augmentation_set=ops, rng=random.Random(1))
    from PIL import Image

    img = Image.new("L", (2, 2))
    for _ in range(n):
        ra(img)
    return picked


def test_randaugment_op_distribution_matches_pil_transform() -> None:
    n, depth = 400, 2
    kinds = AB._kinds("all")
    ops, _ = BP.randaugment_draws(n, kinds, depth, torch.Generator().manual_seed(0))
    ours = np.bincount(ops.flatten().numpy(), minlength=len(kinds))
    pil = _pil_choices("all", n, depth)
    theirs = np.array([pil.count(k) for k in kinds])
    # the two samples come from one distribution (chi-square test of homogeneity)
    assert _homogeneous(ours, theirs), (ours, theirs)
    # every sample draws its own ops: a sample's second op is independent of its first and of
    # the next sample's (13 x 13 contingency, pooled into "same op" vs "another op")
    for a, b in [(ops[:, 0], ops[:, 1]), (ops[:-1, 0], ops[1:, 0])]:
        same = int((a == b).sum())
        assert _binomial_ok(same, len(a), 1 / len(kinds))


def test_augmix_draws_have_the_pil_transforms_distributions() -> None:
    n, width, alpha = 600, 3, 1.0
    g = torch.Generator().manual_seed(4)
    weights, m, ops, levels, signs = BP.augmix_draws(n, AB._kinds("all"), 3.0, -1, width, alpha, g)
    # chain depth uniform on {1, 2, 3}, per chain
    depth = (ops >= 0).sum(-1).flatten().numpy()
    counts = np.bincount(depth, minlength=4)[1:]
    assert _homogeneous(counts, np.full(3, counts.sum() / 3))
    # Dirichlet(1, 1, 1) marginals are Beta(1, 2); Beta(1, 1) is uniform
    assert _fits(weights[:, 0].numpy(), lambda t: 1 - (1 - t) ** 2)
    assert _fits(m.numpy(), lambda t: t)
    torch.testing.assert_close(weights.sum(-1), torch.ones(n))
    # levels uniform on [0.1, 3], signs fair
    lv = levels[ops >= 0].numpy()
    assert _fits(lv, lambda t: (t - 0.1) / 2.9)
    drawn = signs[ops >= 0]  # a chain past its depth draws nothing
    assert _binomial_ok(int((drawn > 0).sum()), drawn.numel(), 0.5)
    # small alpha: nearly one chain and nearly all-or-nothing, never NaN
    w_small, m_small, *_ = BP.augmix_draws(n, AB._kinds("all"), 3.0, 2, width, 0.01, g)
    assert torch.isfinite(w_small).all() and torch.isfinite(m_small).all()
    assert (w_small.amax(-1) > 0.99).float().mean() > 0.9
    assert ((m_small < 0.01) | (m_small > 0.99)).float().mean() > 0.9


def test_identical_images_get_different_chains() -> None:
    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (1, 3, 16, 16), dtype=np.uint8))
    x = x.expand(64, 3, 16, 16).contiguous()
    for fn in (augment.batch_augment_and_mix, augment.batch_randaugment):
        out = fn(x, generator=torch.Generator().manual_seed(0))
        distinct = {bytes(o.numpy().tobytes()) for o in out}
        assert len(distinct) > 40, fn.__name__


# ------------------------------------------------------------------- module and dtypes


def test_modules_after_the_loader() -> None:
    g = torch.Generator().manual_seed(0)
    am = augment.BatchAugMix(severity=3, width=2, alpha=0.5, augmentation_set="safe", generator=g)
    ra = augment.BatchRandAugment(severity=5, depth=1, generator=g)
    assert repr(am) == (
        "BatchAugMix(severity=3, depth=-1, width=2, alpha=0.5, augmentation_set='safe')"
    )
    assert repr(ra) == "BatchRandAugment(severity=5, depth=1, augmentation_set='all')"
    assert am.state_dict() == {} and list(am.parameters()) == []
    pipe = torch.nn.Sequential(am, ra)
    x8 = torch.randint(0, 256, (4, 3, 12, 12), dtype=torch.uint8)
    assert pipe(x8).dtype == torch.uint8
    xf = torch.rand(4, 1, 12, 12, dtype=torch.float64)
    out = pipe(xf)
    assert out.dtype == torch.float64 and out.min() >= 0 and out.max() <= 1
    assert augment.batch_randaugment(xf, depth=0).equal(xf)
    assert augment.batch_augment_and_mix(x8[:0]).shape == (0, 3, 12, 12)


@pytest.mark.parametrize("grouped", [True, False])
def test_float_augmix_stays_in_0_1(monkeypatch, grouped) -> None:
    """The mix's weights sum to 1 only up to rounding: a white batch must not come back above
    1 (it did, by one float32 ulp, before the mix was clamped)."""
    monkeypatch.setattr(BP, "GROUPED", grouped)
    x = torch.ones(32, 3, 8, 8)
    for seed in range(4):
        out = augment.batch_augment_and_mix(x, generator=torch.Generator().manual_seed(seed))
        assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_no_host_reads(monkeypatch) -> None:
    """The accelerator/compile path (each operation on its slots); eager CPU groups the
    samples by reading the (host) op indices, by design."""
    monkeypatch.setattr(BP, "GROUPED", False)
    x = torch.randint(0, 256, (4, 3, 10, 12), dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    with no_host_reads():
        augment.batch_augment_and_mix(x, augmentation_set="original", generator=g)
        augment.batch_randaugment(x.float() / 255, generator=g)
        augment.BatchAugMix(depth=2, alpha=0.3)(x)


@pytest.mark.slow
def test_compiles_once_across_batches() -> None:
    aug = augment.BatchAugMix(severity=3, depth=1, width=2)
    ra = augment.BatchRandAugment(severity=9, depth=1)

    def step(x):
        return aug(x), ra(x)

    calls = [((torch.randint(0, 256, (4, 3, 10, 12), dtype=torch.uint8),), {}) for _ in range(3)]
    results = assert_compiles_once(step, calls)
    for (a, r), ((x,), _) in zip(results, calls, strict=True):
        assert a.shape == r.shape == x.shape and a.dtype == r.dtype == torch.uint8
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_compiled_transforms_equal_eager_ones(dtype) -> None:
    """The device path traced whole (its host-planned constants, its strided writes done as
    copies) gives the values of eager code drawing the same random numbers, all operations and
    depths included (RandAugment depth 3, AugMix's random depths)."""
    aug = augment.BatchAugMix(severity=3, width=3)
    ra = augment.BatchRandAugment(severity=7, depth=3, augmentation_set="original")

    def step(x):
        return aug(x), ra(x)

    torch._dynamo.reset()
    compiled, counter = compile_counter(step)
    rs = np.random.default_rng(6)
    for seed in range(3):
        x = _batch(rs, 16, 3, 12, 14)
        x = x if dtype == torch.uint8 else x.to(dtype) / 255
        torch.manual_seed(seed)
        got = compiled(x)
        torch.manual_seed(seed)
        want = step(x)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)
    assert counter.frame_count == 1
    torch._dynamo.reset()


@pytest.mark.slow
def test_inductor_compiled_transforms_match_eager_ones() -> None:
    """Inductor's generated kernels (torch's random numbers kept: ``fallback_random``) give
    eager's values up to one grey level: a fused kernel may contract a multiply and an add
    (one rounding instead of two) where a float32 value lies on a rounding boundary."""
    import torch._inductor.config as inductor_config

    aug = augment.BatchAugMix(severity=3, depth=1, width=2)
    ra = augment.BatchRandAugment(severity=7, depth=1, augmentation_set="original")

    def step(x):
        return aug(x), ra(x)

    torch._dynamo.reset()
    rs = np.random.default_rng(6)
    with inductor_config.patch(fallback_random=True):
        compiled = torch.compile(step, fullgraph=True)
        for seed in range(2):
            x = _batch(rs, 16, 3, 12, 14)
            torch.manual_seed(seed)
            got = compiled(x)
            torch.manual_seed(seed)
            want = step(x)
            for g, w in zip(got, want, strict=True):
                diff = (g.int() - w.int()).abs()
                assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 0.01
    torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_layer_equals_eager_and_does_not_recompile_when_parameters_change() -> None:
    kinds = AB._kinds("all")
    x = B.to_levels(_batch(np.random.default_rng(5), 6, 3, 10, 12))

    def layer(v, op, level, sign):
        return B.apply_ops(v, op, level, sign, kinds)

    g = torch.Generator().manual_seed(1)
    calls = [
        (
            (
                x,
                torch.randint(0, len(kinds), (6,), generator=g),
                torch.rand(6, generator=g, dtype=torch.float64) * 10,
                torch.where(torch.rand(6, generator=g) < 0.5, -1.0, 1.0),
            ),
            {},
        )
        for _ in range(3)
    ]
    for got, (args, _) in zip(assert_compiles_once(layer, calls), calls, strict=True):
        assert torch.equal(got, layer(*args))
    torch._dynamo.reset()


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"severity": 11}, ValueError, "severity"),
        ({"width": 0}, ValueError, "width"),
        ({"width": 2.0}, TypeError, "width"),
        ({"depth": 0}, ValueError, "depth"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"augmentation_set": "nope"}, ValueError, "augmentation_set"),
        ({"augmentation_set": [lambda img, lv: img]}, TypeError, "batched kernels"),
        ({"generator": 3}, TypeError, "generator"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(error, match=match):
        augment.batch_augment_and_mix(x, **kwargs)


def test_bad_batches() -> None:
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        augment.batch_randaugment(torch.zeros(3, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="C = 1 or 3"):
        augment.batch_randaugment(torch.zeros(2, 4, 8, 8, dtype=torch.uint8))
    with pytest.raises(TypeError, match="uint8"):
        augment.batch_randaugment(torch.zeros(2, 3, 8, 8, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        augment.batch_randaugment(np.zeros((2, 3, 8, 8), dtype=np.uint8))
    with pytest.raises(ValueError, match="shape"):
        B.rotate(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.ones(3), 1.0)


@pytest.mark.parametrize("shape", [(2, 3, 0, 5), (2, 1, 4, 0)])
@pytest.mark.parametrize("transform", [augment.BatchAugMix(), augment.BatchRandAugment()])
def test_an_empty_image_is_the_pil_paths_error(transform, shape) -> None:
    """Height or width 0 in a non-empty batch: the PIL path's ValueError, in its words."""
    c, h, w = shape[1:]
    with pytest.raises(ValueError, match="must not be empty") as pil:
        augment.augment_and_mix(torch.zeros((c, h, w), dtype=torch.uint8))
    with pytest.raises(ValueError, match="must not be empty") as batched:
        transform(torch.zeros(shape, dtype=torch.uint8))
    assert str(pil.value) == f"img must not be empty, got shape {(c, h, w)}"
    assert str(batched.value) == f"x must not be empty, got shape {shape}"
    empty_batch = torch.zeros((0, c, h, w), dtype=torch.uint8)  # nothing to augment: a copy
    assert transform(empty_batch).shape == empty_batch.shape


@pytest.mark.parametrize("fn", [augment.batch_augment_and_mix, augment.batch_randaugment])
def test_a_float_batch_outside_0_1_is_an_error_with_the_fix(fn) -> None:
    """A batch of 0..255 floats or a normalized batch was silently clamped to [0, 1]."""
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"divide .* by 255.*got values in \[0\.\d+, 2\d\d"):
        fn(x * 255)
    normalized = (x - 0.45) / 0.22
    with pytest.raises(ValueError, match=r"augment before normalizing .* \* std \+ mean"):
        fn(normalized)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        B.solarize(x * 255, 5.0)
    assert fn(x).shape == x.shape and fn(x.double()).dtype == torch.float64


def test_an_nhwc_batch_is_told_to_permute() -> None:
    x = torch.zeros(2, 8, 8, 3, dtype=torch.uint8)
    with pytest.raises(
        ValueError, match=r"looks like \(N, H, W, C\): pass x\.permute\(0, 3, 1, 2\)"
    ):
        augment.BatchAugMix()(x)
    assert augment.BatchAugMix()(x.permute(0, 3, 1, 2)).shape == (2, 3, 8, 8)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_a_channels_last_batch_comes_back_channels_last(monkeypatch, grouped, dtype) -> None:
    monkeypatch.setattr(BP, "GROUPED", grouped)
    x = _batch(np.random.default_rng(3), 5, 3, 9, 11)
    x = x if dtype == torch.uint8 else x.to(dtype) / 255
    cl = x.contiguous(memory_format=torch.channels_last)
    for fn in (augment.batch_augment_and_mix, augment.batch_randaugment):
        out = fn(cl, generator=torch.Generator().manual_seed(1))
        assert out.is_contiguous(memory_format=torch.channels_last), fn.__name__
        assert torch.equal(out, fn(x, generator=torch.Generator().manual_seed(1)))
    assert augment.batch_randaugment(cl, depth=0).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.cuda
def test_cuda_without_synchronisation() -> None:
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8).cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    aug = augment.BatchAugMix(generator=g)
    ra = augment.BatchRandAugment(generator=g)
    aug(x)  # warm-up (lazy CUDA initialisation may synchronise)
    torch.cuda.set_sync_debug_mode("error")
    try:
        out, out2 = aug(x), ra(x.float() / 255)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.device.type == "cuda" and out2.dtype == torch.float32
    # same per-primitive results as on the CPU
    lv, sg = torch.rand(16) * 10, torch.where(torch.rand(16) < 0.5, -1.0, 1.0)
    for kind in GEOMETRIC + POINT + BLENDS:
        got = _kernel(kind, x, lv.cuda(), sg.cuda()).cpu()
        want = _kernel(kind, x.cpu(), lv, sg)
        assert (got.int() - want.int()).abs().max() <= 1, kind
    with pytest.raises(ValueError, match="device"):
        augment.batch_randaugment(x, generator=torch.Generator())


@pytest.mark.parametrize(
    "call",
    [
        lambda x, s: augment.batch_randaugment(x, severity=s),
        lambda x, s: augment.BatchRandAugment(severity=s)(x),
    ],
)
def test_batched_randaugment_takes_randaugments_severity_range(call):
    """Severity 1 to 10, as the PIL RandAugment and the seed (0 was accepted here)."""
    x = torch.zeros(2, 3, 8, 8)
    for bad in (0, 0.5, 10.5):
        with pytest.raises(ValueError, match=r"severity must be in \[1\.0, 10\.0\]"):
            call(x, bad)
    assert call(x, 1).shape == x.shape
