"""ALiBi length extrapolation: train a tiny GPT-2 at length 64, evaluate at 64, 128 and 256.

Task: a noisy second-order Markov chain over 16 tokens -- each token follows a fixed random
table of the previous two with probability 0.8, else it is uniform. The dependency is local, so
a model that learned the rule at length 64 can apply it at any length; what decides whether it
does is how the model encodes position (Press et al. 2022, Figure 1).

Models (same initial weights, same batches, trained in lockstep so their step times are measured
interleaved):

* learned positions, ``n_positions=64`` -- the original GPT-2; it cannot run past its table;
* learned positions, ``n_positions=256`` -- same, with table rows 64..255 never trained;
* ALiBi -- the first model after ``functional.apply_alibi(model, max_sequence_length=256)``.

Reported: mean next-token cross-entropy (nats) per evaluation length, the loss of the true
process (the floor), and the training step time. Composer's ``apply_alibi`` is tried on the
same model; on transformers 5.x it fails (it patches GPT-2 attention internals that no longer
exist), which the notes record.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as TF

import functional
from benchmarks._harness import Table, main_for, peer, synchronize

VOCAB = 16
FOLLOW = 0.8  # probability that a token follows the table
TRAIN_LENGTH = 64
EVAL_LENGTHS = (64, 128, 256)


def make_table(seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (VOCAB, VOCAB), generator=generator)


def sample(
    table: torch.Tensor, batch: int, length: int, generator: torch.Generator
) -> torch.Tensor:
    """Sequences of the noisy second-order chain, shape (batch, length)."""
    noise = torch.randint(0, VOCAB, (batch, length), generator=generator)
    follow = torch.rand(batch, length, generator=generator) < FOLLOW
    seq = noise.clone()
    for t in range(2, length):
        rule = table[seq[:, t - 2], seq[:, t - 1]]
        seq[:, t] = torch.where(follow[:, t], rule, noise[:, t])
    return seq


def true_process_loss(table: torch.Tensor, seqs: torch.Tensor) -> float:
    """Cross-entropy of the true process itself on ``seqs`` (targets 1..L-1): the floor.

    Target 1 has no rule yet (probability 1/V); later targets have probability
    ``FOLLOW + (1 - FOLLOW)/V`` when they follow the rule, ``(1 - FOLLOW)/V`` otherwise.
    """
    rule = table[seqs[:, :-2], seqs[:, 1:-1]]
    p = torch.where(seqs[:, 2:] == rule, FOLLOW, 0.0) + (1 - FOLLOW) / VOCAB
    first = torch.full((seqs.shape[0], 1), 1 / VOCAB, dtype=p.dtype)
    return (-torch.cat([first, p], dim=1).log()).mean().item()


def lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids).logits
    return TF.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def build(n_positions: int, width: int, layers: int, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=n_positions,
        n_embd=width,
        n_layer=layers,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def try_composer(
    model: torch.nn.Module, max_sequence_length: int = max(EVAL_LENGTHS), vocab: int = VOCAB
) -> str:
    """Composer's apply_alibi on ``model`` and one forward pass, or why it failed."""
    composer = peer("composer")
    if composer is None:
        return "Composer not installed (`make peers`): not compared"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            composer.apply_alibi(model, max_sequence_length=max_sequence_length)
            model(torch.randint(0, vocab, (1, max_sequence_length)))
    except Exception as error:  # report, do not crash: the peer is what is being measured
        return (
            "Composer 0.32 apply_alibi fails on this transformers version: "
            f"{type(error).__name__}: {error}"
        )
    return "Composer apply_alibi ran on this transformers version"


def run(*, quick: bool = False, device: str = "cpu", steps: int | None = None) -> list[Table]:
    import transformers

    torch.set_num_threads(min(torch.get_num_threads(), 2))
    default_steps, batch, width, layers, eval_batch = (
        (4, 4, 32, 1, 2) if quick else (600, 32, 64, 2, 256)
    )
    steps = default_steps if steps is None else steps
    table = make_table()
    lr = 3e-3

    base = build(TRAIN_LENGTH, width, layers, seed=0)
    models = {
        "learned positions, table 64 (original)": base,
        "learned positions, table 256": build(max(EVAL_LENGTHS), width, layers, seed=0),
        "ALiBi (apply_alibi, max_sequence_length=256)": functional.apply_alibi(
            copy.deepcopy(base), max_sequence_length=max(EVAL_LENGTHS)
        ),
    }
    composer_note = (
        "Composer's apply_alibi not tried in --quick (importing Composer takes seconds)"
        if quick
        else try_composer(copy.deepcopy(base))
    )
    optimizers = {}
    for name, model in models.items():
        model.to(device).train()
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedulers = {
        name: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
        for name, opt in optimizers.items()
    }

    data = torch.Generator().manual_seed(1)
    step_times: dict[str, list[float]] = {name: [] for name in models}
    names = list(models)
    start = time.perf_counter()
    for step in range(steps):
        ids = sample(table, batch, TRAIN_LENGTH, data).to(device)
        for name in names[step % len(names) :] + names[: step % len(names)]:
            model, opt = models[name], optimizers[name]
            synchronize(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            lm_loss(model, ids).backward()
            opt.step()
            schedulers[name].step()
            synchronize(device)
            step_times[name].append(time.perf_counter() - t0)
        if not quick and (step + 1) % 100 == 0:
            print(f"step {step + 1}/{steps}, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    train_seconds = time.perf_counter() - start

    evaluation = torch.Generator().manual_seed(2)
    eval_sets = {n: sample(table, eval_batch, n, evaluation).to(device) for n in EVAL_LENGTHS}
    losses = Table(
        f"ALiBi extrapolation: tiny GPT-2 trained at length {TRAIN_LENGTH}, loss (nats) by "
        "evaluation length",
        ["model", *[f"length {n}" for n in EVAL_LENGTHS], "train step (ms)"],
    )
    for name, model in models.items():
        model.eval()
        row: list[object] = [name]
        limit = model.config.n_positions if "ALiBi" not in name else max(EVAL_LENGTHS)
        for n in EVAL_LENGTHS:
            if n > limit:
                row.append(f"n/a (position table is {limit})")
                continue
            with torch.no_grad():
                row.append(round(lm_loss(model, eval_sets[n]).item(), 4))
        row.append(round(1000 * statistics.median(step_times[name]), 1))
        losses.add(*row)
    floors = [round(true_process_loss(table, eval_sets[n].cpu()), 4) for n in EVAL_LENGTHS]
    losses.add("true process on the same sequences (floor)", *floors, None)
    losses.notes += [
        f"Task: noisy 2nd-order Markov chain, {VOCAB} tokens, rule followed with p={FOLLOW}; "
        f"uniform guessing scores {math.log(VOCAB):.3f}.",
        f"GPT-2 n_embd={width}, n_layer={layers}, n_head=4, no dropout; AdamW lr {lr} one-cycle, "
        f"{steps} steps of {batch}x{TRAIN_LENGTH} tokens; {eval_batch} held-out sequences per "
        f"length; {train_seconds:.0f} s of training for the three models on {device} "
        f"(transformers {transformers.__version__}, torch {torch.__version__}).",
        "Step times are medians of interleaved steps (same batches, rotating order).",
        composer_note,
    ]
    return [losses]


def _steps_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=None, help="training steps (default 600)")


if __name__ == "__main__":
    main_for(run, __doc__, add_arguments=_steps_argument)
