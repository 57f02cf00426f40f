"""Stateless training speed-up algorithms: ``import functional as F``.

Tensor ops (MixUp, CutMix, Cutout, ColOut, blur, resizing, label smoothing, selective backprop,
sequence-length warmup), schedules, training-state helpers (EMA, SAM, LR-schedule scaling,
gradient clipping, SWA) and in-place model transforms built on the :mod:`surgery` engine.
"""

from functional.blurpool import blur_2d, blurmax_pool2d
from functional.colout import colout, colout_batch
from functional.cutmix import cutmix_batch
from functional.cutout import cutout
from functional.ema import compute_ema, ema_smoothing
from functional.label_smoothing import smooth_labels
from functional.mixup import gen_interpolation_lambda, mixup_batch
from functional.progressive_resizing import progressive_resizing_scale, resize_inputs
from functional.selective_backprop import select_using_loss, should_selective_backprop
from functional.seq_length_warmup import apply_seq_length_warmup, seq_length_warmup_length

__all__: list[str] = [
    "apply_seq_length_warmup",
    "blur_2d",
    "blurmax_pool2d",
    "colout",
    "colout_batch",
    "compute_ema",
    "cutmix_batch",
    "cutout",
    "ema_smoothing",
    "gen_interpolation_lambda",
    "mixup_batch",
    "progressive_resizing_scale",
    "resize_inputs",
    "select_using_loss",
    "seq_length_warmup_length",
    "should_selective_backprop",
    "smooth_labels",
]
