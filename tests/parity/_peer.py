"""Composer's algorithms package for the side-by-side checks of this folder.

Through the folder's ``composer`` fixture (``conftest.py``: Composer from the ``.peers``
folders) where it exists, else from ``sys.path`` (``PYTHONPATH=.peers``); the test skips when
Composer cannot be imported.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def composer_algorithms(request: pytest.FixtureRequest) -> ModuleType:
    try:
        request.getfixturevalue("composer")
    except pytest.FixtureLookupError:
        pytest.importorskip("composer.functional")
    return importlib.import_module("composer.algorithms")
