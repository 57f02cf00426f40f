"""Exponential moving average of model weights (Polyak averaging; Izmailov et al. 2018 for SWA).

An EMA copy of the weights, evaluated instead of the trained weights, usually generalises
better; see Tarvainen and Valpola, `Mean teachers are better role models
<https://arxiv.org/abs/1703.01780>`_ (2017) and Kaddour et al., `Stop Wasting My Time!
<https://arxiv.org/abs/2209.14981>`_ (2022).

Layout of this package, one job per module:

* :mod:`~functional.ema.smoothing`: :func:`ema_smoothing` (half-lives and time strings).
* :mod:`~functional.ema.pairing`: the private pairing of the model's tensors with the EMA's
  (module trees, state dicts, DDP/FSDP2 shards), derived on every call.
* :mod:`~functional.ema.update`: the update :func:`compute_ema`.
* :mod:`~functional.ema.rounding`: the private stochastic rounding of low-precision EMAs.
* :mod:`~functional.ema.swap`: :func:`swap_ema_weights` and :func:`use_ema_weights`.
"""

from functional.ema.smoothing import ema_smoothing
from functional.ema.swap import swap_ema_weights, use_ema_weights
from functional.ema.update import compute_ema

__all__ = ["compute_ema", "ema_smoothing", "swap_ema_weights", "use_ema_weights"]
