"""Wrapper modules: the engine refuses wrapped models with a message saying what to do, and
``unwrap_model`` finds the model inside DDP and torch.compile wrappers."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from surgery import check_unwrapped, replace_module_classes, unwrap_model
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


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def test_unwrap_model_returns_a_bare_model_itself():
    model = net()
    assert unwrap_model(model) is model


def test_unwrap_model_looks_through_ddp_and_compile_nested(process_group):
    model = net()
    ddp = nn.parallel.DistributedDataParallel(model)
    assert unwrap_model(ddp) is model
    compiled = torch.compile(ddp)  # building the wrapper compiles nothing
    assert unwrap_model(compiled) is model
    # either order, any depth
    assert unwrap_model(nn.parallel.DistributedDataParallel(torch.compile(model))) is model
    # the result is what surgery accepts
    check_unwrapped(unwrap_model(compiled))


def test_unwrap_model_looks_through_a_ddp_subclass(process_group):
    class MyDDP(nn.parallel.DistributedDataParallel):
        pass

    model = net()
    assert unwrap_model(MyDDP(model)) is model


def test_unwrap_model_keeps_fully_shard_modules(process_group):
    from torch.distributed.device_mesh import init_device_mesh

    model = net()
    _fully_shard()(model, mesh=init_device_mesh("cpu", (1,)))
    assert unwrap_model(model) is model  # sharded in place: the model itself
    wrapped = torch.compile(model)
    assert unwrap_model(wrapped) is model


def test_unwrap_model_keeps_a_module_compiled_in_place():
    model = net()
    model.compile()  # no wrapper: the module itself compiles on its next call
    assert unwrap_model(model) is model
    with pytest.raises(TypeError, match=r"module\.compile\(\)"):
        check_unwrapped(model)


def test_unwrap_model_ignores_look_alikes_outside_torch():
    class OptimizedModule(nn.Module):  # the name of torch.compile's wrapper, not its class
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self._orig_mod = inner

    outer = OptimizedModule(net())
    assert unwrap_model(outer) is outer
    check_unwrapped(outer)  # nor does surgery refuse it: one rule for both


def test_unwrap_model_rejects_a_non_module():
    with pytest.raises(TypeError, match=r"module must be an nn\.Module, got dict"):
        unwrap_model({})  # type: ignore[arg-type]
