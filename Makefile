# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs the project with its extras.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TEST_TORCH_SEED ?= 0

.PHONY: test demo demo-lm bench peers lint docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,demo]'
	@touch $(STAMP)

test: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE HYPOTHESIS_PROFILE=ci TEST_TORCH_SEED=$(TEST_TORCH_SEED) $(PY) -m pytest -q $(PYTEST_ARGS)

# The demos install only what they need (the demo extra: scikit-learn, matplotlib, tqdm; the
# language-model study adds transformers), not the test tools.
DEMO_STAMP := $(VENV)/.demo-installed-stamp
DEMO_LM_STAMP := $(VENV)/.demo-lm-installed-stamp

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[demo]'
	@touch $(DEMO_STAMP)

$(DEMO_LM_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[demo-lm]'
	@touch $(DEMO_LM_STAMP)

# The demo installs Fashion-MNIST (Debian's dataset-fashion-mnist) itself when it is missing
# and it may (root with apt-get); otherwise it says the command and falls back to the digits.
demo: $(DEMO_STAMP)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m benchmarks.demo $(DEMO_ARGS)

# The language-model study: the Python docs' sources (Debian's python3.11-doc), installed the
# same way when missing; without them it says the command to run.
demo-lm: $(DEMO_LM_STAMP)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m benchmarks.demo_lm $(DEMO_ARGS)

bench: $(STAMP)
	PYTHONPATH=.peers $(PY) -m benchmarks $(BENCH_ARGS)

# The peers the benchmarks compare against (Composer, timm, kornia, ema-pytorch), pinned in
# benchmarks/peers.txt, into .peers/ without their dependencies: the project's own torch and
# environment are left as they are. Needs the package index; nothing else does.
peers: $(STAMP)
	$(PY) -m pip install -q --upgrade --target .peers --no-deps -r benchmarks/peers.txt
	PYTHONPATH=.peers $(PY) -c "import composer.functional, timm, kornia, ema_pytorch; \
		print('peers ready: composer', composer.__version__, 'timm', timm.__version__, \
		'kornia', kornia.__version__)"

# The documentation site (docs/): warnings are errors, then every internal link is checked.
DOCS_STAMP := $(VENV)/.docs-installed-stamp

$(DOCS_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	MPLBACKEND=Agg $(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	$(PY) docs/check_links.py docs/_build/html

lint: $(STAMP)
	$(PY) -m ruff check surgery functional augment tests benchmarks docs
	$(PY) -m ruff format --check surgery functional augment tests benchmarks
	$(PY) -m mypy

clean:
	rm -rf $(VENV) docs/_build docs/api/generated docs/gallery/_generated .pytest_cache .hypothesis .ruff_cache .mypy_cache *.egg-info benchmarks/out
