"""The one registry type behind every extension point (``functional._registry.Registry``)."""

from __future__ import annotations

import sys
import types

import pytest
from torch import nn

from functional._registry import NotRegisteredError, Registry


def test_register_lookup_contains_and_order():
    registry: Registry[str, int] = Registry("number")
    assert registry.register("one", 1) == 1
    registry.register("two", 2)
    assert registry.lookup("one") == 1 and registry.lookup("three") is None
    assert "two" in registry and "three" not in registry
    assert list(registry) == ["one", "two"] and len(registry) == 2
    assert list(registry.items()) == [("one", 1), ("two", 2)]
    assert registry["two"] == 2


def test_duplicate_refused_unless_replace():
    registry: Registry[type, str] = Registry("ALiBi converter")
    registry.register(nn.Linear, "a")
    with pytest.raises(
        ValueError, match="Linear already has an ALiBi converter; pass replace=True"
    ):
        registry.register(nn.Linear, "b")
    assert registry[nn.Linear] == "a"
    registry.register(nn.Linear, "b", replace=True)
    assert registry[nn.Linear] == "b"
    blocks: Registry[str, int] = Registry("stochastic block")
    blocks.register("x", 1)
    with pytest.raises(ValueError, match="'x' already has a stochastic block"):
        blocks.register("x", 1)


def test_unregister_and_missing_keys():
    registry: Registry[str, int] = Registry("number")
    registry.register("one", 1)
    assert registry.unregister("one") == 1
    assert "one" not in registry
    for error in (KeyError, ValueError):  # either except clause catches a missing key
        with pytest.raises(error, match="no number is registered for 'one'"):
            registry.unregister("one")
        with pytest.raises(error, match="no number is registered for 'one'"):
            registry["one"]
    assert str(NotRegisteredError("plain message")) == "plain message"  # not KeyError's quotes
    assert registry.get("one", 7) == 7
    registry.register("two", 2)
    del registry["two"]
    assert len(registry) == 0


def test_snapshot_is_a_copy():
    registry: Registry[str, int] = Registry("number")
    registry.register("one", 1)
    snapshot = registry.snapshot()
    snapshot["two"] = 2
    registry.unregister("one")
    assert snapshot == {"one": 1, "two": 2} and registry.snapshot() == {}


def test_registered_restores_the_previous_state_even_after_an_error():
    registry: Registry[str, int] = Registry("number")
    registry.register("kept", 1)
    with registry.registered("kept", 10) as value:
        assert value == 10 and registry["kept"] == 10
    assert registry["kept"] == 1
    with pytest.raises(RuntimeError), registry.registered("temporary", 3):
        assert registry["temporary"] == 3
        raise RuntimeError("test body failed")
    assert "temporary" not in registry
    assert registry.snapshot() == {"kept": 1}


def test_check_runs_before_every_registration():
    def positive(key: str, value: int) -> None:
        if value <= 0:
            raise ValueError(f"value must be > 0, got {value}")

    registry: Registry[str, int] = Registry("number", check=positive)
    with pytest.raises(ValueError, match="value must be > 0, got 0"):
        registry.register("zero", 0)
    with pytest.raises(ValueError, match="value must be > 0"), registry.registered("zero", 0):
        pass
    assert "zero" not in registry


def test_lazy_entries_resolve_once_their_module_is_imported(monkeypatch):
    registry: Registry[type, str] = Registry("converter")
    name = "tests_registry_fake_optional_dependency"
    registry.register_lazy(name, "Model", "built-in")
    assert len(registry) == 0  # nothing imported: nothing resolved, nothing imported by us
    assert name not in sys.modules
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    assert len(registry) == 0  # still importing: the class is not defined yet

    class Model(nn.Module):
        pass

    module.Model = Model
    assert registry.lookup(Model) == "built-in"
    assert list(registry) == [Model]
    registry.unregister(Model)  # removing a resolved built-in removes it for good
    assert Model not in registry and len(registry) == 0


def test_lazy_entry_does_not_override_a_user_registration(monkeypatch):
    name = "tests_registry_fake_optional_dependency_2"
    module = types.ModuleType(name)

    class Model(nn.Module):
        pass

    module.Model = Model
    registry: Registry[type, str] = Registry("converter")
    registry.register_lazy(name, "Model", "built-in")
    registry.register(Model, "user's")  # before the module is imported
    monkeypatch.setitem(sys.modules, name, module)
    assert registry[Model] == "user's" and len(registry) == 1


def test_lazy_group_loads_once_after_the_import_and_never_overrides(monkeypatch):
    """``register_lazy_group``: the loader runs at the first read after its module is imported
    (never while it is importing, never before), once; its entries yield to keys registered
    by then, and an unregistered one stays removed."""
    name = "tests_registry_fake_optional_dependency_3"
    calls: list[int] = []

    def load() -> dict[str, str]:
        calls.append(1)
        return {"a": "built-in a", "b": "built-in b"}

    registry: Registry[str, str] = Registry("block")
    registry.register_lazy_group(name, load)
    registry.register("b", "user's b")
    assert list(registry) == ["b"] and calls == []
    module = types.ModuleType(name)
    module.__spec__ = types.SimpleNamespace(_initializing=True)
    monkeypatch.setitem(sys.modules, name, module)
    assert "a" not in registry and calls == []  # still importing
    module.__spec__._initializing = False
    assert registry.snapshot() == {"b": "user's b", "a": "built-in a"} and calls == [1]
    registry.unregister("a")
    assert "a" not in registry and list(registry) == ["b"] and calls == [1]


def test_repr_names_the_keys():
    registry: Registry[type, int] = Registry("converter")
    registry.register(nn.Linear, 1)
    registry.register(nn.Conv2d, 2)
    assert repr(registry) == "Registry('converter': Linear, Conv2d)"
