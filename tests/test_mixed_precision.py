# Long file: one sweep over the whole public API; the tables that list every name and the
# cases of each kind belong together.
"""Mixed-precision sweep: every public name of ``functional`` in bfloat16 and float16.

Each batch op, layer, model transform and training-state helper runs (a) as a whole
low-precision model or on low-precision tensors and (b) in float32 under CPU autocast (with
``torch.amp.GradScaler('cpu')`` for the float16 training steps), against the same computation
in float32: within the dtype's tolerance, and never NaN or inf where float32 is finite.
``test_every_public_name_is_swept`` enumerates ``functional.__all__``, so a new public name
fails until it is swept here or skipped with a reason.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torchvision
from torch import nn

import functional as F
from tests.functional.test_conformance import CASES

LOW = [torch.bfloat16, torch.float16]
IDS = ["bf16", "fp16"]
# Relative error of a whole computation (‖low - fp32‖ / ‖fp32‖): a few roundings of the dtype.
REL = {torch.bfloat16: 4e-2, torch.float16: 6e-3}


def _rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-12))


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    """Finite wherever float32 is, and within ``scale`` times the dtype's relative tolerance."""
    assert want.isfinite().all()
    assert got.isfinite().all(), "NaN/inf where float32 is finite"
    assert _rel_error(got, want) < scale * REL[dtype], _rel_error(got, want)


# ---------------------------------------------------------------------------------------------
# What is swept, by kind; every public name appears once, in a sweep or with a reason.
# ---------------------------------------------------------------------------------------------

BATCH_OPS = {  # public op -> the conformance cases that call it
    name: [c for c in CASES if c.name == name or c.name.startswith(name + "_")]
    for name in (
        "mixup_batch",
        "cutmix_batch",
        "cutout",
        "colout",
        "colout_batch",
        "blur_2d",
        "blurmax_pool2d",
        "resize_inputs",
        "smooth_labels",
        "select_using_loss",
    )
}
LAYERS = (
    "BlurConv2d BlurMaxPool2d BlurPool2d FactorizedConv2d FactorizedLinear GatedLinear "
    "GhostBatchNorm1d GhostBatchNorm2d GhostBatchNorm3d GhostBatchNormAct2d LowPrecisionGroupNorm "
    "LowPrecisionLayerNorm LowPrecisionLayerNorm2d SqueezeExcite2d SqueezeExciteConv2d WeightStandardizer AlibiBias "
    "GyroDropoutLayer"
).split()
TRANSFORMS = (
    "apply_blurpool apply_channels_last apply_factorization apply_ghost_batchnorm "
    "apply_low_precision_groupnorm apply_low_precision_layernorm apply_se apply_squeeze_excite "
    "apply_stochastic_depth apply_weight_standardization apply_gated_linear_units apply_alibi "
    "apply_gyro_dropout"
).split()
TRAINING_STATE = (
    "compute_ema swap_ema_weights use_ema_weights SAMOptimizer apply_gradient_clipping SWA"
).split()
OTHER_TENSOR_FUNCTIONS = ("alibi_bias", "alibi_slopes", "gen_interpolation_lambda")
SKIPPED = {
    "STOCHASTIC_BLOCKS": "a registry: no arithmetic",
    "register_alibi": "a registry: no arithmetic",
    "unregister_alibi": "a registry: no arithmetic",
    "alibi_registry": "a registry: no arithmetic",
    "register_glu_block": "a registry: no arithmetic",
    "unregister_glu_block": "a registry: no arithmetic",
    "glu_block_registry": "a registry: no arithmetic",
    "register_stochastic_block": "a registry: no arithmetic",
    "unregister_stochastic_block": "a registry: no arithmetic",
    "StochasticBlock": "abstract base of StochasticBasicBlock/StochasticBottleneck",
    "StochasticBasicBlock": "built and swept by apply_stochastic_depth (resnet18)",
    "StochasticBottleneck": "built and swept by apply_stochastic_depth (resnet50 blocks)",
    "AlibiMultiheadAttention": "built and swept by apply_alibi (nn.TransformerEncoder)",
    "AlibiContext": "built and swept by apply_alibi",
    "DisabledPositionEmbedding": "built and swept by apply_alibi (GPT-2); outputs zeros",
    "set_stochastic_depth_drop_rate": "sets a rate: no arithmetic on weights or activations",
    "freeze_layers": "sets requires_grad: no arithmetic",
    "scale_scheduler": "edits an LR scheduler: no tensors",
    "apply_seq_length_warmup": "truncates integer token batches: no floating point",
    "ema_smoothing": "a Python float schedule",
    "progressive_resizing_scale": "a Python float schedule",
    "seq_length_warmup_length": "a Python int schedule",
    "stochastic_depth_drop_rate": "a Python float schedule",
    "should_selective_backprop": "a Python bool schedule",
    "LowRankSolution": "a dataclass of tensors: no arithmetic",
    "factorize_matrix": "one-off solver, run in the accumulation dtype and returned in the "
    "weight's (tests/functional/test_factorization_solve.py)",
    "factorize_conv2d": "one-off solver, as factorize_matrix",
}


def test_every_public_name_is_swept() -> None:
    swept = [*BATCH_OPS, *LAYERS, *TRANSFORMS, *TRAINING_STATE, *OTHER_TENSOR_FUNCTIONS]
    assert len(set(swept)) == len(swept) and not set(swept) & set(SKIPPED)
    assert set(swept) | set(SKIPPED) == set(F.__all__), (
        "sweep or skip (with a reason): "
        f"{sorted(set(F.__all__) - set(swept) - set(SKIPPED))}; "
        f"gone: {sorted((set(swept) | set(SKIPPED)) - set(F.__all__))}"
    )
    assert all(BATCH_OPS.values()), [k for k, v in BATCH_OPS.items() if not v]


# ---------------------------------------------------------------------------------------------
# Batch ops: low-precision tensors against float32, the same draws
# ---------------------------------------------------------------------------------------------

# select_using_loss ranks samples by a low-precision model's loss: rounding may swap two close
# losses and select other samples, so only finiteness and dtype are checked there.
_RANKED = {"select_using_loss"}


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
@pytest.mark.parametrize("case", [c for cs in BATCH_OPS.values() for c in cs], ids=lambda c: c.name)
def test_batch_ops_match_float32(case, dtype) -> None:
    if dtype not in case.dtypes:
        pytest.skip(f"{case.name} does not take {dtype}")
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    low = x.to(dtype)
    want = case.run(low.float(), torch.Generator().manual_seed(1))  # the same rounded input
    got = case.run(low, torch.Generator().manual_seed(1))
    assert got.dtype == dtype
    if case.name in _RANKED:
        assert got.isfinite().all()
        return
    _check(got, want, dtype, scale=0.25)  # one rounding of the result: ~an epsilon


# ---------------------------------------------------------------------------------------------
# Layers and model transforms: whole low-precision models, and float32 under autocast
# ---------------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.GroupNorm(4, 32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.LayerNorm(32 * 16), nn.Linear(32 * 16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _image(n: int = 2, side: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, side, side, generator=torch.Generator().manual_seed(0))


def _gpt2(impl: str = "eager"):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=40, n_positions=32, n_embd=16, n_layer=2, n_head=4, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    model.set_attn_implementation(impl)
    return model


def _bert():
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=24, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return BertForMaskedLM(config)


def _tokens() -> torch.Tensor:
    return torch.randint(1, 40, (2, 12), generator=torch.Generator().manual_seed(0))


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    return out.logits if hasattr(out, "logits") else out


def _transformer_encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


# name -> (build a float32 model, an input, the transform (model, dtype) -> model)
MODELS: dict[str, tuple[Callable, Callable, Callable]] = {
    "apply_blurpool": (SmallCNN, _image, lambda m, d: F.apply_blurpool(m, min_channels=1)),
    "apply_channels_last": (SmallCNN, _image, lambda m, d: F.apply_channels_last(m)),
    "apply_factorization": (
        SmallCNN,
        _image,
        lambda m, d: F.apply_factorization(m, min_channels=8, min_features=8, latent_channels=0.5),
    ),
    "apply_ghost_batchnorm": (
        SmallCNN,
        lambda: _image(8),
        lambda m, d: F.apply_ghost_batchnorm(m, ghost_batch_size=4),
    ),
    "apply_low_precision_groupnorm": (
        SmallCNN,
        _image,
        lambda m, d: F.apply_low_precision_groupnorm(m, d),
    ),
    "apply_low_precision_layernorm": (
        SmallCNN,
        _image,
        lambda m, d: F.apply_low_precision_layernorm(m, d),
    ),
    "apply_se": (SmallCNN, _image, lambda m, d: F.apply_se(m, latent_channels=4, min_channels=8)),
    "apply_squeeze_excite": (
        SmallCNN,
        _image,
        lambda m, d: F.apply_squeeze_excite(m, latent_channels=4, min_channels=8),
    ),
    "apply_stochastic_depth": (
        lambda: torchvision.models.resnet18(num_classes=10),
        lambda: _image(2, 32),
        lambda m, d: F.apply_stochastic_depth(m, "block", "ResNetBasicBlock", drop_rate=0.5),
    ),
    "apply_weight_standardization": (
        SmallCNN,
        _image,
        lambda m, d: F.apply_weight_standardization(m),
    ),
    "apply_gated_linear_units": (_bert, _tokens, lambda m, d: F.apply_gated_linear_units(m)),
    "apply_alibi": (_gpt2, _tokens, lambda m, d: F.apply_alibi(m, max_sequence_length=64)),
    "apply_gyro_dropout": (
        lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(), nn.Linear(32, 4)),
        lambda: torch.randn(4, 16, generator=torch.Generator().manual_seed(0)),
        lambda m, d: F.apply_gyro_dropout(
            m, 10, 10, 0.5, 8, 2, generator=torch.Generator().manual_seed(0)
        ),
    ),
    "apply_alibi (nn.TransformerEncoder)": (
        _transformer_encoder,
        lambda: torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(0)),
        lambda m, d: F.apply_alibi(m, max_sequence_length=64),
    ),
}


def _build(name: str, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    build, make_input, transform = MODELS[name]
    torch.manual_seed(0)
    model = transform(build(), dtype)
    return model, make_input()


def _forward_backward(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    """The output, and the gradients of the parameters and of a floating input."""
    if x.is_floating_point():
        x = x.detach().requires_grad_()
    out = _logits(model, x)
    out.float().square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return out.detach(), grads + ([x.grad] if x.grad is not None else [])


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_transformed_models_in_low_precision(name, dtype) -> None:
    """The whole model in ``dtype`` (training mode, eval for stochastic depth's draws)."""
    model, x = _build(name, dtype)
    model.eval() if name == "apply_stochastic_depth" else model.train()
    low = copy.deepcopy(model).to(dtype)
    want, _ = _forward_backward(model, x)
    got, grads = _forward_backward(low, x if not x.is_floating_point() else x.to(dtype))
    assert got.dtype == dtype
    assert all(g.dtype == dtype and g.isfinite().all() for g in grads)
    _check(got.float(), want, dtype, scale=2.0)


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_transformed_models_under_autocast(name, dtype) -> None:
    model, x = _build(name, dtype)
    model.eval() if name == "apply_stochastic_depth" else model.train()
    reference = copy.deepcopy(model)
    want, want_grads = _forward_backward(reference, x)
    with torch.autocast("cpu", dtype=dtype):
        got, grads = _forward_backward(model, x)
    assert all(g.dtype == torch.float32 for g in grads)
    flat = [torch.cat([g.flatten() for g in gs]) for gs in (grads, want_grads)]
    _check(*flat, dtype, scale=4.0)  # all gradients together (some are ~0: noise alone)
    _check(got.float(), want, dtype, scale=2.0)


def _layer_cases() -> dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]]:
    img = _image

    def vec(*shape):
        return lambda: torch.randn(*shape, generator=torch.Generator().manual_seed(0))

    return {
        "BlurConv2d": (lambda: F.BlurConv2d(3, 8, 3, stride=2, padding=1), img),
        "BlurMaxPool2d": (lambda: F.BlurMaxPool2d(2), img),
        "BlurPool2d": (lambda: F.BlurPool2d(channels=3), img),
        "FactorizedConv2d": (lambda: F.FactorizedConv2d(3, 16, 3, latent_channels=0.5), img),
        "FactorizedLinear": (lambda: F.FactorizedLinear(16, 16, latent_features=0.25), vec(4, 16)),
        "GatedLinear": (lambda: F.GatedLinear(16, 8), vec(4, 16)),
        "GyroDropoutLayer": (lambda: F.GyroDropoutLayer(10, 10, 0.5, 8, 2, seed=0), vec(4, 16)),
        "GhostBatchNorm1d": (lambda: F.GhostBatchNorm1d(6, ghost_batch_size=4), vec(8, 6)),
        "GhostBatchNorm2d": (lambda: F.GhostBatchNorm2d(3, ghost_batch_size=2), lambda: img(4)),
        "GhostBatchNorm3d": (lambda: F.GhostBatchNorm3d(2, ghost_batch_size=2), vec(4, 2, 3, 4, 4)),
        "LowPrecisionGroupNorm": (lambda: F.LowPrecisionGroupNorm(3, 3), img),
        "GhostBatchNormAct2d": (
            lambda: F.GhostBatchNormAct2d(3, ghost_batch_size=2, act=nn.SiLU()),
            lambda: img(4),
        ),
        "LowPrecisionLayerNorm": (lambda: F.LowPrecisionLayerNorm(16), vec(4, 16)),
        "LowPrecisionLayerNorm2d": (lambda: F.LowPrecisionLayerNorm2d(3), img),
        "SqueezeExcite2d": (lambda: F.SqueezeExcite2d(3, latent_channels=4), img),
        "SqueezeExciteConv2d": (lambda: F.SqueezeExciteConv2d(3, 8, 3, latent_channels=4), img),
    }


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
@pytest.mark.parametrize("name", sorted(_layer_cases()))
@pytest.mark.parametrize("mode", ["whole", "autocast"])
def test_layers_in_low_precision(name, dtype, mode) -> None:
    build, make_input = _layer_cases()[name]
    torch.manual_seed(0)
    layer = build()
    if name.startswith("LowPrecision"):  # the layer's own low-precision dtype
        layer.low_precision_dtype = dtype
    x = make_input()
    want, _ = _forward_backward(copy.deepcopy(layer), x)
    if mode == "whole":
        got, grads = _forward_backward(layer.to(dtype), x.to(dtype))
        assert got.dtype == dtype
    else:
        with torch.autocast("cpu", dtype=dtype):
            got, grads = _forward_backward(layer, x)
    assert all(g.isfinite().all() for g in grads)
    _check(got.float(), want, dtype, scale=2.0)


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_weight_standardizer_and_alibi_tensors(dtype) -> None:
    w = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))
    want = F.WeightStandardizer()(w)
    got = F.WeightStandardizer().to(dtype)(w.to(dtype))
    assert got.dtype == dtype
    _check(got.float(), want, dtype)
    for got, want in (
        (F.alibi_slopes(4, dtype=dtype), F.alibi_slopes(4)),
        (F.alibi_bias(4, 12, dtype=dtype), F.alibi_bias(4, 12)),
        (F.AlibiBias(4, 32)(12, dtype=dtype), F.AlibiBias(4, 32)(12)),
    ):
        assert got.dtype == dtype
        _check(got.float(), want, dtype, scale=0.25)
    lam = F.gen_interpolation_lambda(0.4, batch_size=8, generator=torch.Generator().manual_seed(0))
    assert lam.dtype == torch.float32 and lam.isfinite().all()  # drawn in float32: cast by the op


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_alibi_eager_attention_runs_in_the_models_dtype(dtype) -> None:
    """HF's eager attention runs its softmax in the model's dtype: no float32 (B, H, L, L)."""
    model, x = _build("apply_alibi", dtype)
    model = model.to(dtype).eval()
    seen: list[torch.dtype] = []

    class Watch(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.shape == (2, 4, 12, 12):
                seen.append(out.dtype)
            return out

    with torch.no_grad(), Watch():
        model(x)
    assert seen and torch.float32 not in seen


# ---------------------------------------------------------------------------------------------
# Training-state helpers
# ---------------------------------------------------------------------------------------------


def _trained_pair(dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = SmallCNN()
    ema = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return model, ema


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_ema_of_a_low_precision_model(dtype) -> None:
    model, ema = _trained_pair(dtype)
    low_model = copy.deepcopy(model).to(dtype)
    ema32_of_low, ema_low = copy.deepcopy(ema), copy.deepcopy(ema).to(dtype)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        F.compute_ema(model, ema, 0.9)
        F.compute_ema(low_model, ema32_of_low, torch.tensor(0.9))  # float32 EMA of it
        F.compute_ema(low_model, ema_low, 0.9, generator=gen)  # stochastic rounding
    for want, a, b in zip(
        ema.parameters(), ema32_of_low.parameters(), ema_low.parameters(), strict=True
    ):
        _check(a.detach(), want.detach(), dtype, scale=0.25)
        _check(b.detach().float(), want.detach(), dtype, scale=0.5)
    x = _image().to(dtype)
    with torch.no_grad():
        want_out = ema_low.eval()(x)
        with F.use_ema_weights(low_model, ema_low):  # bit for bit, in the same dtype
            assert torch.equal(low_model.eval()(x), want_out)
    F.swap_ema_weights(low_model, ema_low)
    F.swap_ema_weights(low_model, ema_low)
    assert low_model.features[0].weight.dtype == dtype


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
@pytest.mark.parametrize("kind", ["norm", "value", "adaptive"])
def test_gradient_clipping_in_low_precision(dtype, kind) -> None:
    model, _ = _trained_pair(dtype)
    low = copy.deepcopy(model).to(dtype)
    gen = torch.Generator().manual_seed(3)
    for p, q in zip(model.parameters(), low.parameters(), strict=True):
        q.grad = (0.1 * torch.randn(p.shape, generator=gen)).to(dtype)
        p.grad = q.grad.float()  # the same rounded gradients
    F.apply_gradient_clipping(model, kind, 0.05)
    F.apply_gradient_clipping(low, kind, 0.05)
    for p, q in zip(model.parameters(), low.parameters(), strict=True):
        assert q.grad.dtype == dtype
        _check(q.grad.float(), p.grad, dtype, scale=0.25)
    # A float16 norm beyond float16's range: accumulated in float32, the clip stays finite.
    big = [torch.full((1000,), 3000.0, dtype=dtype, requires_grad=True)]
    big[0].grad = torch.full((1000,), 3000.0, dtype=dtype)
    F.apply_gradient_clipping(big, kind, 1.0)
    assert big[0].grad.isfinite().all()
    if kind == "norm":
        assert float(big[0].grad.float().norm()) == pytest.approx(1.0, rel=1e-2)


def _step(model, x, dtype=None, scaler=None, loss_scale=1.0, sam=True) -> None:
    """One SAM step (or one step of its base optimizer), in autocast ``dtype`` if given."""
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = F.SAMOptimizer(base, rho=0.05, grad_scaler=scaler) if sam else base

    def closure():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = _logits(model, x).float().square().mean() * loss_scale
        (scaler.scale(loss) if scaler is not None else loss).backward()
        return loss

    if sam:
        opt.step(closure)
    elif scaler is not None:
        closure()
        scaler.step(opt)
    else:
        closure()
        opt.step()
    if scaler is not None:
        scaler.update()


def _step_error(dtype, mode, sam) -> float:
    """Relative error of the weights after one step in low precision, against float32."""
    model, _ = _trained_pair(dtype)
    x = _image()
    reference = copy.deepcopy(model)
    _step(reference, x, sam=sam)
    if mode == "whole":
        model.to(dtype)
        _step(model, x.to(dtype), sam=sam)
    else:
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8) if dtype == torch.float16 else None
        _step(model, x, dtype, scaler, sam=sam)
    got = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    assert got.isfinite().all()
    want = torch.cat([p.detach().flatten() for p in reference.parameters()])
    start = torch.cat([p.detach().flatten() for p in _trained_pair(dtype)[0].parameters()])
    return _rel_error(got - start, want - start)  # of the update


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
@pytest.mark.parametrize("mode", ["whole", "autocast"])
def test_sam_step_in_low_precision(dtype, mode) -> None:
    """SAM's update in low precision is as close to float32's as its base optimizer's is."""
    sam, base = _step_error(dtype, mode, True), _step_error(dtype, mode, False)
    assert sam < 1.5 * base + REL[dtype], (sam, base)


def test_sam_perturbation_of_float16_weights_keeps_its_radius() -> None:
    torch.manual_seed(0)
    model = nn.Linear(64, 32).half()
    start = [p.detach().clone() for p in model.parameters()]
    opt = F.SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.0), rho=0.05)
    radius = []

    def closure():
        radius.append(
            float(
                torch.cat(
                    [
                        (p.detach() - s).float().flatten()
                        for p, s in zip(model.parameters(), start, strict=True)
                    ]
                ).norm()
            )
        )
        opt.zero_grad()
        loss = sum((p.float() * 2e4).sum() for p in model.parameters())  # ‖g‖ ≈ 9e5
        loss.backward()
        return loss

    opt.step(closure)
    assert radius[0] == 0.0
    assert radius[1] == pytest.approx(0.05, rel=0.01)


def test_sam_with_a_grad_scaler_overflow_leaves_the_model_as_scaler_step_does() -> None:
    model, _ = _trained_pair(torch.float16)
    reference = copy.deepcopy(model)
    for net, sam in ((reference, False), (model, True)):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        _step(net, _image(), torch.float16, scaler, loss_scale=1e30, sam=sam)  # inf gradients
    want = reference.state_dict()
    for name, value in model.state_dict().items():
        if value.is_floating_point():
            assert value.isfinite().all(), name  # no NaN written by the second pass
        assert torch.equal(value, want[name]), name  # buffers included


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_swa_of_a_low_precision_model(dtype) -> None:
    def run(dtype_or_none):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        if dtype_or_none is not None:
            model.to(dtype_or_none)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        swa = F.SWA(model, opt, total_steps=10, swa_start=0.5)
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
        for _ in range(10):
            opt.zero_grad()
            model(x.to(model[0].weight.dtype)).float().square().mean().backward()
            opt.step()
            swa.step()
        return swa.averaged_model

    want, got = run(None), run(dtype)
    for p, q in zip(got.parameters(), want.parameters(), strict=True):
        _check(p.detach().float(), q.detach(), dtype, scale=0.5)
