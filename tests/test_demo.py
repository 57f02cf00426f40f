"""`make demo`: the Fashion-MNIST loader and its validation split, the frontier arithmetic, the
runs, and the study run end to end on the real data at the smallest size (skipped, with the
reason, without them). The shared study machinery has its own tests in tests/test_study.py."""

from __future__ import annotations

import gzip
import json
import struct

import numpy as np
import pytest
import torch

from benchmarks import _demo_data as data_mod
from benchmarks import _study, demo
from benchmarks._demo_train import Config, Run
from benchmarks._study import frontier, merit_at, ratio_words, speedup, time_to_reach

FASHION = data_mod.DEFAULT_DIR


def _write_idx(path, array: np.ndarray, code: int = 0x08) -> None:
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with (gzip.open if path.suffix == ".gz" else open)(path, "wb") as f:
        f.write(header + array.tobytes())


def _fake_fashion(directory, n_train=300, n_test=100):
    rng = np.random.default_rng(0)
    for stem, n, shape in (
        ("train-images-idx3-ubyte", n_train, (28, 28)),
        ("t10k-images-idx3-ubyte", n_test, (28, 28)),
        ("train-labels-idx1-ubyte", n_train, ()),
        ("t10k-labels-idx1-ubyte", n_test, ()),
    ):
        high = 256 if shape else 10
        array = rng.integers(0, high, size=(n, *shape), dtype=np.uint8)
        _write_idx(directory / (stem + (".gz" if "train" in stem else "")), array)


def test_read_idx_reads_the_format_plain_and_gzipped(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        _write_idx(tmp_path / name, array)
        np.testing.assert_array_equal(data_mod.read_idx(tmp_path / name), array)
    big_endian = np.array([1, -2, 300], dtype=">i4")
    _write_idx(tmp_path / "b", big_endian, code=0x0C)
    np.testing.assert_array_equal(data_mod.read_idx(tmp_path / "b"), [1, -2, 300])


def test_read_idx_refuses_what_is_not_idx(tmp_path):
    (tmp_path / "x").write_bytes(b"PK\x03\x04rest")
    with pytest.raises(ValueError, match="not an IDX file"):
        data_mod.read_idx(tmp_path / "x")
    _write_idx(tmp_path / "y", np.zeros((2, 3), np.uint8))
    (tmp_path / "y").write_bytes((tmp_path / "y").read_bytes()[:-1])
    with pytest.raises(ValueError, match="data bytes for shape"):
        data_mod.read_idx(tmp_path / "y")


def test_validation_is_held_out_of_the_training_set_fixed_by_its_seed(tmp_path):
    _fake_fashion(tmp_path, n_train=300, n_test=100)
    data = data_mod.load_fashion_mnist(tmp_path)
    split = data.hold_out(60)
    again = data_mod.load_fashion_mnist(tmp_path).hold_out(60)
    assert (len(split.y_train), len(split.y_val), len(split.y_test)) == (240, 60, 100)
    assert torch.equal(split.x_val, again.x_val) and torch.equal(split.x_train, again.x_train)
    # every training image is in exactly one of the two splits
    rows = {tuple(x.flatten().tolist()) for x in data.x_train}
    train = {tuple(x.flatten().tolist()) for x in split.x_train}
    val = {tuple(x.flatten().tolist()) for x in split.x_val}
    assert train | val == rows and not train & val
    assert split.hold_out(10).y_val.shape == (10,)
    # subsetting keeps the validation split whole
    assert split.subset(100, 50).y_val.shape == (60,)
    with pytest.raises(ValueError, match="n_val must be in"):
        data.hold_out(300)


def test_data_dir_is_read_and_a_missing_one_falls_back_to_digits_saying_so(tmp_path):
    _fake_fashion(tmp_path)
    data = data_mod.load_data(tmp_path, install=False)
    assert data.name == "Fashion-MNIST" and data.note == ""
    assert data.x_train.shape == (300, 1, 28, 28) and data.x_test.shape == (100, 1, 28, 28)
    assert 0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1
    assert data.y_train.dtype == torch.long and int(data.y_train.max()) < 10
    empty = tmp_path / "empty"
    empty.mkdir()
    fallback = data_mod.load_data(empty, install=False)
    assert fallback.name == "scikit-learn digits" and fallback.x_train.shape[-2:] == (28, 28)
    assert "no Fashion-MNIST" in fallback.note and "Falling back" in fallback.note


def test_frontier_keeps_only_points_no_faster_point_beats():
    points = [(3.0, 0.80), (1.0, 0.70), (2.0, 0.65), (4.0, 0.90)]
    assert frontier(points, 0.1) == [(0.0, 0.1), (1.0, 0.70), (3.0, 0.80), (4.0, 0.90)]
    curve = frontier(points, 0.1)
    assert time_to_reach(curve, 0.75) == pytest.approx(2.0)
    assert time_to_reach(curve, 0.4) == pytest.approx(0.5)  # from (0, chance)
    assert time_to_reach(curve, 0.95) is None
    assert merit_at(curve, 3.5) == pytest.approx(0.85)
    assert merit_at(curve, 10.0) == pytest.approx(0.90)  # flat after the last point


def test_speedup_is_read_at_the_best_accuracy_both_reach_and_worded_both_ways():
    base = frontier([(2.0, 0.80), (4.0, 0.85), (8.0, 0.88)], 0.1)
    fast = frontier([(1.0, 0.82), (2.0, 0.86), (4.0, 0.87)], 0.1)
    s = speedup(base, fast)
    assert s["merit"] == pytest.approx(0.87)
    # baseline: 4 + 4 * (0.87 - 0.85) / 0.03 = 6.667 s; recipe: 4 s
    assert s["ratio"] == pytest.approx((4 + 4 * 2 / 3) / 4)
    slow = speedup(fast, base)
    assert slow["ratio"] == pytest.approx(1 / s["ratio"])
    assert (
        ratio_words(s["ratio"]) == "1.67x faster" and ratio_words(slow["ratio"]) == "1.67x slower"
    )


@pytest.fixture
def tiny_data(tmp_path):
    _fake_fashion(tmp_path, n_train=256, n_test=64)
    return data_mod.load_fashion_mnist(tmp_path)


def test_each_budget_has_its_own_full_schedule_and_the_same_data_order(tiny_data):
    cfg = Config(batch_size=32, ref_steps=16)
    short = Run("baseline", (), 0.5, tiny_data, cfg, seed=3)
    full = Run("recipe", ("label_smoothing", "mixup"), 1.0, tiny_data, cfg)
    assert (short.total_steps, full.total_steps) == (8, 16)
    assert short.scheduler.total_steps == 8 and full.scheduler.total_steps == 16
    lrs = []
    while not short.done:
        short.advance(1)
        lrs.append(short.base_opt.param_groups[0]["lr"])
    assert max(lrs) == pytest.approx(cfg.lr, rel=0.05) and lrs[-1] < cfg.lr / 100
    # the algorithms draw from their own generator: the data order stays the baseline's,
    # across epochs (8 steps here) too
    seen: dict[str, list[torch.Tensor]] = {}
    for run in (
        Run("baseline", (), 1.0, tiny_data, cfg),
        full,
        Run("x", (), 1.0, tiny_data, cfg, seed=1),
    ):
        labels = seen.setdefault(run.point.arm, [])
        original = run._batch

        def recording(original=original, labels=labels):
            x, y = original()
            labels.append(y)
            return x, y

        run._batch = recording
        run.advance(12)
    assert len(seen["recipe"]) == 12
    for a, b in zip(seen["baseline"], seen["recipe"], strict=True):
        assert torch.equal(a, b)
    # another seed, another order
    assert not all(torch.equal(a, b) for a, b in zip(seen["baseline"], seen["x"], strict=True))


def test_interleaving_changes_no_result(tiny_data):
    """Two runs advanced in turns end exactly where each would alone (same computation)."""
    cfg = Config(batch_size=32, ref_steps=12)
    alone = Run("baseline", ("selective_backprop", "ema"), 1.0, tiny_data, cfg)
    alone.advance(100)
    pair = [Run("baseline", ("selective_backprop", "ema"), 1.0, tiny_data, cfg),
            Run("recipe", ("channels_last", "label_smoothing"), 1.0, tiny_data, cfg)]  # fmt: skip
    points = _study.interleave(pair, progress=False, chunk=5)
    for a, b in zip(
        alone.model.state_dict().values(), pair[0].model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    assert pair[0].step == 12 and all(p.cpu_s > 0 and p.wall_s > 0 for p in points)
    assert points[0].score == alone.evaluate()


def test_validation_runs_read_the_validation_split_only(tiny_data):
    data = tiny_data.hold_out(64)
    run = Run("baseline", (), 1.0, data, Config(batch_size=32, ref_steps=2), split="val")
    run.advance(2)
    run.evaluate()
    assert set(run.point.extra) >= {"val_accuracy"} and "test_accuracy" not in run.point.extra
    with pytest.raises(ValueError, match="split must be"):
        Run("baseline", (), 1.0, data, Config(batch_size=32, ref_steps=2), split="train")


@pytest.mark.skipif(
    not data_mod.has_fashion_mnist(FASHION),
    reason=f"Fashion-MNIST is not installed in {FASHION} (apt-get install dataset-fashion-mnist)",
)
@pytest.mark.slow
def test_demo_study_on_fashion_mnist(tmp_path, capsys):
    """The real data, the smallest size: every run, the claims, the plot, the JSON."""
    assert demo.main(["--smoke", "--no-progress", "--no-install",
                      "--output", str(tmp_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Fashion-MNIST: 1,024 training / 10,000 validation" in out
    assert "machine: " in out and "torch " in out and "load average" in out
    assert "recipe against baseline:" in out and "(one seed: no interval)" in out
    assert (tmp_path / "frontiers.png").stat().st_size > 10_000
    record = json.loads((tmp_path / "study.json").read_text())
    points = record["points"]
    # the three arms at the same four budgets, 2x included, each its own schedule
    by_arm = {arm: [p["steps"] for p in points if p["arm"] == arm] for arm in demo.ARMS}
    assert by_arm["baseline"] == by_arm["channels_last"] == by_arm["recipe"]
    assert len(set(by_arm["baseline"])) == 4 and max(p["budget"] for p in points) == 2.0
    assert all(p["cpu_s"] > 0 and 0 <= p["score"] <= 1 for p in points)
    assert all("test_accuracy" in p["extra"] and "val_accuracy" not in p["extra"] for p in points)
    assert record["machine"]["torch"] == torch.__version__
    assert [(c["base"], c["other"]) for c in record["comparisons"]][:2] == [
        ("baseline", "recipe"), ("channels_last", "recipe")]  # fmt: skip


def test_demo_refuses_unknown_algorithms_and_bad_budgets(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--recipe", "mixup,nonesuch"])
    assert "nonesuch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        demo.main(["--budgets", "0.5"])
    assert "at least two" in capsys.readouterr().err
