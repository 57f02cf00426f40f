# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs the project with its extras.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TEST_TORCH_SEED ?= 0
COMMA := ,

.PHONY: test test-compat demo demo-lm bench gpu-check peers lint docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# pip's output goes to a log in the venv, shown (its end) only when the install fails, so that
# what a target prints is its own output: install EXTRAS LOGNAME
define pip_install
	@echo "installing the project with '.[$(1)]' into $(VENV) (pip's log: $(VENV)/$(2).log)"
	@$(PY) -m pip install -e '.[$(1)]' > $(VENV)/$(2).log 2>&1 || { \
		echo "pip install failed; the end of $(VENV)/$(2).log:" >&2; \
		grep -v '^WARNING: Location' $(VENV)/$(2).log | tail -n 30 >&2; exit 1; }
endef

$(STAMP): pyproject.toml | $(PY)
	$(call pip_install,test$(COMMA)demo,pip-test)
	@touch $(STAMP)

# Two pytest workers, one per core (pytest-xdist), each with one torch thread: the suite is
# thousands of small tests whose Python overhead one process cannot spread over two cores.
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2

test: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE HYPOTHESIS_PROFILE=ci TEST_TORCH_SEED=$(TEST_TORCH_SEED) $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The compatibility lane: the non-slow tests of functional, surgery and augment and every compile
# test on each end of the supported torch range (2.6 and 2.15), each in its own environment under
# .venv-compat/ (made on first use, about 2 minutes and 6 GB each, then reused). See
# .ci/compat/lane.sh; COMPAT_TORCH="2.15" runs one end only.
COMPAT_TORCH ?= 2.6 2.15

test-compat:
	PYTHON=$(PYTHON) bash .ci/compat/lane.sh $(COMPAT_TORCH)

# The demos install only what they need (the demo extra: scikit-learn, matplotlib, tqdm; the
# language-model study adds transformers), not the test tools.
DEMO_STAMP := $(VENV)/.demo-installed-stamp
DEMO_LM_STAMP := $(VENV)/.demo-lm-installed-stamp

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(call pip_install,demo,pip-demo)
	@touch $(DEMO_STAMP)

$(DEMO_LM_STAMP): pyproject.toml | $(PY)
	$(call pip_install,demo-lm,pip-demo-lm)
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

# The GPU check (benchmarks/gpu_check.py): the CUDA test lane, then every figure against the
# device's copy bandwidth and bf16 matmul rate, in under 8 minutes on one GPU (a time budget
# skips what no longer fits). Without CUDA: GPU_CHECK_ARGS="--device cpu --dry-run".
gpu-check: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m benchmarks.gpu_check $(GPU_CHECK_ARGS)

# The peers the benchmarks compare against (Composer, timm, kornia, ema-pytorch), pinned in
# benchmarks/peers.txt, into .peers/ without their dependencies: the project's own torch and
# environment are left as they are. Needs the package index; nothing else does.
peers: $(STAMP)
	$(PY) -m pip install -q --upgrade --target .peers --no-deps -r benchmarks/peers.txt
	PYTHONPATH=.peers $(PY) -c "import composer.functional, timm, kornia, ema_pytorch; \
		print('peers ready: composer', composer.__version__, 'timm', timm.__version__, \
		'kornia', kornia.__version__)"

# The documentation site (docs/): warnings are errors, then every internal link is checked and
# any asset loaded from another host is refused; then, where Chromium is installed (`.ci/run`
# installs it), the pages' maths is checked to render with every host but 127.0.0.1 unreachable.
DOCS_STAMP := $(VENV)/.docs-installed-stamp

$(DOCS_STAMP): pyproject.toml | $(PY)
	$(call pip_install,docs,pip-docs)
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	MPLBACKEND=Agg $(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	$(PY) docs/check_links.py docs/_build/html
	$(PY) docs/check_offline.py docs/_build/html || [ $$? -eq 2 ]

lint: $(STAMP)
	$(PY) -m ruff check surgery functional augment tests benchmarks docs
	$(PY) -m ruff format --check surgery functional augment tests benchmarks
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .venv-compat docs/_build docs/api/generated docs/gallery/_generated .pytest_cache .hypothesis .ruff_cache .mypy_cache *.egg-info benchmarks/out
