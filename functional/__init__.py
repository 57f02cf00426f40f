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
from functional.gated_linear_units import GatedLinear, apply_gated_linear_units

__all__: list[str] = []
__all__ += [
    "AlibiBias",
    "AlibiContext",
    "AlibiMultiheadAttention",
    "DisabledPositionEmbedding",
    "alibi_bias",
    "alibi_registry",
    "alibi_slopes",
    "apply_alibi",
    "register_alibi",
    "unregister_alibi",
]
__all__ += ["GatedLinear", "apply_gated_linear_units"]
