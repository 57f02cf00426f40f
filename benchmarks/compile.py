"""torch.compile on transformed models and per-step ops: graph breaks, recompiles, speed.

Two tables, ours next to Composer's (``composer.functional``) on the same run:

1. **Model transforms.** A small real model after each transform (torchvision ResNet with one
   block per stage; tiny HuggingFace GPT-2/BERT from configs) trains for ``steps`` steps with
   fresh data each step: ``model`` compiled with ``torch.compile`` (the usual
   ``torch.compile(model)``; backward through AOT autograd, the optimizer step eager). Reported:
   graph breaks (dynamo's ``counters["graph_break"]``) and recompiles (graphs built after the
   first step, counted by a ``CompileCounterWithBackend``), compile time (the first step), and
   eager and compiled steps/s timed interleaved (medians).
2. **Per-step ops.** Each op compiled alone and called ``steps`` times with fresh random values
   and changing scalar arguments (the mixup λ, cutmix/cutout boxes, the smoothing α, a resize
   scale within one output size, the EMA smoothing, SAM's steps): graph breaks and recompiles.

A transform or op that fails (Composer's on current torch/transformers, for instance) gets its
error in the row instead of numbers. ``--quick``: 10 steps, backend ``aot_eager``, one repeat (a
smoke run: its timings mean nothing). Full: 50 steps, backend ``inductor`` on CUDA and
``aot_eager`` on a CPU (inductor's code generation takes minutes per model there; the breaks and
recompiles are dynamo's and the same; ``--backend inductor`` for CPU speed figures).
"""

from __future__ import annotations

import argparse
import contextlib
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo
import torch._dynamo.testing
import torch.nn.functional as TF
import torchvision
from torch import nn
from torch._dynamo.utils import counters

import functional as F
from benchmarks._harness import Table, machine_description, main_for, peer, time_interleaved

__all__ = ["run"]

VOCAB = 40


# ----------------------------------------------------------------------------- models


def _resnet(block: str = "basic", norm: Callable[[int], nn.Module] | None = None) -> nn.Module:
    kind = torchvision.models.resnet.BasicBlock
    if block == "bottleneck":
        kind = torchvision.models.resnet.Bottleneck
    extra = {} if norm is None else {"norm_layer": norm}
    return torchvision.models.resnet.ResNet(kind, [1, 1, 1, 1], num_classes=10, **extra)


def _group_norm(channels: int) -> nn.Module:
    return nn.GroupNorm(8, channels)


def _gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.set_attn_implementation("sdpa")
    return model


def _bert() -> nn.Module:
    import transformers

    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = transformers.BertForMaskedLM(config)
    model.set_attn_implementation("sdpa")
    return model


@dataclass(frozen=True)
class _Transform:
    build: Callable[[], nn.Module]
    ours: Callable[[nn.Module], object]
    composer: Callable[[Any, nn.Module], object] | None
    tokens: bool = False
    channels_last: bool = False
    autocast: bool = False


def _transforms() -> dict[str, _Transform]:
    def sd(method: str) -> _Transform:
        return _Transform(
            lambda: _resnet("bottleneck"),
            lambda m: F.apply_stochastic_depth(
                m, method, "ResNetBottleneck", drop_rate=0.2, seed=0
            ),
            lambda cf, m: cf.apply_stochastic_depth(
                m, target_layer_name="ResNetBottleneck", stochastic_method=method, drop_rate=0.2
            ),
        )

    return {
        "blurpool": _Transform(_resnet, F.apply_blurpool, lambda cf, m: cf.apply_blurpool(m)),
        "squeeze_excite": _Transform(
            _resnet,
            lambda m: F.apply_se(m, latent_channels=64, min_channels=128),
            lambda cf, m: cf.apply_squeeze_excite(m, latent_channels=64, min_channels=128),
        ),
        "ghost_batchnorm": _Transform(
            _resnet,
            lambda m: F.apply_ghost_batchnorm(m, ghost_batch_size=2),
            lambda cf, m: cf.apply_ghost_batchnorm(m, ghost_batch_size=2),
        ),
        "stochastic_depth block": sd("block"),
        "stochastic_depth sample": sd("sample"),
        "factorization": _Transform(
            _resnet,
            lambda m: F.apply_factorization(m, min_channels=128, latent_channels=0.25),
            lambda cf, m: cf.apply_factorization(m, min_channels=128, latent_channels=0.25),
        ),
        "weight_standardization": _Transform(
            lambda: _resnet(norm=_group_norm),
            F.apply_weight_standardization,
            lambda cf, m: cf.apply_weight_standardization(m),
        ),
        "low_precision_groupnorm": _Transform(
            lambda: _resnet(norm=_group_norm),
            lambda m: F.apply_low_precision_groupnorm(m, torch.bfloat16),
            lambda cf, m: cf.apply_low_precision_groupnorm(m, precision="amp_bf16"),
            autocast=True,
        ),
        "channels_last": _Transform(
            _resnet,
            F.apply_channels_last,
            lambda cf, m: cf.apply_channels_last(m),
            channels_last=True,
        ),
        "low_precision_layernorm (GPT-2)": _Transform(
            _gpt2,
            lambda m: F.apply_low_precision_layernorm(m, torch.bfloat16),
            lambda cf, m: cf.apply_low_precision_layernorm(m, precision="amp_bf16"),
            tokens=True,
            autocast=True,
        ),
        "alibi (GPT-2)": _Transform(
            _gpt2,
            lambda m: F.apply_alibi(m, max_sequence_length=64),
            lambda cf, m: cf.apply_alibi(m, max_sequence_length=64),
            tokens=True,
        ),
        "alibi (BERT)": _Transform(
            _bert,
            lambda m: F.apply_alibi(m, max_sequence_length=64),
            lambda cf, m: cf.apply_alibi(m, max_sequence_length=64),
            tokens=True,
        ),
        "gated_linear_units (BERT)": _Transform(
            _bert,
            F.apply_gated_linear_units,
            lambda cf, m: cf.apply_gated_linear_units(m, None),
            tokens=True,
        ),
    }


# ----------------------------------------------------------------------------- measuring


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= 110 else text[:107] + "..."


def _graph_breaks() -> int:
    return sum(counters["graph_break"].values())


class _Batches:
    """Fresh inputs every call, drawn from an explicit generator (outside any timed region)."""

    def __init__(self, spec: _Transform, device: str, batch: int, size: int) -> None:
        self.spec, self.device, self.batch, self.size = spec, device, batch, size
        self.generator = torch.Generator().manual_seed(0)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.generator
        if self.spec.tokens:
            ids = torch.randint(0, VOCAB, (self.batch, 16), generator=g).to(self.device)
            return ids, ids
        x = torch.randn(self.batch, 3, self.size, self.size, generator=g)
        if self.spec.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (self.batch,), generator=g)
        return x.to(self.device), y.to(self.device)


def _train_step(
    forward: Callable[[torch.Tensor], Any], opt: torch.optim.Optimizer, autocast: bool, device: str
) -> Callable[[tuple[torch.Tensor, torch.Tensor]], None]:
    device_type = torch.device(device).type

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, y = batch
        opt.zero_grad(set_to_none=True)
        context = (
            torch.autocast(device_type, dtype=torch.bfloat16)
            if autocast
            else contextlib.nullcontext()
        )
        with context:
            out = forward(x)
        logits = out.logits if hasattr(out, "logits") else out
        TF.cross_entropy(logits.float().flatten(0, -2), y.flatten()).backward()
        opt.step()

    return step


def _transformed(spec: _Transform, apply: Callable[[nn.Module], object], device: str) -> nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = spec.build()
        apply(model)
    return model.to(device).train()


def _transform_row(
    name: str, who: str, spec: _Transform, apply, *, steps: int, backend: str, device: str,
    repeats: int, batch: int, size: int,
) -> list[object]:  # fmt: skip
    try:
        eager_model = _transformed(spec, apply, device)
        model = _transformed(spec, apply, device)
    except Exception as exc:
        return [name, who, None, None, None, None, None, None, f"transform failed: {_error(exc)}"]
    batches = _Batches(spec, device, batch, size)
    torch._dynamo.reset()
    counters.clear()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(model, backend=counter)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = _train_step(compiled, opt, spec.autocast, device)
    eager_step = _train_step(
        eager_model,
        torch.optim.SGD(eager_model.parameters(), lr=0.01, momentum=0.9),
        spec.autocast,
        device,
    )
    try:
        first = batches()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step(first)
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        graphs_first = counter.frame_count
        breaks = _graph_breaks()  # break sites met by the first step
        for _ in range(steps - 1):
            step(batches())
        recompiles = counter.frame_count - graphs_first
        pool = [batches() for _ in range(4)]
        state = {"i": 0}

        def cycled(fn):
            def call() -> None:
                state["i"] = (state["i"] + 1) % len(pool)
                fn(pool[state["i"]])

            return call

        times = time_interleaved(
            {"eager": cycled(eager_step), "compiled": cycled(step)},
            repeats=repeats,
            number=3,
            warmup=1,
            device=device,
        )
        recompiles = counter.frame_count - graphs_first  # timing steps count too
    except Exception as exc:
        return [name, who, None, None, None, None, None, None, f"step failed: {_error(exc)}"]
    eager_rate, compiled_rate = 1 / times["eager"], 1 / times["compiled"]
    return [
        name, who, eager_rate, compiled_rate, compiled_rate / eager_rate, compile_s, breaks,
        recompiles, "",
    ]  # fmt: skip


# ----------------------------------------------------------------------------- per-step ops


def _op_cases(cf: Any, device: str) -> dict[str, dict[str, Callable[[int], Callable[[], Any]]]]:
    """name -> {who: make(seed) -> call()}; each call compiles (through the caller's backend)
    a function whose tensors and scalars are arguments, so changing values reach dynamo."""
    x = torch.randn(8, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (8,), device=device)
    logits = torch.randn(8, 10, device=device)
    rng = torch.Generator().manual_seed(0)

    def uniform(low: float, high: float) -> float:
        return low + (high - low) * float(torch.rand((), generator=rng))

    ours: dict[str, Callable[..., Any]] = {
        "mixup_batch (λ changes)": lambda: ((x, y, F.gen_interpolation_lambda(0.2)), lambda a, b, lam: F.mixup_batch(a, b, lam, n_classes=10)),
        "cutmix_batch (random box)": lambda: ((x, y), lambda a, b: F.cutmix_batch(a, b, 10, alpha=1.0)),
        "cutout (random holes)": lambda: ((x,), lambda a: F.cutout(a, 1, 0.5)),
        "smooth_labels (α changes)": lambda: ((logits, y, uniform(0.0, 0.2)), lambda a, b, s: F.smooth_labels(a, b, s)),
        "resize_inputs resize (scale changes, one size)": lambda: ((x, y, uniform(0.5, 0.53)), lambda a, b, s: F.resize_inputs(a, b, s, "resize")),
        "resize_inputs crop (scale changes, one size)": lambda: ((x, y, uniform(0.5, 0.53)), lambda a, b, s: F.resize_inputs(a, b, s, "crop")),
    }  # fmt: skip
    theirs: dict[str, Callable[..., Any]] = {}
    if cf is not None:
        theirs = {
            "mixup_batch (λ changes)": lambda: ((x, y, F.gen_interpolation_lambda(0.2)), lambda a, b, lam: cf.mixup_batch(a, b, mixing=lam)),
            "cutmix_batch (random box)": lambda: ((x, y), lambda a, b: cf.cutmix_batch(a, b, alpha=1.0)),
            "cutout (random holes)": lambda: ((x,), lambda a: cf.cutout_batch(a, 1, 0.5)),
            "smooth_labels (α changes)": lambda: ((logits, y, uniform(0.0, 0.2)), lambda a, b, s: cf.smooth_labels(a, b, smoothing=s)),
            "resize_inputs resize (scale changes, one size)": lambda: ((x, y, uniform(0.5, 0.53)), lambda a, b, s: cf.resize_batch(a, b, s, "resize")),
            "resize_inputs crop (scale changes, one size)": lambda: ((x, y, uniform(0.5, 0.53)), lambda a, b, s: cf.resize_batch(a, b, s, "crop")),
        }  # fmt: skip
    return {name: {"ours": ours[name], "composer": theirs.get(name)} for name in ours}


def _count_op(
    draw: Callable[[], tuple[tuple[Any, ...], Callable[..., Any]]], steps: int, backend: str
) -> tuple[int | None, int | None, str]:
    torch._dynamo.reset()
    counters.clear()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled_by_fn: dict[int, Callable[..., Any]] = {}
    graphs_first = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(steps):
                args, fn = draw()
                # One compiled wrapper per op (draw returns a new lambda each time).
                key = fn.__code__.co_firstlineno
                if key not in compiled_by_fn:
                    compiled_by_fn[key] = torch.compile(fn, backend=counter)
                compiled_by_fn[key](*args)
                if i == 0:
                    graphs_first, breaks = counter.frame_count, _graph_breaks()
    except Exception as exc:
        return None, None, _error(exc)
    assert graphs_first is not None
    return breaks, counter.frame_count - graphs_first, ""


def _ema_case(cf: Any, device: str, who: str):
    model = _resnet().to(device)
    ema = _resnet().to(device)
    rng = torch.Generator().manual_seed(0)
    fn = F.compute_ema if who == "ours" else cf.compute_ema

    def step(smoothing: float) -> None:
        fn(model, ema, smoothing=smoothing)

    return lambda: ((0.99 + 0.009 * float(torch.rand((), generator=rng)),), step)


def _sam_case(cf: Any, device: str, who: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10)).to(device)
    base = torch.optim.SGD(model.parameters(), lr=0.01)
    if who == "ours":
        sam = F.SAMOptimizer(base, rho=0.05, interval=2)
    else:
        from composer.algorithms.sam import SAMOptimizer

        sam = SAMOptimizer(base, rho=0.05, interval=2)
    g = torch.Generator().manual_seed(0)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        def closure(**_: Any) -> torch.Tensor:  # Composer passes ddp_sync=
            sam.zero_grad()
            loss = TF.cross_entropy(model(x), y)
            loss.backward()
            return loss

        return sam.step(closure)

    return lambda: (
        (torch.randn(8, 16, generator=g).to(device), torch.randint(0, 10, (8,), generator=g).to(device)),
        step,
    )  # fmt: skip


# ----------------------------------------------------------------------------- run

# --quick smoke-runs the machinery on a few rows (it runs inside the test suite).
_QUICK = ("squeeze_excite", "alibi (GPT-2)", "mixup_batch (λ changes)")


def run(
    *, quick: bool, device: str, backend: str | None = None, only: str | None = None
) -> list[Table]:
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)  # stable ratios on a shared machine
    try:
        return _run(quick=quick, device=device, backend=backend, only=only)
    finally:
        torch.set_num_threads(threads)


def _run(*, quick: bool, device: str, backend: str | None, only: str | None) -> list[Table]:
    if backend is None:
        # inductor's code generation takes minutes per model on a CPU; there, aot_eager (the
        # same dynamo and AOT-autograd tracing, so the same breaks and recompiles) keeps the
        # full run to minutes. Pass --backend inductor for CPU speed figures.
        backend = "eager" if quick else ("inductor" if device.startswith("cuda") else "aot_eager")
    steps = 5 if quick else 50
    repeats = 1 if quick else 5
    cf = peer("composer")
    torch.manual_seed(0)

    models = Table(
        f"Compiled training step after each transform ({steps} steps, backend {backend}, {device})",
        ["transform", "impl", "eager steps/s", "compiled steps/s", "compiled / eager",
         "compile s", "graph breaks (step 1)", "recompiles (steps 2+)", "error"],
    )  # fmt: skip
    for name, spec in _transforms().items():
        if (only and only not in name) or (quick and not only and name not in _QUICK):
            continue
        impls: list[tuple[str, Callable[[nn.Module], object] | None]] = [("ours", spec.ours)]
        impls.append(
            (
                "composer",
                None
                if cf is None or spec.composer is None
                else (lambda m, s=spec: s.composer(cf, m)),
            )
        )
        for who, apply in impls:
            if apply is None:
                models.add(name, who, None, None, None, None, None, None, "not available")
                continue
            models.add(
                *_transform_row(
                    name, who, spec, apply, steps=steps, backend=backend, device=device,
                    repeats=repeats, batch=4, size=32,
                )
            )  # fmt: skip
            print(models.rows[-1], flush=True)

    ops = Table(
        f"Per-step ops compiled alone: {steps} calls with fresh random values ({backend}, {device})",
        [
            "op",
            "ours breaks (call 1)",
            "ours recompiles (calls 2+)",
            "composer breaks (call 1)",
            "composer recompiles (calls 2+)",
            "error",
        ],
    )
    op_cases = _op_cases(cf, device)
    op_cases["compute_ema (smoothing changes)"] = {
        "ours": _ema_case(cf, device, "ours"),
        "composer": None if cf is None else _ema_case(cf, device, "composer"),
    }
    op_cases["SAMOptimizer.step (interval=2)"] = {
        "ours": _sam_case(cf, device, "ours"),
        "composer": None if cf is None else _sam_case(cf, device, "composer"),
    }
    for name, pair in op_cases.items():
        if (only and only not in name) or (quick and not only and name not in _QUICK):
            continue
        ob, orc, oerr = _count_op(pair["ours"], steps, backend)
        cb, crc, cerr = (
            (None, None, "not available")
            if pair["composer"] is None
            else _count_op(pair["composer"], steps, backend)
        )
        errors = "; ".join(f"{w}: {e}" for w, e in (("ours", oerr), ("composer", cerr)) if e)
        ops.add(name, ob, orc, cb, crc, errors)
        print(ops.rows[-1], flush=True)

    models.notes.append(machine_description())
    models.notes.append(
        "Graph breaks: break sites dynamo met while compiling the first step of the compiled model "
        "(forward, and backward through AOT autograd); recompiles: graphs built in all later "
        "steps, timing steps included. "
        "The optimizer step runs eagerly, as with a plain torch.compile(model). steps/s: medians "
        "of interleaved repeats of 3 steps, fresh data each step. Targets: 0 breaks, 0 recompiles."
    )
    models.notes.append(
        "Each row (one implementation) times its eager and compiled steps interleaved; our rows "
        "and Composer's are separate runs, so on a shared machine compare compiled / eager within "
        "a row, not steps/s across rows (the models benchmark times ours against Composer's "
        "interleaved)."
    )
    models.notes.append(
        "On a CPU the default backend is aot_eager: it traces what inductor would (so the "
        "breaks and recompiles are the real ones) but generates no code, so compiled / eager "
        "measures tracing overhead, not the speed-up inductor gives on a GPU."
    )
    if quick:
        models.notes.append(
            "--quick: a few rows, 5 steps, one repeat, backend eager (dynamo only): a smoke run "
            "whose timings mean nothing."
        )
    if cf is None:
        models.notes.append("Composer is not installed here: its rows are empty.")
    ops.notes.append(
        "Each op is compiled alone (torch.compile, not fullgraph, so breaks are counted rather "
        "than raised) and called with tensors and changing Python scalars as arguments. SAM's "
        "breaks include torch's own (loss.backward() inside the closure and the base "
        "optimizer's step always break), for both implementations."
    )
    ops.notes.append(
        "A Python float argument costs one recompile: dynamo compiles it as a constant first and "
        "symbolically from its second value on, for any function (`lambda x, lam: x * lam` does "
        "the same). Pass a 0-d tensor, or compile with `dynamic=True`, for exactly one graph."
    )
    return [models, ops]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend", default=None, help="inductor (default on CUDA), aot_eager (CPU), eager"
    )
    parser.add_argument("--only", default=None, help="run only rows whose name contains this")


if __name__ == "__main__":
    main_for(run, __doc__, add_arguments=_arguments)
