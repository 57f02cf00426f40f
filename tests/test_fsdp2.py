"""SAM, gradient clipping and layer freezing on models sharded with FSDP2 (``fully_shard``).

Two gloo ranks on 127.0.0.1 (the launcher of ``tests/test_distributed.py``) train a sharded
model, each on its half of a batch; every rank also trains an unsharded copy on the whole
batch in one process, the reference. Layer sizes do not divide by the world size, so the
shards are uneven (rank 1 holds fewer rows, sometimes none). FSDP2 averages the gradients over
the ranks, which equals the gradient of the mean loss over the whole batch, so the sharded run
must match the reference up to the order of floating-point sums.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.test_distributed import FSDP2_ON_CPU, _fully_shard, launch

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.slow,
    FSDP2_ON_CPU,
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable"),
]

TOL = {"rtol": 1e-5, "atol": 1e-6}


def linear_model() -> nn.Module:
    torch.manual_seed(0)  # same initial weights on every rank
    return nn.Sequential(
        nn.Linear(6, 7),
        nn.Tanh(),
        nn.Linear(7, 1),  # one row: rank 1's shards of it are empty
        nn.Tanh(),
        nn.Linear(1, 5),
        nn.Tanh(),
        nn.Linear(5, 3),
    )


def small_cnn() -> nn.Module:
    """Convolutions with 5 and 3 channels, GroupNorm (1-D gains of 5), a Linear head."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 5, 3, padding=1),
        nn.GroupNorm(1, 5),
        nn.ReLU(),
        nn.Conv2d(5, 3, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(3, 3),
    )


MODELS = {"linear": (linear_model, (6,)), "cnn": (small_cnn, (3, 8, 8))}


def shard(model: nn.Module) -> nn.Module:
    """``fully_shard`` on every layer with parameters, then on the root."""
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard = _fully_shard()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if next(layer.parameters(), None) is not None:
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def whole_batch(step: int, shape: tuple[int, ...], world_size: int):
    """The same batch on every rank (8 samples per rank), and this rank's slice of it."""
    gen = torch.Generator().manual_seed(100 + step)
    n = 8 * world_size
    x, y = torch.randn(n, *shape, generator=gen), torch.randint(0, 3, (n,), generator=gen)
    rank = dist.get_rank()
    return (x, y), (x[8 * rank : 8 * (rank + 1)], y[8 * rank : 8 * (rank + 1)])


def backward(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


def full(tensors) -> list[torch.Tensor]:
    """Sharded tensors gathered whole (plain tensors as they are)."""
    return [t.full_tensor() if hasattr(t, "full_tensor") else t for t in tensors]


def assert_matches(sharded: nn.Module, reference: nn.Module, grads: bool = False) -> None:
    for (name, p), q in zip(sharded.named_parameters(), reference.parameters(), strict=True):
        got, want = (p.grad, q.grad) if grads else (p, q)
        if want is None:
            assert got is None, name
            continue
        torch.testing.assert_close(full([got])[0], want, **TOL, msg=lambda m, n=name: f"{n}: {m}")


def scenario_gradient_clipping(rank: int, world_size: int) -> None:
    """All three modes: the same clipped gradients and returned norm as one process."""
    import functional as F

    thresholds = {"norm": 0.05, "value": 2e-3, "adaptive": 0.01}
    for make, shape in MODELS.values():
        for mode, threshold in thresholds.items():
            reference = make()
            sharded = shard(copy.deepcopy(reference))
            assert all(p.shape[0] % world_size for p in sharded.parameters())  # uneven shards
            whole, mine = whole_batch(0, shape, world_size)
            backward(reference, whole)
            backward(sharded, mine)
            unclipped = [q.grad.clone() for q in reference.parameters()]
            want = F.apply_gradient_clipping(reference, mode, threshold)
            got = F.apply_gradient_clipping(sharded, mode, threshold)
            clipped = [q.grad for q in reference.parameters()]
            assert any(not torch.equal(a, b) for a, b in zip(clipped, unclipped, strict=True))
            if mode == "value":
                assert got is None and want is None
            else:
                assert type(got) is torch.Tensor  # a plain tensor, the same on every rank
                torch.testing.assert_close(got, want, **TOL)
            assert_matches(sharded, reference, grads=True)


def scenario_sam(rank: int, world_size: int) -> None:
    """SAM with momentum SGD for three steps: the same weights as one process."""
    import functional as F

    for name, (make, shape) in MODELS.items():
        reference = make()
        sharded = shard(copy.deepcopy(reference))
        runs = []
        for model in (reference, sharded):
            base = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
            runs.append((model, F.SAMOptimizer(base, rho=0.5)))
        for step in range(3):
            whole, mine = whole_batch(step, shape, world_size)
            for (model, opt), batch in zip(runs, (whole, mine), strict=True):

                def closure(model=model, opt=opt, batch=batch):
                    opt.zero_grad()
                    return backward(model, batch)

                opt.step(closure)
        assert_matches(sharded, reference)
        assert any(
            not torch.equal(p, q)
            for p, q in zip(full(sharded.parameters()), make().parameters(), strict=True)
        ), name


def scenario_freeze_layers_then_train(rank: int, world_size: int) -> None:
    """freeze_layers on the sharded model between epochs, as on one process."""
    import functional as F

    reference = small_cnn()
    sharded = shard(copy.deepcopy(reference))
    runs = [
        (m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)) for m in (reference, sharded)
    ]
    for epoch in range(3):
        whole, mine = whole_batch(epoch, (3, 8, 8), world_size)
        for (model, opt), batch in zip(runs, (whole, mine), strict=True):
            opt.zero_grad()
            backward(model, batch)
            opt.step()
            n_frozen, _ = F.freeze_layers(
                model, opt, epoch + 1, 3, freeze_start=0.0, freeze_level=0.75
            )
        assert_matches(sharded, reference)
    assert n_frozen == 3
    frozen = [p for p in sharded.parameters() if not p.requires_grad]
    assert len(frozen) == 6 and all(p.grad is None for p in frozen)


@pytest.mark.parametrize(
    "scenario",
    [scenario_gradient_clipping, scenario_sam, scenario_freeze_layers_then_train],
    ids=lambda f: f.__name__.removeprefix("scenario_"),
)
def test_scenario(scenario):
    launch(scenario)
