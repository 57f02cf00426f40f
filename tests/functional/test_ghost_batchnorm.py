"""Ghost batch normalization: per-ghost-batch normalization, whole-batch running statistics."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as TF
import torchvision
from torch import nn

from functional import GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d, apply_ghost_batchnorm
from tests.functional._model_checks import (
    assert_dtype,
    assert_idempotent,
    assert_no_effect,
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    sgd_with_state,
    train_step,
)
from tests.strategies import calibrate_batchnorm

CASES = [
    (nn.BatchNorm1d, GhostBatchNorm1d, (10, 6)),
    (nn.BatchNorm1d, GhostBatchNorm1d, (7, 3, 5)),
    (nn.BatchNorm2d, GhostBatchNorm2d, (9, 4, 3, 5)),
    (nn.BatchNorm3d, GhostBatchNorm3d, (5, 2, 2, 3, 3)),
]


def ghost_sizes(batch: int, ghost: int) -> list[int]:
    """The documented split: ceil(B/g) ghost batches, sizes differing by at most one, larger first."""
    n = -(-batch // ghost)
    q, r = divmod(batch, n)
    return [q + 1] * r + [q] * (n - r)


def reference(x: torch.Tensor, bn: nn.Module, ghost: int) -> torch.Tensor:
    """The obvious loop: F.batch_norm on every ghost batch."""
    chunks = torch.split(x, ghost_sizes(x.shape[0], ghost))
    return torch.cat(
        [TF.batch_norm(c, None, None, bn.weight, bn.bias, True, 0.0, bn.eps) for c in chunks]
    )


def randomized(bn: nn.Module) -> nn.Module:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-1.0, 1.0)
        bn.running_mean.uniform_(-1.0, 1.0)
        bn.running_var.uniform_(0.5, 2.0)
    return bn


def test_ghost_sizes_rule():
    assert ghost_sizes(70, 32) == [24, 23, 23]
    assert ghost_sizes(64, 32) == [32, 32]
    assert ghost_sizes(5, 32) == [5]


@pytest.mark.parametrize(("plain", "ghost_cls", "shape"), CASES)
@pytest.mark.parametrize("ghost", [2, 3, 4])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_training_matches_reference_and_plain_running_stats(
    plain, ghost_cls, shape, ghost, momentum
):
    channels = shape[1]
    bn = randomized(plain(channels, momentum=momentum).double())
    twin = copy.deepcopy(bn)
    gbn = ghost_cls.from_batchnorm(bn, ghost_batch_size=ghost)
    assert gbn.weight is bn.weight and gbn.running_mean is bn.running_mean

    x = (torch.randn(*shape, dtype=torch.float64) * 3 + 1).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    out, expected = gbn(x), reference(x_ref, gbn, ghost)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)

    grad = torch.randn_like(out)
    (expected * grad).sum().backward()
    grads_ref = [x_ref.grad, gbn.weight.grad.clone(), gbn.bias.grad.clone()]
    gbn.weight.grad = gbn.bias.grad = None
    (out * grad).sum().backward()
    for got, want in zip([x.grad, gbn.weight.grad, gbn.bias.grad], grads_ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)

    # Running statistics: exactly plain BatchNorm's on the same whole batches.
    twin(x.detach())
    twin(2 * x.detach() - 1)
    gbn(2 * x.detach() - 1)
    torch.testing.assert_close(gbn.running_mean, twin.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gbn.running_var, twin.running_var, rtol=1e-12, atol=1e-12)
    assert gbn.num_batches_tracked.item() == twin.num_batches_tracked.item() == 2


def test_gradcheck():
    gbn = GhostBatchNorm2d(3, ghost_batch_size=2).double()
    randomized(gbn)
    x = torch.randn(5, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(gbn, (x,))


def test_small_batches_and_eval_are_plain_batchnorm_exactly():
    bn = randomized(nn.BatchNorm2d(4))
    gbn = GhostBatchNorm2d.from_batchnorm(copy.deepcopy(bn), ghost_batch_size=8)
    x = torch.randn(8, 4, 5, 5)
    assert torch.equal(gbn(x), bn(x))  # one ghost batch
    assert torch.equal(gbn.running_var, bn.running_var)
    gbn.ghost_batch_size = 3
    gbn.eval(), bn.eval()
    assert torch.equal(gbn(x), bn(x))
    # Without running statistics, evaluation uses the whole batch, as BatchNorm does.
    plain = nn.BatchNorm2d(4, track_running_stats=False).eval()
    ghost = GhostBatchNorm2d.from_batchnorm(copy.deepcopy(plain), ghost_batch_size=3).eval()
    assert torch.equal(ghost(x), plain(x))
    ghost.train()
    torch.testing.assert_close(ghost(x), reference(x, ghost, 3))


def test_single_value_ghost_batches_are_refused():
    gbn = GhostBatchNorm1d(3, ghost_batch_size=1)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        gbn(torch.randn(4, 3))
    assert GhostBatchNorm2d(3, ghost_batch_size=1)(torch.randn(4, 3, 2, 2)).shape == (4, 3, 2, 2)


def test_constructor_and_validation():
    gbn = GhostBatchNorm2d(8, momentum=None, ghost_batch_size=4)
    assert gbn.momentum is None and "ghost_batch_size=4" in repr(gbn)
    with pytest.raises(ValueError, match="ghost_batch_size must be >= 1"):
        GhostBatchNorm2d(8, ghost_batch_size=0)
    with pytest.raises(TypeError, match=r"bn must be an nn.BatchNorm2d"):
        GhostBatchNorm2d.from_batchnorm(nn.BatchNorm1d(3))
    with pytest.raises(ValueError, match="expected 4D input"):
        gbn(torch.randn(4, 8))
    with pytest.raises(TypeError, match="ghost_batch_size must be an int"):
        apply_ghost_batchnorm(nn.BatchNorm2d(2), ghost_batch_size=2.5)


def test_apply_on_torchvision_models():
    factory = torchvision.models.resnet18
    model = factory()
    x = torch.randn(6, 3, 32, 32)
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    n_bn = sum(type(m) is nn.BatchNorm2d for m in model.modules())
    calibrate_batchnorm(model, x)  # eval output well-conditioned on any CPU
    model.eval()
    with torch.no_grad():
        reference_out = model(x)
    assert torch.isfinite(reference_out).all()
    checkpoint = copy.deepcopy(model.state_dict())

    assert apply_ghost_batchnorm(model, ghost_batch_size=4, optimizers=opt) is model
    assert sum(isinstance(m, GhostBatchNorm2d) for m in model.modules()) == n_bn > 0
    assert list(model.state_dict()) == list(checkpoint)
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    with torch.no_grad():
        assert torch.equal(model(x), reference_out)  # evaluation: exactly the original
    train_step(model, x, opt)
    model.load_state_dict(checkpoint)
    factory().load_state_dict(model.state_dict())
    assert_idempotent(
        model, apply_ghost_batchnorm, "nn.BatchNorm1d, nn.BatchNorm2d or nn.BatchNorm3d"
    )


def test_no_effect_dtype_and_layout():
    assert_no_effect(lambda: apply_ghost_batchnorm(nn.Linear(2, 2)), "nn.BatchNorm2d")
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(torch.bfloat16)
    apply_ghost_batchnorm(model, ghost_batch_size=2)
    assert_dtype(model, torch.bfloat16)
    x = torch.randn(5, 3, 6, 6, dtype=torch.bfloat16, requires_grad=True)
    out = model(x)
    out.float().sum().backward()
    assert out.dtype == x.grad.dtype == model[1].weight.grad.dtype == torch.bfloat16
    # bf16 statistics are accumulated in float32: close to the float32 computation.
    ref = copy.deepcopy(model).float()
    torch.testing.assert_close(out.float(), ref(x.detach().float()), atol=0.05, rtol=0.05)

    gbn = GhostBatchNorm2d(4, ghost_batch_size=3)
    y = gbn(torch.randn(8, 4, 5, 5).to(memory_format=torch.channels_last))
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_sync_batchnorm_and_subclasses_are_left_alone():
    class MyBN(nn.BatchNorm2d):
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(MyBN(2), nn.SyncBatchNorm(2), nn.BatchNorm2d(2))
    apply_ghost_batchnorm(model)
    assert [type(m) for m in model] == [MyBN, nn.SyncBatchNorm, GhostBatchNorm2d]
