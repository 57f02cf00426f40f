"""Seed parity: every setting of the seed documents (`../shared/seeds/`), as an executable spec.

One test per seed example and per seed parameter, called with the seed's own parameter names
(Composer's ``composer.algorithms`` / ``composer.functional`` pages). Where the contract
(`../shared/API.md`) deliberately differs from a seed, the test pins the contract's behaviour and
says so. The porting guide (docs/guides/porting.md) maps Composer 0.32.1 itself, name by name;
tests/parity/ checks it.

"""

from __future__ import annotations

import inspect
import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

import augment
import functional as F
from surgery import NoEffectWarning


def params(fn: object) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def defaults(fn: object, names: list[str]) -> dict[str, object]:
    p = params(fn)
    return {n: p[n].default for n in names}


def rgb_image(w: int = 24, h: int = 16, seed: int = 0) -> Image.Image:
    rs = np.random.default_rng(seed)
    return Image.fromarray(rs.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


class Recorder:
    """An augmentation ``(img, level) -> img`` that records its levels and brightens by 1."""

    def __init__(self) -> None:
        self.levels: list[float] = []

    def __call__(self, img: Image.Image, level: float) -> Image.Image:
        self.levels.append(level)
        return img.point(lambda v: min(v + 1, 255))


# =============================================================================================
# ALiBi: apply_alibi(model, heads_per_layer, max_sequence_length, position_embedding_attribute,
#        attention_module, attr_to_replace, alibi_attention, mask_replacement_function);
#        Alibi(..., train_sequence_length_scaling)
# =============================================================================================


def tiny_gpt2(n_positions: int = 16):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=50,
        n_positions=n_positions,
        n_embd=16,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_alibi_max_sequence_length_accepts_longer_inputs_and_rejects_beyond() -> None:
    model = F.apply_alibi(tiny_gpt2(n_positions=16), max_sequence_length=40)
    ids = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(1))
    assert model(ids).logits.shape == (2, 40, 50)  # past the 16 learned positions
    with pytest.raises(ValueError, match="max_sequence_length"):
        model(torch.zeros(1, 41, dtype=torch.long))


def test_alibi_heads_per_layer_is_read_from_the_model() -> None:
    """Seed ``heads_per_layer``: inferred from each attention layer (here ``n_head=4``)."""
    model = F.apply_alibi(tiny_gpt2(), max_sequence_length=32)
    for block in model.transformer.h:
        bias = block.attn.alibi_bias
        assert bias.num_heads == 4
        torch.testing.assert_close(bias.slopes, F.alibi_slopes(4))


def test_alibi_position_embedding_attribute_transformer_wpe_is_disabled() -> None:
    """Seed ``position_embedding_attribute='transformer.wpe'``: found and zeroed automatically."""
    model = F.apply_alibi(tiny_gpt2(), max_sequence_length=32)
    assert isinstance(model.transformer.wpe, F.DisabledPositionEmbedding)
    out = model.transformer.wpe(torch.arange(8)[None])
    assert torch.count_nonzero(out) == 0
    assert "transformer.wpe.weight" not in dict(model.named_parameters())


def test_alibi_mask_replacement_function_longer_sequences_stay_causal() -> None:
    """Seed ``mask_replacement_function``: the mask for lengths past the model's initial size is
    built here; a causal model stays causal at 30 tokens with 16 learned positions."""
    model = F.apply_alibi(tiny_gpt2(n_positions=16), max_sequence_length=32)
    ids = torch.randint(1, 50, (1, 30), generator=torch.Generator().manual_seed(2))
    changed = ids.clone()
    changed[0, 25] = (ids[0, 25] + 1) % 50
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[0, :25], b[0, :25])
    assert not torch.allclose(a[0, 25:], b[0, 25:])


def test_alibi_attention_module_attr_to_replace_alibi_attention_via_register_alibi() -> None:
    """Seed ``attention_module`` / ``attr_to_replace`` / ``alibi_attention``: a new attention
    class is taught to ``apply_alibi`` with ``register_alibi(cls, converter)``."""

    class TinyAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads, self.qkv, self.alibi = 2, nn.Linear(8, 24), None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, d = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            mask = None if self.alibi is None else self.alibi(n, device=x.device, dtype=x.dtype)
            y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return y.transpose(1, 2).reshape(b, n, d)

    def converter(module: nn.Module, context: F.AlibiContext) -> bool:
        if isinstance(module.alibi, F.AlibiBias):
            return False
        module.alibi = context.bias(module.heads)
        return True

    F.register_alibi(TinyAttention, converter)
    try:
        model = nn.Sequential(TinyAttention())
        x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(0))
        before = model(x)
        F.apply_alibi(model, max_sequence_length=16)
        assert isinstance(model[0].alibi, F.AlibiBias) and model[0].alibi.num_heads == 2
        assert not torch.allclose(model(x), before)
    finally:
        F.unregister_alibi(TinyAttention)


def test_alibi_docstring_maps_every_seed_parameter() -> None:
    doc = F.apply_alibi.__doc__ or ""
    for name in (
        "heads_per_layer",
        "position_embedding_attribute",
        "attention_module",
        "attr_to_replace",
        "alibi_attention",
        "mask_replacement_function",
    ):
        assert name in doc, name


def test_alibi_train_sequence_length_scaling_recipe() -> None:
    """Seed ``train_sequence_length_scaling=0.25``: a (batch, L) batch becomes
    (batch / 0.25, L * 0.25), the extra tokens forming new rows: that is exactly
    ``apply_seq_length_warmup(batch, int(L * scaling), truncate=False)``."""
    ids = torch.arange(4 * 32).view(4, 32)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    out = F.apply_seq_length_warmup(batch, int(32 * 0.25), truncate=False)
    assert out["input_ids"].shape == (16, 8) and out["attention_mask"].shape == (16, 8)
    assert torch.equal(out["input_ids"], ids.reshape(16, 8))


# =============================================================================================
# AugMix(severity=3, depth=-1, width=3, alpha=1.0, augmentation_set='all'); augment_and_mix
# =============================================================================================


@pytest.mark.parametrize("fn", [augment.AugMix, augment.augment_and_mix])
def test_augmix_defaults_are_the_seeds(fn) -> None:
    names = ["severity", "depth", "width", "alpha", "augmentation_set"]
    assert defaults(fn, names) == dict(
        severity=3, depth=-1, width=3, alpha=1.0, augmentation_set="all"
    )


@pytest.mark.parametrize("severity", [0, 3, 10])
def test_augmix_severity_0_to_10_accepted(severity) -> None:
    img = rgb_image()
    t = augment.AugMix(severity=severity, rng=random.Random(0))
    assert t(img).size == img.size
    assert augment.augment_and_mix(img, severity=severity, rng=random.Random(0)).size == img.size


def test_augmix_severity_0_leaves_the_level_scaled_operations_without_effect() -> None:
    """Seed: "0 (no augmentation)". Here (as in Composer's code) severity 0 neutralises every
    operation whose strength scales with the level; autocontrast, equalize and posterize,
    which ignore or floor the level, still change the image (the porting table)."""
    img = rgb_image(32, 24)
    scaled = [op for op in SEED_DEFAULT_LIST if op not in LEVEL_FREE]
    for seed in range(5):
        out = augment.augment_and_mix(
            img, severity=0, augmentation_set=scaled, rng=random.Random(seed)
        )
        assert out.tobytes() == img.tobytes()
    dull = img.point(lambda v: 100 + v // 4)  # low contrast: autocontrast stretches it
    for op in LEVEL_FREE:
        changed = augment.augment_and_mix(
            dull, severity=0, width=1, depth=1, alpha=1e4, augmentation_set=[op]
        )
        assert changed.tobytes() != dull.tobytes(), op.__name__


@pytest.mark.parametrize("severity", [-0.5, 10.5])
def test_augmix_severity_outside_0_to_10_rejected(severity) -> None:
    with pytest.raises(ValueError, match=r"severity must be in \[0.0, 10.0\]"):
        augment.AugMix(severity=severity)
    with pytest.raises(ValueError, match=r"severity must be in \[0.0, 10.0\]"):
        augment.augment_and_mix(rgb_image(), severity=severity)


def test_augmix_levels_lie_in_0_1_to_severity() -> None:
    """The 'original' set's factor 0.1 + 0.18·level is bounded below by 0.118 (level >= 0.1)."""
    op = Recorder()
    for seed in range(40):
        augment.augment_and_mix(
            rgb_image(4, 4),
            severity=7,
            depth=1,
            width=1,
            augmentation_set=[op],
            rng=random.Random(seed),
        )
    assert min(op.levels) >= 0.1 and max(op.levels) <= 7
    assert max(op.levels) > 5 and min(op.levels) < 2


@pytest.mark.parametrize("width", [1, 4])
def test_augmix_width_is_the_number_of_chains(width) -> None:
    op = Recorder()
    augment.augment_and_mix(
        rgb_image(), depth=1, width=width, augmentation_set=[op], rng=random.Random(0)
    )
    assert len(op.levels) == width
    with pytest.raises(ValueError, match="width must be >= 1"):
        augment.AugMix(width=0)


def test_augmix_depth_minus_one_is_uniform_on_1_to_3() -> None:
    counts = Counter()
    for seed in range(60):
        op = Recorder()
        augment.augment_and_mix(
            rgb_image(4, 4), depth=-1, width=1, augmentation_set=[op], rng=random.Random(seed)
        )
        counts[len(op.levels)] += 1
    assert set(counts) == {1, 2, 3} and min(counts.values()) >= 10
    op = Recorder()
    augment.augment_and_mix(rgb_image(), depth=2, width=3, augmentation_set=[op])
    assert len(op.levels) == 6
    with pytest.raises(ValueError, match="depth must be -1"):
        augment.AugMix(depth=0)


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_augmix_alpha_must_be_positive(alpha) -> None:
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        augment.AugMix(alpha=alpha)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        augment.augment_and_mix(rgb_image(), alpha=alpha)


def test_augmix_alpha_large_mixes_evenly_small_picks_one() -> None:
    """Beta/Dirichlet(alpha): large alpha -> near-uniform weights (the mix is halfway between
    the image and its augmentation); alpha -> 0 -> one version of the image."""
    img = Image.new("L", (8, 8), 0)
    white = [lambda im, level: Image.new("L", im.size, 200)]
    even = np.array(
        augment.augment_and_mix(img, alpha=1e4, augmentation_set=white, rng=random.Random(0))
    )
    assert np.all(np.abs(even.astype(int) - 100) <= 3)
    for seed in range(10):
        one = np.array(
            augment.augment_and_mix(
                img, alpha=1e-3, augmentation_set=white, rng=random.Random(seed)
            )
        )
        assert np.all(one <= 2) or np.all(one >= 198)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("augmentations_all", "all"),
        ("augmentations_corruption_safe", "safe"),
        ("augmentations_original", "original"),
    ],
)
def test_augmix_augmentation_set_names(name, short) -> None:
    img = rgb_image()
    long_out = augment.augment_and_mix(img, augmentation_set=name, rng=random.Random(3))
    short_out = augment.augment_and_mix(img, augmentation_set=short, rng=random.Random(3))
    assert long_out.tobytes() == short_out.tobytes()
    assert augment.AugMix(augmentation_set=name)(img).size == img.size


def test_augmix_unknown_augmentation_set_rejected() -> None:
    with pytest.raises(ValueError, match="augmentation_set must be one of"):
        augment.AugMix(augmentation_set="augmentations_unsafe")


SEED_DEFAULT_LIST = [
    augment.autocontrast,
    augment.equalize,
    augment.posterize,
    augment.rotate,
    augment.solarize,
    augment.shear_x,
    augment.shear_y,
    augment.translate_x,
    augment.translate_y,
    augment.color,
    augment.contrast,
    augment.brightness,
    augment.sharpness,
]


LEVEL_FREE = [augment.autocontrast, augment.equalize, augment.posterize]


def test_augment_and_mix_takes_the_seeds_list_of_functions() -> None:
    img = rgb_image()
    out = augment.augment_and_mix(
        img,
        severity=3,
        depth=-1,
        width=3,
        alpha=1.0,
        augmentation_set=SEED_DEFAULT_LIST,
        rng=random.Random(5),
    )
    same = augment.augment_and_mix(img, augmentation_set="all", rng=random.Random(5))
    assert out.tobytes() == same.tobytes()


# =============================================================================================
# BlurPool(replace_convs, replace_maxpools, blur_first); apply_blurpool; BlurConv2d;
# BlurMaxPool2d; BlurPool2d; blur_2d
# =============================================================================================


def blur_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1),  # stride 1: never replaced
    )


@pytest.mark.parametrize("replace_convs", [True, False])
@pytest.mark.parametrize("replace_maxpools", [True, False])
def test_apply_blurpool_replace_convs_and_replace_maxpools(replace_convs, replace_maxpools) -> None:
    model = blur_model()
    if not (replace_convs or replace_maxpools):
        with pytest.warns(NoEffectWarning):
            F.apply_blurpool(model, replace_convs=False, replace_maxpools=False)
    else:
        F.apply_blurpool(model, replace_convs=replace_convs, replace_maxpools=replace_maxpools)
    assert isinstance(model[0], F.BlurConv2d) is replace_convs
    assert isinstance(model[1], F.BlurMaxPool2d) is replace_maxpools
    assert type(model[2]) is nn.Conv2d


@pytest.mark.parametrize("blur_first", [True, False])
def test_apply_blurpool_blur_first(blur_first) -> None:
    model = F.apply_blurpool(blur_model(), True, True, blur_first)  # the seed's positional order
    assert model[0].blur_first is blur_first
    x = torch.randn(2, 16, 12, 12, generator=torch.Generator().manual_seed(0))
    conv = model[0]
    if blur_first:  # blur at stride 1, then the strided convolution
        expected = nn.functional.conv2d(F.blur_2d(x), conv.weight, conv.bias, 2, 1)
    else:  # the convolution at stride 1, then the blur downsamples
        expected = F.blur_2d(nn.functional.conv2d(x, conv.weight, conv.bias, 1, 1), stride=2)
    torch.testing.assert_close(conv(x), expected)


def test_apply_blurpool_min_channels_zero_replaces_every_strided_conv() -> None:
    """The seed replaces every strided conv; ``min_channels=16`` (ours) skips thin stems."""
    stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2))
    with pytest.warns(NoEffectWarning):
        F.apply_blurpool(stem)
    F.apply_blurpool(stem, min_channels=0)
    assert isinstance(stem[0], F.BlurConv2d)


def test_blurconv2d_seed_positional_arguments() -> None:
    conv = F.BlurConv2d(8, 16, 3, 2, 1, 1, 1, True, False)
    assert conv.stride == (2, 2) and conv.padding == (1, 1) and conv.groups == 1
    assert conv.bias is not None and conv.blur_first is False
    assert conv(torch.randn(1, 8, 10, 10)).shape == (1, 16, 5, 5)


def test_blurconv2d_stride_none_the_seeds_default() -> None:
    """``stride=None`` must either be refused at construction, naming ``stride``, or give a
    working layer -- never be accepted and crash in ``forward``."""
    try:
        conv = F.BlurConv2d(8, 16, 3, stride=None)
    except (TypeError, ValueError) as error:
        assert "stride" in str(error)
        return
    assert conv(torch.randn(1, 8, 10, 10)).ndim == 4


def test_blurmaxpool2d_seed_positional_arguments() -> None:
    pool = F.BlurMaxPool2d(3, 2, 1, 1, False)  # kernel_size, stride, padding, dilation, ceil_mode
    x = torch.randn(2, 4, 9, 9, generator=torch.Generator().manual_seed(0))
    expected = F.blur_2d(nn.functional.max_pool2d(x, 3, 1, 1), stride=2)
    torch.testing.assert_close(pool(x), expected)
    assert "return_indices" not in params(F.BlurMaxPool2d)
    with pytest.raises(TypeError):
        F.BlurMaxPool2d(3, return_indices=True)


def test_blurpool2d_seed_arguments() -> None:
    assert defaults(F.BlurPool2d, ["stride", "padding"]) == {"stride": 2, "padding": 1}
    x = torch.randn(2, 3, 9, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(F.BlurPool2d(2, 1)(x), F.blur_2d(x, stride=2))
    with pytest.raises(ValueError, match="padding must be 1"):
        F.BlurPool2d(2, 0)


def test_blur_2d_default_filter_and_same_size_padding() -> None:
    x = torch.zeros(1, 1, 5, 5)
    x[0, 0, 2, 2] = 16.0
    expected = torch.tensor([[1.0, 2, 1], [2, 4, 2], [1, 2, 1]])
    out = F.blur_2d(x)
    assert out.shape == x.shape  # padding 1 keeps the size at stride 1
    torch.testing.assert_close(out[0, 0, 1:4, 1:4], expected)
    assert out.sum() == 16.0


def test_blur_2d_filter_2d_or_4d_and_stride_pair() -> None:
    x = torch.randn(2, 3, 8, 10, generator=torch.Generator().manual_seed(0))
    filt = torch.tensor([[0.0, 1, 0], [1, 4, 1], [0, 1, 0]]) / 8
    a = F.blur_2d(x, stride=(2, 1), filter=filt)
    b = F.blur_2d(x, stride=(2, 1), filter=filt.expand(3, 1, 3, 3))
    assert a.shape == (2, 3, 4, 10)
    torch.testing.assert_close(a, b)
    reference = nn.functional.conv2d(x, filt.expand(3, 1, 3, 3), stride=(2, 1), padding=1, groups=3)
    torch.testing.assert_close(a, reference)
    with pytest.raises(ValueError, match="filter"):
        F.blur_2d(x, filter=torch.ones(2, 1, 3, 3))  # (C, 1, kH, kW) needs C = 3


# =============================================================================================
# ChannelsLast
# =============================================================================================


def test_apply_channels_last() -> None:
    model = F.apply_channels_last(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3)))
    for conv in model:
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        assert not conv.weight.is_contiguous()


# =============================================================================================
# ColOut(p_row=0.15, p_col=0.15, batch=True); colout(img, p_row, p_col)
# =============================================================================================


def test_colout_batch_true_drops_the_same_rows_and_columns_for_the_batch() -> None:
    base = torch.arange(20 * 10, dtype=torch.float32).view(1, 1, 20, 10)
    X = torch.cat([base, base + 1000.0]).expand(2, 3, 20, 10)
    out = F.colout_batch(X, p_row=0.15, p_col=0.15, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 3, 20 - 3, 10 - 1)
    torch.testing.assert_close(out[1], out[0] + 1000.0)  # the same rows/cols for every image


@pytest.mark.parametrize("kind", ["tensor", "pil"])
def test_colout_batch_false_is_colout_per_image(kind) -> None:
    img = torch.randint(0, 256, (3, 20, 10), dtype=torch.uint8)
    if kind == "pil":
        img = Image.fromarray(img.permute(1, 2, 0).numpy(), "RGB")
    out = F.colout(img, 0.15, 0.15, generator=torch.Generator().manual_seed(0))
    if kind == "pil":
        assert out.size == (9, 17)
    else:
        assert out.shape == (3, 17, 9)


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_colout_fractions_outside_0_1_rejected(p) -> None:
    with pytest.raises(ValueError, match="p_row must be in"):
        F.colout_batch(torch.ones(1, 1, 4, 4), p, 0.1)


# =============================================================================================
# CutOut(n_holes, length); cutout(X, n_holes, length)
# =============================================================================================


def test_cutout_same_square_for_every_image_of_the_batch() -> None:
    X = torch.ones(4, 3, 16, 16)
    out = F.cutout(X, 1, 4, generator=torch.Generator().manual_seed(0))
    holes = out == 0
    assert torch.equal(holes, holes[:1, :1].expand_as(holes))  # every image and channel
    rows, cols = holes[0, 0].any(1).nonzero(), holes[0, 0].any(0).nonzero()
    assert 1 <= len(rows) <= 4 and 1 <= len(cols) <= 4
    assert holes[0, 0].sum() == len(rows) * len(cols)  # one (clipped) square
    assert torch.equal(X, torch.ones(4, 3, 16, 16))  # input untouched


def test_cutout_n_holes() -> None:
    X = torch.ones(2, 1, 64, 64)
    out = F.cutout(X, 3, 2, generator=torch.Generator().manual_seed(1))
    assert 1 <= (out[0, 0] == 0).sum() <= 3 * 4
    with pytest.raises(TypeError, match="n_holes must be an int"):
        F.cutout(X, 1.5, 2)


# =============================================================================================
# GhostBatchNorm(ghost_batch_size=32); apply_ghost_batchnorm(model, ghost_batch_size)
# =============================================================================================


def test_apply_ghost_batchnorm_normalizes_chunks_of_ghost_batch_size() -> None:
    model = F.apply_ghost_batchnorm(nn.Sequential(nn.BatchNorm2d(3)), 4)
    bn = model[0]
    assert isinstance(bn, F.GhostBatchNorm2d) and bn.ghost_batch_size == 4
    x = torch.randn(12, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    expected = torch.cat(
        [nn.functional.batch_norm(c, None, None, training=True) for c in x.split(4)]
    )
    torch.testing.assert_close(model.train()(x), expected)
    assert params(F.apply_ghost_batchnorm)["ghost_batch_size"].default == 32  # contract default


# =============================================================================================
# LabelSmoothing(alpha); smooth_labels(logits, targets, alpha)
# =============================================================================================


def test_smooth_labels_formula_and_alpha_extremes() -> None:
    logits = torch.zeros(3, 5)
    targets = torch.tensor([0, 4, 2])
    onehot = nn.functional.one_hot(targets, 5).float()
    torch.testing.assert_close(F.smooth_labels(logits, targets, 0.1), 0.9 * onehot + 0.1 / 5)
    torch.testing.assert_close(F.smooth_labels(logits, targets, 0.0), onehot)
    torch.testing.assert_close(F.smooth_labels(logits, targets, 1.0), torch.full((3, 5), 0.2))


@pytest.mark.parametrize("alpha", [-0.1, 1.1])
def test_smooth_labels_alpha_outside_0_1_rejected(alpha) -> None:
    with pytest.raises(ValueError, match=r"alpha must be in \[0.0, 1.0\]"):
        F.smooth_labels(torch.zeros(2, 3), torch.tensor([0, 1]), alpha)


def test_smooth_labels_extra_dimensions_and_target_range() -> None:
    logits = torch.zeros(2, 4, 3, 3)  # (N, C, d1, d2)
    targets = torch.randint(0, 4, (2, 3, 3))
    out = F.smooth_labels(logits, targets, 0.2)
    assert out.shape == logits.shape
    torch.testing.assert_close(out.sum(1), torch.ones(2, 3, 3))
    with pytest.raises(ValueError, match=r"class indices in \[0, 4\)"):
        F.smooth_labels(logits, torch.full((2, 3, 3), 4), 0.2)


# =============================================================================================
# LayerFreezing(freeze_start=0.5, freeze_level=1.0);
# freeze_layers(model, optimizers, current_epoch, max_epochs, freeze_start, freeze_level, logger)
# =============================================================================================


def four_layers() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(*[nn.Linear(3, 3) for _ in range(4)])
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_freeze_layers_seed_positional_call_with_a_tuple_of_optimizers() -> None:
    model, opt = four_layers()
    other = torch.optim.Adam(model.parameters())
    n, fraction = F.freeze_layers(model, (opt, other), 3, 4, 0.5, 1.0)
    assert (n, fraction) == (2, 0.5)
    assert [m.weight.requires_grad for m in model] == [False, False, True, True]
    for o in (opt, other):
        assert len(o.param_groups[0]["params"]) == 4


def test_freeze_start_nothing_frozen_before_it() -> None:
    model, opt = four_layers()
    assert F.freeze_layers(model, opt, current_epoch=5, max_epochs=10, freeze_start=0.5) == (0, 0.0)
    assert all(p.requires_grad for p in model.parameters())


def test_freeze_level_is_the_fraction_frozen_at_the_end() -> None:
    model, opt = four_layers()
    n, fraction = F.freeze_layers(
        model, opt, current_epoch=10, max_epochs=10, freeze_start=0.0, freeze_level=0.5
    )
    assert (n, fraction) == (2, 0.5)


@pytest.mark.parametrize("name", ["freeze_start", "freeze_level"])
def test_freeze_fractions_outside_0_1_rejected(name) -> None:
    model, opt = four_layers()
    with pytest.raises(ValueError, match=rf"{name} must be in \[0.0, 1.0\]"):
        F.freeze_layers(model, opt, 1, 2, **{name: 1.5})


def test_freeze_layers_accepts_logger_none() -> None:
    model, opt = four_layers()
    assert F.freeze_layers(model, opt, 3, 4, 0.5, 1.0, logger=None) == (2, 0.5)


# =============================================================================================
# MixUp(alpha); mixup_batch(x, y, interpolation_lambda, n_classes, indices); the seed example
# =============================================================================================


def test_mixup_seed_example_loop() -> None:
    """The seed's example, with a loss that takes dense labels."""
    torch.manual_seed(0)
    nclasses = 4
    model = nn.Linear(6, nclasses)
    loss_fun = nn.functional.cross_entropy  # accepts dense (probability) targets
    dataloader = [(torch.randn(8, 6), torch.randint(0, nclasses, (8,))) for _ in range(2)]
    for X, y in dataloader:
        lam = F.gen_interpolation_lambda(alpha=0.2)
        X, y, _ = F.mixup_batch(X, y, lam, nclasses)
        pred = model(X)
        loss = loss_fun(pred, y)
        loss.backward()
        assert y.shape == (8, nclasses)
        torch.testing.assert_close(y.sum(1), torch.ones(8))
        assert torch.isfinite(loss)


def test_mixup_batch_indices_and_formula() -> None:
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3])
    perm = torch.tensor([2, 3, 0, 1])
    x_mix, y_mix, used = F.mixup_batch(x, y, 0.3, 4, indices=perm)
    assert torch.equal(used, perm)
    torch.testing.assert_close(x_mix, 0.7 * x + 0.3 * x[perm])
    onehot = nn.functional.one_hot(y, 4).float()
    torch.testing.assert_close(y_mix, 0.7 * onehot + 0.3 * onehot[perm])


def test_mixup_interpolation_lambda_outside_0_1_rejected() -> None:
    with pytest.raises(ValueError, match="interpolation_lambda"):
        F.mixup_batch(torch.zeros(2, 3), torch.tensor([0, 1]), 1.5, 2)


def test_gen_interpolation_lambda_alpha() -> None:
    """Large alpha: pairs weighted nearly equally; alpha -> 0+: nearly one element of the pair.
    (alpha = 0 itself is accepted here as 'no mixing'; the seed asks for alpha > 0.)"""
    g = torch.Generator().manual_seed(0)
    big = [F.gen_interpolation_lambda(1000.0, generator=g) for _ in range(20)]
    assert all(abs(v - 0.5) < 0.1 for v in big)
    small = [F.gen_interpolation_lambda(1e-3, generator=g) for _ in range(20)]
    assert sum(min(v, 1 - v) < 0.05 for v in small) >= 18  # P(middle) is about 0.6% per draw
    with pytest.raises(ValueError, match="alpha"):
        F.gen_interpolation_lambda(-1.0)


# =============================================================================================
# ProgressiveResizing(mode='resize', initial_scale=0.5, finetune_fraction=0.2,
#                     resize_targets=False); resize_inputs(X, y, scale_factor, mode, resize_targets)
# =============================================================================================


def test_progressive_resizing_schedule_defaults() -> None:
    assert defaults(F.progressive_resizing_scale, ["initial_scale", "finetune_fraction"]) == {
        "initial_scale": 0.5,
        "finetune_fraction": 0.2,
    }
    assert F.progressive_resizing_scale(0.0) == 0.5
    assert F.progressive_resizing_scale(0.4) == pytest.approx(0.75)
    assert F.progressive_resizing_scale(0.8) == 1.0
    assert F.progressive_resizing_scale(0.95) == 1.0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("initial_scale", 0.0),
        ("initial_scale", 1.5),
        ("finetune_fraction", -0.1),
        ("finetune_fraction", 1.5),
    ],
)
def test_progressive_resizing_fractions_outside_range_rejected(name, value) -> None:
    with pytest.raises(ValueError, match=name):
        F.progressive_resizing_scale(0.5, **{name: value})


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_resize_inputs_mode_and_resize_targets(mode) -> None:
    X = torch.randn(2, 3, 16, 12, generator=torch.Generator().manual_seed(0))
    y = torch.randn(2, 1, 16, 12)
    X_sized, y_same = F.resize_inputs(X, y, 0.5, mode=mode, resize_targets=False)
    assert X_sized.shape == (2, 3, 8, 6) and y_same is y
    X_sized, y_sized = F.resize_inputs(
        X, y, 0.5, mode, True, generator=torch.Generator().manual_seed(0)
    )
    assert y_sized.shape == (2, 1, 8, 6)
    X_full, _ = F.resize_inputs(X, y, 1.0, mode=mode)
    torch.testing.assert_close(X_full, X)
    with pytest.raises(ValueError, match="mode must be one of"):
        F.resize_inputs(X, y, 0.5, mode="pad")


# =============================================================================================
# RandAugment(severity=9, depth=2, augmentation_set='all'); randaugment
# =============================================================================================


@pytest.mark.parametrize("fn", [augment.RandAugment, augment.randaugment])
def test_randaugment_defaults_are_the_seeds(fn) -> None:
    names = ["severity", "depth", "augmentation_set"]
    assert defaults(fn, names) == dict(severity=9, depth=2, augmentation_set="all")


@pytest.mark.parametrize("severity", [1, 5, 10])
def test_randaugment_severity_1_to_10_accepted(severity) -> None:
    img = rgb_image()
    assert augment.RandAugment(severity=severity, rng=random.Random(0))(img).size == img.size
    assert augment.randaugment(img, severity=severity).size == img.size


@pytest.mark.parametrize("severity", [0, 0.5, 10.5, -1])
def test_randaugment_severity_outside_1_to_10_rejected(severity) -> None:
    with pytest.raises(ValueError, match=r"severity must be in \[1.0, 10.0\]"):
        augment.RandAugment(severity=severity)
    with pytest.raises(ValueError, match=r"severity must be in \[1.0, 10.0\]"):
        augment.randaugment(rgb_image(), severity=severity)


def test_randaugment_depth_is_n_operations_at_magnitude_severity() -> None:
    op = Recorder()
    augment.randaugment(rgb_image(), severity=7, depth=3, augmentation_set=[op])
    assert op.levels == [7, 7, 7]
    op = Recorder()
    augment.RandAugment(severity=4, depth=5, augmentation_set=[op])(rgb_image())
    assert op.levels == [4] * 5


def test_randaugment_original_set_intensity_from_0_28_to_1_9() -> None:
    """Seed: the original forms' factor is intensity·0.18 + 0.1: 0.28 at 1, 1.9 at 10."""
    grey = Image.new("L", (4, 4), 100)
    for severity, factor in ((1, 0.28), (10, 1.9)):
        out = augment.randaugment(
            grey, severity=severity, depth=1, augmentation_set=[augment.brightness_original]
        )
        assert abs(np.array(out).mean() - 100 * factor) <= 1


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("augmentations_all", "all"),
        ("augmentations_corruption_safe", "safe"),
        ("augmentations_original", "original"),
    ],
)
def test_randaugment_augmentation_set_names(name, short) -> None:
    img = rgb_image()
    a = augment.randaugment(img, augmentation_set=name, rng=random.Random(1))
    b = augment.RandAugment(augmentation_set=short, rng=random.Random(1))(img)
    assert a.tobytes() == b.tobytes()


def test_randaugment_takes_the_seeds_list_of_functions() -> None:
    img = rgb_image()
    a = augment.randaugment(img, 9, 2, SEED_DEFAULT_LIST, rng=random.Random(2))
    b = augment.randaugment(img, 9, 2, "all", rng=random.Random(2))
    assert a.tobytes() == b.tobytes()


# =============================================================================================
# SeqLengthWarmup(duration=0.3, min_seq_length=8, max_seq_length=1024, step_size=8,
#                 truncate=True); apply_seq_length_warmup(batch, curr_seq_len, truncate)
# =============================================================================================


def test_seq_length_warmup_schedule_defaults() -> None:
    names = ["duration", "min_seq_length", "max_seq_length", "step_size"]
    assert defaults(F.seq_length_warmup_length, names) == dict(
        duration=0.3, min_seq_length=8, max_seq_length=1024, step_size=8
    )
    lengths = [F.seq_length_warmup_length(t / 100) for t in range(101)]
    assert lengths[0] == 8 and lengths[30] == 1024 and lengths[-1] == 1024
    assert all(n % 8 == 0 for n in lengths) and lengths == sorted(lengths)
    assert F.seq_length_warmup_length(0.15, step_size=64) % 64 == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"duration": 1.5}, "duration"),
        ({"min_seq_length": 0}, "min_seq_length"),
        ({"min_seq_length": 64, "max_seq_length": 32}, "max_seq_length"),
        ({"step_size": 0}, "step_size"),
    ],
)
def test_seq_length_warmup_bad_settings_rejected(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        F.seq_length_warmup_length(0.1, **kwargs)


def test_apply_seq_length_warmup_truncate() -> None:
    ids = torch.arange(2 * 12).view(2, 12)
    batch = {"input_ids": ids, "labels": ids + 100}
    short = F.apply_seq_length_warmup(batch, 4, truncate=True)
    assert torch.equal(short["input_ids"], ids[:, :4]) and short["labels"].shape == (2, 4)
    rows = F.apply_seq_length_warmup(batch, 4, truncate=False)
    assert torch.equal(rows["input_ids"], ids.reshape(6, 4))
    with pytest.raises(TypeError, match="batch"):
        F.apply_seq_length_warmup([ids], 4, True)


# =============================================================================================
# SAM(rho=0.05, epsilon=1e-12, interval=1) -> SAMOptimizer
# =============================================================================================


def test_sam_defaults_are_the_seeds() -> None:
    assert defaults(F.SAMOptimizer, ["rho", "epsilon", "interval"]) == dict(
        rho=0.05, epsilon=1e-12, interval=1
    )


def test_sam_rho_and_epsilon_perturb_along_the_normalised_gradient() -> None:
    """L(w) = ||w||²/2: g = w; SAM's gradient is (w + rho·w/(||w|| + eps)), so SGD(lr=1)
    moves w to -rho·w/(||w|| + eps)."""
    w = nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.float64))
    opt = F.SAMOptimizer(torch.optim.SGD([w], lr=1.0), rho=0.5, epsilon=1e-12)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (w * w).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss.detach()) == pytest.approx(12.5)  # the loss at w
    torch.testing.assert_close(w.detach(), torch.tensor([-0.3, -0.4], dtype=torch.float64))


def test_sam_interval_runs_sam_every_interval_steps() -> None:
    w = nn.Parameter(torch.ones(2))
    opt = F.SAMOptimizer(torch.optim.SGD([w], lr=0.01), rho=0.05, interval=2)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    per_step = []
    for _ in range(4):
        before = len(calls)
        opt.step(closure)
        per_step.append(len(calls) - before)
    assert per_step == [1, 2, 1, 2]  # "roughly twice as much time" on SAM steps


def test_sam_rho_negative_and_interval_zero_rejected() -> None:
    base = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(ValueError, match="rho"):
        F.SAMOptimizer(base, rho=-0.1)
    with pytest.raises(ValueError, match="interval must be >= 1"):
        F.SAMOptimizer(base, interval=0)


def test_sam_rho_must_be_greater_than_0() -> None:
    base = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(ValueError, match="rho"):
        F.SAMOptimizer(base, rho=0)


# =============================================================================================
# ScaleSchedule(ratio, method='epoch'); scale_scheduler(scheduler, ssr, orig_max_epochs)
# =============================================================================================


def sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)


lrs = torch.optim.lr_scheduler


@pytest.mark.parametrize("ssr", [0.5, 2.0])
def test_scale_scheduler_the_five_seed_schedulers(ssr) -> None:
    step = F.scale_scheduler(lrs.StepLR(sgd(), step_size=10), ssr)
    assert step.step_size == 10 * ssr
    multi = F.scale_scheduler(lrs.MultiStepLR(sgd(), milestones=[30, 60]), ssr)
    assert sorted(multi.milestones) == [30 * ssr, 60 * ssr]
    cos = F.scale_scheduler(lrs.CosineAnnealingLR(sgd(), T_max=100), ssr)
    assert cos.T_max == 100 * ssr
    warm = F.scale_scheduler(lrs.CosineAnnealingWarmRestarts(sgd(), T_0=10), ssr)
    assert warm.T_0 == 10 * ssr
    exp = F.scale_scheduler(lrs.ExponentialLR(sgd(), gamma=0.9), ssr)
    assert exp.gamma == pytest.approx(0.9 ** (1 / ssr))


def test_scale_schedule_seed_example_half_as_long_cosine() -> None:
    """Seed: half the training without rescaling ends at lr ~0.5; rescaled, at 0.01 or less."""
    plain, scaled = lrs.CosineAnnealingLR(sgd(), T_max=100), lrs.CosineAnnealingLR(sgd(), T_max=100)
    F.scale_scheduler(scaled, 0.5)
    for _ in range(50):
        plain.optimizer.step()
        plain.step()
        scaled.optimizer.step()
        scaled.step()
    assert plain.get_last_lr()[0] == pytest.approx(0.5)
    assert scaled.get_last_lr()[0] <= 0.01


def test_scale_scheduler_orig_max_epochs() -> None:
    cos = F.scale_scheduler(lrs.CosineAnnealingLR(sgd(), T_max=90), 0.5, orig_max_epochs=90)
    assert cos.T_max == 45


def test_scale_scheduler_raises_for_unsupported_and_for_zero() -> None:
    with pytest.raises(ValueError, match="does not support"):
        F.scale_scheduler(lrs.LambdaLR(sgd(), lambda e: 1.0), 0.5)
    with pytest.raises(ValueError, match="rounds to 0"):
        F.scale_scheduler(lrs.StepLR(sgd(), step_size=1), 0.1)


# =============================================================================================
# SelectiveBackprop(start, end, keep, scale_factor, interrupt)
# =============================================================================================


def test_should_selective_backprop_start_end_and_interrupt() -> None:
    assert not F.should_selective_backprop(0.1, 0, start=0.5, end=0.9, interrupt=0)
    assert not F.should_selective_backprop(0.9, 0, start=0.5, end=0.9, interrupt=0)
    every = [F.should_selective_backprop(0.6, i, 0.5, 0.9, 0) for i in range(4)]
    assert every == [True] * 4  # interrupt=0: SB at every step of the interval
    alternate = [F.should_selective_backprop(0.6, i, 0.5, 0.9, 2) for i in range(4)]
    assert alternate == [True, False, True, False]  # interrupt=2: alternates with plain steps


def test_select_using_loss_keep_and_scale_factor() -> None:
    torch.manual_seed(0)
    seen = []
    model = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 4))
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[-2:]))
    X = torch.randn(10, 3, 8, 8)
    y = torch.randint(0, 4, (10,))
    Xk, yk = F.select_using_loss(
        X,
        y,
        model,
        nn.functional.cross_entropy,
        keep=0.5,
        scale_factor=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert Xk.shape == (5, 3, 8, 8) and yk.shape == (5,)  # full-size inputs for the gradient
    assert seen == [torch.Size([4, 4])]  # the selection forward pass ran downsampled
    rows = [int(torch.nonzero((X == row).flatten(1).all(1))[0]) for row in Xk]
    assert len(set(rows)) == 5 and torch.equal(y[rows], yk)


@pytest.mark.parametrize("keep", [-0.1, 1.5])
def test_select_using_loss_keep_outside_0_1_rejected(keep) -> None:
    with pytest.raises(ValueError, match=r"keep must be in \[0.0, 1.0\]"):
        F.select_using_loss(
            torch.zeros(2, 3),
            torch.tensor([0, 1]),
            nn.Linear(3, 2),
            nn.functional.cross_entropy,
            keep,
        )


# =============================================================================================
# SqueezeExcite(latent_channels=64, min_channels=128); apply_se; SqueezeExcite2d;
# SqueezeExciteConv2d(*args, latent_channels=0.125, conv=None, **kwargs)
# =============================================================================================


def test_apply_se_min_channels_and_latent_channels() -> None:
    model = nn.Sequential(nn.Conv2d(8, 32, 1), nn.Conv2d(32, 32, 3), nn.Conv2d(32, 4, 1))
    F.apply_se(model, 0.25, 16)  # the seed's positional order: latent_channels, min_channels
    assert [type(m) for m in model] == [nn.Conv2d, F.SqueezeExciteConv2d, nn.Conv2d]
    assert model[1].se.fc1.out_features == 8  # 0.25 of 32 output channels
    model = F.apply_se(nn.Sequential(nn.Conv2d(32, 32, 3)), latent_channels=6, min_channels=32)
    assert model[0].se.fc1.out_features == 6
    assert defaults(F.apply_se, ["latent_channels", "min_channels"]) == dict(
        latent_channels=64, min_channels=128
    )


def test_squeeze_excite2d_rescales_each_channel() -> None:
    se = F.SqueezeExcite2d(num_features=16)  # latent_channels=0.125 -> 2
    assert se.fc1.out_features == 2
    x = torch.rand(2, 16, 5, 5) + 0.5
    ratio = se(x) / x
    torch.testing.assert_close(ratio, ratio[:, :, :1, :1].expand_as(ratio))  # one gate per channel
    assert torch.all((ratio > 0) & (ratio < 1))


def test_squeeze_excite_conv2d_constructor_latent_channels() -> None:
    conv = F.SqueezeExciteConv2d(8, 16, 3, padding=1, latent_channels=0.25)
    assert isinstance(conv, nn.Conv2d) and conv.se.fc1.out_features == 4
    x = torch.randn(2, 8, 6, 6)
    plain = nn.functional.conv2d(x, conv.weight, conv.bias, padding=1)
    torch.testing.assert_close(conv(x), conv.se(plain))


def test_squeeze_excite_conv2d_wraps_an_existing_conv() -> None:
    conv = nn.Conv2d(4, 8, 3, padding=1)
    se_conv = F.SqueezeExciteConv2d(latent_channels=0.5, conv=conv)
    assert se_conv.weight is conv.weight and se_conv.se.fc1.out_features == 4
    x = torch.randn(2, 4, 6, 6)
    torch.testing.assert_close(se_conv(x), se_conv.se(conv(x)))


# =============================================================================================
# StochasticDepth(stochastic_method, target_layer_name, drop_rate=0.2, drop_distribution='linear',
#                 drop_warmup=0.0, use_same_gpu_seed=True); apply_stochastic_depth;
# StochasticBottleneck
# =============================================================================================


def bottlenecks(n: int = 4) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*[Bottleneck(16, 4) for _ in range(n)])
    return model.eval()


def test_apply_stochastic_depth_seed_positional_call() -> None:
    model = F.apply_stochastic_depth(
        bottlenecks(), "block", "ResNetBottleneck", 0.2, "linear", True
    )
    assert all(isinstance(m, F.StochasticBottleneck) for m in model)
    assert defaults(
        F.apply_stochastic_depth, ["drop_rate", "drop_distribution", "use_same_gpu_seed"]
    ) == dict(drop_rate=0.2, drop_distribution="linear", use_same_gpu_seed=True)


@pytest.mark.parametrize(
    ("distribution", "rates"),
    [("linear", [0.1, 0.2, 0.3, 0.4]), ("uniform", [0.4, 0.4, 0.4, 0.4])],
)
def test_drop_distribution(distribution, rates) -> None:
    """'linear' rises with depth to drop_rate at the last block (p·l/L, l = 1..L: the first
    block gets p/L, as in Huang et al., not exactly 0); 'uniform' is drop_rate everywhere."""
    model = F.apply_stochastic_depth(
        bottlenecks(), "sample", "ResNetBottleneck", drop_rate=0.4, drop_distribution=distribution
    )
    assert [m.drop_rate for m in model] == pytest.approx(rates)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("drop_rate", 1.5),
        ("drop_rate", -0.1),
        ("drop_distribution", "cubic"),
        ("stochastic_method", "layer"),
    ],
)
def test_stochastic_depth_bad_settings_rejected(name, value) -> None:
    kwargs = dict(stochastic_method="block", target_layer_name="ResNetBottleneck")
    kwargs[name] = value
    with pytest.raises(ValueError, match=name):
        F.apply_stochastic_depth(bottlenecks(1), **kwargs)


def test_stochastic_method_block_drops_the_whole_batch_sample_drops_per_sample() -> None:
    x = torch.randn(64, 16, 4, 4, generator=torch.Generator().manual_seed(0))
    block_model = F.apply_stochastic_depth(
        bottlenecks(1), "block", "ResNetBottleneck", drop_rate=1.0, seed=0
    ).train()
    torch.testing.assert_close(block_model(x), torch.relu(x))  # branch always dropped
    sample_model = F.apply_stochastic_depth(
        bottlenecks(1), "sample", "ResNetBottleneck", drop_rate=0.5, seed=0
    ).train()
    with torch.no_grad():
        out = sample_model(x)
    dropped = torch.isclose(out, torch.relu(x)).flatten(1).all(1)
    assert 10 < int(dropped.sum()) < 54  # some samples dropped, others kept, in one batch


def test_stochastic_depth_evaluation_is_the_unmodified_model() -> None:
    """Contract (differs from the seed): inverted scaling, so eval output is exactly the
    original model's instead of the branch times (1 - p)."""
    x = torch.randn(2, 16, 4, 4, generator=torch.Generator().manual_seed(0))
    reference = bottlenecks()
    with torch.no_grad():
        expected = reference(x)
    model = F.apply_stochastic_depth(bottlenecks(), "block", "ResNetBottleneck", drop_rate=0.5)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), expected, rtol=0, atol=0)


def test_use_same_gpu_seed_is_a_bool() -> None:
    for value in (True, False):
        F.apply_stochastic_depth(
            bottlenecks(1), "block", "ResNetBottleneck", use_same_gpu_seed=value
        )
    with pytest.raises(TypeError, match="use_same_gpu_seed"):
        F.apply_stochastic_depth(bottlenecks(1), "block", "ResNetBottleneck", use_same_gpu_seed=1)


def test_target_layer_name_must_be_registered() -> None:
    """Seed: the name must be registered (its STOCHASTIC_LAYER_MAPPING); here
    ``F.STOCHASTIC_BLOCKS``, extended with ``F.register_stochastic_block``."""
    with pytest.raises(ValueError, match="target_layer_name must be one of"):
        F.apply_stochastic_depth(bottlenecks(1), "block", "ResNetBlock")

    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.body(x)

    class StochasticResidual(F.StochasticBlock, Residual):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.add_branch(x, lambda: self.body(x))

    F.register_stochastic_block("SeedParityResidual", Residual, StochasticResidual)
    try:
        model = F.apply_stochastic_depth(
            nn.Sequential(Residual(), Residual()), "block", "SeedParityResidual", drop_rate=0.4
        )
        assert [type(m) for m in model] == [StochasticResidual] * 2
        assert [m.drop_rate for m in model] == pytest.approx([0.2, 0.4])
    finally:
        del F.STOCHASTIC_BLOCKS["SeedParityResidual"]


def test_stochastic_bottleneck_layer_and_basic_block_target() -> None:
    block = F.StochasticBottleneck(16, 4, drop_rate=0.1)
    assert block.drop_rate == 0.1 and block(torch.randn(2, 16, 3, 3)).shape == (2, 16, 3, 3)
    model = F.apply_stochastic_depth(nn.Sequential(BasicBlock(8, 8)), "sample", "ResNetBasicBlock")
    assert isinstance(model[0], F.StochasticBasicBlock)


def test_drop_warmup_schedule() -> None:
    """Seed ``drop_warmup``: the drop rate rises linearly from 0 to ``drop_rate`` over the first
    ``drop_warmup`` of training, then stays there."""
    rate = F.stochastic_depth_drop_rate
    assert rate(0.0, drop_rate=0.2, drop_warmup=0.5) == 0.0
    assert rate(0.25, drop_rate=0.2, drop_warmup=0.5) == pytest.approx(0.1)
    assert rate(0.5, drop_rate=0.2, drop_warmup=0.5) == pytest.approx(0.2)
    assert rate(0.9, drop_rate=0.2, drop_warmup=0.5) == pytest.approx(0.2)
    assert rate(0.0, drop_rate=0.2, drop_warmup=0.0) == pytest.approx(0.2)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="drop_warmup"):
            rate(0.1, drop_rate=0.2, drop_warmup=bad)


@pytest.mark.parametrize(
    ("distribution", "rates"),
    [("linear", [0.025, 0.05, 0.075, 0.1]), ("uniform", [0.1, 0.1, 0.1, 0.1])],
)
def test_drop_rate_set_from_the_loop_keeps_the_distribution(distribution, rates) -> None:
    model = F.apply_stochastic_depth(
        bottlenecks(), "block", "ResNetBottleneck", drop_rate=0.4, drop_distribution=distribution
    )
    F.set_stochastic_depth_drop_rate(model, 0.1)
    assert [m.drop_rate for m in model] == pytest.approx(rates)


# =============================================================================================
# SWA(swa_start=0.8, anneal_epochs=10, swa_lr=None)
# =============================================================================================


def test_swa_swa_start_and_swa_lr() -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    swa = F.SWA(model, opt, total_steps=10, swa_start=0.8, swa_lr=0.05)
    for _ in range(10):
        opt.step()
        swa.step()
    assert swa.n_averaged == 2  # units 8 and 9: the last 20%
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    assert params(F.SWA)["anneal_steps"].default == 0  # the seed's anneal_epochs is unused
    with pytest.raises(ValueError, match="swa_start"):
        F.SWA(model, opt, total_steps=10, swa_start=1.0)


def test_swa_lr_none_keeps_the_learning_rate() -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    swa = F.SWA(model, opt, total_steps=4, swa_start=0.5, swa_lr=None)
    for _ in range(4):
        opt.step()
        swa.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5) and swa.n_averaged == 2


# =============================================================================================
# EMA(half_life, update_interval=None, train_with_ema_weights=False); ShadowModel(model);
# compute_ema(model, ema_model, smoothing=0.99)
# =============================================================================================


def test_compute_ema_seed_example() -> None:
    """The seed's example (with resnet18 for speed; the seed builds resnet50)."""
    from torchvision import models

    torch.manual_seed(0)
    model = models.resnet18()
    ema_model = models.resnet18()
    before = ema_model.fc.weight.detach().clone()
    F.compute_ema(model, ema_model, smoothing=0.9)
    torch.testing.assert_close(ema_model.fc.weight, 0.9 * before + 0.1 * model.fc.weight)


def test_compute_ema_formula_and_default_smoothing() -> None:
    assert params(F.compute_ema)["smoothing"].default == 0.99
    model, ema = nn.Linear(3, 2), nn.Linear(3, 2)
    old = ema.weight.detach().clone()
    F.compute_ema(model, ema)
    torch.testing.assert_close(ema.weight, 0.99 * old + 0.01 * model.weight)


@pytest.mark.parametrize("smoothing", [-0.1, 1.5])
def test_compute_ema_smoothing_outside_range_rejected(smoothing) -> None:
    """Seed: smoothing in (0, 1); here [0, 1]: the endpoints are the seed's half-life 0
    (no averaging) and infinity (no update)."""
    with pytest.raises(ValueError, match="smoothing"):
        F.compute_ema(nn.Linear(2, 2), nn.Linear(2, 2), smoothing)


def test_half_life_formula_and_its_inverse() -> None:
    for t in (1, 10, 50):
        s = F.ema_smoothing(t)
        assert s == pytest.approx(math.exp(-math.log(2) / t))
        assert -math.log(2) / math.log(s) == pytest.approx(t)
    assert F.ema_smoothing(50, 10) == pytest.approx(math.exp(-math.log(2) * 10 / 50))


def test_half_life_zero_means_no_averaging_infinite_means_no_update() -> None:
    model, ema = nn.Linear(2, 2), nn.Linear(2, 2)
    old = ema.weight.detach().clone()
    F.compute_ema(model, ema, F.ema_smoothing(math.inf))
    torch.testing.assert_close(ema.weight, old)
    F.compute_ema(model, ema, F.ema_smoothing(0))
    torch.testing.assert_close(ema.weight, model.weight)


def test_ema_seed_example_time_strings() -> None:
    """The seed's ``EMA(half_life='50ba', update_interval='1ba')``, in a loop."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    ema_model = nn.Linear(3, 1)
    ema_model.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    smoothing = F.ema_smoothing(half_life="50ba", update_interval="1ba")
    assert smoothing == pytest.approx(F.ema_smoothing(50, 1))
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 3)).pow(2).mean().backward()
        opt.step()
        F.compute_ema(model, ema_model, smoothing)
    assert not torch.equal(ema_model.weight, model.weight)


def test_ema_time_string_units_and_default_update_interval() -> None:
    assert F.ema_smoothing("1ep") == pytest.approx(F.ema_smoothing(1))
    assert F.ema_smoothing("50ba", "10ba") == pytest.approx(F.ema_smoothing(50, 10))
    assert F.ema_smoothing("0ba") == 0.0


@pytest.mark.parametrize(
    ("half_life", "update_interval"),
    [("50ba", "1ep"), ("1.5ba", "1ba"), ("50ba", "0.5ba"), ("50tok", "1tok"), ("ba", "1ba")],
)
def test_ema_time_string_errors(half_life, update_interval) -> None:
    """Units must match, values must be integers, units are 'ep' or 'ba'."""
    with pytest.raises(ValueError):
        F.ema_smoothing(half_life, update_interval)


def test_train_with_ema_weights_recipe() -> None:
    """Seed ``train_with_ema_weights=True``: after each EMA update the model trains on from the
    EMA weights; ``compute_ema(ema_model, model, smoothing=0.0)`` copies them back."""
    torch.manual_seed(0)
    model, ema = nn.Linear(3, 1), nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    F.compute_ema(model, ema, 0.5)
    F.compute_ema(ema, model, smoothing=0.0)
    for p, q in zip(model.parameters(), ema.parameters(), strict=True):
        assert torch.equal(p, q)


def test_train_with_ema_weights() -> None:
    """Seed ``train_with_ema_weights=True``: after the update the model holds the EMA weights."""
    torch.manual_seed(0)
    model, ema = nn.Linear(3, 1), nn.Linear(3, 1)
    w_model, w_ema = model.weight.detach().clone(), ema.weight.detach().clone()
    F.compute_ema(model, ema, 0.5, train_with_ema_weights=True)
    expected = 0.5 * w_ema + 0.5 * w_model
    torch.testing.assert_close(ema.weight.detach(), expected)
    torch.testing.assert_close(model.weight.detach(), expected)


def test_swap_ema_weights_in_place_and_context_manager() -> None:
    """Evaluation with the EMA weights without a third copy: swap in place, and swap back."""
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    ema = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    ema[1].running_mean.fill_(2.0)
    m0 = {k: v.clone() for k, v in model.state_dict().items()}
    e0 = {k: v.clone() for k, v in ema.state_dict().items()}
    w = model[0].weight
    F.swap_ema_weights(model, ema)
    assert model[0].weight is w  # the same Parameter objects: optimizers stay valid
    for k in m0:
        assert torch.equal(model.state_dict()[k], e0[k]) and torch.equal(ema.state_dict()[k], m0[k])
    F.swap_ema_weights(model, ema)
    with F.use_ema_weights(model, ema):
        assert torch.equal(model[1].running_mean, e0["1.running_mean"])
    for k in m0:
        assert torch.equal(model.state_dict()[k], m0[k])


def test_shadow_model_equivalent_is_a_state_dict() -> None:
    """Seed ``ShadowModel(model)`` (tracks parameters and buffers): a detached copy of the
    state dict is the lighter equivalent; ``compute_ema`` updates it in place."""
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.train()(torch.randn(8, 3))  # moves the running statistics
    with torch.no_grad():
        model[0].weight.add_(1.0)
    old = {k: v.clone() for k, v in shadow.items()}
    F.compute_ema(model, shadow, smoothing=0.5)
    for name in ("0.weight", "1.running_mean", "1.running_var"):
        torch.testing.assert_close(shadow[name], 0.5 * old[name] + 0.5 * model.state_dict()[name])
    assert shadow["1.num_batches_tracked"] == 1  # integer buffers are copied
    assert "state_dict" in (F.compute_ema.__doc__ or "")
