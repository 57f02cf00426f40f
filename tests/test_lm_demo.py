"""`make demo-lm`: the language-model study on the Python documentation's sources (Debian's
python3.11-doc): the split by file, the runs' shared batches, bits per byte, and the smoke
study end to end on the real text (skipped, with the install command, without the package)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import _lm_data, demo_lm
from benchmarks._lm_train import LMConfig, LMRun

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(
    not _lm_data.has_python_doc(),
    reason=f"{_lm_data.DEFAULT_DIR} is missing: {_lm_data.INSTALL_COMMAND}",
)
TINY = LMConfig(
    width=16,
    layers=1,
    heads=2,
    context=32,
    short=16,
    batch=2,
    ref_steps=4,
    eval_bytes=256,
    eval_lengths=(8, 16, 32),
)


@pytest.fixture(scope="module")
def text():
    return _lm_data.load_text(install=False)


def test_the_split_is_by_whole_files_fixed_and_disjoint(text):
    again = _lm_data.load_text(install=False)
    assert torch.equal(text.val, again.val) and torch.equal(text.test, again.test)
    n_files = sum(1 for _ in _lm_data.DEFAULT_DIR.rglob("*.txt"))
    assert sum(text.files) == n_files and text.files[1] > 0 and text.files[2] > 0
    sizes = len(text.train) + len(text.val) + len(text.test)
    assert sizes == sum(p.stat().st_size for p in _lm_data.DEFAULT_DIR.rglob("*.txt"))
    assert 0.6 < len(text.train) / sizes < 0.95


def test_every_arm_sees_the_same_bytes_cut_to_its_length(text):
    plain = LMRun("baseline", (), 1.0, text, TINY, seed=5)
    alibi = LMRun("recipe", ("alibi",), 1.0, text, TINY, seed=5)
    a, b = plain._batch(), alibi._batch()
    assert a.shape == (2, 32) and b.shape == (4, 16) and torch.equal(a.reshape(-1), b.reshape(-1))
    warm = LMRun("recipe", ("alibi", "seq_length_warmup"), 1.0, text, TINY, seed=5)
    assert warm._batch().shape == (4, 16)  # min 16 bytes at the start: the short length here
    with pytest.raises(ValueError, match="train_length must divide"):
        LMRun("x", (), 1.0, text, TINY, train_length=12)


def test_an_untrained_model_scores_near_8_bits_per_byte(text):
    run = LMRun("baseline", (), 1.0, text, TINY)
    assert abs(run.bits_per_byte(text.val, 32) - 8.0) < 0.5
    # the same number a direct computation gives
    ids = text.val[:256].long().reshape(-1, 32)
    with torch.no_grad():
        logits = run.model(input_ids=ids).logits[:, :-1]
    nats = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
    assert run.bits_per_byte(text.val, 32) == pytest.approx(float(nats) / math.log(2), rel=1e-5)


@pytest.mark.slow
def test_lm_study_smoke_on_the_real_text(tmp_path, capsys):
    assert (
        demo_lm.main(["--smoke", "--no-progress", "--no-install", "--output", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "Python 3.11 documentation sources" in out and "recipe against baseline" in out
    assert "ALiBi extrapolation (L = 64)" in out and "test bits per byte" in out
    record = json.loads((tmp_path / "lm_study.json").read_text())
    arms = [p["arm"] for p in record["points"]]
    assert arms.count("baseline") == arms.count("recipe") == len(demo_lm.BUDGETS)
    assert all(0 < p["score"] < 9 for p in record["points"])
    assert {p["arm"] for p in record["extrapolation"]} == {
        "alibi at L",
        "learned at L",
        "learned at 4L",
    }
    assert (tmp_path / "lm_frontiers.png").stat().st_size > 10_000
