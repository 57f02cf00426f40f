"""The grouped AGC schedule of eager accelerators, run on CPU tensors against the per-tensor
one (``test_gradient_clipping.py`` runs every public case through every schedule)."""

from __future__ import annotations

import pytest
import torch
import torchvision

import functional.gradient_clipping as gradient_clipping


def test_rounds_split_between_rows_and_keep_a_long_row_alone():
    rounds = gradient_clipping._rounds([(4, 3), (1, 10), (2, 2), (0, 5), (1, 0)], cap=7)
    assert rounds == [[(0, 0, 2)], [(0, 2, 2)], [(1, 0, 1)], [(2, 0, 2), (4, 0, 1)]]
    assert gradient_clipping._rounds([], cap=7) == []


@pytest.mark.parametrize("scratch_bytes", [32 * 2**20, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_grouped_schedule_equals_the_per_tensor_one(monkeypatch, scratch_bytes, dtype):
    """The grouped schedule (eager accelerators) gives the per-tensor batched one's result to
    float tolerance, on CPU tensors: a real ResNet's parameters with channels-last, transposed
    (neither layout: the per-tensor way), empty and 0-D tensors among them, in one or many
    rounds."""
    monkeypatch.setattr(gradient_clipping, "_SCRATCH_BYTES", scratch_bytes)
    gen = torch.Generator().manual_seed(3)
    model = torchvision.models.resnet18(num_classes=10).to(dtype)
    ws = [p.detach() for p in model.parameters()]
    ws[0] = ws[0].to(memory_format=torch.channels_last)
    ws += [
        torch.randn(7, 5, generator=gen, dtype=dtype).t(),
        torch.empty(0, 4, dtype=dtype),
        torch.empty(3, 0, dtype=dtype),
        torch.tensor(0.5, dtype=dtype),
    ]
    grads = [(torch.randn(w.shape, generator=gen) * 0.3).to(dtype) for w in ws]
    grads[0] = grads[0].to(memory_format=torch.channels_last)
    grads[-4] = grads[-4].t().contiguous().t()
    grouped = [g.clone(memory_format=torch.preserve_format) for g in grads]
    batched = [g.clone(memory_format=torch.preserve_format) for g in grads]
    acc = gradient_clipping.accumulation_dtype(dtype)
    total_grouped = gradient_clipping._clip_grouped_(ws, grouped, 0.01, acc)
    total_batched = gradient_clipping._clip_batched_(ws, batched, 0.01, acc)
    assert total_grouped.dtype == total_batched.dtype == acc
    torch.testing.assert_close(total_grouped, total_batched, rtol=1e-5, atol=0)
    changed = 0
    for g, a, b in zip(grads, grouped, batched, strict=True):
        assert a.stride() == g.stride()
        tol = {"rtol": 1e-2, "atol": 1e-6} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(a, b, **tol)
        changed += int(not torch.equal(a, g))
    assert changed > 20  # the threshold clips most units
