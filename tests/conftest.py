"""Test-suite configuration: Hypothesis profiles and replayable torch randomness.

Choose the Hypothesis profile with ``HYPOTHESIS_PROFILE`` (``ci`` is the default and what
``make test`` uses; ``dev`` runs fewer examples for a quick local loop; ``thorough`` many more).
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

# Tests run on 2 cores in CI; more threads than cores only adds contention.
torch.set_num_threads(min(torch.get_num_threads(), 2))


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Every test starts from the same torch seed, so a failure reproduces by itself."""
    torch.manual_seed(0)


@pytest.fixture
def no_warnings():
    """Fail the test if the code under test emits any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield
