"""Test-suite configuration: Hypothesis profiles and replayable torch randomness.

Choose the Hypothesis profile with ``HYPOTHESIS_PROFILE`` (``ci`` is the default and what
``make test`` uses; ``dev`` runs fewer examples for a quick local loop; ``thorough`` many more).
Every test starts from ``torch.manual_seed(TEST_TORCH_SEED)`` (default 0); run the suite again
with another value, and with ``--hypothesis-seed=N``, to check that no test depends on one draw:
``make test TEST_TORCH_SEED=7 PYTEST_ARGS=--hypothesis-seed=7``.

Tests marked ``cuda`` run only where CUDA is available (the GPU lane); elsewhere they are
skipped with that reason.
"""

from __future__ import annotations

import os
import warnings

# Tiny ops on a busy 2-core machine: spinning OpenMP threads waste the other core. Must be set
# before torch initialises OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import hypothesis
import pytest
import torch

hypothesis.settings.register_profile(
    "ci",
    deadline=None,
    print_blob=True,
    max_examples=25,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.register_profile(
    "dev", deadline=None, max_examples=10, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.register_profile("thorough", deadline=None, print_blob=True, max_examples=300)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class _TorchGlobalRandom:
    """Adapter so Hypothesis seeds and restores torch's global RNG around every example."""

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def getstate(self) -> torch.Tensor:
        return torch.get_rng_state()

    def setstate(self, state: torch.Tensor) -> None:
        torch.set_rng_state(state)


# Hypothesis keeps only a weak reference: the module-level name keeps the adapter alive.
TORCH_RANDOM = _TorchGlobalRandom()
hypothesis.register_random(TORCH_RANDOM)

# Tests run on 2 cores in CI; more threads than cores only adds contention. Under pytest-xdist
# (`make test` runs 2 workers) the cores are shared between the workers.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(torch.get_num_threads(), 2) // _WORKERS))


TORCH_SEED = int(os.environ.get("TEST_TORCH_SEED", "0"))


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Every test starts from the same torch seed, so a failure reproduces by itself."""
    torch.manual_seed(TORCH_SEED)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (the GPU lane); none on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str:
    return f"torch seed: {TORCH_SEED} (TEST_TORCH_SEED), CUDA: {torch.cuda.is_available()}"


@pytest.fixture
def no_warnings():
    """Fail the test if the code under test emits any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield
