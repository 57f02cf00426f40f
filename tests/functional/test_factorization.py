"""Low-rank factorization initialised from the SVD of the original weight."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
import torchvision
from torch import nn

import surgery
from functional import FactorizedConv2d, FactorizedLinear, apply_factorization
from functional.factorization.solve import one_cpu_thread as _one_cpu_thread
from tests.functional._hf_models import hf_model
from tests.functional._model_checks import (
    assert_dtype,
    assert_idempotent,
    assert_no_effect,
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    optimizer_ids,
    sgd_with_state,
    train_step,
)


def best_rank_r_error(weight: torch.Tensor, rank: int) -> float:
    with _one_cpu_thread(weight.device):
        s = torch.linalg.svdvals(weight.reshape(weight.shape[0], -1).double())
    return float((s[rank:].square().sum() / s.square().sum()).sqrt())


def test_linear_is_the_best_rank_r_approximation():
    lin = nn.Linear(40, 30).double()
    fact = FactorizedLinear.from_linear(lin, latent_features=8)
    assert fact.rank == fact.latent_features == 8 and fact.module1.bias is lin.bias
    dense = fact.dense_state_dict()["weight"]
    error = float((dense - lin.weight.detach()).norm() / lin.weight.detach().norm())
    assert error == pytest.approx(best_rank_r_error(lin.weight.detach(), 8), rel=1e-9)
    assert fact.approximation_error == pytest.approx(error, rel=1e-6)
    x = torch.randn(5, 40, dtype=torch.float64)
    torch.testing.assert_close(fact(x), TF.linear(x, dense, lin.bias))
    # Both factors carry the singular values evenly.
    torch.testing.assert_close(fact.module0.weight.norm(dim=1), fact.module1.weight.norm(dim=0))


def _low_rank_(weight: torch.Tensor, rank: int) -> None:
    """Overwrite ``weight`` (out, ...) with a random matrix of rank ``rank``, same shape."""
    g = torch.Generator().manual_seed(rank)
    flat = weight.reshape(weight.shape[0], -1)
    left, right = (
        torch.randn(flat.shape[0], rank, generator=g),
        torch.randn(rank, flat.shape[1], generator=g),
    )
    with torch.no_grad():
        weight.copy_((left @ right).reshape(weight.shape))


def test_a_layer_of_rank_r_is_exact_at_rank_r():
    lin = nn.Linear(12, 20)
    _low_rank_(lin.weight, 3)
    fact = FactorizedLinear.from_linear(lin, latent_features=3)
    x = torch.randn(3, 12)
    torch.testing.assert_close(fact(x), lin(x), rtol=1e-4, atol=1e-4)
    assert fact.approximation_error == pytest.approx(0.0, abs=1e-5)
    conv = nn.Conv2d(4, 16, 3, stride=2, padding=2, dilation=2, padding_mode="reflect")
    _low_rank_(conv.weight, 4)
    fconv = FactorizedConv2d.from_conv2d(conv, latent_channels=4)
    img = torch.randn(2, 4, 9, 10)
    torch.testing.assert_close(fconv(img), conv(img), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: FactorizedLinear(12, 20, latent_features=8), "latent_features must be <= 7"),
        (lambda: FactorizedLinear(10, 10, latent_features=0.5), "saves no multiply-adds"),
        (lambda: FactorizedConv2d(8, 8, 1, latent_channels=4), "1x1 convolution 8 -> 8"),
        (lambda: FactorizedConv2d.from_conv2d(nn.Conv2d(4, 16, 3), latent_channels=12), "<= 11"),
    ],
)
def test_a_rank_that_saves_no_compute_is_refused(build, match):
    with pytest.raises(ValueError, match=match):
        build()
    assert FactorizedLinear.max_allowed_latent_features(12, 20) == 7
    assert FactorizedConv2d.max_allowed_latent_channels(4, 16, 3) == 11
    assert FactorizedConv2d(4, 16, 3, latent_channels=11).rank == 11


@pytest.mark.parametrize("bias", [True, False])
def test_conv_factorization_is_the_dense_conv_of_its_product(bias):
    conv = nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=bias).double()
    fact = FactorizedConv2d.from_conv2d(conv, latent_channels=0.5)
    assert fact.rank == 4 and fact.module0.stride == (2, 2) and fact.module0.bias is None
    assert (fact.module1.bias is conv.bias) if bias else fact.module1.bias is None
    dense = fact.dense_state_dict()
    x = torch.randn(2, 8, 7, 9, dtype=torch.float64)
    expected = TF.conv2d(x, dense["weight"], dense.get("bias"), stride=2, padding=1)
    torch.testing.assert_close(fact(x), expected)
    error = float((dense["weight"] - conv.weight.detach()).norm() / conv.weight.detach().norm())
    assert error == pytest.approx(best_rank_r_error(conv.weight.detach(), 4), rel=1e-9)
    assert "rank=4" in repr(fact)


def test_apply_with_defaults_on_resnet18_and_checkpoints():
    model = torchvision.models.resnet18()
    x = torch.randn(2, 3, 32, 32)
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    checkpoint = {k: v.clone() for k, v in model.state_dict().items()}
    fc_bias = model.fc.bias
    # Defaults: every Conv2d/Linear with both widths >= 512, at a quarter of that width.
    expected = {
        n
        for n, m in model.named_modules()
        if (type(m) is nn.Conv2d and min(m.in_channels, m.out_channels) >= 512)
        or (type(m) is nn.Linear and min(m.in_features, m.out_features) >= 512)
    }

    assert apply_factorization(model, optimizers=opt) is model
    factorized = {
        n: m
        for n, m in model.named_modules()
        if isinstance(m, (FactorizedConv2d, FactorizedLinear))
    }
    assert set(factorized) == expected and len(expected) == 4
    assert all(m.rank == 128 and 0 < m.approximation_error < 1 for m in factorized.values())
    assert isinstance(model.fc, FactorizedLinear) and model.fc.module1.bias is fc_bias
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    assert opt.state[fc_bias]["momentum_buffer"] is before[id(fc_bias)]
    train_step(model, x, opt)

    # A dense checkpoint loads through remap_state_dict, factorized exactly as the transform does.
    model.load_state_dict(surgery.remap_state_dict(checkpoint, model))
    for name, m in factorized.items():
        reference = FactorizedConv2d if isinstance(m, FactorizedConv2d) else FactorizedLinear
        dense = {k[len(name) + 1 :]: v for k, v in checkpoint.items() if k.startswith(name + ".")}
        assert set(dense) <= {"weight", "bias"}
        _assert_best_rank_r(m.dense_state_dict()["weight"], dense["weight"], m.rank)
        assert reference is type(m)
    remapped = surgery.remap_state_dict(model.state_dict(), model)  # idempotent
    assert list(remapped) == list(model.state_dict())
    assert_idempotent(model, apply_factorization, "saves multiply-adds")


def _assert_best_rank_r(approx: torch.Tensor, weight: torch.Tensor, rank: int) -> None:
    """``approx`` is a best rank-``rank`` approximation of ``weight`` (Eckart-Young).

    Checked through what is unique on any CPU: its rank, and its error, which must equal the
    optimum ``sqrt(sum of the discarded squared singular values)`` from an independent float64
    SVD. The best approximation itself is not unique where singular values nearly tie, so
    comparing matrices elementwise would depend on the LAPACK build.
    """
    flat = weight.reshape(weight.shape[0], -1).double()
    approx = approx.reshape(flat.shape).double()
    with _one_cpu_thread(flat.device):
        s = torch.linalg.svdvals(flat)
        assert int(torch.linalg.matrix_rank(approx, rtol=1e-5)) <= rank
    optimum = s[rank:].square().sum().sqrt()
    error = torch.linalg.matrix_norm(flat - approx)
    torch.testing.assert_close(error, optimum, rtol=1e-4, atol=1e-6 * float(s[0]))


def test_skips_grouped_and_unprofitable_layers_and_mha():
    mobilenet = torchvision.models.mobilenet_v3_small()
    apply_factorization(mobilenet, min_channels=96, latent_channels=0.25, factorize_linears=False)
    for m in mobilenet.modules():
        if isinstance(m, FactorizedConv2d):
            assert m.module0.groups == 1
    assert any(isinstance(m, nn.Conv2d) and m.groups > 1 for m in mobilenet.modules())
    # A 1x1 convolution does not save work at more than half its width.
    assert_no_effect(
        lambda: apply_factorization(nn.Conv2d(8, 8, 1), min_channels=8, latent_channels=5),
        "saves multiply-adds",
    )
    # nn.MultiheadAttention's out_proj (a Linear subclass read by MHA itself) is left alone.
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=64, mlp_dim=128
    )
    apply_factorization(vit, min_features=64, latent_features=8)
    assert type(vit.encoder.layers[0].self_attention.out_proj) is not FactorizedLinear
    assert isinstance(vit.encoder.layers[0].mlp[0], FactorizedLinear)
    assert vit(torch.randn(2, 3, 32, 32)).shape == (2, 1000)


def test_validation_and_dtype():
    with pytest.raises(ValueError, match="latent_channels must be an int >= 1 or a float in"):
        apply_factorization(nn.Linear(2, 2), latent_channels=1.5)
    with pytest.raises(ValueError, match="latent_features must be an int >= 1 or a float in"):
        apply_factorization(nn.Linear(2, 2), latent_features=0)
    with pytest.raises(TypeError, match="latent_features must be an int"):
        apply_factorization(nn.Linear(2, 2), latent_features=True)
    with pytest.raises(ValueError, match="min_channels must be >= 1"):
        apply_factorization(nn.Linear(2, 2), min_channels=0)
    with pytest.raises(ValueError, match=r"conv.groups must be 1"):
        FactorizedConv2d.from_conv2d(nn.Conv2d(4, 4, 3, groups=2))
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to(torch.bfloat16)
    apply_factorization(model, min_features=64, latent_features=16)
    assert_dtype(model, torch.bfloat16)
    assert model(torch.randn(2, 64, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_frozen_layer_stays_frozen_and_its_factors_join_no_optimizer():
    """Issue 13 #3: a frozen weight's factors get requires_grad=False and stay out of an
    optimizer that holds the layer's (trainable) bias; a trainable layer's factors join it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    model[0].weight.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    apply_factorization(model, min_features=32, latent_features=8, optimizers=opt)
    frozen, trainable = model[0], model[2]
    assert isinstance(frozen, FactorizedLinear) and isinstance(trainable, FactorizedLinear)
    assert not frozen.module0.weight.requires_grad and not frozen.module1.weight.requires_grad
    assert frozen.module1.bias.requires_grad
    held = set(optimizer_ids(opt))
    assert id(frozen.module0.weight) not in held and id(frozen.module1.weight) not in held
    assert id(frozen.module1.bias) in held
    assert {id(p) for p in trainable.parameters()} <= held
    assert_optimizer_matches(opt, model)
    before = frozen.module0.weight.detach().clone()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    assert torch.equal(frozen.module0.weight, before)


def test_frozen_conv_factors_stay_frozen():
    conv = nn.Conv2d(32, 32, 3)
    conv.requires_grad_(False)
    model = nn.Sequential(conv)
    apply_factorization(model, min_channels=16, latent_channels=4)
    assert not any(p.requires_grad for p in model.parameters())


def test_meta_device_builds_shapes_without_decomposing():
    """Issue 13 #8: shape-only model building on the meta device."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv2d(32, 32, 3), nn.Flatten(), nn.Linear(32 * 4, 64))
    apply_factorization(
        model, min_channels=16, latent_channels=4, min_features=32, latent_features=8
    )
    assert isinstance(model[0], FactorizedConv2d) and isinstance(model[2], FactorizedLinear)
    assert all(p.is_meta for p in model.parameters())
    out = model(torch.empty(2, 32, 4, 4, device="meta"))
    assert out.shape == (2, 64) and out.is_meta


def test_tied_lm_head_stays_dense_and_tied_with_a_warning():
    """Issue 32 §3: GPT-2's lm_head shares the token embedding's matrix; factorizing it would
    untie them silently."""
    gpt2 = hf_model("gpt2")
    wte = gpt2.transformer.wte.weight
    with pytest.warns(surgery.NoEffectWarning) as caught:
        apply_factorization(gpt2, min_features=16, latent_features=4)
    messages = [str(w.message) for w in caught]
    assert any("lm_head (weight tied to transformer.wte)" in m for m in messages), messages
    assert any("neither tied to another module" in m for m in messages), messages
    assert type(gpt2.lm_head) is nn.Linear and gpt2.lm_head.weight is wte


def test_t5_feed_forward_output_stays_dense_and_t5_still_runs():
    """Issue 32 §3: T5's feed-forward forward reads ``wo.weight``; that layer stays dense (named
    in the warning), the other linears are factorized and the model runs."""
    t5 = hf_model("t5")
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(0))
    with pytest.warns(surgery.NoEffectWarning, match=r"DenseReluDense.wo \(T5DenseActDense"):
        apply_factorization(t5, min_features=16, latent_features=4)
    factorized = {n for n, m in t5.named_modules() if isinstance(m, FactorizedLinear)}
    assert "encoder.block.0.layer.1.DenseReluDense.wi" in factorized
    assert not any(n.endswith(".wo") for n in factorized) and "lm_head" not in factorized
    assert t5(input_ids=ids, decoder_input_ids=ids).logits.shape == (2, 6, 40)
