"""Stochastic depth (Huang et al. 2016): randomly skip residual branches while training.

The stochastic blocks subclass the blocks they replace (torchvision's ``Bottleneck`` and
``BasicBlock``), so parameters and state_dict keys stay. A kept branch is scaled by
``1 / (1 - p)`` while training (inverted scaling), so evaluation computes exactly what the
unmodified model computes.

In eager mode, ``'block'`` decisions are drawn on the host, from a CPU generator the transform
gives the model, before the branch runs: a dropped branch is not computed at all (that is the
speed-up), and no decision ever waits for the device. Under ``torch.compile`` (or with
``skip_dropped=False``) the decision is a 0-d device tensor multiplying the branch, so the one
compiled graph draws fresh decisions at every step. ``'sample'`` decisions are a per-sample
mask drawn on the activations' device, so no block synchronises with the host either. Under
``DistributedDataParallel``, eager ``'block'`` needs ``find_unused_parameters=True`` (a dropped
branch's parameters get no gradient in that step); the device paths do not.

The drop rate of each block is also held in a 0-d int64 buffer, read by compiled graphs, so
:func:`set_stochastic_depth_drop_rate` (with the schedule :func:`stochastic_depth_drop_rate`,
the seed's ``drop_warmup``) changes it without recompiling.

Each block saves its rate, its position in its random stream and the seed in
``model.state_dict()``, so a run resumed from a checkpoint draws the decisions the
uninterrupted run draws.

timm's residual blocks (ResNet, ConvNeXt, ViT/DeiT, EfficientNet, RegNet) are built in once
timm is imported; other residual blocks plug in through :func:`register_stochastic_block` (and
leave through :func:`unregister_stochastic_block`).

Layout of this package, one job per module:

* :mod:`~functional.stochastic_depth.generators`: the private seeding and counter-based
  streams of the drop decisions (host and device, shared by the ranks or not).
* :mod:`~functional.stochastic_depth.layers`: the :class:`StochasticBlock` mixin and the
  torchvision blocks :class:`StochasticBottleneck` and :class:`StochasticBasicBlock`.
* :mod:`~functional.stochastic_depth.timm_blocks`: timm's blocks, made stochastic when timm
  is imported (timm stays optional).
* :mod:`~functional.stochastic_depth.registry`: :data:`STOCHASTIC_BLOCKS`,
  :func:`register_stochastic_block` and :func:`unregister_stochastic_block`.
* :mod:`~functional.stochastic_depth.transform`: :func:`apply_stochastic_depth`.
* :mod:`~functional.stochastic_depth.schedule`: :func:`stochastic_depth_drop_rate` and
  :func:`set_stochastic_depth_drop_rate`.
"""

# _DropGenerators is re-exported so that models pickled before this module became a package
# (whose stochastic blocks hold a functional.stochastic_depth._DropGenerators) still load.
from functional.stochastic_depth.generators import _DropGenerators as _DropGenerators
from functional.stochastic_depth.layers import (
    StochasticBasicBlock,
    StochasticBlock,
    StochasticBottleneck,
)
from functional.stochastic_depth.registry import (
    STOCHASTIC_BLOCKS,
    register_stochastic_block,
    unregister_stochastic_block,
)
from functional.stochastic_depth.schedule import (
    set_stochastic_depth_drop_rate,
    stochastic_depth_drop_rate,
)
from functional.stochastic_depth.transform import apply_stochastic_depth

__all__ = [
    "STOCHASTIC_BLOCKS",
    "StochasticBasicBlock",
    "StochasticBlock",
    "StochasticBottleneck",
    "apply_stochastic_depth",
    "register_stochastic_block",
    "set_stochastic_depth_drop_rate",
    "stochastic_depth_drop_rate",
    "unregister_stochastic_block",
]
