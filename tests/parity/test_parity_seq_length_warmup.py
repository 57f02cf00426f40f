"""Sequence-length warmup against Composer 0.32.1's ``set_batch_sequence_length``: truncation
with ``preserve_end_of_sequence`` in our words, and side by side with Composer on right-padded
batches, where the two agree (skipped without Composer)."""

from __future__ import annotations

import copy

import pytest
import torch

import functional as F


def _batch(lengths: list[int], width: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (len(lengths), width), generator=g)
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


@pytest.mark.parametrize("c", [3, 8, 15])
def test_last_real_token_is_the_last_kept_one(c) -> None:
    lengths = [16, 10, 4, 1]
    before = _batch(lengths)
    after = F.apply_seq_length_warmup(before, c, preserve_end_of_sequence=True)
    for key in before:
        assert after[key].shape == (4, c)
        for r, n in enumerate(lengths):
            assert after[key][r, min(c, n) - 1] == before[key][r, n - 1]
            assert torch.equal(after[key][r, : min(c, n) - 1], before[key][r, : min(c, n) - 1])


@pytest.mark.parametrize("c", [3, 8, 15, 16, 20])
@pytest.mark.parametrize("preserve", [True, False])
def test_side_by_side_with_composer(c, preserve) -> None:
    composer_slw = pytest.importorskip("composer.algorithms.seq_length_warmup.seq_length_warmup")
    batch = _batch([16, 10, 4, 1])
    theirs = composer_slw.set_batch_sequence_length(copy.deepcopy(batch), c, True, preserve)
    ours = F.apply_seq_length_warmup(batch, c, preserve_end_of_sequence=preserve)
    assert set(ours) == set(theirs)
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
