"""Every public name of the three packages, so that nothing disappears (or appears) silently.

The public names are those the contract (``shared/API.md``) promises plus this library's
extensions (more layers, registries, the SWA helper, ...). Changing either list is an API change.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

# The names the contract (shared/API.md) promises, package by package.
CONTRACT = {
    "surgery": [
        "replace_module_classes",
        "count_module_instances",
        "update_params_in_optimizer",
        "remap_state_dict",
        "NoEffectWarning",
    ],
    "functional": [
        # batch and label ops
        "gen_interpolation_lambda",
        "mixup_batch",
        "cutmix_batch",
        "cutout",
        "colout",
        "colout_batch",
        "blur_2d",
        "blurmax_pool2d",
        "resize_inputs",
        "smooth_labels",
        "select_using_loss",
        "should_selective_backprop",
        "apply_seq_length_warmup",
        # schedules
        "ema_smoothing",
        "progressive_resizing_scale",
        "seq_length_warmup_length",
        # model transforms
        "apply_blurpool",
        "apply_channels_last",
        "apply_ghost_batchnorm",
        "apply_se",
        "apply_squeeze_excite",
        "apply_stochastic_depth",
        "apply_alibi",
        "apply_factorization",
        "apply_weight_standardization",
        "apply_low_precision_layernorm",
        "apply_gated_linear_units",
        "glu_block_registry",
        "register_glu_block",
        "unregister_glu_block",
        "freeze_layers",
        # layers
        "BlurConv2d",
        "BlurMaxPool2d",
        "BlurPool2d",
        "SqueezeExcite2d",
        "SqueezeExciteConv2d",
        "GhostBatchNorm2d",
        "StochasticBottleneck",
        # training-state helpers
        "compute_ema",
        "SAMOptimizer",
        "scale_scheduler",
        "apply_gradient_clipping",
    ],
    "augment": [
        "AugMix",
        "RandAugment",
        "augment_and_mix",
        "randaugment",
        "augmentation_sets",
        "autocontrast",
        "equalize",
        "posterize",
        "rotate",
        "solarize",
        "shear_x",
        "shear_y",
        "translate_x",
        "translate_y",
        "color",
        "contrast",
        "brightness",
        "sharpness",
    ],
}

# What this library offers beyond the contract.
EXTENSIONS = {
    "surgery": [
        "ReplacementFunction",
        "OptimizerArg",
        "as_optimizer_list",
        "check_unwrapped",
        "fill_missing_entries",
        "replace_modules",
        "unwrap_model",
        "WRAPPER_PREFIXES",
    ],
    "functional": [
        "SWA",
        "apply_low_precision_groupnorm",
        "GhostBatchNorm1d",
        "GhostBatchNorm3d",
        "GhostBatchNormAct2d",
        "StochasticBlock",
        "StochasticBasicBlock",
        "FactorizedConv2d",
        "FactorizedLinear",
        "WeightStandardizer",
        "LowPrecisionLayerNorm",
        "LowPrecisionLayerNorm2d",
        "LowPrecisionGroupNorm",
        "GatedLinear",
        "AlibiMultiheadAttention",
        "DisabledPositionEmbedding",
        # registries and ALiBi building blocks
        "STOCHASTIC_BLOCKS",
        "register_stochastic_block",
        "unregister_stochastic_block",
        "register_alibi",
        "unregister_alibi",
        "alibi_registry",
        "AlibiContext",
        "AlibiBias",
        "alibi_bias",
        "alibi_slopes",
        # evaluation with EMA weights
        "swap_ema_weights",
        "use_ema_weights",
        # stochastic depth's drop_warmup (issue 14): a schedule and a per-step setter
        "stochastic_depth_drop_rate",
        "set_stochastic_depth_drop_rate",
        # Composer's gyro dropout and data-driven factorization (issue 31)
        "GyroDropoutLayer",
        "apply_gyro_dropout",
        "LowRankSolution",
        "factorize_conv2d",
        "factorize_matrix",
    ],
    "augment": [
        "color_original",
        "contrast_original",
        "brightness_original",
        "sharpness_original",
        # batched transforms for tensors on the device (augment/batched/)
        "BatchAugMix",
        "BatchRandAugment",
        "batch_augment_and_mix",
        "batch_randaugment",
    ],
}

PUBLIC = {package: CONTRACT[package] + EXTENSIONS[package] for package in CONTRACT}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_exactly_these(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    for name in PUBLIC[package]:
        assert hasattr(module, name), f"{package}.{name} is listed but missing"


@pytest.mark.parametrize("package", sorted(CONTRACT))
def test_contract_and_extensions_do_not_overlap(package):
    assert not set(CONTRACT[package]) & set(EXTENSIONS[package])
    assert len(set(PUBLIC[package])) == len(PUBLIC[package])


@pytest.mark.parametrize(
    ("package", "name"),
    [(p, n) for p, names in PUBLIC.items() for n in names],
)
def test_public_callables_are_documented(package, name):
    obj = getattr(importlib.import_module(package), name)
    if callable(obj) and (inspect.isfunction(obj) or inspect.isclass(obj)):
        assert inspect.getdoc(obj), f"{package}.{name} has no docstring"


def test_contract_signatures():
    """Argument names API.md fixes (data positional, options by keyword)."""
    import augment
    import functional as F
    import surgery

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(surgery.replace_module_classes)[:2] == ["model", "policies"]
    assert params(F.mixup_batch)[:5] == ["x", "y", "interpolation_lambda", "n_classes", "indices"]
    assert params(F.cutmix_batch)[:3] == ["x", "y", "n_classes"]
    assert params(F.cutout)[:3] == ["X", "n_holes", "length"]
    assert params(F.blur_2d) == ["input", "stride", "filter"]
    assert params(F.resize_inputs)[:5] == ["X", "y", "scale_factor", "mode", "resize_targets"]
    assert params(F.smooth_labels) == ["logits", "targets", "alpha"]
    assert params(F.select_using_loss)[:6] == [
        "X",
        "y",
        "model",
        "loss_fun",
        "keep",
        "scale_factor",
    ]
    assert params(F.should_selective_backprop) == [
        "current_duration",
        "batch_idx",
        "start",
        "end",
        "interrupt",
    ]
    assert params(F.compute_ema)[:3] == ["model", "ema_model", "smoothing"]
    assert params(F.SAMOptimizer)[:4] == ["base_optimizer", "rho", "epsilon", "interval"]
    assert params(F.scale_scheduler) == ["scheduler", "ssr", "orig_max_epochs"]
    assert params(F.apply_gradient_clipping) == [
        "parameters",
        "clipping_type",
        "clipping_threshold",
    ]
    assert params(F.freeze_layers)[:6] == [
        "model",
        "optimizers",
        "current_epoch",
        "max_epochs",
        "freeze_start",
        "freeze_level",
    ]
    assert params(F.apply_stochastic_depth)[:7] == [
        "model",
        "stochastic_method",
        "target_layer_name",
        "drop_rate",
        "drop_distribution",
        "use_same_gpu_seed",
        "optimizers",
    ]
    assert params(augment.AugMix)[:6] == [
        "severity",
        "depth",
        "width",
        "alpha",
        "augmentation_set",
        "rng",
    ]
    assert params(augment.RandAugment)[:4] == ["severity", "depth", "augmentation_set", "rng"]
