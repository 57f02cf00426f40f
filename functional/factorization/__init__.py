"""Low-rank factorization of convolutions and linear layers.

A ``k×k`` convolution with ``C_in → C_out`` channels becomes a ``k×k`` convolution to ``r``
channels followed by a ``1×1`` convolution to ``C_out``; a linear layer ``d_in → d_out`` becomes
two linear layers through ``r`` features. :func:`apply_factorization` starts the factors from
the truncated SVD of the original weight, split evenly (:math:`U_r\\sqrt{S_r}` and
:math:`\\sqrt{S_r}V_r^\\top`), the best rank-``r`` layer in Frobenius norm (Eckart–Young) rather
than a random re-initialisation. From data, :func:`factorize_matrix` and
:func:`factorize_conv2d` (Composer's functions) give the factors that best reproduce a layer's
outputs on sample inputs, and ``set_rank`` on a factorized layer lowers its rank that way.

Modules, one job each:

* :mod:`~functional.factorization.solve`: the low-rank solutions (weight space and output
  space) and :class:`LowRankSolution`;
* :mod:`~functional.factorization.layers`: :class:`FactorizedConv2d`, :class:`FactorizedLinear`;
* :mod:`~functional.factorization.transform`: :func:`apply_factorization` and the layers it
  leaves dense (tied weights, weights read by the parent's ``forward``).
"""

from functional.factorization.layers import FactorizedConv2d, FactorizedLinear
from functional.factorization.solve import LowRankSolution, factorize_conv2d, factorize_matrix
from functional.factorization.transform import apply_factorization

__all__ = [
    "FactorizedConv2d",
    "FactorizedLinear",
    "LowRankSolution",
    "apply_factorization",
    "factorize_conv2d",
    "factorize_matrix",
]
