"""Model transforms under ``torch.compile``, the host-read detector and autocast (issue 12).

For every ``apply_*`` transform of this area (squeeze-excite, ghost batch norm, factorization,
weight standardization, low-precision LayerNorm/GroupNorm, channels_last, ALiBi on HF GPT-2 and
BERT, gated linear units) a small real model -- a torchvision ResNet with one block per stage,
or a tiny HuggingFace model built from a config -- is transformed, then trained for a few steps
with fresh data each step:

- compiled with ``fullgraph=True`` (a graph break raises) through a graph counter: one graph
  over all steps (no recompile), and the same losses and weights as the eager run;
- eagerly inside :func:`tests.devicecheck.no_host_reads` (forward and backward): no replacement
  layer reads a device value on the host;
- under ``torch.autocast`` bf16 on the CPU (finite losses; each replacement layer's output dtype
  is the one its docstring states), and on CUDA in bf16 and in fp16 with ``GradScaler`` under
  ``torch.cuda.set_sync_debug_mode("error")`` (the GPU lane).

Backend ``aot_eager`` (traces forward and backward as inductor would, without code generation)
keeps the file fast; two ``slow`` tests compare inductor's generated code with eager.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import torch
import torch._dynamo
import torch.nn.functional as TF
import torchvision
from torch import nn

import functional as F
from functional._compat import TORCH_RELEASE
from functional.factorization import FactorizedConv2d, FactorizedLinear
from functional.gated_linear_units import GatedLinear
from functional.ghost_batchnorm import GhostBatchNorm2d, GhostBatchNormAct2d
from functional.low_precision_norm import (
    LowPrecisionGroupNorm,
    LowPrecisionLayerNorm,
    LowPrecisionLayerNorm2d,
)
from functional.squeeze_excite import SqueezeExcite2d, SqueezeExciteConv2d
from tests.devicecheck import compile_counter, no_host_reads
from tests.functional._hf_models import hf_model

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.compile

# torch.compile of Hugging Face models fails inside transformers itself on torch 2.6 (measured on
# 2.6.0 with transformers 5.25: "too many positional arguments" while dynamo binds a forward's
# arguments, and an unsupported ``co_varnames`` lookup in GPT-2's forward), not in this library;
# 2.14.1 and 2.15.0 pass (and 2.9.1 did, by issue 37's table).
# docs/getting_started.md says so too.
HF_COMPILES = TORCH_RELEASE >= (2, 7)
HF_SKIP_REASON = "torch.compile of Hugging Face models fails inside transformers on torch 2.6"

VOCAB = 40
STEPS = 3


def resnet(norm: Callable[[int], nn.Module] | None = None) -> nn.Module:
    """torchvision's ResNet with one BasicBlock per stage (channels 64..512), 10 classes."""
    extra = {} if norm is None else {"norm_layer": norm}
    return torchvision.models.resnet.ResNet(
        torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=10, **extra
    )


def group_norm(channels: int) -> nn.Module:
    return nn.GroupNorm(8, channels)


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=16,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config)
    model.set_attn_implementation("sdpa")
    return model


def bert() -> nn.Module:
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertForMaskedLM(config)
    model.set_attn_implementation("sdpa")
    return model


class TinyEncoderLM(nn.Module):
    """Embedding, a two-layer ``nn.TransformerEncoder`` and a vocabulary head (torch only)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)))


def encoder_alibi_glu() -> nn.Module:
    model = F.apply_alibi(TinyEncoderLM(), max_sequence_length=64)
    return F.apply_gated_linear_units(model, act_fn="silu")


def timm_model(name: str, **kwargs) -> nn.Module:
    timm = pytest.importorskip("timm")
    return timm.create_model(name, num_classes=10, **kwargs)


def alibi_and_glu(model: nn.Module) -> nn.Module:
    return F.apply_gated_linear_units(F.apply_alibi(model, max_sequence_length=64))


@dataclass(frozen=True)
class Case:
    """A transformed model, its kind of data, and whether it is meant to run under autocast."""

    build: Callable[[], nn.Module]
    tokens: bool = False
    channels_last: bool = False
    autocast: bool = False  # the low-precision norms only differ from plain ones under autocast
    hf: bool = False  # a Hugging Face model: see HF_COMPILES


CASES: dict[str, Case] = {
    "squeeze_excite": Case(lambda: F.apply_se(resnet(), latent_channels=0.25, min_channels=128)),
    "ghost_batchnorm": Case(lambda: F.apply_ghost_batchnorm(resnet(), ghost_batch_size=2)),
    "factorization": Case(
        lambda: F.apply_factorization(
            resnet(), min_channels=128, latent_channels=0.25, min_features=10, latent_features=4
        )
    ),
    "weight_standardization": Case(lambda: F.apply_weight_standardization(resnet(group_norm))),
    "low_precision_groupnorm": Case(
        lambda: F.apply_low_precision_groupnorm(resnet(group_norm), torch.bfloat16),
        autocast=True,
    ),
    "channels_last": Case(lambda: F.apply_channels_last(resnet()), channels_last=True),
    "low_precision_layernorm": Case(
        lambda: F.apply_low_precision_layernorm(gpt2(), torch.bfloat16),
        tokens=True,
        autocast=True,
        hf=True,
    ),
    "alibi_gpt2": Case(lambda: F.apply_alibi(gpt2(), max_sequence_length=64), tokens=True, hf=True),
    "alibi_bert": Case(lambda: F.apply_alibi(bert(), max_sequence_length=64), tokens=True, hf=True),
    "gated_linear_units": Case(lambda: F.apply_gated_linear_units(bert()), tokens=True, hf=True),
    "alibi_and_glu_transformer_encoder": Case(encoder_alibi_glu, tokens=True),
    "ghost_batchnorm_act_timm": Case(
        lambda: F.apply_ghost_batchnorm(timm_model("mobilenetv3_small_050"), ghost_batch_size=2)
    ),
    "low_precision_layernorm_timm": Case(
        lambda: F.apply_low_precision_layernorm(
            timm_model("convnext_atto", depths=(1, 1, 1, 1), conv_mlp=False), torch.bfloat16
        ),
        autocast=True,
    ),
    "alibi_and_glu_roberta": Case(lambda: alibi_and_glu(hf_model("roberta")), tokens=True, hf=True),
    "alibi_and_glu_distilbert": Case(
        lambda: alibi_and_glu(hf_model("distilbert")), tokens=True, hf=True
    ),
}


def build(case: Case, seed: int = 0) -> nn.Module:
    """The transformed model, from a fixed seed (two builds are identical)."""
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' config notes
        return case.build().train()


def batches(case: Case, n: int, *, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` fresh (input, target) pairs from an explicit generator: unit-variance images or
    token ids of length 16."""
    g = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(n):
        if case.tokens:
            ids = torch.randint(0, VOCAB, (2, 16), generator=g)
            out.append((ids.to(device), ids.to(device)))
        else:
            x = torch.randn(4, 3, 32, 32, generator=g)
            if case.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            out.append((x.to(device), torch.randint(0, 10, (4,), generator=g).to(device)))
    return out


def loss_of(output: object, target: torch.Tensor) -> torch.Tensor:
    logits = output.logits if hasattr(output, "logits") else output
    return TF.cross_entropy(logits.float().flatten(0, -2), target.flatten())


def autocast_if(enabled: bool, device: str = "cpu", dtype: torch.dtype = torch.bfloat16):
    return torch.autocast(device, dtype=dtype) if enabled else contextlib.nullcontext()


def train(
    model: nn.Module,
    forward: Callable[..., object],
    data: list[tuple[torch.Tensor, torch.Tensor]],
    *,
    autocast: bool,
) -> list[torch.Tensor]:
    """SGD with momentum, one step per batch; the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        with autocast_if(autocast):
            out = forward(x)
        loss = loss_of(out, y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def assert_close_models(compiled: nn.Module, eager: nn.Module, rtol: float, atol: float) -> None:
    for (name, a), (_, b) in zip(
        compiled.state_dict().items(), eager.state_dict().items(), strict=True
    ):
        if a.is_floating_point():
            torch.testing.assert_close(
                a, b, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}"
            )
        else:
            assert torch.equal(a, b), name


def run_compiled_vs_eager(case: Case, backend: str) -> None:
    if case.hf and not HF_COMPILES:
        pytest.skip(HF_SKIP_REASON)
    data = batches(case, STEPS)
    eager_model = build(case)
    eager_losses = train(eager_model, eager_model, data, autocast=case.autocast)

    torch._dynamo.reset()
    model = build(case)
    compiled, counter = compile_counter(model, backend=backend)
    losses = train(model, compiled, data, autocast=case.autocast)

    assert counter.frame_count == 1, f"{counter.frame_count} graphs over {STEPS} steps"
    # aot_eager runs the same kernels as eager; inductor fuses (other rounding). bf16 autocast
    # rounds every activation to 8 bits of mantissa.
    rtol, atol = (2e-2, 2e-3) if case.autocast else (1e-4, 1e-5)
    if backend == "inductor":
        rtol, atol = max(rtol, 1e-3), max(atol, 1e-4)
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses), rtol=rtol, atol=atol)
    assert_close_models(model, eager_model, rtol=rtol * 10, atol=atol * 10)


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_training_step_one_graph_no_break_and_equals_eager(name: str) -> None:
    run_compiled_vs_eager(CASES[name], "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi_and_glu_transformer_encoder", "alibi_gpt2"])
def test_inductor_training_step_equals_eager(name: str) -> None:
    run_compiled_vs_eager(CASES[name], "inductor")


@pytest.mark.skipif(not HF_COMPILES, reason=HF_SKIP_REASON)
def test_alibi_second_length_compiles_once_more_and_no_more() -> None:
    """The ALiBi bias is built inside the graph under compile (no cached-buffer mutation, which
    recompiled the second step before): a new sequence length is a new shape (one more graph,
    or a dynamic one), and alternating lengths afterwards compiles nothing new."""
    torch._dynamo.reset()
    model = build(CASES["alibi_gpt2"])
    compiled, counter = compile_counter(model)
    g = torch.Generator().manual_seed(5)
    for length in (16, 16, 24, 16, 24):
        ids = torch.randint(0, VOCAB, (2, length), generator=g)
        loss_of(compiled(ids), ids).backward()
    assert counter.frame_count <= 2
    # The eager cache was not touched by the traced calls.
    biases = [m for m in model.modules() if isinstance(m, F.AlibiBias)]
    assert biases and all(b.bias is None for b in biases)


# --------------------------------------------------------------------------- host reads


@pytest.mark.parametrize("name", list(CASES))
def test_forward_backward_has_no_host_reads(name: str) -> None:
    case = CASES[name]
    model = build(case)
    ((x, y),) = batches(case, 1)
    with autocast_if(case.autocast):
        with no_host_reads():
            loss = loss_of(model(x), y)
            loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad), (
        "every trainable parameter got a gradient"
    )


def test_ghost_batchnorm_cumulative_average_has_no_host_read() -> None:
    """``momentum=None`` (cumulative average) weights the update by 1/num_batches_tracked on
    the device, not through ``float(num_batches_tracked)``."""
    bn = GhostBatchNorm2d(3, momentum=None, ghost_batch_size=2)
    x = torch.randn(6, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    with no_host_reads():
        bn(x)
        bn(x * 2)
    plain = nn.BatchNorm2d(3, momentum=None)
    plain(x)
    plain(x * 2)
    torch.testing.assert_close(bn.running_mean, plain.running_mean)
    torch.testing.assert_close(bn.running_var, plain.running_var)


# --------------------------------------------------------------------------- autocast


@pytest.mark.parametrize("name", list(CASES))
def test_trains_under_cpu_bf16_autocast(name: str) -> None:
    case = CASES[name]
    model = build(case)
    losses = train(model, model, batches(case, 2), autocast=True)
    assert all(torch.isfinite(loss) for loss in losses)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _alibi_attention_output(dtype: torch.dtype) -> torch.Tensor:
    model = build(CASES["alibi_gpt2"])
    attention = model.transformer.h[0].attn
    hidden = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0), dtype=dtype)
    return attention(hidden)[0]


# (layer factory, input, dtype of the output under bf16 autocast) -- as the docstrings state.
DTYPE_RULES: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor], torch.dtype]] = {
    "SqueezeExcite2d(float32 input)": (
        lambda: SqueezeExcite2d(16, 4),
        lambda: torch.randn(2, 16, 4, 4),
        torch.float32,
    ),
    "SqueezeExcite2d(bf16 input)": (
        lambda: SqueezeExcite2d(16, 4),
        lambda: torch.randn(2, 16, 4, 4, dtype=torch.bfloat16),
        torch.bfloat16,
    ),
    "SqueezeExciteConv2d": (
        lambda: SqueezeExciteConv2d(8, 16, 3, latent_channels=4),
        lambda: torch.randn(2, 8, 6, 6),
        torch.bfloat16,
    ),
    "GhostBatchNorm2d(bf16 input)": (
        lambda: GhostBatchNorm2d(8, ghost_batch_size=2),
        lambda: torch.randn(4, 8, 3, 3, dtype=torch.bfloat16),
        torch.bfloat16,
    ),
    "GhostBatchNorm2d(float32 input)": (
        lambda: GhostBatchNorm2d(8, ghost_batch_size=2),
        lambda: torch.randn(4, 8, 3, 3),
        torch.float32,
    ),
    "FactorizedConv2d": (
        lambda: FactorizedConv2d.from_conv2d(nn.Conv2d(16, 16, 3), latent_channels=4),
        lambda: torch.randn(2, 16, 5, 5),
        torch.bfloat16,
    ),
    "FactorizedLinear": (
        lambda: FactorizedLinear.from_linear(nn.Linear(16, 16), latent_features=4),
        lambda: torch.randn(2, 16),
        torch.bfloat16,
    ),
    "weight-standardized Conv2d": (
        lambda: F.apply_weight_standardization(nn.Sequential(nn.Conv2d(3, 8, 3))),
        lambda: torch.randn(2, 3, 6, 6),
        torch.bfloat16,
    ),
    "LowPrecisionLayerNorm": (
        lambda: LowPrecisionLayerNorm.from_layernorm(nn.LayerNorm(8), torch.bfloat16),
        lambda: torch.randn(2, 8),
        torch.float32,
    ),
    "LowPrecisionLayerNorm2d": (
        lambda: LowPrecisionLayerNorm2d.from_layernorm(nn.LayerNorm(8), torch.bfloat16),
        lambda: torch.randn(2, 8, 3, 3),
        torch.float32,
    ),
    "GhostBatchNormAct2d": (
        lambda: GhostBatchNormAct2d(8, ghost_batch_size=2, act=nn.ReLU()),
        lambda: torch.randn(4, 8, 3, 3, dtype=torch.bfloat16),
        torch.bfloat16,
    ),
    "LowPrecisionGroupNorm": (
        lambda: LowPrecisionGroupNorm.from_groupnorm(nn.GroupNorm(2, 8), torch.bfloat16),
        lambda: torch.randn(2, 8, 3),
        torch.float32,
    ),
    "GatedLinear": (
        lambda: GatedLinear.from_linear(nn.Linear(8, 8), TF.gelu),
        lambda: torch.randn(2, 8),
        torch.bfloat16,
    ),
}


@pytest.mark.parametrize("name", list(DTYPE_RULES))
def test_replacement_layer_dtype_under_bf16_autocast(name: str) -> None:
    make, make_input, expected = DTYPE_RULES[name]
    layer = make().train()
    x = make_input()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    assert out.dtype == expected
    out.float().sum().backward()
    assert all(p.grad is None or p.grad.dtype == p.dtype for p in layer.parameters())


def test_alibi_attention_dtype_under_bf16_autocast() -> None:
    """GPT-2's projections run in bf16 under autocast, and the ALiBi bias is built in the
    query's dtype, so the attention output is bf16."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _alibi_attention_output(torch.float32).dtype == torch.bfloat16


def test_low_precision_norm_computes_in_low_precision_under_autocast() -> None:
    """Under autocast the low-precision LayerNorm rounds like a bf16 layer_norm (not like
    autocast's float32 one), and returns float32."""
    ln = nn.LayerNorm(64)
    low = LowPrecisionLayerNorm.from_layernorm(ln, torch.bfloat16)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3 + 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = low(x)
    expected = TF.layer_norm(x.bfloat16(), (64,), ln.weight.bfloat16(), ln.bias.bfloat16()).float()
    assert torch.equal(got, expected)


# --------------------------------------------------------------------------- CUDA lane


@contextlib.contextmanager
def sync_debug_error() -> Iterator[None]:
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_amp_training_without_syncs(name: str, dtype: torch.dtype) -> None:
    """bf16, and fp16 with ``GradScaler``: finite training; forward and backward never
    synchronise (the scaler's own inf check in ``step`` does, by design, so it stays outside)."""
    case = CASES[name]
    model = build(case).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    for i, (x, y) in enumerate(batches(case, 3, device="cuda")):
        opt.zero_grad(set_to_none=True)
        guard = sync_debug_error() if i > 0 else contextlib.nullcontext()  # 1st: cuDNN setup
        with guard:
            with torch.autocast("cuda", dtype=dtype):
                out = model(x)
            loss = loss_of(out, y)
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        assert torch.isfinite(loss)


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_compiled_training_step_one_graph(name: str) -> None:
    case = CASES[name]
    torch._dynamo.reset()
    model = build(case).cuda()
    compiled, counter = compile_counter(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches(case, STEPS, device="cuda"):
        opt.zero_grad(set_to_none=True)
        with autocast_if(True, "cuda"):
            loss = loss_of(compiled(x), y)
        loss.backward()
        opt.step()
    assert counter.frame_count == 1
