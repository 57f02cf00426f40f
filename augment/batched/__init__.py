r"""AugMix and RandAugment on batches of tensors, every sample drawing its own chain.

The algorithms of :class:`~augment.AugMix` and :class:`~augment.RandAugment`, with the same
parameters and the same thirteen operations at the same level scaling (:mod:`augment.primitives`),
applied to an ``N x C x H x W`` batch (``torch.uint8`` or floating point in [0, 1], any device)
after the data loader, where a GPU does the work. Each sample draws its own operations, levels,
directions, chain depths and mixing weights, as the PIL transforms do per image: every sample's
draws have the PIL transform's distribution. (torchvision v2's AugMix and RandAugment apply one
chain to a whole batch.)

The draws across a batch are balanced: in every layer of the chains the rows (samples, or
AugMix's chains) take ``K c`` slots, ``c = ceil(rows / K)`` for each of the ``K`` operations of
the set, through one random permutation. A row's operation is uniform over the set and
independent of its level, direction and other layers, but an operation is drawn by at most ``c``
rows of a layer (sampling without replacement from ``c`` copies of each operation, where the PIL
transform samples each image independently); AugMix's chain depths in {1, 2, 3} are balanced the
same way (at most ``ceil(rows / 3)`` chains each), and a layer has slots for the chains still
running only. This is what lets the device path know every operation's group size on the host.

How it runs, two paths with the same draws and the same values (tested):

* On accelerators and under ``torch.compile``: per layer, one gather of the slots, the
  operations in the order of three stages, each stage once on its own rows (a table lookup
  for posterize, solarize, brightness, autocontrast and equalize; a blend for contrast,
  color and sharpness; Pillow's fixed-point warp for the geometric ones), one write back;
  then the mix in float32. Fixed shapes, no value read on the host, no Python loop over the
  samples: it compiles once under ``torch.compile`` and never synchronises a GPU. Counted
  without a GPU (``python -m benchmarks device``), 64 x 3 x 224 x 224 uint8: AugMix (width
  3) 281 kernel launches and 2.5 GB of memory traffic (129x the batch read and written
  once; torchvision v2's one chain for the whole batch: about 120x), RandAugment (depth 2)
  96 launches and 0.68 GB (35x); no syncs.
* On CPU in eager mode (``x`` on the CPU, not compiling; the generator is then a CPU one):
  :func:`augment.batched.ops.apply_grouped`, which reads the drawn operation indices (CPU
  tensors, host values already: nothing waits on a device), sorts the samples of each layer
  by operation (one copy of the batch) and applies each operation to its own slice of samples
  only, on uint8, in groups of samples of about 8 M values, AugMix's chains counted
  (``augment.batched.paths.GROUPED_CHUNK``): one operation's work per sample, as in the PIL
  path. The point operations and the brightness and contrast blends apply their tables'
  formulas to the levels of their slice (a table lookup for equalize only: torch's is
  single-threaded on CPU). Still no Python loop over the samples (loops over the layers and
  the at most thirteen operations).

Input: ``torch.uint8`` levels, or floating point in [0, 1]; a float batch outside [0, 1] (levels
0..255 as floats, a normalized batch) is an error (checked on the CPU at once, on accelerators
by a device-side assert that never makes the host wait; not under ``torch.compile``). A
channels_last batch comes back channels_last.

Per-op results equal the PIL primitives' (see :mod:`augment.batched.ops`).

Randomness comes only from ``generator`` (a ``torch.Generator`` on the batch's device; ``None``:
torch's global generator). ``torch.compile`` cannot trace a ``torch.Generator``: compiled code
uses ``generator=None`` (seed with ``torch.manual_seed``).

Layout of this package, one job per module:

* :mod:`~augment.batched.transforms`: the public functions and modules, their argument checks.
* :mod:`~augment.batched.ops`: the thirteen operations as deterministic batched kernels with
  per-sample parameters, and the batch checks and level conversions.
* :mod:`~augment.batched.plan`: the per-sample parameters of the operations (the PIL level
  scaling, per sample).
* :mod:`~augment.batched.stages`: the stages (one family of operations each: table lookups,
  blends, warps) and the formulas both paths share.
* :mod:`~augment.batched.grouped`: the eager CPU path, each operation on its own sorted slice
  of samples, in groups that stay in the cache.
* :mod:`~augment.batched.slots`: the balanced slot draws and the device path's layers, each
  operation on its own slots.
* :mod:`~augment.batched.device`: the device path's plan and its three stages per layer (a
  table lookup, a blend and a warp).
* :mod:`~augment.batched.paths`: the draws and the choice between the two paths.

Example (a training loop):
    >>> import torch
    >>> import augment
    >>> aug = augment.BatchAugMix(severity=3, width=3, generator=torch.Generator().manual_seed(0))
    >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> loader = [(torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8), torch.arange(4))]
    >>> for x, y in loader:
    ...     x = aug(x)  # on a GPU: aug(x.cuda(non_blocking=True)), generator on "cuda"
    ...     loss = torch.nn.functional.cross_entropy(model(x.float() / 255), y)
    ...     opt.zero_grad()
    ...     loss.backward()
    ...     opt.step()
    >>> x.shape, x.dtype
    (torch.Size([4, 3, 8, 8]), torch.uint8)
"""

from augment.batched.transforms import (
    BatchAugMix,
    BatchRandAugment,
    batch_augment_and_mix,
    batch_randaugment,
)

__all__ = ["BatchAugMix", "BatchRandAugment", "batch_augment_and_mix", "batch_randaugment"]
