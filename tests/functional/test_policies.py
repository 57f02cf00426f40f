"""``functional._policies.NoEffectReport``: the warnings a model transform owes, in one order."""

from __future__ import annotations

import warnings

import pytest

from functional._policies import NoEffectReport
from surgery import NoEffectWarning

REPORT = NoEffectReport(
    "apply_demo",
    looked_for="demo layer",
    skipped="left these modules alone: {names}. Register them",
    separator="; ",
)


def messages(**run) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        REPORT.warn(**run)
    assert all(issubclass(w.category, NoEffectWarning) for w in caught)
    return [str(w.message) for w in caught]


def test_changed_and_nothing_skipped_is_silent():
    assert messages(changed=True) == []
    assert messages(changed=True, already="it was done before") == []


def test_skipped_names_sorted_distinct_and_joined_even_when_something_changed():
    assert messages(changed=True, skipped=["B", "A", "B"]) == [
        "apply_demo left these modules alone: A; B. Register them"
    ]


def test_nothing_changed_already_converted_comes_after_the_skipped():
    assert messages(changed=False, skipped=["A"], already="the model is converted") == [
        "apply_demo left these modules alone: A. Register them",
        "apply_demo changed nothing: the model is converted",
    ]


def test_nothing_found_at_all_is_warn_no_effect_and_a_callable_is_called_only_then():
    calls = []

    def looked_for() -> str:
        calls.append(1)
        return "layer made on demand"

    lazy = NoEffectReport("apply_demo", looked_for=looked_for, skipped="{names}")
    with pytest.warns(NoEffectWarning) as record:
        lazy.warn(changed=False)
    assert [str(w.message) for w in record] == [
        "apply_demo changed nothing: the model has no layer made on demand"
    ]
    lazy.warn(changed=True)
    with pytest.warns(NoEffectWarning):
        lazy.warn(changed=False, skipped=["A"])
    assert calls == [1]
    assert messages(changed=False) == ["apply_demo changed nothing: the model has no demo layer"]


def test_stacklevel_points_at_the_transform_caller():
    def apply_demo() -> None:
        REPORT.warn(changed=False)  # default stacklevel: the caller of apply_demo

    with pytest.warns(NoEffectWarning) as record:
        apply_demo()
    assert record[0].filename == __file__
    assert (
        record[0].lineno
        == test_stacklevel_points_at_the_transform_caller.__code__.co_firstlineno + 5
    )
