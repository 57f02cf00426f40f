"""The engine refuses models wrapped for distributed training, with a message saying what to do."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from torch import nn

from surgery import replace_module_classes
from tests.test_distributed import free_port

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")


@pytest.fixture
def process_group():
    """A one-process gloo group on localhost, torn down even when the test fails."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def test_ddp_refused_with_the_fix(process_group):
    wrapped = nn.parallel.DistributedDataParallel(net())
    with pytest.raises(TypeError, match=r"DistributedDataParallel.*\.module\) before wrapping"):
        replace_module_classes(wrapped, {nn.ReLU: lambda m, i: nn.GELU()})
    # the advice works: operate on the inner module
    replace_module_classes(wrapped.module, {nn.ReLU: lambda m, i: nn.GELU()}, dry_run=True)


def test_fully_shard_refused_with_the_fix(process_group):
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    model = net()
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    with pytest.raises(TypeError, match=r"fully_shard.*unsharded model first"):
        replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})


def test_sharded_submodule_refused(process_group):
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    model = nn.Sequential(net(), net())
    fully_shard(model[1], mesh=init_device_mesh("cpu", (1,)))
    with pytest.raises(TypeError, match="fully_shard"):
        replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})
