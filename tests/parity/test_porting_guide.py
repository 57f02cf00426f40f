"""The porting guide (docs/guides/porting.md) checked against Composer 0.32.1 and this library.

Each section ``## `name``` ports one Composer name. Every one of Composer's arguments must be
mapped in its section, the Composer signature it shows must be Composer's, and every call of
this library in its code must exist with the argument names it uses.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import augment
import functional as F

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "porting.md"

# Composer 0.32.1's parameters, transcribed so that the guide is checked without Composer; the
# test below compares them with Composer itself where it is installed.
COMPOSER_PARAMETERS: dict[str, list[str]] = {
    "apply_alibi": ["model", "max_sequence_length", "optimizers"],
    "augmix_image": ["img", "severity", "depth", "width", "alpha", "augmentation_set"],
    "apply_blurpool": [
        "model",
        "replace_convs",
        "replace_maxpools",
        "blur_first",
        "min_channels",
        "optimizers",
    ],
    "apply_channels_last": ["model"],
    "colout_batch": ["sample", "p_row", "p_col", "resize_target"],
    "compute_ema": ["model", "ema_model", "smoothing"],
    "cutmix_batch": ["input", "target", "length", "alpha", "bbox", "indices", "uniform_sampling"],
    "cutout_batch": ["input", "num_holes", "length", "uniform_sampling"],
    "apply_factorization": [
        "model",
        "factorize_convs",
        "factorize_linears",
        "min_channels",
        "latent_channels",
        "min_features",
        "latent_features",
        "optimizers",
    ],
    "apply_gated_linear_units": [
        "model",
        "optimizers",
        "act_fn",
        "gated_layer_bias",
        "non_gated_layer_bias",
    ],
    "apply_ghost_batchnorm": ["model", "ghost_batch_size", "optimizers"],
    "apply_gradient_clipping": ["model", "clipping_type", "clipping_threshold", "fsdp_enabled"],
    "apply_low_precision_layernorm": ["model", "precision", "optimizers"],
    "apply_low_precision_groupnorm": ["model", "precision", "optimizers"],
    "smooth_labels": ["logits", "target", "smoothing"],
    "freeze_layers": ["model", "optimizers", "current_duration", "freeze_start", "freeze_level"],
    "mixup_batch": ["input", "target", "mixing", "alpha", "indices"],
    "resize_batch": ["input", "target", "scale_factor", "mode", "resize_targets"],
    "randaugment_image": ["img", "severity", "depth", "augmentation_set"],
    "should_selective_backprop": ["current_duration", "batch_idx", "start", "end", "interrupt"],
    "select_using_loss": ["input", "target", "model", "loss_fun", "keep", "scale_factor"],
    "set_batch_sequence_length": ["batch", "curr_seq_len", "truncate", "preserve_end_of_sequence"],
    "apply_squeeze_excite": ["model", "latent_channels", "min_channels", "optimizers"],
    "apply_stochastic_depth": [
        "model",
        "target_layer_name",
        "stochastic_method",
        "drop_rate",
        "drop_distribution",
    ],
    "apply_weight_standardization": ["module", "n_last_layers_ignore"],
    "apply_gyro_dropout": ["model", "iters_per_epoch", "max_epoch", "p", "sigma", "tau"],
}
COMPOSER_ALGORITHMS: dict[str, list[str]] = {
    "SAM": ["rho", "epsilon", "interval"],
    "SWA": [
        "swa_start",
        "swa_end",
        "update_interval",
        "schedule_swa_lr",
        "anneal_strategy",
        "anneal_steps",
        "swa_lr",
    ],
    "EMA": ["half_life", "smoothing", "ema_start", "update_interval"],
}


def sections() -> dict[str, str]:
    """``{name: text}`` for each ``## `name``` section of the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    parts = re.split(r"^## `(\w+)`\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_one_section_per_composer_name_in_composer_order() -> None:
    assert list(sections()) == [*COMPOSER_PARAMETERS, *COMPOSER_ALGORITHMS]


@pytest.mark.parametrize("name", [*COMPOSER_PARAMETERS, *COMPOSER_ALGORITHMS])
def test_every_composer_argument_is_shown_and_mapped(name: str) -> None:
    """The section shows Composer's signature with each argument, in order, and maps each one
    in its "Arguments" list (a bullet that starts with it)."""
    text = sections()[name]
    expected = {**COMPOSER_PARAMETERS, **COMPOSER_ALGORITHMS}[name]
    shown = re.search(r"^Composer 0\.32\.1: `(\w+)\(([^`]*)\)`", text, flags=re.MULTILINE)
    assert shown is not None and shown.group(1) == name, f"{name}: no Composer signature line"
    shown_names = re.findall(r"(?:^|, )(\*{0,2}\w+)", shown.group(2))
    assert [n for n in shown_names if not n.startswith("*")] == expected
    arguments = text.split("Arguments:", 1)[1].split("Differences:", 1)[0]
    mapped = set(re.findall(r"`(\w+)` →", arguments))  # `composer_name` → ours
    bullets = re.sub(r"\n  (?=\S)", " ", arguments).splitlines()  # one line per bullet
    for line in bullets:  # - `a`, `b`, `c`: same names and meaning
        if line.startswith("- "):
            mapped |= set(re.findall(r"`(\w+)`", re.split(r"→|: ", line, maxsplit=1)[0]))
    assert not [p for p in expected if p not in mapped], f"{name}: unmapped"


def _calls(code: str):
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in ("F", "augment"):
                yield {"F": F, "augment": augment}[owner.id], node


@pytest.mark.parametrize("name", [*COMPOSER_PARAMETERS, *COMPOSER_ALGORITHMS])
def test_the_ported_code_calls_what_exists(name: str) -> None:
    """The section has its before/after pair (blocks shown, not run: the docs test runs only
    plain ```python fences), and each ``F.x(...)``/``augment.x(...)`` in the "here" block
    exists and binds the positional and keyword arguments the block passes."""
    code = re.findall(r"```{code-block} python\n(# \w+)\n(.*?)```", sections()[name], re.DOTALL)
    assert [label for label, _ in code] == ["# Composer", "# here"], f"{name}: a code pair"
    blocks = [block for _, block in code[1:]]
    ast.parse(code[0][1])  # the Composer code is Python too
    for module, call in _calls(blocks[0]):
        attr = call.func.attr  # type: ignore[attr-defined]
        assert hasattr(module, attr), f"{name}: {module.__name__}.{attr} does not exist"
        signature = inspect.signature(getattr(module, attr))
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for keyword in call.keywords:
            assert keyword.arg in signature.parameters or takes_kwargs, (
                f"{name}: {attr}() has no {keyword.arg!r}"
            )
        if not any(isinstance(a, ast.Starred) for a in call.args) and all(call.keywords):
            try:  # as many positional arguments as it takes, none twice, none missing
                signature.bind(*call.args, **{k.arg: k.value for k in call.keywords})  # type: ignore[misc]
            except TypeError as error:
                raise AssertionError(f"{name}: {attr}(): {error}") from None


def test_the_transcribed_signatures_are_composers(composer: ModuleType) -> None:
    import composer.algorithms as algorithms

    for name, expected in COMPOSER_PARAMETERS.items():
        assert list(inspect.signature(getattr(composer, name)).parameters) == expected, name
    for name, expected in COMPOSER_ALGORITHMS.items():
        assert list(inspect.signature(getattr(algorithms, name)).parameters) == expected, name
    assert sorted(composer.__all__) == sorted(COMPOSER_PARAMETERS)


def _shown_parameters(arguments: str) -> list[tuple[str, str | None]]:
    """``[(name, default text or None)]`` of a signature written as ``a, b=1, *, c='x'``."""
    parts, depth, quote, current = [], 0, "", ""
    for char in arguments:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    parts.append(current)
    shown = []
    for part in filter(str.strip, parts):
        name, _, default = part.strip().partition("=")
        shown.append((name.strip(), default.strip() or None))
    return shown


def _real_parameters(function: object) -> list[tuple[str, str | None]]:
    real: list[tuple[str, str | None]] = []
    for parameter in inspect.signature(function).parameters.values():  # type: ignore[arg-type]
        if parameter.kind is parameter.KEYWORD_ONLY and ("*", None) not in real:
            real.append(("*", None))
        prefix = {parameter.VAR_POSITIONAL: "*", parameter.VAR_KEYWORD: "**"}
        default = None if parameter.default is parameter.empty else repr(parameter.default)
        real.append((prefix.get(parameter.kind, "") + parameter.name, default))  # type: ignore[call-overload]
    return real


@pytest.mark.parametrize("name", [*COMPOSER_PARAMETERS, *COMPOSER_ALGORITHMS])
def test_the_signatures_shown_here_are_the_real_ones(name: str) -> None:
    """Each ``F.x(...)``/``augment.x(...)`` signature of the section's "Here:" paragraph has the
    function's parameters in order, its keyword-only marker, and its defaults where shown."""
    here = re.search(r"^Here: (.*?)\n\n", sections()[name], flags=re.MULTILINE | re.DOTALL)
    assert here is not None, f"{name}: no 'Here:' paragraph"
    shown_any = False
    for owner, attr, arguments in re.findall(r"`(F|augment)\.([\w.]+)\(([^`]*)\)`", here.group(1)):
        function: object = {"F": F, "augment": augment}[owner]
        for part in attr.split("."):
            function = getattr(function, part)
        real = _real_parameters(function)
        shown = _shown_parameters(arguments)
        assert [n for n, _ in shown] == [n for n, _ in real], f"{name}: {attr} parameters"
        for (parameter, default), (_, real_default) in zip(shown, real, strict=True):
            assert default in (None, "...", real_default), f"{name}: {attr}({parameter}=)"
        shown_any = True
    assert shown_any, f"{name}: no signature of this library in 'Here:'"
