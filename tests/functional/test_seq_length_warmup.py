"""seq_length_warmup_length and apply_seq_length_warmup."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import BatchEncoding

import functional as F
from tests.functional import reference


@pytest.mark.parametrize("duration", [0.0, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("bounds", [(8, 1024, 8), (10, 100, 8), (1, 7, 3), (64, 64, 16)])
def test_schedule_follows_the_formula(duration, bounds) -> None:
    low, high, step = bounds
    previous = low
    for i in range(101):
        t = i / 100
        fraction = 1.0 if duration == 0 or t >= duration else t / duration
        expected = min(high, max(low, math.floor((low + (high - low) * fraction) / step) * step))
        got = F.seq_length_warmup_length(t, duration, low, high, step)
        assert got == expected and isinstance(got, int)
        assert low <= got <= high and got >= previous
        previous = got


def test_schedule_reaches_max_exactly_at_duration() -> None:
    assert F.seq_length_warmup_length(0.3) == 1024
    assert F.seq_length_warmup_length(0.0) == 8
    assert F.seq_length_warmup_length(0.15) == 512  # 8 + 1016 / 2 = 516, rounded down to 512
    assert F.seq_length_warmup_length(0.3 * 0.999) == 1016


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"progress": -0.1}, ValueError, "progress must be in"),
        ({"duration": 1.1}, ValueError, "duration must be in"),
        ({"min_seq_length": 0}, ValueError, "min_seq_length must be >= 1"),
        (
            {"min_seq_length": 32, "max_seq_length": 16},
            ValueError,
            "max_seq_length must be >= min_seq_length",
        ),
        ({"step_size": 0}, ValueError, "step_size must be >= 1"),
        ({"step_size": 8.0}, TypeError, "step_size must be an int"),
    ],
)
def test_schedule_rejects_bad_arguments(kwargs, error, match) -> None:
    args = {"progress": 0.5}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        F.seq_length_warmup_length(**args)


def _batch() -> dict:
    ids = torch.arange(2 * 10).view(2, 10)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(2, 10, dtype=torch.long),
        "embeds": torch.rand(2, 10, 4),
        "meta": "kept as is",
    }


@pytest.mark.parametrize("length", [1, 3, 4, 5, 9])
def test_truncate_keeps_the_first_positions(length) -> None:
    batch = _batch()
    out = F.apply_seq_length_warmup(batch, length)
    for key in ("input_ids", "attention_mask", "embeds"):
        assert torch.equal(out[key], batch[key][:, :length])
    assert out["meta"] == "kept as is"


@pytest.mark.parametrize("length", [1, 3, 4, 5, 9])
def test_split_makes_rows_of_the_current_length(length) -> None:
    batch = _batch()
    out = F.apply_seq_length_warmup(batch, length, truncate=False)
    for key in ("input_ids", "attention_mask", "embeds"):
        assert torch.equal(out[key], reference.seq_split(batch[key], length))
        assert out[key].shape[:2] == (2 * (10 // length), length)
        # contiguous whether or not length divides L: models .view() their labels
        assert out[key].is_contiguous()
        out[key].view(-1)


def test_length_at_least_l_leaves_tensors_alone_and_input_is_not_modified() -> None:
    batch = _batch()
    snapshot = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    for truncate in (True, False):
        out = F.apply_seq_length_warmup(batch, 10, truncate)
        assert all(out[k] is batch[k] for k in batch)
        F.apply_seq_length_warmup(batch, 3, truncate)
    assert batch.keys() == snapshot.keys()
    assert all(torch.equal(batch[k], snapshot[k]) for k in ("input_ids", "embeds"))


def test_hugging_face_batch_encoding_is_accepted() -> None:
    enc = BatchEncoding(
        {"input_ids": torch.arange(12).view(2, 6), "attention_mask": torch.ones(2, 6)}
    )
    out = F.apply_seq_length_warmup(enc, 4)
    assert out["input_ids"].shape == (2, 4) and out["attention_mask"].shape == (2, 4)


@pytest.mark.parametrize(
    "batch,length,error,match",
    [
        ({"labels": torch.arange(4)}, 2, ValueError, "must be \\(B, L, ...\\)"),
        ({"a": torch.zeros(2, 5), "b": torch.zeros(2, 6)}, 2, ValueError, "same length L"),
        ({"a": torch.zeros(2, 5)}, 0, ValueError, "curr_seq_len must be >= 1"),
        ([torch.zeros(2, 5)], 2, TypeError, "batch must be a mapping"),
    ],
)
def test_bad_arguments(batch, length, error, match) -> None:
    with pytest.raises(error, match=match):
        F.apply_seq_length_warmup(batch, length)


# preserve_end_of_sequence (Composer's option): the last real token survives truncation.


def _padded_batch(lengths: list[int], width: int, *, left: bool = False) -> dict:
    rows = len(lengths)
    ids = torch.arange(rows * width).view(rows, width) + 100
    mask = torch.zeros(rows, width, dtype=torch.long)
    for r, n in enumerate(lengths):
        if left:
            mask[r, width - n :] = 1
        else:
            mask[r, :n] = 1
    labels = torch.stack([ids, -ids], dim=-1)  # (B, L, 2): a tensor with trailing dims
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "name": "kept as is"}


def _reference_preserve(batch: dict, c: int) -> dict:
    """Composer's rule as a loop: truncate, then put each row's last real token at
    min(last, c - 1)."""
    out = {}
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor):
            out[key] = value
            continue
        rows = []
        for r in range(value.shape[0]):
            real = torch.nonzero(batch["attention_mask"][r]).flatten().tolist()
            row = value[r, :c].clone()
            if real:
                row[min(real[-1], c - 1)] = value[r, real[-1]]
            rows.append(row)
        out[key] = torch.stack(rows)
    return out


@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=5),
    c=st.integers(1, 11),
    left=st.booleans(),
)
def test_preserve_end_of_sequence_matches_the_loop(lengths, c, left) -> None:
    batch = _padded_batch(lengths, 12, left=left)
    got = F.apply_seq_length_warmup(batch, c, preserve_end_of_sequence=True)
    expected = _reference_preserve(batch, c)
    assert got["name"] == "kept as is"
    for key in ("input_ids", "attention_mask", "labels"):
        assert torch.equal(got[key], expected[key]), key
    for r, n in enumerate(lengths):  # what Composer's test checks, for right padding
        if n and not left:
            assert got["input_ids"][r, min(c, n) - 1] == batch["input_ids"][r, n - 1]


def test_preserve_end_of_sequence_leaves_the_input_and_short_rows_alone() -> None:
    batch = _padded_batch([3, 8], 8)
    before = {k: v.clone() for k, v in batch.items() if isinstance(v, torch.Tensor)}
    got = F.apply_seq_length_warmup(batch, 5, preserve_end_of_sequence=True)
    assert torch.equal(got["input_ids"][0], batch["input_ids"][0, :5])
    assert got["input_ids"][1, 4] == batch["input_ids"][1, 7]
    assert all(torch.equal(batch[k], v) for k, v in before.items())


@pytest.mark.parametrize(
    "batch,kwargs,match",
    [
        ({"input_ids": torch.ones(2, 6)}, {}, "attention_mask"),
        ({"input_ids": torch.ones(2, 6), "attention_mask": torch.ones(2, 6, 1)}, {}, r"\(B, L\)"),
        ({"input_ids": torch.ones(3, 6), "attention_mask": torch.ones(2, 6)}, {}, "batch size"),
        (
            {"input_ids": torch.ones(2, 6), "attention_mask": torch.ones(2, 6)},
            {"truncate": False},
            "truncate",
        ),
    ],
)
def test_preserve_end_of_sequence_refusals(batch, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        F.apply_seq_length_warmup(batch, 4, preserve_end_of_sequence=True, **kwargs)
