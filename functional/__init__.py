"""Stateless training speed-up algorithms: ``import functional as F``.

Tensor ops (MixUp, CutMix, Cutout, ColOut, blur, resizing, label smoothing, selective backprop,
sequence-length warmup), schedules, training-state helpers (EMA, SAM, LR-schedule scaling,
gradient clipping, SWA) and in-place model transforms built on the :mod:`surgery` engine.
"""

from functional.blurpool import BlurConv2d, BlurMaxPool2d, BlurPool2d, apply_blurpool
from functional.channels_last import apply_channels_last
from functional.factorization import FactorizedConv2d, FactorizedLinear, apply_factorization
from functional.ghost_batchnorm import (
    GhostBatchNorm1d,
    GhostBatchNorm2d,
    GhostBatchNorm3d,
    apply_ghost_batchnorm,
)
from functional.layer_freezing import freeze_layers
from functional.low_precision_norm import (
    LowPrecisionGroupNorm,
    LowPrecisionLayerNorm,
    apply_low_precision_groupnorm,
    apply_low_precision_layernorm,
)
from functional.squeeze_excite import (
    SqueezeExcite2d,
    SqueezeExciteConv2d,
    apply_se,
    apply_squeeze_excite,
)
from functional.stochastic_depth import (
    STOCHASTIC_BLOCKS,
    StochasticBasicBlock,
    StochasticBlock,
    StochasticBottleneck,
    apply_stochastic_depth,
    register_stochastic_block,
)
from functional.weight_standardization import WeightStandardizer, apply_weight_standardization

__all__: list[str] = []
__all__ += ["BlurConv2d", "BlurMaxPool2d", "BlurPool2d", "apply_blurpool"]
__all__ += ["apply_channels_last"]
__all__ += ["FactorizedConv2d", "FactorizedLinear", "apply_factorization"]
__all__ += ["GhostBatchNorm1d", "GhostBatchNorm2d", "GhostBatchNorm3d", "apply_ghost_batchnorm"]
__all__ += ["freeze_layers"]
__all__ += [
    "LowPrecisionGroupNorm",
    "LowPrecisionLayerNorm",
    "apply_low_precision_groupnorm",
    "apply_low_precision_layernorm",
]
__all__ += ["SqueezeExcite2d", "SqueezeExciteConv2d", "apply_se", "apply_squeeze_excite"]
__all__ += [
    "STOCHASTIC_BLOCKS",
    "StochasticBasicBlock",
    "StochasticBlock",
    "StochasticBottleneck",
    "apply_stochastic_depth",
    "register_stochastic_block",
]
__all__ += ["WeightStandardizer", "apply_weight_standardization"]
