"""One registry type for every extension point of the library.

A :class:`Registry` maps keys (a class, a name) to values (a converter, a pair of classes) with
``register``, ``unregister`` and ``lookup``, a ``registered`` context manager for tests, and
read access as a mapping. Entries may also be *lazy*: keyed by a class of an optional
dependency that is only looked up once its module has been imported by someone else, so that
registering built-ins never imports the dependency.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["NotRegisteredError", "Registry"]

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()


class NotRegisteredError(KeyError, ValueError):
    """A key that is not registered: a ``KeyError`` (mapping access) and a ``ValueError`` (a bad
    argument to ``unregister``) at once, so either ``except`` clause catches it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(Mapping[K, V]):
    """An extension point: an ordered mapping of keys to values with explicit registration.

    Reading works as for a read-only mapping (``registry[key]``, ``key in registry``,
    iteration in registration order, ``len``, ``items()``); changes go through
    :meth:`register` and :meth:`unregister` (``del registry[key]`` is :meth:`unregister`).

    Args:
        what: what a value is, for messages (``"ALiBi converter"``: "GPT2Model already has an
            ALiBi converter; ...", "no ALiBi converter is registered for GPT2Model").
        check: called as ``check(key, value)`` before every registration; raises for a bad
            entry.

    Example:
        >>> blocks = Registry("block")
        >>> blocks.register("basic", int)
        <class 'int'>
        >>> blocks.lookup("basic"), blocks.lookup("other"), "basic" in blocks
        (<class 'int'>, None, True)
        >>> with blocks.registered("basic", float):
        ...     blocks["basic"]
        <class 'float'>
        >>> blocks.unregister("basic")
        <class 'int'>
        >>> blocks.unregister("basic")
        Traceback (most recent call last):
        ...
        functional._registry.NotRegisteredError: no block is registered for 'basic'
    """

    def __init__(self, what: str, *, check: Callable[[K, V], None] | None = None) -> None:
        self.what = what
        self._check = check
        self._entries: dict[K, V] = {}
        self._lazy: dict[tuple[str, str], V] = {}
        self._lazy_groups: dict[str, Callable[[], Mapping[K, V]]] = {}

    # -- changes ------------------------------------------------------------------------------

    def register(self, key: K, value: V, *, replace: bool = False) -> V:
        """Register ``value`` under ``key`` and return it.

        Raises:
            ValueError: ``key`` is registered already and ``replace`` is false.
            TypeError, ValueError: what ``check`` raises for a bad entry (checked first).
        """
        if self._check is not None:
            self._check(key, value)
        self._resolve()
        if not replace and key in self._entries:
            article = "an" if self.what[:1].lower() in "aeiou" else "a"
            raise ValueError(
                f"{_describe(key)} already has {article} {self.what}; pass replace=True to "
                "replace it"
            )
        self._entries[key] = value
        return value

    def register_lazy(self, module: str, attribute: str, value: V) -> None:
        """Register ``value`` under ``getattr(sys.modules[module], attribute)``, once that module
        has been imported (by anyone; this never imports it).

        The entry resolves at the first read after the import and never replaces a key
        registered by then; unregistering the resolved key removes it for good.
        """
        self._lazy[(module, attribute)] = value

    def register_lazy_group(self, module: str, load: Callable[[], Mapping[K, V]]) -> None:
        """Register the entries ``load()`` returns once ``module`` has been imported (by anyone;
        this never imports it): for built-ins whose values are made from an optional
        dependency's classes.

        ``load`` is called once, at the first read after the import, and its entries never
        replace keys registered by then; unregistering one of them removes it for good.
        """
        self._lazy_groups[module] = load

    def unregister(self, key: K) -> V:
        """Remove ``key`` and return its value.

        Raises:
            NotRegisteredError: ``key`` is not registered (a ``KeyError`` and a ``ValueError``).
        """
        self._resolve()
        if key not in self._entries:
            raise NotRegisteredError(f"no {self.what} is registered for {_describe(key)}")
        return self._entries.pop(key)

    def __delitem__(self, key: K) -> None:
        self.unregister(key)

    @contextlib.contextmanager
    def registered(self, key: K, value: V) -> Iterator[V]:
        """Register ``value`` under ``key`` (replacing any entry) for the ``with`` block; on exit
        the key has its previous value again, or is absent if it was."""
        self._resolve()
        previous = self._entries.get(key, _MISSING)
        self.register(key, value, replace=True)
        try:
            yield value
        finally:
            if previous is _MISSING:
                self._entries.pop(key, None)
            else:
                self._entries[key] = previous

    # -- reads --------------------------------------------------------------------------------

    def lookup(self, key: K) -> V | None:
        """The value registered under ``key``, or ``None``."""
        self._resolve()
        return self._entries.get(key)

    def snapshot(self) -> dict[K, V]:
        """A copy of the entries, in registration order."""
        self._resolve()
        return dict(self._entries)

    def __getitem__(self, key: K) -> V:
        self._resolve()
        try:
            return self._entries[key]
        except KeyError:
            raise NotRegisteredError(f"no {self.what} is registered for {_describe(key)}") from None

    def __contains__(self, key: object) -> bool:
        self._resolve()
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        self._resolve()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._resolve()
        return len(self._entries)

    def __repr__(self) -> str:
        keys = ", ".join(_describe(key) for key in self)
        return f"Registry({self.what!r}: {keys})"

    def _resolve(self) -> None:
        """Turn the lazy entries whose module is now imported into ordinary ones."""
        if self._lazy_groups:
            self._resolve_groups()
        if not self._lazy:
            return
        for spec in list(self._lazy):
            module = sys.modules.get(spec[0])
            key = getattr(module, spec[1], None) if module is not None else None
            if key is not None:  # absent: not imported yet, or still importing
                value = self._lazy.pop(spec)
                self._entries.setdefault(key, value)

    def _resolve_groups(self) -> None:
        for name in list(self._lazy_groups):
            module = sys.modules.get(name)
            spec = getattr(module, "__spec__", None)
            if module is None or getattr(spec, "_initializing", False):
                continue  # not imported yet, or still importing
            for key, value in self._lazy_groups.pop(name)().items():
                self._entries.setdefault(key, value)


def _describe(key: object) -> str:
    return key.__qualname__ if isinstance(key, type) else repr(key)
