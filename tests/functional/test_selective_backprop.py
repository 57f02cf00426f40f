"""should_selective_backprop and select_using_loss."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

import functional as F


@pytest.mark.parametrize(
    "duration,start,end",
    list(itertools.product([0.0, 0.3, 0.5, 0.7, 0.9, 1.0], [0.0, 0.5], [0.5, 0.9, 1.0])),
)
@pytest.mark.parametrize("interrupt", [0, 1, 2, 3])
def test_should_selective_backprop_truth_table(duration, start, end, interrupt) -> None:
    for batch_idx in range(7):
        expected = start <= duration < end and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)
        assert F.should_selective_backprop(duration, batch_idx, start, end, interrupt) is expected


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((1.5, 0, 0.5, 0.9, 2), ValueError, "current_duration must be in"),
        ((0.5, -1, 0.5, 0.9, 2), ValueError, "batch_idx must be >= 0"),
        ((0.5, 0, 0.9, 0.5, 2), ValueError, "end must be >= start"),
        ((0.5, 0, 0.5, 0.9, -2), ValueError, "interrupt must be >= 0"),
        ((0.5, 0, 0.5, 0.9, 2.0), TypeError, "interrupt must be an int"),
    ],
)
def test_should_selective_backprop_rejects_bad_arguments(args, error, match) -> None:
    with pytest.raises(error, match=match):
        F.should_selective_backprop(*args)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4, 3)
        self.shapes: list[tuple[int, ...]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.shapes.append(tuple(x.shape))
        return self.fc(self.drop(self.bn(self.conv(x)).relu().mean((2, 3))))


def _batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, 8, 8, generator=gen), torch.randint(0, 3, (n,), generator=gen)


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.25, 0.5, 0.77, 1.0])
def test_returns_exactly_int_b_keep_matching_rows(keep) -> None:
    X, y = _batch(13)
    X_sel, y_sel = F.select_using_loss(X, y, Net(), nn.functional.cross_entropy, keep)
    n = int(13 * keep)
    assert X_sel.shape == (n, 3, 8, 8) and y_sel.shape == (n,)
    # Each row is one original (X, y) pair, no row twice, in batch order.
    rows = [next(i for i in range(13) if torch.equal(X[i], row)) for row in X_sel]
    assert rows == sorted(set(rows))
    assert torch.equal(y_sel, y[rows])


@pytest.mark.parametrize("training", [True, False])
def test_model_state_is_untouched(training) -> None:
    model = Net().train(training)
    with torch.no_grad():
        model.bn.running_mean.uniform_()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    X, y = _batch()
    X.requires_grad_()
    X_sel, _ = F.select_using_loss(X, y, model, nn.functional.cross_entropy, 0.5)
    assert model.training is training and model.drop.training is training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())
    assert X.grad is None
    assert X_sel.shape[0] == 8


def test_probability_of_selection_matches_sampling_without_replacement() -> None:
    # A loss equal to the target makes the ranking known: sample i has rank i.
    n, keep, draws = 8, 0.5, 4000
    X, y = torch.arange(n, dtype=torch.float32).view(n, 1), torch.arange(n)

    def loss_fun(output, target, reduction="mean"):
        assert reduction == "none"
        return target.float()

    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(n)
    for _ in range(draws):
        X_sel, _ = F.select_using_loss(X, y, nn.Identity(), loss_fun, keep, generator=gen)
        counts[X_sel.view(-1).long().numpy()] += 1
    # Oracle: NumPy's sequential draw without replacement with the same weights.
    weights = ((np.arange(n) + 0.5) / n) ** (1 / keep - 1)
    rng = np.random.default_rng(0)
    oracle = np.zeros(n)
    for _ in range(draws):
        oracle[rng.choice(n, int(n * keep), replace=False, p=weights / weights.sum())] += 1
    assert np.all(np.diff(counts) > 0)  # rises with the loss
    np.testing.assert_allclose(counts / draws, oracle / draws, atol=0.04)


def test_keep_one_selects_everything_in_order() -> None:
    X, y = _batch(6)
    X_sel, y_sel = F.select_using_loss(X, y, Net(), nn.functional.cross_entropy, 1.0)
    assert torch.equal(X_sel, X) and torch.equal(y_sel, y)


def test_scale_factor_scores_a_downsampled_copy() -> None:
    model = Net()
    X, y = _batch()
    X_sel, _ = F.select_using_loss(X, y, model, nn.functional.cross_entropy, 0.5, scale_factor=0.5)
    assert model.shapes == [(16, 3, 4, 4)]
    assert X_sel.shape == (8, 3, 8, 8)


def test_reproducible_with_generator() -> None:
    X, y = _batch()
    model = Net().eval()
    a = F.select_using_loss(
        X, y, model, nn.functional.cross_entropy, 0.5, generator=torch.Generator().manual_seed(1)
    )
    b = F.select_using_loss(
        X, y, model, nn.functional.cross_entropy, 0.5, generator=torch.Generator().manual_seed(1)
    )
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"keep": 1.5}, ValueError, "keep must be in \\[0.0, 1.0\\]"),
        ({"scale_factor": 1.5}, ValueError, "scale_factor must be in \\(0.0, 1.0\\]"),
        ({"y": torch.arange(3)}, ValueError, "y must have the batch size"),
        (
            {"loss_fun": lambda out, y: out.sum()},
            TypeError,
            "must take a keyword argument `reduction`",
        ),
        ({"loss_fun": "ce"}, TypeError, "loss_fun must be callable"),
        ({"loss_fun": lambda out, y, reduction: out.sum()}, ValueError, "one loss per sample"),
        ({"model": lambda x: x}, TypeError, "model must be an nn.Module"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    X, y = _batch(4)
    args = {"X": X, "y": y, "model": Net(), "loss_fun": nn.functional.cross_entropy, "keep": 0.5}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        F.select_using_loss(**args)


def test_scale_factor_needs_spatial_inputs() -> None:
    with pytest.raises(ValueError, match="spatial dims"):
        F.select_using_loss(
            torch.randn(4, 5),
            torch.arange(4) % 3,
            nn.Linear(5, 3),
            nn.functional.cross_entropy,
            0.5,
            0.5,
        )


# --- issue 13 regressions ---------------------------------------------------------------------


def _cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


def test_scale_factor_that_empties_the_images_is_refused_at_entry() -> None:
    X, y = torch.rand(4, 3, 6, 9), torch.tensor([0, 1, 2, 0])
    model = torch.nn.Module()  # never called: the check comes before the scoring pass
    with pytest.raises(ValueError, match=r"scale_factor=0.1 shrinks the spatial size \(6, 9\)"):
        F.select_using_loss(X, y, model, torch.nn.functional.cross_entropy, 0.5, 0.1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_module_is_scored_per_sample_whatever_its_reduction(reduction) -> None:
    X, y = torch.rand(8, 3, 6, 6), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    weight = torch.tensor([1.0, 2.0, 0.5])
    module = torch.nn.CrossEntropyLoss(weight=weight, label_smoothing=0.1, reduction=reduction)

    def functional(output, target, reduction):
        return torch.nn.functional.cross_entropy(
            output, target, weight=weight, label_smoothing=0.1, reduction=reduction
        )

    want = F.select_using_loss(
        X, y, _cnn(), functional, 0.5, generator=torch.Generator().manual_seed(2)
    )
    got = F.select_using_loss(X, y, _cnn(), module, 0.5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert module.reduction == reduction  # restored


def test_callable_without_reduction_keyword_is_refused_at_entry() -> None:
    X, y = torch.rand(4, 3, 6, 6), torch.tensor([0, 1, 2, 0])
    with pytest.raises(TypeError, match="loss_fun must take a keyword argument `reduction`"):
        F.select_using_loss(X, y, _cnn(), lambda out, target: out.sum(), 0.5)


def test_selection_runs_on_the_data_device_and_keeps_channels_last() -> None:
    X = torch.rand(8, 3, 6, 6).to(memory_format=torch.channels_last)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    Xs, ys = F.select_using_loss(X, y, _cnn(), torch.nn.functional.cross_entropy, 0.5)
    assert Xs.shape == (4, 3, 6, 6) and ys.shape == (4,)
    assert Xs.is_contiguous(memory_format=torch.channels_last)


class _SoftTargetLoss(nn.Module):
    """A plain loss module without ``reduction`` (as timm's ``SoftTargetCrossEntropy``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.sum(-target * x.log_softmax(-1), dim=-1).mean()


def test_loss_module_without_reduction_is_refused_before_scoring() -> None:
    """Refused at entry, naming ``loss_fun`` and the way out, before any scoring pass."""
    X, y = torch.rand(4, 3, 6, 6), torch.eye(3)[torch.tensor([0, 1, 2, 0])]
    model, loss = Net(), _SoftTargetLoss()
    with pytest.raises(
        TypeError, match=r"loss_fun must take a keyword argument `reduction`.*_SoftTargetLoss"
    ):
        F.select_using_loss(X, y, model, loss, 0.5)
    assert model.shapes == [] and loss.calls == 0  # nothing ran
    timm_loss = pytest.importorskip("timm.loss")
    with pytest.raises(TypeError, match=r"SoftTargetCrossEntropy module.*reduction='none'"):
        F.select_using_loss(X, y, model, timm_loss.SoftTargetCrossEntropy(), 0.5)
    # The way out the message names: a per-sample wrapper.
    Xs, ys = F.select_using_loss(
        X, y, model, lambda out, t, reduction="none": -(t * out.log_softmax(-1)).sum(-1), 0.5
    )
    assert Xs.shape == (2, 3, 6, 6) and ys.shape == (2, 3)


def test_stochastic_depth_model_state_is_untouched() -> None:
    """Scoring a stochastic-depth ResNet advances none of its draw counts (host or device):
    the state dict is unchanged and the next training step draws what it would have drawn."""
    torchvision = pytest.importorskip("torchvision")

    def build() -> nn.Module:
        torch.manual_seed(0)
        model = torchvision.models.resnet.ResNet(
            torchvision.models.resnet.Bottleneck, [1, 1, 1, 1], num_classes=3, width_per_group=8
        )
        return F.apply_stochastic_depth(
            model.train(), "block", "ResNetBottleneck", drop_rate=0.5, seed=1
        )

    X, y = _batch(8)
    scored, fresh = build(), build()
    before = {k: v.clone() for k, v in scored.state_dict().items()}
    F.select_using_loss(X, y, scored, nn.functional.cross_entropy, 0.5)
    for k, v in scored.state_dict().items():
        assert torch.equal(v, before[k]), k
    torch.testing.assert_close(scored(X), fresh(X))  # the same blocks dropped next
