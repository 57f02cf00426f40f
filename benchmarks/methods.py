"""What each method costs a training step: its overhead against the same step with no method.

Two named models, each method on its own copy, every candidate of a model timed interleaved in
one process (``_harness.time_interleaved``) so that the overhead of a method is the ratio of its
step to the plain step of the *same round*, repeat by repeat, minus one. The tables print the
median overhead with its min–max over 7 repeats, each repeat the mean of 3 consecutive steps
(5 for the language model, whose steps are shorter), after 2 warm-up steps; where that range
crosses zero the method's cost is within this machine's noise, and the methods index says "≈0
(within noise)".

- Vision: torchvision ResNet-18 (10 classes), batch 32 at 64x64, SGD with momentum; a step is
  what a loop does per batch (its batch op, forward, loss, backward, the optimizer step and its
  per-step helper). Batched augmentations start from a uint8 batch, as after a loader.
- Language: a GPT-2 from a ``transformers`` config (2 layers, width 128, 4 heads), batch 8 of
  128 byte tokens, AdamW (GPT-2's dropout layers at their default rate 0.1, so gyro dropout
  is timed against plain dropout).

One CPU thread, as ``benchmarks.models`` does, and process CPU time rather than wall time (as
the demo's study measures): on a machine shared with other jobs, wall time counts the waits for a
core, CPU time counts the work. ``--quick`` shrinks the
models and runs one repeat: a smoke run whose figures mean nothing.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torchvision
from torch import nn
from torch.nn import functional as nnf

import augment
import functional as F
from benchmarks._harness import Table, Timing, main_for, time_interleaved

__all__ = ["overhead_cell", "run"]

Step = Callable[[], object]


@dataclass
class _Batch:
    x: torch.Tensor  # float, normalised
    x_uint8: torch.Tensor
    y: torch.Tensor
    n_classes: int


def overhead_cell(t: Timing) -> str:
    """``'+3.1% (+0.4 to +5.9)'``: a per-repeat ratio of step times as an overhead with its
    min–max; ``'≈0 (within noise: -1.2 to +2.0)'`` when that range crosses zero."""
    low, median, high = t.spread if len(t.samples) > 1 else (t, t, t)
    low, median, high = (100 * (v - 1) for v in (low, median, high))
    if low < 0 < high:
        return f"≈0 (within noise: {low:+.1f} to {high:+.1f}%)"
    return f"{median:+.1f}% ({low:+.1f} to {high:+.1f})"


# ---------------------------------------------------------------------------------------------
# Vision
# ---------------------------------------------------------------------------------------------


def _vision_model(quick: bool) -> nn.Module:
    if quick:
        resnet = torchvision.models.resnet.ResNet
        return resnet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=10)
    return torchvision.models.resnet18(num_classes=10)


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _soft_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nnf.cross_entropy(logits, target)


def _train_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    after_backward: Callable[[], object] | None = None,
    after_step: Callable[[], object] | None = None,
) -> Step:
    """One step: ``batch()`` gives the (input, target) of the step, then forward, loss,
    backward, ``after_backward`` (clipping), the optimizer step, ``after_step`` (EMA, SWA)."""

    def step() -> None:
        x, target = batch()
        opt.zero_grad(set_to_none=True)
        _soft_ce(model(x), target).backward()
        if after_backward is not None:
            after_backward()
        opt.step()
        if after_step is not None:
            after_step()

    return step


BatchFn = Callable[[], tuple[torch.Tensor, torch.Tensor]]


def _batch_ops(b: _Batch, g: torch.Generator) -> dict[str, Callable[[nn.Module], BatchFn]]:
    """The per-step data and label methods: given the step's model, the batch it trains on."""

    def mixup(model: nn.Module) -> BatchFn:
        def batch() -> tuple[torch.Tensor, torch.Tensor]:
            lam = F.gen_interpolation_lambda(0.2, generator=g)
            x, y, _ = F.mixup_batch(b.x, b.y, lam, b.n_classes, generator=g)
            return x, y

        return batch

    def selective(model: nn.Module) -> BatchFn:  # scores with the model it trains
        return lambda: F.select_using_loss(b.x, b.y, model, nnf.cross_entropy, 0.5, generator=g)

    def augmented(
        transform: Callable[[torch.Tensor], torch.Tensor],
    ) -> Callable[[nn.Module], BatchFn]:
        return lambda model: (
            lambda: (transform(b.x_uint8).float().div_(255).sub_(0.5).div_(0.25), b.y)
        )

    def fixed(make: BatchFn) -> Callable[[nn.Module], BatchFn]:
        return lambda model: make

    return {
        "MixUp (α=0.2)": mixup,
        "CutMix (α=1)": fixed(lambda: F.cutmix_batch(b.x, b.y, b.n_classes, generator=g)[:2]),
        "Cutout (1 hole, 0.25)": fixed(lambda: (F.cutout(b.x, 1, 0.25, generator=g), b.y)),
        "ColOut (0.15, 0.15)": fixed(lambda: (F.colout_batch(b.x, 0.15, 0.15, generator=g), b.y)),
        "label smoothing (0.1)": fixed(
            lambda: (b.x, F.smooth_labels(torch.empty(len(b.y), b.n_classes), b.y, 0.1))
        ),
        "progressive resizing (scale 0.5, its first steps)": fixed(
            lambda: F.resize_inputs(b.x, b.y, 0.5)
        ),
        "selective backprop (keep 0.5)": selective,
        "BatchAugMix (uint8 batch)": augmented(augment.BatchAugMix(generator=g)),
        "BatchRandAugment (uint8 batch)": augmented(augment.BatchRandAugment(generator=g)),
    }


def _quiet(apply: Callable[[nn.Module], object]) -> Callable[[nn.Module], object]:
    def call(model: nn.Module) -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return apply(model)

    return call


_TRANSFORMS: dict[str, Callable[[nn.Module], object]] = {
    "BlurPool": F.apply_blurpool,
    "channels last": F.apply_channels_last,
    "ghost BatchNorm (16)": lambda m: F.apply_ghost_batchnorm(m, ghost_batch_size=16),
    "squeeze-excite": F.apply_squeeze_excite,
    "stochastic depth (block, 0.2)": lambda m: F.apply_stochastic_depth(
        m, "block", "ResNetBasicBlock", drop_rate=0.2, seed=0
    ),
    "factorization": lambda m: F.apply_factorization(m, min_channels=256),
    "weight standardization": F.apply_weight_standardization,
}


def _vision_candidates(base: nn.Module, b: _Batch) -> dict[str, Step]:
    g = torch.Generator().manual_seed(0)
    plain = lambda: (b.x, b.y)  # noqa: E731
    candidates: dict[str, Step] = {}

    def fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
        model = copy.deepcopy(base)
        return model, _sgd(model)

    model, opt = fresh()
    candidates["none (the plain step)"] = _train_step(model, opt, plain)
    for name, make_batch in _batch_ops(b, g).items():
        model, opt = fresh()
        candidates[name] = _train_step(model, opt, make_batch(model))
    for name, apply in _TRANSFORMS.items():
        model, opt = fresh()
        _quiet(apply)(model)
        opt = _sgd(model)
        x = b.x.to(memory_format=torch.channels_last) if name == "channels last" else b.x
        candidates[name] = _train_step(model, opt, lambda x=x: (x, b.y))
    candidates.update(_training_state_candidates(fresh, plain))
    return candidates


def _training_state_candidates(
    fresh: Callable[[], tuple[nn.Module, torch.optim.Optimizer]], plain: Callable[[], tuple]
) -> dict[str, Step]:
    candidates: dict[str, Step] = {}
    model, opt = fresh()
    ema = copy.deepcopy(model).requires_grad_(False)
    candidates["EMA (every step)"] = _train_step(
        model, opt, plain, after_step=lambda: F.compute_ema(model, ema, 0.99)
    )
    model, opt = fresh()
    sam = F.SAMOptimizer(opt, rho=0.05)
    candidates["SAM (every step)"] = _sam_step(model, sam, plain)
    model, opt = fresh()
    swa = F.SWA(model, opt, total_steps=10**6, swa_start=0.0)
    candidates["SWA (averaging every step)"] = _train_step(model, opt, plain, after_step=swa.step)
    model, opt = fresh()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        F.freeze_layers(model, opt, current_epoch=3, max_epochs=4, freeze_start=0.5)
    candidates["layer freezing (half frozen)"] = _train_step(model, opt, plain)
    for mode, threshold in (("norm", 1.0), ("value", 0.1), ("adaptive", 0.01)):
        model, opt = fresh()
        clip = lambda model=model, mode=mode, t=threshold: F.apply_gradient_clipping(model, mode, t)  # noqa: E731
        candidates[f"gradient clipping ({mode})"] = _train_step(
            model, opt, plain, after_backward=clip
        )
    return candidates


def _sam_step(model: nn.Module, sam: F.SAMOptimizer, batch: Callable[[], tuple]) -> Step:
    def step() -> None:
        x, y = batch()

        def closure() -> torch.Tensor:
            sam.zero_grad(set_to_none=True)
            loss = nnf.cross_entropy(model(x), y)
            loss.backward()
            return loss

        sam.step(closure)

    return step


def _vision(quick: bool) -> Table:
    torch.manual_seed(0)
    size, n, repeats, number = (32, 8, 1, 1) if quick else (64, 32, 7, 3)
    x_uint8 = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8)
    b = _Batch(x_uint8.float().div(255).sub(0.5).div(0.25), x_uint8, torch.randint(0, 10, (n,)), 10)
    base = _vision_model(quick).train()
    times = time_interleaved(
        _vision_candidates(base, b),
        repeats=repeats,
        number=number,
        warmup=2,
        clock=time.process_time,
    )
    name = "one-block-per-stage ResNet" if quick else "ResNet-18"
    return _overhead_table(
        f"Method overhead per training step: torchvision {name}, batch {n} at {size}x{size}, "
        "SGD momentum, cpu (1 thread), process CPU time",
        times,
        "none (the plain step)",
    )


# ---------------------------------------------------------------------------------------------
# Language
# ---------------------------------------------------------------------------------------------


def _gpt2(quick: bool, n_positions: int) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    width = 64 if quick else 128
    config = GPT2Config(
        vocab_size=256, n_positions=n_positions, n_embd=width, n_layer=2, n_head=4,
        bos_token_id=None, eos_token_id=None, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).train()


def _lm_step(
    model: nn.Module,
    batch: Callable[[], dict[str, torch.Tensor]],
    *,
    smoothing: float = 0.0,
    clip: bool = False,
    autocast: bool = False,
) -> Step:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        inputs = batch()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=inputs["input_ids"]).logits[:, :-1].float()
        target = inputs["input_ids"][:, 1:]
        loss = nnf.cross_entropy(logits.flatten(0, 1), target.flatten(), label_smoothing=0.0)
        if smoothing:
            soft = F.smooth_labels(logits.flatten(0, 1), target.flatten(), smoothing)
            loss = nnf.cross_entropy(logits.flatten(0, 1), soft)
        loss.backward()
        if clip:
            F.apply_gradient_clipping(model, "norm", 1.0)
        opt.step()

    return step


def _language(quick: bool) -> Table:
    n, length, repeats, number = (2, 32, 1, 1) if quick else (8, 128, 7, 5)
    tokens = torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(0))
    full = lambda: {"input_ids": tokens}  # noqa: E731
    half = lambda: F.apply_seq_length_warmup({"input_ids": tokens}, length // 2)  # noqa: E731
    base = _gpt2(quick, length)
    transformed = {
        "ALiBi (no learned positions)": _quiet(
            lambda m: F.apply_alibi(m, max_sequence_length=length)
        ),
        "gated linear units": _quiet(F.apply_gated_linear_units),
        "gyro dropout (p=0.1, sigma=256, tau=16)": _quiet(
            lambda m: F.apply_gyro_dropout(m, iters_per_epoch=100, max_epoch=10, p=0.1)
        ),
    }
    candidates: dict[str, Step] = {"none (the plain step)": _lm_step(copy.deepcopy(base), full)}
    candidates["sequence-length warmup (half length, its first steps)"] = _lm_step(
        copy.deepcopy(base), half
    )
    for name, apply in transformed.items():
        model = copy.deepcopy(base)
        apply(model)
        candidates[name] = _lm_step(model, full)
    candidates["label smoothing (0.1)"] = _lm_step(copy.deepcopy(base), full, smoothing=0.1)
    candidates["gradient clipping (norm)"] = _lm_step(copy.deepcopy(base), full, clip=True)
    candidates["none, bf16 autocast"] = _lm_step(copy.deepcopy(base), full, autocast=True)
    low = copy.deepcopy(base)
    _quiet(lambda m: F.apply_low_precision_layernorm(m, torch.bfloat16))(low)
    candidates["low-precision LayerNorm (bf16 autocast)"] = _lm_step(low, full, autocast=True)
    times = time_interleaved(
        candidates, repeats=repeats, number=number, warmup=2, clock=time.process_time
    )
    table = _overhead_table(
        f"Method overhead per training step: GPT-2 (2 layers, width {64 if quick else 128}, 4 "
        f"heads), batch {n} of {length} tokens, AdamW, cpu (1 thread), process CPU time",
        {k: v for k, v in times.items() if k != "low-precision LayerNorm (bf16 autocast)"},
        "none (the plain step)",
    )
    lp = times["low-precision LayerNorm (bf16 autocast)"] / times["none, bf16 autocast"]
    table.add(
        "low-precision LayerNorm (bf16 autocast)",
        1e3 * times["low-precision LayerNorm (bf16 autocast)"],
        overhead_cell(lp),
    )
    table.notes.append(
        "Low-precision LayerNorm is compared with the plain step under the same bf16 autocast "
        "(its own baseline row): it only changes what runs under autocast."
    )
    return table


def _overhead_table(title: str, times: dict[str, Timing], baseline: str) -> Table:
    table = Table(title, ["method", "step ms", "overhead vs no method"])
    base = times[baseline]
    for name, t in times.items():
        table.add(name, 1e3 * t, "—" if name == baseline else overhead_cell(t / base))
    return table


def run(*, quick: bool, device: str) -> list[Table]:
    if torch.device(device).type != "cpu":
        raise ValueError(f"benchmarks.methods measures on the CPU only, got device={device!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [_vision(quick), _language(quick)]
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    main_for(run, __doc__, device_help="cpu (the only device this benchmark measures)")
