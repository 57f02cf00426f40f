"""Batch and label ops on the device path: no host reads, compile once, compiled equals eager.

For every per-step op (mixup_batch, gen_interpolation_lambda, cutmix_batch, cutout,
colout_batch, colout, smooth_labels, resize_inputs in both modes, select_using_loss,
apply_seq_length_warmup):

(a) an eager call inside ``no_host_reads()`` passes (the only read allowed is the CPU content
    check in ``check_values``);
(b) ``torch.compile(fullgraph=True)`` builds one graph over several calls with fresh random
    values and, where the op takes them, new scalars as 0-d tensors. Python floats are
    symbolic under dynamo only from the second value on (dynamo's "automatic dynamic": the
    first graph treats the float as a constant, the second generalises), so with Python floats
    the contract is at most two graphs over many values (:func:`_at_most_two_graphs`); what
    changes an output shape (a resize scale that changes floor(H·s), int(B·keep)) is allowed
    to recompile and is tested to do so only then;
(c) the compiled result equals the eager one: with ``aot_eager`` the random ops run the same
    ATen kernels in the same order, so the same ``torch.manual_seed`` gives the same draws;
    with inductor (slow tests) the deterministic core is compared with fixed parameters;
(d) on CUDA (the GPU lane, skipped here) every op runs under
    ``torch.cuda.set_sync_debug_mode("error")``, which fails on any synchronising call.

Small tensors and the ``aot_eager`` backend keep the file fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch._dynamo

import functional as F
from functional._compat import TORCH_RELEASE
from tests.devicecheck import assert_compiles_once, compile_counter, no_host_reads

pytestmark = pytest.mark.compile

# Dynamo of torch 2.6 specialises on a Python float used in Python arithmetic (``1.0 - s``,
# ``s * size``): each new value recompiles (results stay right). Measured on 2.6.0; 2.14.1 and
# 2.15.0 generalise after the second value. The shared helpers put such floats on tensors first
# where that was found (compute_ema, the Beta draws of mixup and cutmix); these ops still
# specialise on 2.6, so their graph counts are pinned to 2.14+ and expected to fail on 2.6.
# Users of 2.6 pass 0-d tensors for values that change each step (docs/getting_started.md).
FLOATS_SPECIALISE = pytest.mark.xfail(
    TORCH_RELEASE < (2, 7),
    reason="dynamo of torch 2.6 recompiles for each new Python float these ops do arithmetic on",
    strict=True,
)

N_CLASSES = 5


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _images(batch: int = 4, seed: int = 0, shape=(3, 8, 7), dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, *shape, generator=g, dtype=torch.float64).to(dtype)


def _labels(batch: int = 4) -> torch.Tensor:
    return torch.arange(batch) % N_CLASSES


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _graphs(fn: Callable[..., Any]) -> int:
    """Number of graphs dynamo keeps for ``fn`` (its cache entries; a restarted analysis,
    which dynamo does when a float only feeds sizes and guards, is not a new graph)."""
    return len(torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__))


def _at_most_two_graphs(fn: Callable[..., Any], calls: Sequence[tuple]) -> list[Any]:
    """Compiled over ``calls`` (>= 4, new Python floats each): no graph break, <= 2 graphs.

    The first graph specialises on the first float (dynamo), the second makes it symbolic;
    after that a new value must not recompile.
    """
    assert len(calls) >= 4
    torch._dynamo.reset()
    compiled, _ = compile_counter(fn)
    results = [compiled(*args) for args in calls[:2]]
    after_two = _graphs(fn)
    results += [compiled(*args) for args in calls[2:]]
    graphs = _graphs(fn)
    assert graphs <= 2 and graphs == after_two, (
        f"{graphs} graphs over {len(calls)} calls with new Python floats"
    )
    return results


def _compiled_equals_eager(fn: Callable[..., Any], args: tuple, seed: int = 5) -> None:
    """Same global seed: the compiled (aot_eager) result equals the eager one."""
    torch.manual_seed(seed)
    eager = fn(*args)
    compiled, _ = compile_counter(fn)
    torch.manual_seed(seed)
    got = compiled(*args)
    torch.testing.assert_close(got, eager, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# mixup_batch and gen_interpolation_lambda
# ---------------------------------------------------------------------------------------------


def _mixup(x, y, lam):
    return F.mixup_batch(x, y, lam, N_CLASSES)


@pytest.mark.parametrize("lam", [0.3, torch.tensor(0.3), torch.linspace(0, 1, 4)])
def test_mixup_reads_nothing_on_the_host(lam) -> None:
    x, y = _images(), _labels()
    with no_host_reads():
        F.mixup_batch(x, y, lam, N_CLASSES, generator=_gen())
        F.mixup_batch(x, y, lam, N_CLASSES, indices=torch.tensor([3, 2, 1, 0]))
        F.mixup_batch(x.to(torch.uint8), y, lam, N_CLASSES, generator=_gen())
        F.gen_interpolation_lambda(0.2, batch_size=4, generator=_gen())


def test_mixup_compiles_once_for_tensor_lambdas_and_new_permutations() -> None:
    x, y = _images(), _labels()
    calls = [((x, y, torch.tensor(v)), {}) for v in (0.1, 0.5, 0.9)]
    assert_compiles_once(_mixup, calls)
    per_sample = [((x, y, torch.rand(4)), {}) for _ in range(3)]
    assert_compiles_once(_mixup, per_sample)


def test_mixup_python_float_lambda_does_not_recompile_per_value() -> None:
    x, y = _images(), _labels()
    _at_most_two_graphs(_mixup, [(x, y, v) for v in (0.1, 0.2, 0.35, 0.8, 0.95)])


@pytest.mark.parametrize("lam", [0.3, torch.linspace(0, 1, 4)])
def test_mixup_compiled_equals_eager(lam) -> None:
    _compiled_equals_eager(_mixup, (_images(), _labels(), lam))
    fixed = torch.tensor([2, 0, 3, 1])
    _compiled_equals_eager(
        lambda x, y: F.mixup_batch(x, y, lam, N_CLASSES, indices=fixed),
        (_images(dtype=torch.float64), _labels()),
    )


def _mixup_alpha(x, y, alpha):
    return F.mixup_batch(x, y, n_classes=N_CLASSES, alpha=alpha)


def test_mixup_alpha_form_reads_nothing_compiles_at_most_twice_and_equals_eager() -> None:
    x, y = _images(), _labels()
    with no_host_reads():
        F.mixup_batch(x, y, n_classes=N_CLASSES, alpha=0.2, generator=_gen())
    _at_most_two_graphs(_mixup_alpha, [(x, y, a) for a in (0.2, 0.4, 1.0, 3.0)])
    _compiled_equals_eager(_mixup_alpha, (x, y, 0.7))


def test_gen_interpolation_lambda_per_sample_compiles_once_and_equals_eager() -> None:
    def draw(alpha):
        return F.gen_interpolation_lambda(alpha, batch_size=6)

    compiled, _ = compile_counter(draw)
    for alpha in (0.2, 0.4, 1.0, 3.0, 1e-320):
        torch.manual_seed(1)
        got = compiled(alpha)
        torch.manual_seed(1)
        torch.testing.assert_close(got, draw(alpha))
        assert bool(((got >= 0) & (got <= 1)).all())
    assert _graphs(draw) <= 2


# ---------------------------------------------------------------------------------------------
# cutmix_batch
# ---------------------------------------------------------------------------------------------


def _cutmix(x, y):
    return F.cutmix_batch(x, y, N_CLASSES, alpha=1.0)


def test_cutmix_reads_nothing_on_the_host() -> None:
    x, y = _images(), _labels()
    with no_host_reads():
        F.cutmix_batch(x, y, N_CLASSES, generator=_gen())
        F.cutmix_batch(x, y, N_CLASSES, indices=torch.tensor([1, 1, 0, 2]), generator=_gen())
        F.cutmix_batch(x, y, N_CLASSES, bbox=torch.tensor([1, 2, 5, 6]))
        F.cutmix_batch(x, y, N_CLASSES, bbox=(1, 2, 5, 6))


def test_cutmix_compiles_once_over_new_boxes_and_alphas() -> None:
    x, y = _images(), _labels()
    results = assert_compiles_once(_cutmix, [((x, y), {})] * 4)
    # the boxes really changed from call to call
    assert (
        len({float(r[1][0].max()) for r in results} | {int((r[0] != x).sum()) for r in results}) > 1
    )
    _at_most_two_graphs(
        lambda x, y, a: F.cutmix_batch(x, y, N_CLASSES, alpha=a),
        [(x, y, a) for a in (0.5, 1.0, 2.0, 3.5)],
    )
    boxes = [((x, y, torch.tensor(b)), {}) for b in ([0, 0, 3, 3], [2, 1, 7, 8], [1, 1, 1, 1])]
    assert_compiles_once(lambda x, y, b: F.cutmix_batch(x, y, N_CLASSES, bbox=b), boxes)


@pytest.mark.parametrize("length", [None, 0.5])
def test_cutmix_length_and_uniform_sampling_read_nothing_and_compile_once(length) -> None:
    x, y = _images(), _labels()
    with no_host_reads():
        F.cutmix_batch(x, y, N_CLASSES, length=length, uniform_sampling=True, generator=_gen())

    def fn(x, y):
        return F.cutmix_batch(x, y, N_CLASSES, length=length, uniform_sampling=True)

    assert_compiles_once(fn, [((x, y), {})] * 3)
    _compiled_equals_eager(fn, (x, y))


def test_cutmix_compiled_equals_eager() -> None:
    _compiled_equals_eager(_cutmix, (_images(), _labels()))
    _compiled_equals_eager(
        lambda x, y, b: F.cutmix_batch(x, y, N_CLASSES, bbox=b, indices=torch.tensor([3, 0, 1, 2])),
        (_images(), _labels(), torch.tensor([1, 2, 6, 5])),
    )


# ---------------------------------------------------------------------------------------------
# cutout
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "per_sample,uniform",
    [pytest.param(False, False, marks=FLOATS_SPECIALISE), (True, False), (True, True)],
)
def test_cutout_reads_nothing_and_compiles_once(per_sample, uniform) -> None:
    x = _images()
    with no_host_reads():
        F.cutout(x, 2, 3, per_sample=per_sample, uniform_sampling=uniform, generator=_gen())
        F.cutout(x[0], 1, 0.5, per_sample=per_sample, uniform_sampling=uniform, generator=_gen())
    fn = lambda x: F.cutout(x, 2, 3, per_sample=per_sample, uniform_sampling=uniform)  # noqa: E731
    results = assert_compiles_once(fn, [((x,), {})] * 4)
    assert (
        len({int((r == 0).sum()) for r in results} | {r.flatten().argmin().item() for r in results})
        > 1
    )
    _compiled_equals_eager(fn, (x,))
    if per_sample:
        return  # the side is computed the same way in every mode (and compiles are slow)
    # a fractional length that keeps the side (0.4·7 and 0.42·7 both floor to 2 pixels)
    _at_most_two_graphs(
        lambda x, f: F.cutout(x, 1, f, per_sample=per_sample),
        [(x, f) for f in (0.4, 0.41, 0.42, 0.425)],
    )


# ---------------------------------------------------------------------------------------------
# colout_batch and colout
# ---------------------------------------------------------------------------------------------


@FLOATS_SPECIALISE
def test_colout_reads_nothing_and_compiles_once() -> None:
    x = _images()
    with no_host_reads():
        F.colout_batch(x, 0.25, 0.3, generator=_gen())
        F.colout(x[0], 0.25, 0.3, generator=_gen())
    fn = lambda x: F.colout_batch(x, 0.25, 0.3)  # noqa: E731
    assert_compiles_once(fn, [((x,), {})] * 3)
    assert_compiles_once(lambda x: F.colout(x[0], 0.25, 0.3), [((x,), {})] * 3)
    # new fractions that keep the same counts (8 - 2 rows, 7 - 2 columns) do not recompile
    _at_most_two_graphs(
        lambda x, p: F.colout_batch(x, p, p), [(x, p) for p in (0.3, 0.31, 0.33, 0.35)]
    )
    _compiled_equals_eager(fn, (x,))


def test_colout_pair_reads_nothing_compiles_once_and_equals_eager() -> None:
    x = _images()
    masks = (x[:, 0] > 0.5).long()
    with no_host_reads():
        F.colout_batch((x, masks), 0.25, 0.3, generator=_gen())

    def fn(x, m):
        return F.colout_batch((x, m), 0.25, 0.3)

    assert_compiles_once(fn, [((x, masks), {})] * 3)
    _compiled_equals_eager(fn, (x, masks))


def test_colout_recompiles_only_when_the_output_shape_changes() -> None:
    x = _images()
    fn = lambda x, p: F.colout_batch(x, p, 0.0)  # noqa: E731
    compiled, _ = compile_counter(fn)
    for p in (0.3, 0.31, 0.32):  # 6 rows kept each time: static graph, then symbolic
        assert compiled(x, p).shape[-2] == 6
    graphs = _graphs(fn)
    assert compiled(x, 0.55).shape[-2] == 4  # a new shape: one more graph, by design
    assert _graphs(fn) == graphs + 1


# ---------------------------------------------------------------------------------------------
# smooth_labels
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dense", [False, True])
def test_smooth_labels_reads_nothing_compiles_once_and_equals_eager(dense) -> None:
    logits = torch.randn(4, N_CLASSES)
    targets = torch.softmax(torch.randn(4, N_CLASSES), 1) if dense else _labels()
    with no_host_reads():
        F.smooth_labels(logits, targets, 0.1)
        F.smooth_labels(logits, targets, torch.tensor(0.1))
    calls = [((logits, targets, torch.tensor(a)), {}) for a in (0.0, 0.1, 0.5)]
    results = assert_compiles_once(F.smooth_labels, calls)
    for ((_, _, alpha), _), got in zip(calls, results, strict=True):
        torch.testing.assert_close(got, F.smooth_labels(logits, targets, alpha))
    floats = [(logits, targets, a) for a in (0.05, 0.1, 0.2, 0.3)]
    for args, got in zip(floats, _at_most_two_graphs(F.smooth_labels, floats), strict=True):
        torch.testing.assert_close(got, F.smooth_labels(*args))


# ---------------------------------------------------------------------------------------------
# resize_inputs
# ---------------------------------------------------------------------------------------------


def test_resize_inputs_reads_nothing_on_the_host() -> None:
    x = _images(shape=(3, 10, 9))
    y = torch.randint(0, N_CLASSES, (4, 10, 9))
    with no_host_reads():
        for mode in ("resize", "crop"):
            F.resize_inputs(x, y, 0.6, mode, resize_targets=True, generator=_gen())


@pytest.mark.parametrize("targets", [False, True])
def test_resize_scale_within_one_size_does_not_recompile_and_equals_eager(targets) -> None:
    x = _images(shape=(3, 10, 9))
    y = torch.randint(0, N_CLASSES, (4, 10, 9))
    scales = (0.5, 0.52, 0.54, 0.55)  # every one gives 5 x 4 from 10 x 9
    calls = [(x, y, s) for s in scales]

    def fn(x, y, s):
        return F.resize_inputs(x, y, s, "resize", resize_targets=targets)

    for (_, _, s), (got_x, got_y) in zip(calls, _at_most_two_graphs(fn, calls), strict=True):
        want_x, want_y = F.resize_inputs(x, y, s, "resize", resize_targets=targets)
        assert got_x.shape == want_x.shape == (4, 3, 5, 4)
        torch.testing.assert_close(got_x, want_x, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_y, want_y, rtol=0, atol=0)


def test_resize_recompiles_only_when_the_output_size_changes() -> None:
    x, y = _images(shape=(3, 10, 9)), _labels()
    fn = lambda x, s: F.resize_inputs(x, y, s, "resize")[0]  # noqa: E731
    compiled, _ = compile_counter(fn)
    for s in (0.5, 0.52, 0.54, 0.55):
        compiled(x, s)
    graphs = _graphs(fn)
    assert compiled(x, 0.75).shape[-2:] == (7, 6)
    assert _graphs(fn) == graphs + 1


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_resize_targets_of_another_size_read_nothing_compile_once_and_equal_eager(mode) -> None:
    x = _images(shape=(3, 12, 10))
    y = torch.randint(0, N_CLASSES, (4, 6, 5))  # half resolution
    with no_host_reads():
        F.resize_inputs(x, y, 0.5, mode, resize_targets=True, generator=_gen())

    def fn(x, y):
        return F.resize_inputs(x, y, 0.5, mode, resize_targets=True)

    results = assert_compiles_once(fn, [((x, y), {})] * 3)
    assert all(r[1].shape == (4, 3, 2) for r in results)
    _compiled_equals_eager(fn, (x, y))


@FLOATS_SPECIALISE
def test_resize_crop_compiles_once_over_new_offsets_and_equals_eager() -> None:
    x = _images(shape=(3, 10, 9)).to(memory_format=torch.channels_last)
    y = torch.randint(0, N_CLASSES, (4, 10, 9))

    def fn(x, y):
        return F.resize_inputs(x, y, 0.5, "crop", resize_targets=True)

    results = assert_compiles_once(fn, [((x, y), {})] * 5)
    assert len({float(r[0].sum()) for r in results}) > 1  # the window moved
    assert all(r[0].is_contiguous(memory_format=torch.channels_last) for r in results)
    _compiled_equals_eager(fn, (x, y))
    _at_most_two_graphs(
        lambda x, s: F.resize_inputs(x, y, s, "crop")[0], [(x, s) for s in (0.5, 0.52, 0.54, 0.55)]
    )


# ---------------------------------------------------------------------------------------------
# select_using_loss
# ---------------------------------------------------------------------------------------------


def _scorer() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, N_CLASSES),
    )


@pytest.mark.parametrize(
    "loss_fun",
    [
        pytest.param(torch.nn.functional.cross_entropy, marks=FLOATS_SPECIALISE),
        torch.nn.CrossEntropyLoss(),
    ],
)
def test_select_using_loss_reads_nothing_compiles_once_and_equals_eager(loss_fun) -> None:
    model = _scorer()
    x, y = _images(8), _labels(8)
    with no_host_reads():
        F.select_using_loss(x, y, model, loss_fun, 0.5, generator=_gen())
        F.select_using_loss(x, y, model, loss_fun, 0.5, 0.5, generator=_gen())

    def fn(x, y, keep):
        return F.select_using_loss(x, y, model, loss_fun, keep)

    results = assert_compiles_once(fn, [((x, y, 0.5), {})] * 4)
    assert len({tuple(r[1].tolist()) for r in results}) > 1  # new draws each call
    _compiled_equals_eager(fn, (x, y, 0.5))
    if isinstance(loss_fun, torch.nn.Module):
        return  # the rest is the same path for both (and compiles are slow)
    # new keep fractions with the same count (int(8 * keep) = 4) do not recompile
    _at_most_two_graphs(fn, [(x, y, k) for k in (0.5, 0.52, 0.55, 0.6)])


# ---------------------------------------------------------------------------------------------
# apply_seq_length_warmup
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("truncate,preserve", [(True, False), (False, False), (True, True)])
def test_seq_length_warmup_reads_nothing_compiles_once_and_equals_eager(truncate, preserve) -> None:
    def batch(seed):
        g = _gen(seed)
        return {
            "input_ids": torch.randint(0, 100, (2, 12), generator=g),
            # random right padding: the end-of-sequence position changes every call
            "attention_mask": (torch.arange(12) < torch.randint(1, 13, (2, 1), generator=g)).long(),
        }

    with no_host_reads():
        F.apply_seq_length_warmup(batch(0), 4, truncate, preserve_end_of_sequence=preserve)

    def fn(b):
        return F.apply_seq_length_warmup(b, 4, truncate, preserve_end_of_sequence=preserve)

    results = assert_compiles_once(fn, [((batch(s),), {}) for s in range(3)])
    for s, got in enumerate(results):
        want = fn(batch(s))
        assert all(torch.equal(got[k], want[k]) for k in want)


# ---------------------------------------------------------------------------------------------
# inductor: generated kernels equal eager (slow)
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_inductor_mixup_and_smoothing_equal_eager() -> None:
    x, y = _images(), _labels()
    perm = torch.tensor([3, 0, 1, 2])

    def step(x, y, lam, alpha):
        a, ya, _ = F.mixup_batch(x, y, lam, N_CLASSES, indices=perm)
        return a, F.smooth_labels(ya, y, alpha)

    fn = step
    compiled, _ = compile_counter(fn, backend="inductor")
    for lam, alpha in ((0.3, 0.1), (0.6, 0.2)):
        args = (x, y, torch.tensor(lam), torch.tensor(alpha))
        torch.testing.assert_close(compiled(*args), step(*args), rtol=1e-5, atol=1e-6)
    assert _graphs(fn) == 1


@pytest.mark.slow
def test_inductor_resize_equals_eager_interpolate() -> None:
    x = _images(shape=(3, 16, 13))
    fn = lambda x, s: F.resize_inputs(x, _labels(), s, "resize")[0]  # noqa: E731
    compiled, _ = compile_counter(fn, backend="inductor")
    for s in (0.5, 0.51, 0.53):  # 8 x 6 from 16 x 13
        torch.testing.assert_close(
            compiled(x, s), F.resize_inputs(x, _labels(), s, "resize")[0], rtol=1e-5, atol=1e-5
        )
    assert _graphs(fn) <= 2


# ---------------------------------------------------------------------------------------------
# CUDA lane: no synchronisation on a GPU (skipped without CUDA)
# ---------------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("generator_device", ["cpu", "cuda"])
def test_every_op_runs_on_cuda_without_a_sync(generator_device) -> None:
    device = torch.device("cuda")
    x = _images(8, shape=(3, 16, 15)).to(device)
    y = _labels(8).to(device)
    seg = torch.randint(0, N_CLASSES, (8, 16, 15), device=device)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, N_CLASSES),
    ).to(device)
    g = torch.Generator(device=generator_device).manual_seed(0)
    lam = torch.rand(8, device=device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        F.mixup_batch(x, y, 0.3, N_CLASSES, generator=g)
        F.mixup_batch(x, y, lam, N_CLASSES, generator=g)
        F.mixup_batch(x, y, lam[0], N_CLASSES, indices=torch.arange(8, device=device).flip(0))
        F.gen_interpolation_lambda(0.2, batch_size=8, generator=g)
        F.cutmix_batch(x, y, N_CLASSES, generator=g)
        F.cutmix_batch(x, y, N_CLASSES, bbox=torch.tensor([1, 2, 6, 9], device=device))
        F.cutout(x, 2, 4, generator=g)
        F.cutout(x, 2, 0.25, per_sample=True, generator=g)
        F.colout_batch(x, 0.2, 0.3, generator=g)
        F.colout(x[0], 0.2, 0.3, generator=g)
        F.smooth_labels(torch.randn(8, N_CLASSES, device=device), y, 0.1)
        F.smooth_labels(
            torch.randn(8, N_CLASSES, device=device), y, torch.tensor(0.1, device=device)
        )
        F.resize_inputs(x, seg, 0.5, "resize", resize_targets=True)
        F.resize_inputs(x, seg, 0.5, "crop", resize_targets=True, generator=g)
        F.select_using_loss(x, y, model, torch.nn.functional.cross_entropy, 0.5, generator=g)
        F.select_using_loss(x, y, model, torch.nn.CrossEntropyLoss(), 0.5, 0.5, generator=g)
        F.apply_seq_length_warmup({"input_ids": seg.flatten(1)}, 32, truncate=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.cuda
def test_compiled_ops_on_cuda_compile_once() -> None:
    device = torch.device("cuda")
    x, y = _images(8).to(device), _labels(8).to(device)

    def step(x, y, lam, alpha):
        x1, y1, _ = F.mixup_batch(x, y, lam, N_CLASSES)
        x2, y2, _ = F.cutmix_batch(x1, y, N_CLASSES)
        x3 = F.cutout(x2, 1, 3, per_sample=True)
        return x3, F.smooth_labels(y1 + y2, y, alpha)

    calls = [
        ((x, y, torch.rand((), device=device), torch.tensor(a, device=device)), {})
        for a in (0.1, 0.2, 0.3)
    ]
    assert_compiles_once(step, calls)
