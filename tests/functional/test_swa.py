"""SWA helper: averaging timeline, LR hand-over to SWALR, BatchNorm recomputation with real
DataLoaders (tuple, dict and bare-tensor batches), checkpointing, and argument checks."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import update_bn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from functional import SWA, SAMOptimizer


def tiny_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1, bias=False),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 3),
    )


def dataset(n: int = 32) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
    )


def train_epoch(model, opt, loader):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def run(epochs, swa_kwargs, *, make_sched=None, loader=None, stop_after=None, state=None):
    torch.manual_seed(0)
    model = tiny_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = make_sched(opt) if make_sched else None
    swa = SWA(model, opt, total_steps=epochs, scheduler=sched, **swa_kwargs)
    loader = loader or DataLoader(dataset(), batch_size=8)
    lrs, snapshots, averaged = [], [], []
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        if sched is not None:
            sched.load_state_dict(state["sched"])
        swa.load_state_dict(state["swa"])
        start = swa.steps_done
    for epoch in range(start, epochs):
        lrs.append(opt.param_groups[0]["lr"])
        train_epoch(model, opt, loader)
        snapshots.append([p.detach().clone() for p in model.parameters()])
        averaged.append(swa.step())
        if stop_after is not None and epoch + 1 == stop_after:
            saved = {"model": model.state_dict(), "opt": opt.state_dict(), "swa": swa.state_dict()}
            if sched is not None:
                saved["sched"] = sched.state_dict()
            return copy.deepcopy(saved)
    return model, swa, lrs, snapshots, averaged


def step_lr(opt):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


def assert_is_mean_of(swa: SWA, snapshots: list[list[torch.Tensor]]) -> None:
    assert swa.n_averaged == len(snapshots)
    for i, p in enumerate(swa.averaged_model.module.parameters()):
        mean = torch.stack([s[i] for s in snapshots]).mean(0)
        torch.testing.assert_close(p, mean, rtol=1e-5, atol=1e-6)


def test_timeline_average_and_lr_switch():
    model, swa, lrs, snaps, averaged = run(
        6, {"swa_start": 0.5, "swa_lr": 0.01}, make_sched=step_lr
    )
    assert swa.start_step == 3
    assert averaged == [False, False, False, True, True, True]
    assert lrs == pytest.approx([0.1, 0.05, 0.025, 0.01, 0.01, 0.01])
    assert_is_mean_of(swa, snaps[3:])
    # the averaged copy is separate from the model, which keeps its last weights
    for p, q in zip(model.parameters(), snaps[-1], strict=True):
        assert torch.equal(p, q)


def test_linear_anneal_and_default_swa_lr():
    *_, lrs, _, _ = run(
        6,
        {"swa_start": 0.5, "swa_lr": 0.01, "anneal_steps": 2, "anneal_strategy": "linear"},
        make_sched=step_lr,
    )
    assert lrs == pytest.approx([0.1, 0.05, 0.025, 0.025, 0.0175, 0.01])
    *_, lrs, _, _ = run(5, {"swa_start": 0.4}, make_sched=step_lr)  # swa_lr=None: hold the rate
    assert lrs == pytest.approx([0.1, 0.05, 0.05, 0.05, 0.05])


def test_update_interval_and_start_at_zero():
    _, swa, _, snaps, averaged = run(10, {"swa_start": 0.4, "update_interval": 2})
    assert averaged == [False] * 5 + [True, False, True, False, True]
    assert_is_mean_of(swa, [snaps[5], snaps[7], snaps[9]])
    _, swa, lrs, snaps, averaged = run(3, {"swa_start": 0.0, "swa_lr": 0.02})
    assert lrs == pytest.approx([0.02] * 3) and all(averaged)
    assert_is_mean_of(swa, snaps)


class Pairs(Dataset):
    """(inputs, targets) pairs, or {'pixel_values': ..., 'labels': ...} dicts."""

    def __init__(self, as_dict: bool) -> None:
        self.data = dataset()
        self.as_dict = as_dict

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        x, y = self.data[i]
        return {"pixel_values": x, "labels": y} if self.as_dict else (x, y)


class KeywordModel(nn.Module):
    """A model called as model(**batch), Hugging Face style."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, pixel_values, labels=None):
        return self.net(pixel_values)


def test_update_bn_with_real_dataloaders():
    _model, swa, *_ = run(4, {"swa_start": 0.5})
    before = copy.deepcopy(swa.averaged_model)
    # torch's own update_bn on a copy is the reference (tuple batches, no workers)
    reference = copy.deepcopy(swa.averaged_model)
    update_bn(DataLoader(dataset(), batch_size=8), reference)

    swa.update_bn(DataLoader(Pairs(as_dict=False), batch_size=8, num_workers=2))
    bn = [m for m in swa.averaged_model.modules() if isinstance(m, nn.BatchNorm2d)]
    ref_bn = [m for m in reference.modules() if isinstance(m, nn.BatchNorm2d)]
    old_bn = [m for m in before.modules() if isinstance(m, nn.BatchNorm2d)]
    for m, r, o in zip(bn, ref_bn, old_bn, strict=True):
        torch.testing.assert_close(m.running_mean, r.running_mean)
        torch.testing.assert_close(m.running_var, r.running_var)
        assert not torch.allclose(m.running_mean, o.running_mean)
        assert m.momentum == 0.1  # restored after the cumulative pass
    assert swa.averaged_model.training  # mode restored (AveragedModel starts in train mode)
    # equal batches: the first BN's running mean is the dataset mean of its input
    x = dataset().tensors[0]
    conv_out = swa.averaged_model.module[0](x)
    torch.testing.assert_close(
        bn[0].running_mean, conv_out.mean(dim=(0, 2, 3)), rtol=1e-5, atol=1e-6
    )

    # bare tensors and dicts (with a key, or as keyword arguments) give the same statistics
    swa.update_bn(DataLoader(dataset().tensors[0], batch_size=8))
    torch.testing.assert_close(bn[0].running_var, ref_bn[0].running_var)
    swa.update_bn(DataLoader(Pairs(as_dict=True), batch_size=8), input_key="pixel_values")
    torch.testing.assert_close(bn[1].running_var, ref_bn[1].running_var)


def test_update_bn_dict_batches_as_keywords():
    torch.manual_seed(0)
    model = KeywordModel(tiny_cnn())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    swa = SWA(model, opt, total_steps=2, swa_start=0.5)
    loader = DataLoader(Pairs(as_dict=True), batch_size=8)
    for _ in range(2):
        for batch in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(**batch), batch["labels"]).backward()
            opt.step()
        swa.step()
    swa.update_bn(loader)
    by_keywords = [b.clone() for b in swa.averaged_model.buffers()]
    swa.update_bn(loader, input_key="pixel_values")
    for a, b in zip(by_keywords, swa.averaged_model.buffers(), strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="input_key='image' is not in the batch keys"):
        swa.update_bn(loader, input_key="image")


def test_state_dict_resume_matches_uninterrupted_run():
    kwargs = {"swa_start": 0.4, "swa_lr": 0.02, "anneal_steps": 2}
    _, swa, lrs, _, _ = run(5, kwargs, make_sched=step_lr)
    for stop in (1, 3):  # before and inside the SWA phase
        state = run(5, kwargs, make_sched=step_lr, stop_after=stop)
        _, resumed, resumed_lrs, _, _ = run(5, kwargs, make_sched=step_lr, state=state)
        assert resumed_lrs == pytest.approx(lrs[stop:])
        assert resumed.n_averaged == swa.n_averaged
        for p, q in zip(
            swa.averaged_model.parameters(), resumed.averaged_model.parameters(), strict=True
        ):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="starting at unit 2, this SWA starts it at 4"):
        SWA(
            tiny_cnn(), torch.optim.SGD(tiny_cnn().parameters(), lr=0.1), 5, swa_start=0.8
        ).load_state_dict(state["swa"])


def test_works_with_sam():
    torch.manual_seed(0)
    model = tiny_cnn()
    opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.05)
    swa = SWA(model, opt, total_steps=2, swa_start=0.5, swa_lr=0.03, scheduler=step_lr(opt))
    x, y = dataset().tensors
    for _ in range(2):

        def closure():
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)
        swa.step()
    assert swa.n_averaged == 1 and opt.param_groups[0]["lr"] == pytest.approx(0.03)


def test_validation():
    model = tiny_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"swa_start must be in \[0.0, 1.0\), got 1.0"):
        SWA(model, opt, 10, swa_start=1.0)
    with pytest.raises(ValueError, match="leaves no unit for the SWA phase"):
        SWA(model, opt, 10, swa_start=0.96)
    with pytest.raises(ValueError, match="total_steps must be >= 1, got 0"):
        SWA(model, opt, 0)
    with pytest.raises(TypeError, match=r"optimizer must be a torch\.optim\.Optimizer"):
        SWA(model, "sgd", 10)
    with pytest.raises(
        ValueError, match=r"swa_lr must be a float or one float per param group \(1\), got 2"
    ):
        SWA(model, opt, 10, swa_lr=[0.1, 0.2])
    with pytest.raises(
        ValueError, match="anneal_strategy must be one of 'cos', 'linear'; got 'step'"
    ):
        SWA(model, opt, 10, anneal_strategy="step")
    with pytest.raises(ValueError, match="update_interval must be >= 1, got 0"):
        SWA(model, opt, 10, update_interval=0)
    other = torch.optim.SGD(tiny_cnn().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="scheduler must drive the same optimizer"):
        SWA(model, opt, 10, scheduler=step_lr(other))
    swa = SWA(model, opt, 10)
    assert swa.averaged_model is None and swa.n_averaged == 0
    with pytest.raises(RuntimeError, match="nothing has been averaged yet"):
        swa.update_bn([torch.randn(2, 3, 8, 8)])
    assert "SWA(total_steps=10, swa_start=0.8 (unit 8)" in repr(swa)
