# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all lint docs bench gpu clean

# uv installs the same packages as pip (checked: the same `pip freeze`) in about 12 s where pip takes about 80 s on
# 2 cores; pip where uv cannot be installed or fails.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	( $(PY) -m pip install -q uv && $(VENV)/bin/uv pip install -q --python $(PY) -e ".[test,docs]" ) || \
	( $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e ".[test,docs]" )
	touch $(STAMP)

# One OpenBLAS thread per process: gradflow limits OpenBLAS while it runs flows one per core (gradflow._config.PerCore;
# the paper-size part 7.5 min before, 5 min 10 s since), and one thread also speeds up the serial parts by about a tenth.
demo: export OPENBLAS_NUM_THREADS ?= 1
demo: $(STAMP)
	$(VENV)/bin/gradflow demo --out demo_output
	$(VENV)/bin/gradflow demo --full-weights --paper-size --out demo_output
	$(VENV)/bin/gradflow demo --depth --out demo_output
	$(VENV)/bin/gradflow demo --deep-linear --out demo_output

# Two workers (pytest-xdist), each test file on one of them; compiled programs are shared through .jax_cache/.
test: $(STAMP) lint
	$(PY) -m pytest -m "not slow" -q -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/bench_flow.py

# On a GPU machine whose $(PYTHON) has JAX with CUDA (see docs/networks.md, "On a GPU"): every GPU part in turn.
gpu:
	PYTHONPATH=. $(PYTHON) benchmarks/gpu_session.py all --out runs/gpu_output --budget 86400

clean:
	rm -rf $(VENV) site demo_output .pytest_cache .hypothesis .jax_cache
