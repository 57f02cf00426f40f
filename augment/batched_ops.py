"""The import path ``augment.batched_ops``, kept: the batched kernels live in
:mod:`augment.batched.ops`; this module gives its public names (``__all__``) under the old path."""

from augment.batched import ops as _ops
from augment.batched.ops import *  # noqa: F403  (the same objects, not copies)

__all__ = list(_ops.__all__)
