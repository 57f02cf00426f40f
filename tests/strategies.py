"""Hypothesis strategies shared by the whole suite.

``module_trees`` draws random, shape-preserving ``nn.Module`` trees over (B, C, H, W) inputs,
built from convolutions, norms, linears and activations, nested in Sequential, ModuleList and
residual containers, with some submodules shared between several parents.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch import nn

__all__ = [
    "ModuleTree",
    "Residual",
    "calibrate_batchnorm",
    "dtypes",
    "image_batches",
    "module_trees",
    "spatial_sizes",
]


class Residual(nn.Module):
    """``x + body(x)``: a container whose child is not at the top level of a Sequential."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Chain(nn.Module):
    """Runs the modules of a ModuleList one after another."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@dataclass
class ModuleTree:
    """A drawn model and the input shape it accepts."""

    model: nn.Module
    channels: int
    width: int

    def example_input(self, batch: int = 2, height: int = 6) -> torch.Tensor:
        return torch.randn(batch, self.channels, height, self.width)


def _leaves(channels: int, width: int) -> st.SearchStrategy[nn.Module]:
    groups = [g for g in (1, 2, channels) if channels % g == 0]
    return st.one_of(
        st.builds(
            lambda k, stride_one_bias: nn.Conv2d(
                channels, channels, k, padding=k // 2, bias=stride_one_bias
            ),
            st.sampled_from([1, 3]),
            st.booleans(),
        ),
        st.just(None).map(lambda _: nn.BatchNorm2d(channels)),
        st.sampled_from(groups).map(lambda g: nn.GroupNorm(g, channels)),
        st.just(None).map(lambda _: nn.LayerNorm(width)),
        st.booleans().map(lambda bias: nn.Linear(width, width, bias=bias)),
        st.sampled_from([nn.ReLU, nn.GELU, nn.Identity]).map(lambda cls: cls()),
    )


@st.composite
def module_trees(draw: st.DrawFn, max_leaves: int = 12) -> ModuleTree:
    """A random shape-preserving model; some drawn submodules appear under several parents."""
    channels = draw(st.sampled_from([2, 4, 6]))
    width = draw(st.integers(min_value=3, max_value=7))
    pool: list[nn.Module] = []

    def remember(module: nn.Module) -> nn.Module:
        pool.append(module)
        return module

    leaf = _leaves(channels, width).map(remember)
    # Occasionally reuse a module already in the tree: a shared submodule.
    reuse = st.integers(min_value=0, max_value=10_000).map(
        lambda i: pool[i % len(pool)] if pool else nn.Identity()
    )
    tree = st.recursive(
        st.one_of(leaf, leaf, leaf, reuse),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=4).map(lambda c: nn.Sequential(*c)),
            st.lists(children, min_size=1, max_size=3).map(Chain),
            children.map(Residual),
        ),
        max_leaves=max_leaves,
    )
    model = draw(tree)
    if not isinstance(model, nn.Sequential):
        model = nn.Sequential(model)
    return ModuleTree(model=model, channels=channels, width=width)


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """Put a random-init model in a well-defined numeric regime and return it.

    Sets every BatchNorm's running statistics to those of ``x`` (one cumulative-average pass in
    training mode, without gradients), then restores the model's train/eval mode. A random-init
    deep network evaluated with the default statistics (mean 0, variance 1) amplifies its
    activations block after block, and on some CPUs and kernel libraries overflows to inf/NaN;
    calibrated, every BatchNorm normalises in eval mode as in training, so eval outputs are of
    unit scale on any machine. ``x`` needs several values per channel at every stage (a batch
    of 8 for a ResNet at 32x32, whose last stage is 1x1).
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: after one batch, exactly its statistics
    was_training = model.training
    with torch.no_grad():
        model.train()(x)
    for m, momentum in zip(norms, saved, strict=True):
        m.momentum = momentum
    return model.train(was_training)


spatial_sizes = st.integers(min_value=1, max_value=40)
dtypes = st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16])


@st.composite
def image_batches(
    draw: st.DrawFn,
    *,
    min_batch: int = 1,
    max_batch: int = 6,
    min_side: int = 1,
    max_side: int = 40,
    channels: st.SearchStrategy[int] | None = None,
    dtype: st.SearchStrategy[torch.dtype] | None = None,
) -> torch.Tensor:
    """A (B, C, H, W) batch with independently drawn height and width, seeded from Hypothesis."""
    b = draw(st.integers(min_batch, max_batch))
    c = draw(channels if channels is not None else st.integers(1, 4))
    h = draw(st.integers(min_side, max_side))
    w = draw(st.integers(min_side, max_side))
    dt = draw(dtype if dtype is not None else st.just(torch.float32))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    if dt == torch.uint8:
        return torch.randint(0, 256, (b, c, h, w), generator=gen, dtype=torch.uint8)
    return torch.rand((b, c, h, w), generator=gen, dtype=torch.float64).to(dt)


@dataclass
class ConvStack:
    """A drawn convolutional classifier-free network and the input shape it accepts."""

    model: nn.Module
    in_channels: int
    height: int
    width: int

    def example_input(self, batch: int = 4, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(batch, self.in_channels, self.height, self.width, dtype=dtype)


@st.composite
def conv_stacks(draw: st.DrawFn, max_stages: int = 4) -> ConvStack:
    """A random Sequential of conv stages (strided or not, grouped or not, with BatchNorm or
    GroupNorm, max-pools), some inside residual wrappers, over inputs large enough for every
    stride. Widths are 8-32 channels so that width thresholds of the transforms can be drawn."""
    in_channels = draw(st.sampled_from([3, 8, 16]))
    height = draw(st.integers(8, 14))
    width = draw(st.integers(8, 14))
    layers: list[nn.Module] = []
    channels, h, w = in_channels, height, width
    for _ in range(draw(st.integers(1, max_stages))):
        out = draw(st.sampled_from([8, 16, 32]))
        k = draw(st.sampled_from([1, 3]))
        stride = draw(st.sampled_from([1, 2])) if min(h, w) >= 4 else 1
        groups = draw(st.sampled_from([g for g in (1, 2, 8) if channels % g == 0 and out % g == 0]))
        bias = draw(st.booleans())
        conv = nn.Conv2d(channels, out, k, stride=stride, padding=k // 2, groups=groups, bias=bias)
        norm = draw(st.sampled_from(["batch", "group", "none"]))
        stage: list[nn.Module] = [conv]
        if norm == "batch":
            stage.append(nn.BatchNorm2d(out))
        elif norm == "group":
            stage.append(nn.GroupNorm(draw(st.sampled_from([1, 2, 4])), out))
        stage.append(nn.ReLU())
        h, w = (h + stride - 1) // stride, (w + stride - 1) // stride
        pooled = min(h, w) >= 4 and draw(st.booleans())
        if pooled:
            stage.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        block: nn.Module = nn.Sequential(*stage)
        if stride == 1 and out == channels and not pooled and draw(st.booleans()):
            block = Residual(block)
        layers.append(block)
        channels = out
    return ConvStack(
        model=nn.Sequential(*layers), in_channels=in_channels, height=height, width=width
    )
