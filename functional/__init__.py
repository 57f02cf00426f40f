"""Stateless training speed-up algorithms: ``import functional as F``.

Tensor ops (MixUp, CutMix, Cutout, ColOut, blur, resizing, label smoothing, selective backprop,
sequence-length warmup), schedules, training-state helpers (EMA, SAM, LR-schedule scaling,
gradient clipping, SWA) and in-place model transforms built on the :mod:`surgery` engine.
"""

from functional.gradient_clipping import apply_gradient_clipping
from functional.sam import SAMOptimizer
from functional.scale_schedule import scale_scheduler
from functional.swa import SWA

__all__: list[str] = [
    "SWA",
    "SAMOptimizer",
    "apply_gradient_clipping",
    "scale_scheduler",
]
