"""seq_length_warmup_length and apply_seq_length_warmup."""

from __future__ import annotations

import math

import pytest
import torch
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
