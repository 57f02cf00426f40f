"""Stateless training speed-up algorithms: ``import functional as F``.

Tensor ops (MixUp, CutMix, Cutout, ColOut, blur, resizing, label smoothing, selective backprop,
sequence-length warmup), schedules, training-state helpers (EMA, SAM, LR-schedule scaling,
gradient clipping, SWA) and in-place model transforms built on the :mod:`surgery` engine.
"""

from functional.alibi import (
    alibi_bias,
    alibi_registry,
    alibi_slopes,
    AlibiBias,
    AlibiContext,
    AlibiMultiheadAttention,
    apply_alibi,
    DisabledPositionEmbedding,
    register_alibi,
    unregister_alibi,
)
from functional.gated_linear_units import apply_gated_linear_units, GatedLinear
from functional.gradient_clipping import apply_gradient_clipping
from functional.sam import SAMOptimizer
from functional.scale_schedule import scale_scheduler
from functional.swa import SWA

__all__: list[str] = [
    "alibi_bias",
    "alibi_registry",
    "alibi_slopes",
    "AlibiBias",
    "AlibiContext",
    "AlibiMultiheadAttention",
    "apply_alibi",
    "apply_gated_linear_units",
    "apply_gradient_clipping",
    "DisabledPositionEmbedding",
    "GatedLinear",
    "register_alibi",
    "SAMOptimizer",
    "scale_scheduler",
    "SWA",
    "unregister_alibi",
]
