"""apply_gradient_clipping: AGC against a slow per-unit loop, and the torch-backed modes."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision
from torch import nn

import functional.gradient_clipping as gradient_clipping
from functional import apply_gradient_clipping


@pytest.fixture(
    autouse=True,
    params=["cpu-schedule", "grouped-schedule", "grouped-small-rounds", "compiled-schedule"],
)
def schedule(request, monkeypatch):
    """Run every test through every AGC schedule (see functional.gradient_clipping): the CPU
    one, the grouped one of eager accelerators (with 32 MiB rounds, and with 64-byte rounds,
    which split tensors between rows and put a long row in a round alone) and the batched one
    of accelerators under compile."""
    if request.param != "cpu-schedule":
        monkeypatch.setattr(gradient_clipping, "_CACHE_FRIENDLY_DEVICES", set())
    if request.param == "grouped-small-rounds":
        monkeypatch.setattr(gradient_clipping, "_SCRATCH_BYTES", 64)
    if request.param == "compiled-schedule":
        monkeypatch.setattr(gradient_clipping, "_clip_grouped_", gradient_clipping._clip_batched_)
    return request.param


def reference_agc(params: list[torch.Tensor], threshold: float) -> list[torch.Tensor | None]:
    """Obviously-correct AGC: a Python loop over every unit of every parameter, in float64."""
    out = []
    for p in params:
        if p.grad is None:
            out.append(None)
            continue
        w, g = p.detach().double(), p.grad.double().clone()
        units = [(w, g)] if p.ndim <= 1 else [(w[i], g[i]) for i in range(p.shape[0])]
        for wu, gu in units:
            max_norm = threshold * max(wu.norm().item(), 1e-3)
            gn = gu.norm().item()
            if gn > max_norm:
                gu.mul_(max_norm / gn)
        out.append(g)
    return out


def float32_norm_rtol(tensors: list[torch.Tensor]) -> float:
    """A relative error bound of a float32 L2 norm of ``tensors``, whatever the summation order
    (any CPU's kernels): a sum of n terms is within n·eps of the exact sum (the classical
    bound), plus a few eps for the squares, the square roots and the casts."""
    return (sum(t.numel() for t in tensors) + 8) * torch.finfo(torch.float32).eps


class Zoo(nn.Module):
    """Every kind of parameter AGC meets: conv, linear, embedding, transposed conv, norms, a
    scalar, a zero-initialised layer and a parameter that gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.bn = nn.BatchNorm2d(5)
        self.up = nn.ConvTranspose2d(5, 4, 2, stride=2)
        self.zero = nn.Linear(4, 3)
        nn.init.zeros_(self.zero.weight)
        nn.init.zeros_(self.zero.bias)
        self.head = nn.Linear(6 + 3, 2)
        self.temperature = nn.Parameter(torch.tensor(1.5))
        self.unused = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        h = self.up(torch.relu(self.bn(self.conv(x)))).mean(dim=(2, 3))
        feats = torch.cat([self.emb(tokens).mean(1), self.zero(h)], dim=1)
        return self.head(feats) * self.temperature


def zoo_with_grads(scale: float = 100.0) -> Zoo:
    torch.manual_seed(0)
    model = Zoo()
    out = model(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4, 5)))
    (out.pow(2).sum() * scale).backward()
    return model


@pytest.mark.parametrize("threshold", [1e-3, 0.01, 0.1, 10.0])
def test_adaptive_matches_per_unit_reference(threshold):
    model = zoo_with_grads()
    params = list(model.parameters())
    expected = reference_agc(params, threshold)
    grads = [p.grad for p in params if p.grad is not None]
    pre_norm = torch.sqrt(sum(g.double().pow(2).sum() for g in grads))
    norm = apply_gradient_clipping(model.parameters(), "adaptive", threshold)
    torch.testing.assert_close(norm.double(), pre_norm, rtol=float32_norm_rtol(grads), atol=0)
    for p, e in zip(params, expected, strict=True):
        if e is None:
            assert p.grad is None
        else:
            torch.testing.assert_close(p.grad.double(), e, rtol=1e-5, atol=1e-8)


def test_adaptive_on_resnet18_matches_reference():
    torch.manual_seed(1)
    model = torchvision.models.resnet18(num_classes=10)
    nn.functional.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 7])).backward()
    params = list(model.parameters())
    expected = reference_agc(params, 0.01)
    apply_gradient_clipping(model, "adaptive", 0.01)
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p.grad.double(), e, rtol=1e-5, atol=1e-9)


def test_adaptive_zero_weights_still_learn():
    """The 1e-3 floor: a zero-initialised layer keeps a gradient of norm λ·1e-3 per unit."""
    model = zoo_with_grads()
    apply_gradient_clipping([model.zero.weight, model.zero.bias], "adaptive", 0.5)
    row_norms = model.zero.weight.grad.norm(dim=1)
    assert (row_norms > 0).all()
    torch.testing.assert_close(row_norms, torch.full_like(row_norms, 0.5e-3))
    torch.testing.assert_close(model.zero.bias.grad.norm(), torch.tensor(0.5e-3))


def test_adaptive_leaves_small_gradients_bitwise_alone():
    model = zoo_with_grads(scale=1e-6)
    before = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    apply_gradient_clipping(model.parameters(), "adaptive", 1.0)
    for p, g in zip(model.parameters(), before, strict=True):
        assert (p.grad is None and g is None) or torch.equal(p.grad, g)


def test_adaptive_channels_last_and_bfloat16():
    torch.manual_seed(2)
    conv = nn.Conv2d(4, 6, 3).to(memory_format=torch.channels_last)
    conv.weight.grad = torch.randn_like(conv.weight) * 10
    conv.bias.grad = torch.randn_like(conv.bias)
    half = copy.deepcopy(conv).to(torch.bfloat16)
    half.weight.grad = conv.weight.grad.to(torch.bfloat16)
    half.bias.grad = conv.bias.grad.to(torch.bfloat16)
    expected = reference_agc(list(half.parameters()), 0.05)
    apply_gradient_clipping(conv, "adaptive", 0.05)
    apply_gradient_clipping(half, "adaptive", 0.05)
    assert half.weight.grad.dtype == torch.bfloat16
    assert conv.weight.grad.is_contiguous(memory_format=torch.channels_last)
    for p, e in zip(half.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad.double(), e, rtol=2e-2, atol=1e-4)


def test_adaptive_float64_and_single_tensor():
    w = nn.Parameter(torch.randn(3, 4, dtype=torch.float64))
    w.grad = torch.randn(3, 4, dtype=torch.float64) * 50
    expected = reference_agc([w], 0.02)[0]
    norm = apply_gradient_clipping(w, "adaptive", 0.02)
    assert norm.dtype == torch.float64
    torch.testing.assert_close(w.grad, expected, rtol=1e-12, atol=0)


def test_norm_mode_is_clip_grad_norm():
    model, twin = zoo_with_grads(), zoo_with_grads()
    expected = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
    norm = apply_gradient_clipping(model.parameters(), "norm", 0.5)
    torch.testing.assert_close(norm, expected)
    assert norm > 0.5  # the pre-clip norm
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    clipped = torch.sqrt(sum(g.double().pow(2).sum() for g in grads))
    rtol = float32_norm_rtol(grads)
    torch.testing.assert_close(clipped, torch.tensor(0.5, dtype=torch.float64), rtol=rtol, atol=0)


def test_value_mode_clamps_and_returns_none():
    model = zoo_with_grads()
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    assert apply_gradient_clipping(iter(model.parameters()), "value", 0.1) is None
    for p, g in zip(model.parameters(), grads, strict=True):
        if g is not None:
            assert torch.equal(p.grad, g.clamp(-0.1, 0.1))


def test_no_gradients_at_all():
    layer = nn.Linear(2, 2)
    assert apply_gradient_clipping(layer, "adaptive", 0.1).item() == 0.0
    assert apply_gradient_clipping(layer, "norm", 0.1).item() == 0.0
    assert apply_gradient_clipping([], "adaptive", 0.1).item() == 0.0


@pytest.mark.parametrize("clipping_type", ["norm", "value", "adaptive"])
@pytest.mark.parametrize("as_tensor", [False, True], ids=["float", "tensor"])
def test_a_threshold_beyond_the_dtype_clips_nothing(clipping_type, as_tensor):
    """A threshold that is inf in the dtype it is compared in (the gradients' for 'value', the
    float32 norms' otherwise): no clipping, no overflow error, and no NaN from inf/inf when the
    gradient norm overflowed float32 too (inf entries stay inf)."""
    cases = [(torch.float32, 1e300), (torch.bfloat16, 1e300), (torch.float16, 1e300)]
    if clipping_type == "value":
        cases.append((torch.float16, 1e5))  # 1e5 is inf in float16
    for dtype, threshold in cases:
        layer = nn.Linear(3, 4).to(dtype)
        layer.weight.grad = torch.full_like(layer.weight, 3e4 if dtype == torch.float16 else 1e30)
        layer.bias.grad = torch.tensor([1.0, -2.0, float("inf"), 0.0], dtype=dtype)
        before = [p.grad.clone() for p in layer.parameters()]
        limit = torch.tensor(threshold, dtype=torch.float64) if as_tensor else threshold
        apply_gradient_clipping(layer, clipping_type, limit)
        for p, g in zip(layer.parameters(), before, strict=True):
            assert torch.equal(p.grad, g), (dtype, p.grad)


@pytest.mark.parametrize("clipping_type", ["norm", "value", "adaptive"])
def test_zero_gradients_stay_zero_for_any_threshold(clipping_type):
    """Even a threshold that rounds to 0 (5e-324 in float32): no 0/0 NaN."""
    for threshold in (5e-324, 1e-30, 1.0, 1e300):
        layer = nn.Linear(3, 4)
        nn.init.zeros_(layer.weight)  # with zero weights, AGC's bound is λ·1e-3
        for p in layer.parameters():
            p.grad = torch.zeros_like(p)
        apply_gradient_clipping(layer, clipping_type, threshold)
        for p in layer.parameters():
            assert torch.equal(p.grad, torch.zeros_like(p))


def test_overflowing_norm_with_a_finite_threshold():
    """Finite gradients whose float32 norm overflows: 'norm' and 'adaptive' scale by
    threshold/inf = 0, as torch's clip_grad_norm_ does (finite, never NaN); an inf entry
    becomes NaN (it was non-finite already), the others 0."""
    for clipping_type in ("norm", "adaptive"):
        layer = nn.Linear(3, 4)
        layer.weight.grad = torch.full_like(layer.weight, 1e30)
        layer.bias.grad = torch.tensor([1e30, 1e30, 1e30, float("inf")])
        norm = apply_gradient_clipping(layer, clipping_type, 1.0)
        assert norm == float("inf")
        assert torch.equal(layer.weight.grad, torch.zeros_like(layer.weight))
        assert torch.equal(layer.bias.grad[:3], torch.zeros(3)) and layer.bias.grad[3].isnan()


def test_validation():
    layer = nn.Linear(2, 2)
    with pytest.raises(
        ValueError, match="clipping_type must be one of 'norm', 'value', 'adaptive'; got 'agc'"
    ):
        apply_gradient_clipping(layer, "agc", 0.1)
    with pytest.raises(TypeError, match="clipping_type must be a str"):
        apply_gradient_clipping(layer, None, 0.1)
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="clipping_threshold must be a finite number > 0"):
            apply_gradient_clipping(layer, "adaptive", bad)
    with pytest.raises(TypeError, match=r"parameters\[1\] must be a torch.Tensor, got str"):
        apply_gradient_clipping([layer.weight, "bias"], "norm", 1.0)
    with pytest.raises(
        TypeError,
        match=r"parameters must be a tensor, an iterable of tensors or an nn\.Module, got int",
    ):
        apply_gradient_clipping(3, "norm", 1.0)


def _sparse_model() -> tuple[nn.Module, torch.Tensor]:
    """An embedding with sparse gradients (rows 1 and 5 stored twice) and a dense layer."""
    model = nn.Sequential(nn.Embedding(10, 3, sparse=True), nn.Linear(3, 2))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    model(torch.tensor([1, 1, 2, 5, 5])).square().sum().mul(10).backward()
    assert model[0].weight.grad.is_sparse and not model[0].weight.grad.is_coalesced()
    return model, torch.tensor([1, 1, 2, 5, 5])


@pytest.mark.parametrize("threshold", [0.5, 1e6])
def test_norm_clips_sparse_gradients_as_torch_does(threshold):
    # Issue 32 §4: an nn.Embedding(sparse=True) crashed inside torch ("norm_sparse currently
    # does not support 'dtype'"); torch's own clip_grad_norm_ handles it.
    # The reference is torch's clip_grad_norm_ on the same gradients made dense (the norm of a
    # sparse gradient is that of its dense form): torch before 2.7 has no sparse norm kernel.
    ours, _ = _sparse_model()
    theirs, _ = _sparse_model()
    for p in theirs.parameters():
        p.grad = p.grad.to_dense()
    norm = apply_gradient_clipping(ours.parameters(), "norm", threshold)
    expected = torch.nn.utils.clip_grad_norm_(theirs.parameters(), threshold)
    torch.testing.assert_close(norm, expected)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a.grad.to_dense(), b.grad.to_dense())


def test_value_clips_sparse_gradients_after_summing_repeated_rows():
    model, _ = _sparse_model()
    dense = [p.grad.to_dense() for p in model.parameters()]
    assert apply_gradient_clipping(model, "value", 1.5) is None
    for p, before in zip(model.parameters(), dense, strict=True):
        torch.testing.assert_close(p.grad.to_dense(), before.clamp(-1.5, 1.5))
    assert model[0].weight.grad.is_sparse


def test_adaptive_refuses_sparse_gradients_naming_the_alternatives():
    model, _ = _sparse_model()
    with pytest.raises(TypeError, match=r"'adaptive'\) does not support sparse.*'norm' or 'value'"):
        apply_gradient_clipping(model, "adaptive", 0.1)
