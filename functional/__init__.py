"""Stateless training speed-up algorithms: ``import functional as F``.

Tensor ops (MixUp, CutMix, Cutout, ColOut, blur, resizing, label smoothing, selective backprop,
sequence-length warmup), schedules, training-state helpers (EMA, SAM, LR-schedule scaling,
gradient clipping, SWA) and in-place model transforms built on the :mod:`surgery` engine.
"""

from functional.alibi import (
    AlibiBias,
    AlibiContext,
    AlibiMultiheadAttention,
    DisabledPositionEmbedding,
    alibi_bias,
    alibi_registry,
    alibi_slopes,
    apply_alibi,
    register_alibi,
    unregister_alibi,
)
from functional.blurpool import (
    BlurConv2d,
    BlurMaxPool2d,
    BlurPool2d,
    apply_blurpool,
    blur_2d,
    blurmax_pool2d,
)
from functional.channels_last import apply_channels_last
from functional.colout import colout, colout_batch
from functional.cutmix import cutmix_batch
from functional.cutout import cutout
from functional.ema import compute_ema, ema_smoothing, swap_ema_weights, use_ema_weights
from functional.factorization import (
    FactorizedConv2d,
    FactorizedLinear,
    LowRankSolution,
    apply_factorization,
    factorize_conv2d,
    factorize_matrix,
)
from functional.gated_linear_units import (
    GatedLinear,
    apply_gated_linear_units,
    glu_block_registry,
    register_glu_block,
    unregister_glu_block,
)
from functional.ghost_batchnorm import (
    GhostBatchNorm1d,
    GhostBatchNorm2d,
    GhostBatchNorm3d,
    GhostBatchNormAct2d,
    apply_ghost_batchnorm,
)
from functional.gradient_clipping import apply_gradient_clipping
from functional.gyro_dropout import GyroDropoutLayer, apply_gyro_dropout
from functional.label_smoothing import smooth_labels
from functional.layer_freezing import freeze_layers
from functional.low_precision_norm import (
    LowPrecisionGroupNorm,
    LowPrecisionLayerNorm,
    LowPrecisionLayerNorm2d,
    apply_low_precision_groupnorm,
    apply_low_precision_layernorm,
)
from functional.mixup import gen_interpolation_lambda, mixup_batch
from functional.progressive_resizing import progressive_resizing_scale, resize_inputs
from functional.sam import SAMOptimizer
from functional.scale_schedule import scale_scheduler
from functional.selective_backprop import select_using_loss, should_selective_backprop
from functional.seq_length_warmup import apply_seq_length_warmup, seq_length_warmup_length
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
    set_stochastic_depth_drop_rate,
    stochastic_depth_drop_rate,
    unregister_stochastic_block,
)
from functional.swa import SWA
from functional.weight_standardization import WeightStandardizer, apply_weight_standardization

__all__: list[str] = [
    "STOCHASTIC_BLOCKS",
    "SWA",
    "AlibiBias",
    "AlibiContext",
    "AlibiMultiheadAttention",
    "BlurConv2d",
    "BlurMaxPool2d",
    "BlurPool2d",
    "DisabledPositionEmbedding",
    "FactorizedConv2d",
    "FactorizedLinear",
    "GatedLinear",
    "GhostBatchNorm1d",
    "GhostBatchNorm2d",
    "GhostBatchNorm3d",
    "GhostBatchNormAct2d",
    "GyroDropoutLayer",
    "LowPrecisionGroupNorm",
    "LowPrecisionLayerNorm",
    "LowPrecisionLayerNorm2d",
    "LowRankSolution",
    "SAMOptimizer",
    "SqueezeExcite2d",
    "SqueezeExciteConv2d",
    "StochasticBasicBlock",
    "StochasticBlock",
    "StochasticBottleneck",
    "WeightStandardizer",
    "alibi_bias",
    "alibi_registry",
    "alibi_slopes",
    "apply_alibi",
    "apply_blurpool",
    "apply_channels_last",
    "apply_factorization",
    "apply_gated_linear_units",
    "apply_ghost_batchnorm",
    "apply_gradient_clipping",
    "apply_gyro_dropout",
    "apply_low_precision_groupnorm",
    "apply_low_precision_layernorm",
    "apply_se",
    "apply_seq_length_warmup",
    "apply_squeeze_excite",
    "apply_stochastic_depth",
    "apply_weight_standardization",
    "blur_2d",
    "blurmax_pool2d",
    "colout",
    "colout_batch",
    "compute_ema",
    "cutmix_batch",
    "cutout",
    "ema_smoothing",
    "factorize_conv2d",
    "factorize_matrix",
    "freeze_layers",
    "gen_interpolation_lambda",
    "glu_block_registry",
    "mixup_batch",
    "progressive_resizing_scale",
    "register_alibi",
    "register_glu_block",
    "register_stochastic_block",
    "resize_inputs",
    "scale_scheduler",
    "select_using_loss",
    "seq_length_warmup_length",
    "set_stochastic_depth_drop_rate",
    "should_selective_backprop",
    "smooth_labels",
    "stochastic_depth_drop_rate",
    "swap_ema_weights",
    "unregister_alibi",
    "unregister_glu_block",
    "unregister_stochastic_block",
    "use_ema_weights",
]
