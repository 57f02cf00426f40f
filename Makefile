# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs the project with its extras.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TEST_TORCH_SEED ?= 0

.PHONY: test demo bench lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,demo]'
	@touch $(STAMP)

test: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE HYPOTHESIS_PROFILE=ci TEST_TORCH_SEED=$(TEST_TORCH_SEED) $(PY) -m pytest -q $(PYTEST_ARGS)

# The demo installs Fashion-MNIST (Debian's dataset-fashion-mnist) itself when it is missing
# and it may (root with apt-get); otherwise it says the command and falls back to the digits.
demo: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m benchmarks.demo $(DEMO_ARGS)

bench: $(STAMP)
	PYTHONPATH=.peers $(PY) -m benchmarks $(BENCH_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check surgery functional augment tests benchmarks
	$(PY) -m ruff format --check surgery functional augment tests benchmarks
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache .mypy_cache *.egg-info
