"""`make demo`: train the same small CNN twice, plain and with a speed-up recipe, and compare.

The data are scikit-learn's bundled handwritten digits (1,797 real 8x8 scans that ship inside the
package, nothing downloaded), upsampled to 32x32 and split half for training, half for testing.
Both runs use the same model, seeds, optimizer, cosine LR schedule and data order; the recipe is
built only from this library's public API. The default recipe:

- ``scale``: a schedule 0.75x as long (``F.scale_scheduler`` rescales the LR schedule to fit),
- ``ema``: evaluation with an exponential moving average of the weights (``F.compute_ema``),
- ``label_smoothing``: ``F.smooth_labels``,
- ``selective_backprop``: between 20% and 70% of training, every other step backpropagates only
  through the harder half of the batch (``F.select_using_loss``).

Also available with ``--recipe``: ``mixup``, ``cutmix``, ``progressive_resizing``, ``blurpool``
and ``channels_last``. (On these tiny upsampled digits, progressive resizing and CutMix cost
more accuracy than they save time; BlurPool adds accuracy but also time.)

It prints a table and writes a plot of test accuracy against training time. The columns:

- ``training time (s)``: wall-clock time of the training steps only (data selection, forward,
  backward, optimizer, EMA, schedules); the periodic evaluation passes are excluded, since a
  real run evaluates far less often than this demo does to draw its curve;
- ``total wall-clock (s)``: the whole run, from moving the data to the device and building
  the model to the last evaluation, evaluation passes included;
- ``images/s``: training images drawn per second of training time;
- ``final accuracy`` and the training time at which the baseline's final accuracy was reached.

On an accelerator the clock is read after ``torch.cuda.synchronize()``, so queued kernels are
counted in the step that launched them.
"""

from __future__ import annotations

import argparse
import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as TF
from torch import nn

import functional as F

ALGORITHMS = (
    "scale",
    "ema",
    "label_smoothing",
    "progressive_resizing",
    "selective_backprop",
    "mixup",
    "cutmix",
    "blurpool",
    "channels_last",
)
DEFAULT_RECIPE = ("scale", "ema", "label_smoothing", "selective_backprop")
N_CLASSES = 10


# ---------------------------------------------------------------------------------------------
# Data and model
# ---------------------------------------------------------------------------------------------


def load_digits_tensors(size: int = 32, seed: int = 0, test_fraction: float = 0.5):
    """(x_train, y_train, x_test, y_test): digits upsampled to ``size`` and standardised."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    images = TF.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    images = (images - images.mean()) / images.std()
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return images[train], labels[train], images[test], labels[test]


def small_cnn(width: int = 32) -> nn.Module:
    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        ]

    return nn.Sequential(
        *block(1, width, 1),
        *block(width, width, 1),
        nn.MaxPool2d(2),
        *block(width, 2 * width, 1),
        *block(2 * width, 2 * width, 2),
        *block(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, N_CLASSES),
    )


def random_shift(x: torch.Tensor, generator: torch.Generator, pad: int = 2) -> torch.Tensor:
    """The usual pad-and-crop augmentation, one offset per batch."""
    h, w = x.shape[-2:]
    padded = TF.pad(x, (pad, pad, pad, pad))
    dy, dx = torch.randint(0, 2 * pad + 1, (2,), generator=generator).tolist()
    return padded[..., dy : dy + h, dx : dx + w]


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    name: str
    seconds: list[float] = field(default_factory=list)  # training time at each evaluation
    accuracy: list[float] = field(default_factory=list)
    images: int = 0
    train_seconds: float = 0.0  # the training steps only
    total_seconds: float = 0.0  # the whole run, evaluation passes included

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1]

    def time_to(self, target: float) -> float | None:
        for t, acc in zip(self.seconds, self.accuracy, strict=True):
            if acc >= target - 1e-9:
                return t
        return None


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, channels_last: bool) -> float:
    was_training = model.training
    model.eval()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    correct = sum(
        (model(x[i : i + 512]).argmax(1) == y[i : i + 512]).sum().item()
        for i in range(0, len(y), 512)
    )
    model.train(was_training)
    return correct / len(y)


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.sum(-targets * TF.log_softmax(logits, dim=1), dim=1).mean()


def build_model(
    recipe: tuple[str, ...], *, lr: float, device: str, seed: int
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The seeded CNN and its optimizer, with the recipe's model transforms applied."""
    torch.manual_seed(seed)
    model = small_cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    if "blurpool" in recipe:
        F.apply_blurpool(model, optimizers=opt, min_channels=1)
    if "channels_last" in recipe:
        F.apply_channels_last(model)
    return model, opt


def batch_inputs(
    x: torch.Tensor,
    y: torch.Tensor,
    recipe: tuple[str, ...],
    model: nn.Module,
    *,
    progress_fraction: float,
    batch_idx: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's inputs and soft targets after the recipe's data-side algorithms."""
    if "progressive_resizing" in recipe:
        scale = F.progressive_resizing_scale(
            progress_fraction, initial_scale=0.5, finetune_fraction=0.3
        )
        x, _ = F.resize_inputs(x, y, scale, generator=generator)
    if "selective_backprop" in recipe and F.should_selective_backprop(
        progress_fraction, batch_idx, start=0.2, end=0.7, interrupt=2
    ):
        x, y = F.select_using_loss(x, y, model, TF.cross_entropy, keep=0.5, generator=generator)
    if "channels_last" in recipe:
        x = x.contiguous(memory_format=torch.channels_last)
    if "mixup" in recipe:
        lam = F.gen_interpolation_lambda(0.2, generator=generator)
        x, targets, _ = F.mixup_batch(x, y, lam, N_CLASSES, generator=generator)
    elif "cutmix" in recipe:
        x, targets, _ = F.cutmix_batch(x, y, N_CLASSES, alpha=1.0, generator=generator)
    else:
        targets = TF.one_hot(y, N_CLASSES).float()
    return x, targets


def train(
    name: str,
    recipe: tuple[str, ...],
    data,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    device: str,
    seed: int,
    evals_per_epoch: int = 2,
    progress: bool = True,
    scale_ratio: float = 0.75,
) -> RunResult:
    from tqdm.auto import tqdm

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    sync()
    run_start = time.perf_counter()
    x_train, y_train, x_test, y_test = (t.to(device) for t in data)
    model, opt = build_model(recipe, lr=lr, device=device, seed=seed)
    channels_last = "channels_last" in recipe
    steps_per_epoch = math.ceil(len(y_train) / batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
    run_epochs = epochs
    if "scale" in recipe:
        F.scale_scheduler(scheduler, scale_ratio)
        run_epochs = max(1, round(epochs * scale_ratio))
    total_steps = run_epochs * steps_per_epoch
    ema_model = copy.deepcopy(model) if "ema" in recipe else None
    smoothing = F.ema_smoothing(half_life=steps_per_epoch / 2) if ema_model is not None else None
    eval_model = ema_model if ema_model is not None else model
    gen = torch.Generator().manual_seed(seed)
    result = RunResult(name)
    eval_every = max(1, steps_per_epoch // evals_per_epoch)

    step = 0
    elapsed = 0.0
    bar = tqdm(total=total_steps, desc=f"{name:>8}", disable=not progress, leave=True)
    for _epoch in range(run_epochs):
        order = torch.randperm(len(y_train), generator=gen).to(device)
        for batch_idx in range(steps_per_epoch):
            sync()
            start = time.perf_counter()
            idx = order[batch_idx * batch_size : (batch_idx + 1) * batch_size]
            x, targets = batch_inputs(
                random_shift(x_train[idx], gen),
                y_train[idx],
                recipe,
                model,
                progress_fraction=step / total_steps,
                batch_idx=batch_idx,
                generator=gen,
            )
            logits = model(x)
            if "label_smoothing" in recipe:
                targets = F.smooth_labels(logits, targets, alpha=0.1)
            loss = soft_cross_entropy(logits, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            scheduler.step()
            if ema_model is not None:
                F.compute_ema(model, ema_model, smoothing=smoothing)
            result.images += len(idx)  # images drawn from the data, before any selection
            step += 1
            sync()
            elapsed += time.perf_counter() - start
            bar.update(1)
            if step % eval_every == 0 or step == total_steps:
                result.seconds.append(elapsed)
                result.accuracy.append(evaluate(eval_model, x_test, y_test, channels_last))
                bar.set_postfix(acc=f"{result.accuracy[-1]:.3f}")
    bar.close()
    result.train_seconds = elapsed
    sync()
    result.total_seconds = time.perf_counter() - run_start
    return result


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def report(baseline: RunResult, recipe_run: RunResult) -> str:
    target = baseline.final_accuracy
    rows = []
    for run in (baseline, recipe_run):
        reach = run.time_to(target)
        rows.append(
            [
                run.name,
                f"{run.train_seconds:.1f}",
                f"{run.total_seconds:.1f}",
                f"{run.images / run.train_seconds:,.0f}",
                f"{run.final_accuracy:.4f}",
                "not reached" if reach is None else f"{reach:.1f}",
            ]
        )
    header = [
        "run",
        "training time (s)",
        "total wall-clock (s)",
        "images/s",
        "final accuracy",
        f"training time to {target:.4f} (s)",
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(
        "\ntraining time: the training steps only; total wall-clock: the whole run, including "
        f"the {len(baseline.accuracy)} + {len(recipe_run.accuracy)} evaluation passes that draw "
        "the accuracy curves."
    )
    base_t, rec_t = baseline.time_to(target), recipe_run.time_to(target)
    if base_t is not None and rec_t is not None:
        lines.append(
            f"\nThe recipe reached the baseline's final accuracy {base_t / rec_t:.2f}x sooner "
            f"({rec_t:.1f} s vs {base_t:.1f} s of training time)."
        )
    else:
        lines.append("\nThe recipe did not reach the baseline's final accuracy in this run.")
    return "\n".join(lines)


def plot(baseline: RunResult, recipe_run: RunResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for run in (baseline, recipe_run):
        ax.plot(run.seconds, run.accuracy, marker="o", markersize=3, label=run.name)
    ax.axhline(
        baseline.final_accuracy, color="grey", linestyle="--", linewidth=1, label="baseline final"
    )
    ax.set_xlabel("training time (s), evaluation passes excluded")
    ax.set_ylabel("test accuracy")
    ax.set_title("sklearn digits, upsampled to 32x32: test accuracy against training time")
    lows = [a for run in (baseline, recipe_run) for a in run.accuracy]
    ax.set_ylim(max(0.0, min(lows) - 0.02), 1.0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=20, help="baseline epochs (default 20)")
    parser.add_argument(
        "--scale-ratio",
        type=float,
        default=0.75,
        help="length of the recipe's schedule relative to the baseline's (default 0.75)",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--recipe",
        default=",".join(DEFAULT_RECIPE),
        help=f"comma-separated algorithms (default {','.join(DEFAULT_RECIPE)}; available: {', '.join(ALGORITHMS)})",
    )
    parser.add_argument("--output", type=Path, default=Path("demo_out/accuracy_vs_time.png"))
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: all cores)"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--train-limit", type=int, default=None, help=argparse.SUPPRESS
    )  # smoke tests
    args = parser.parse_args(argv)
    recipe = tuple(a for a in args.recipe.split(",") if a)
    unknown = [a for a in recipe if a not in ALGORITHMS]
    if unknown:
        parser.error(
            f"unknown algorithm(s) {', '.join(unknown)}; choose from {', '.join(ALGORITHMS)}"
        )
    if args.threads:
        torch.set_num_threads(args.threads)

    data = load_digits_tensors()
    if args.train_limit:
        data = (data[0][: args.train_limit], data[1][: args.train_limit], *data[2:])
    print(
        f"digits: {len(data[1])} train / {len(data[3])} test images, 32x32; device {args.device}; "
        f"recipe: {', '.join(recipe)}"
    )
    common = dict(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        device=args.device,
        seed=args.seed,
        progress=not args.no_progress,
    )
    baseline = train("baseline", (), data, **common)
    recipe_run = train("recipe", recipe, data, **common)
    print()
    print(report(baseline, recipe_run))
    plot(baseline, recipe_run, args.output)
    print(f"\nplot: {args.output.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
