"""The ``apply_*`` model transforms return the type they were given (issue 22, item 5), so that
``model = F.apply_blurpool(model)`` keeps ``model``'s class for a type checker."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from torch import nn

import functional as F

ROOT = Path(__file__).resolve().parents[2]


def _model_transforms() -> dict[str, inspect.Signature]:
    """Every public function that takes ``model`` first and returns a module."""
    found = {}
    for name in F.__all__:
        obj = getattr(F, name)
        if not inspect.isfunction(obj):
            continue
        signature = inspect.signature(obj)
        first = next(iter(signature.parameters.values()), None)
        if first is None or first.name != "model":
            continue
        returned = signature.return_annotation
        if returned in ("nn.Module", "torch.nn.Module") or returned == first.annotation:
            found[name] = signature
    return found


def test_every_model_transform_returns_the_type_it_was_given():
    transforms = _model_transforms()
    assert {"apply_blurpool", "apply_alibi", "apply_stochastic_depth"} <= set(transforms)
    for name, signature in transforms.items():
        annotation = signature.parameters["model"].annotation
        assert signature.return_annotation == annotation, (name, str(signature))
        type_var = getattr(F, name).__globals__.get(annotation)
        assert isinstance(type_var, TypeVar) and type_var.__bound__ is nn.Module, (
            f"{name}{signature}: `model` and the return should be one TypeVar bound to nn.Module"
        )


# Checked by mypy with the project's configuration: a user's own model class goes through
# every transform and comes out as itself; the last line is the one error mypy must report
# (so the check cannot pass by seeing ``Any`` everywhere).
SNIPPET = textwrap.dedent(
    """
    import torch
    from torch import nn

    import functional as F


    class Net(nn.Module):
        pass


    net = Net()
    net = F.apply_alibi(net, 128)
    net = F.apply_blurpool(net)
    net = F.apply_channels_last(net)
    net = F.apply_factorization(net)
    net = F.apply_gated_linear_units(net)
    net = F.apply_ghost_batchnorm(net)
    net = F.apply_gyro_dropout(net, 100, 10)
    net = F.apply_low_precision_groupnorm(net, torch.bfloat16)
    net = F.apply_low_precision_layernorm(net, torch.bfloat16)
    net = F.apply_se(net)
    net = F.apply_squeeze_excite(net)
    net = F.apply_stochastic_depth(net, "block", "ResNetBottleneck")
    net = F.apply_weight_standardization(net)
    reveal_type(F.apply_blurpool(net))
    not_a_model: int = F.apply_blurpool(net)
    """
)


@pytest.mark.slow
def test_mypy_sees_the_class_kept(tmp_path):
    """Slow on a cold mypy cache (torch's stubs); ``make lint`` runs first in CI and leaves the
    cache warm in the project root, where this check reuses it."""
    missing = [name for name in _model_transforms() if f"F.{name}(" not in SNIPPET]
    assert not missing, f"add {missing} to the snippet"
    snippet = tmp_path / "user_code.py"
    snippet.write_text(SNIPPET)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = run.stdout.splitlines()
    errors = [line for line in lines if ": error:" in line]
    last = len(SNIPPET.strip().splitlines()) + 1  # the file starts with the dedented newline
    # mypy's cache may replay the module's result under the path of an earlier run's tmp dir
    # (same content, same module name): compare the file name and line only.
    where = errors[0].split(": error:")[0].rsplit(":", 1) if len(errors) == 1 else ["", ""]
    assert len(errors) == 1 and where[0].endswith(snippet.name) and where[1] == str(last), (
        run.stdout
    )
    assert 'expression has type "Net"' in errors[0], errors[0]
    assert any(re.search(r'Revealed type is "user_code\.Net"', line) for line in lines), run.stdout


# The apply_* functions that act on one training step, not on a model: they take no
# optimizers (issue 33 §4); their docstrings say they are not model transforms.
_PER_STEP_OPS = {"apply_gradient_clipping", "apply_seq_length_warmup"}


def test_every_model_transform_accepts_optimizers():
    """README and getting started promise ``optimizers=`` on every ``apply_*`` model transform."""
    transforms = _model_transforms()
    applies = {name for name in F.__all__ if name.startswith("apply_")}
    assert applies - set(transforms) == _PER_STEP_OPS
    for name in sorted(_PER_STEP_OPS):
        doc = " ".join((inspect.getdoc(getattr(F, name)) or "").split())
        assert "not a model transform" in doc, f"{name}'s docstring should say so"
    for name, signature in transforms.items():
        parameter = signature.parameters.get("optimizers")
        assert parameter is not None, f"{name}{signature} takes no optimizers="
        assert parameter.default is None and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ), f"{name}{signature}"


@pytest.mark.parametrize("name", ["apply_channels_last", "apply_weight_standardization"])
def test_optimizers_work_where_they_raised_type_error(name):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    assert getattr(F, name)(model, optimizers=[opt]) is model
    assert [p for g in opt.param_groups for p in g["params"]] == params
    with pytest.raises(TypeError, match="optimizers"):
        getattr(F, name)(model, optimizers=model)
