"""The ``composer`` fixture: Composer 0.32.1's ``composer.functional`` when it is installed.

Composer and its dependencies live outside the library's environment, in a ``.peers`` folder
(``make peers``). Those folders go to the *end* of ``sys.path``, and only while Composer is
imported, so that nothing this library imports can come from them.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

PEER_FOLDERS = (Path(__file__).resolve().parents[2] / ".peers", Path("/work/main/.peers"))


def _import_composer() -> ModuleType:
    added = [str(p) for p in PEER_FOLDERS if p.is_dir() and str(p) not in sys.path]
    sys.path.extend(added)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module("composer.functional")
    finally:
        for path in added:
            sys.path.remove(path)


@pytest.fixture(scope="session")
def composer() -> ModuleType:
    """``composer.functional``, or skip: Composer is not installed (``make peers`` installs it)."""
    try:
        return _import_composer()
    except ImportError as error:
        pytest.skip(f"Composer is not installed here (run `make peers`): {error}")
