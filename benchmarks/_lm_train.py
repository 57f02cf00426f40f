"""The language-model study's model and runs: a small byte-level GPT-2, one :class:`LMRun` per
(algorithms, budget, seed), timed and interleaved by :mod:`benchmarks._study`.

Every run builds the same seeded GPT-2 (a ``transformers`` config) and draws the same batches:
``batch`` windows of ``context + 0`` bytes at offsets from a generator seeded by the run's seed.
A run trained at a shorter length ``L`` cuts each window into ``context / L`` rows of ``L``
bytes, so every arm sees the same bytes per step; sequence-length warmup then truncates the
rows early in the run. The AdamW one-cycle schedule over ``ref_steps`` is rescaled to the run's
budget by ``F.scale_scheduler``, as in the vision study.

GPT-2's MLP projections are ``Conv1D`` layers (a transposed ``nn.Linear``); the model here
uses ``nn.Linear`` in their place (same function, weights transposed) for every arm, so that
``F.apply_gated_linear_units`` can gate them (``GPT2MLP`` registered with
``F.register_glu_block``).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as TF
from torch import nn

import functional as F

from ._lm_data import Text
from ._study import Point, TimedRun

VOCAB = 256
# name -> what it does here (the ablation's rows)
LM_ALGORITHMS = {
    "alibi": "F.apply_alibi, trained at the short length, evaluated at the full context",
    "seq_length_warmup": "F.apply_seq_length_warmup from 16 bytes over the first 30% of the run",
    "glu": "F.apply_gated_linear_units on the MLPs (GELU gate)",
    "low_precision_layernorm": "bf16 autocast with F.apply_low_precision_layernorm",
    "gradient_clipping": "F.apply_gradient_clipping, 'norm', 1.0",
    "ema": "evaluate F.compute_ema weights, half-life 2% of the run",
}


@dataclass(frozen=True)
class LMConfig:
    """What every run of one language-model study shares."""

    width: int = 96
    layers: int = 3
    heads: int = 4
    context: int = 256  # the baseline's training length and the evaluation length
    short: int = 128  # the recipe's (ALiBi's) training length
    batch: int = 8  # windows of ``context`` bytes per step
    lr: float = 3e-3
    weight_decay: float = 0.01
    ref_steps: int = 200
    eval_bytes: int = 32_768  # of the validation (or test) split, read at every length
    eval_lengths: tuple[int, ...] = (64, 128, 256)


def gpt2(cfg: LMConfig, seed: int) -> nn.Module:
    """A byte-level GPT-2 from a ``transformers`` config, no dropout, MLPs as ``nn.Linear``."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.pytorch_utils import Conv1D

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=cfg.context,
        n_embd=cfg.width,
        n_layer=cfg.layers,
        n_head=cfg.heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    for block in model.transformer.h:
        for name in ("c_fc", "c_proj"):
            conv: Conv1D = getattr(block.mlp, name)
            linear = nn.Linear(conv.weight.shape[0], conv.weight.shape[1])
            with torch.no_grad():
                linear.weight.copy_(conv.weight.T)
                linear.bias.copy_(conv.bias)
            setattr(block.mlp, name, linear)
    return model


def _gate_mlps(model: nn.Module, generator: torch.Generator) -> None:
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    F.register_glu_block(GPT2MLP, linear="c_fc", activation="act")
    try:
        F.apply_gated_linear_units(model, generator=generator)
    finally:
        F.unregister_glu_block(GPT2MLP)


class LMRun(TimedRun):
    """One training run. ``train_length`` defaults to the short length with ALiBi, the full
    context without. :meth:`evaluate` reads validation bits per byte at every evaluation length
    (the score: at the full context), and the test split too when ``read_test``."""

    def __init__(
        self,
        arm: str,
        algorithms: tuple[str, ...],
        budget: float,
        text: Text,
        cfg: LMConfig,
        *,
        seed: int = 0,
        train_length: int | None = None,
        read_test: bool = False,
    ) -> None:
        unknown = sorted(set(algorithms) - set(LM_ALGORITHMS))
        if unknown:
            raise ValueError(f"unknown algorithm(s) {unknown}; choose from {sorted(LM_ALGORITHMS)}")
        self.algos = frozenset(algorithms)
        self.text, self.cfg, self.read_test = text, cfg, read_test
        default = cfg.short if "alibi" in self.algos else cfg.context
        self.length = train_length or default
        if cfg.context % self.length:
            raise ValueError(f"train_length must divide {cfg.context}, got {self.length}")
        self.total_steps = max(1, math.floor(cfg.ref_steps * budget + 0.5))
        self.point = Point(arm, tuple(algorithms), budget, seed, self.total_steps)
        self.point.extra["train_length"] = self.length
        self.step = 0
        self._build(seed)

    def _build(self, seed: int) -> None:
        cfg = self.cfg
        self.model = gpt2(cfg, seed)
        self.algo_gen = torch.Generator().manual_seed(seed + 10_000)
        if "alibi" in self.algos:
            F.apply_alibi(self.model, max_sequence_length=cfg.context)
        if "glu" in self.algos:
            _gate_mlps(self.model, self.algo_gen)
        if "low_precision_layernorm" in self.algos:
            F.apply_low_precision_layernorm(self.model, torch.bfloat16)
        self.opt = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.opt, max_lr=cfg.lr, total_steps=cfg.ref_steps, pct_start=0.1
        )
        F.scale_scheduler(self.scheduler, self.point.budget, orig_max_epochs=cfg.ref_steps)
        self.ema = None
        if "ema" in self.algos:
            # ALiBi's bias cache is a buffer that appears at the first forward and grows with
            # the length: fill it to the full context first, or compute_ema finds the model
            # and its copy with different buffers (the model's cache grows, the copy's not).
            with torch.no_grad():
                self.model(input_ids=torch.zeros(1, cfg.context, dtype=torch.long))
            self.ema = copy.deepcopy(self.model)
        self.smoothing = F.ema_smoothing(half_life=max(1.0, 0.02 * self.total_steps))
        self.order_gen = torch.Generator().manual_seed(seed)

    def _batch(self) -> torch.Tensor:
        n = self.cfg.context
        starts = torch.randint(
            0, len(self.text.train) - n, (self.cfg.batch,), generator=self.order_gen
        )
        ids = self.text.train[starts[:, None] + torch.arange(n)].long()
        ids = ids.reshape(-1, self.length)
        if "seq_length_warmup" in self.algos:
            length = F.seq_length_warmup_length(
                self.step / self.total_steps,
                duration=0.3,
                min_seq_length=16,
                max_seq_length=self.length,
                step_size=8,
            )
            ids = F.apply_seq_length_warmup({"input_ids": ids}, length)["input_ids"]
        return ids

    def _autocast(self) -> contextlib.AbstractContextManager:
        if "low_precision_layernorm" in self.algos:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _one_step(self) -> None:
        ids = self._batch()
        self.opt.zero_grad(set_to_none=True)
        with self._autocast():
            loss = next_byte_loss(self.model, ids)
        loss.backward()
        if "gradient_clipping" in self.algos:
            F.apply_gradient_clipping(self.model.parameters(), "norm", 1.0)
        self.opt.step()
        self._end_step()

    @torch.no_grad()
    def bits_per_byte(self, data: torch.Tensor, length: int) -> float:
        """Mean next-byte loss in bits over non-overlapping rows of ``length`` bytes of the
        first ``eval_bytes`` of ``data`` (the first byte of a row is not predicted)."""
        model = self.ema if self.ema is not None else self.model
        model.eval()
        n = self.cfg.eval_bytes // length * length
        rows = data[:n].long().reshape(-1, length)
        total = 0.0
        for chunk in rows.split(max(1, 8192 // length)):
            with self._autocast():
                total += float(next_byte_loss(model, chunk)) * chunk.shape[0]
        model.train()
        return total / rows.shape[0] / math.log(2)

    def evaluate(self) -> float:
        start = time.perf_counter()
        for length in self.cfg.eval_lengths:
            self.point.extra[f"val_bpb_{length}"] = self.bits_per_byte(self.text.val, length)
        if self.read_test:
            self.point.extra["test_bpb"] = self.bits_per_byte(self.text.test, self.cfg.context)
        self.point.score = self.point.extra[f"val_bpb_{self.cfg.context}"]
        self.point.extra["eval_wall_s"] = time.perf_counter() - start
        return self.point.score


def next_byte_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) of each byte given those before it in its row."""
    logits = model(input_ids=ids).logits
    return TF.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(), ids[:, 1:].reshape(-1))
