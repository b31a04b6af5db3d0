# Two commands that work on a fresh machine, each doing its own set-up:
#   make demo   - the face-detection job end to end on built-in sample data
#   make test   - the whole test suite
# and `make docs` builds the documentation (docs/) into docs/_build/html, warnings as errors;
# `make dist` builds gpumr's wheel and sdist into dist/ (docs/how-to/install.rst: where they go).
# Both install gpumr into .venv; `. .venv/bin/activate` puts the gpumr command on PATH.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

.PHONY: demo test install gpu bench docs dist clean flink-env

$(VENV)/.ready: setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	touch $@

# (build/ is setuptools' staging copy: a module moved or removed in the checkout would stay in it, and in the wheel)
install: $(VENV)/.ready
	rm -rf build
	$(PY) -m pip install -q --no-build-isolation '.[dev]'
	@echo "gpumr is installed in $(VENV): run '. $(VENV)/bin/activate' to have the gpumr command on PATH"

# PyCUDA builds against the CUDA toolkit: its build takes the toolkit to be the folder above the
# first nvcc on PATH and looks for include/cuda.h there. nvcc is often a link from elsewhere
# (/usr/local/bin/nvcc), so put the toolkit's own bin folder first: nvcc says where it lives
# (its --dryrun TOP); CUDA_ROOT overrides.
gpu: install
	@top=$$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$$ TOP=//p'); \
	root=$$(cd $${CUDA_ROOT:-$${top:-/usr/local/cuda}} 2>/dev/null && pwd -P); \
	test -f $$root/include/cuda.h || { echo "no CUDA toolkit found (no $$root/include/cuda.h): set CUDA_ROOT=<toolkit folder>"; exit 1; }; \
	test -f $$root/include/curand.h || { echo "$$root has no curand.h (a minimal toolkit): PyCUDA needs cuRAND's headers; install the full toolkit, or use CuPy: $(PY) -m pip install '.[cupy]'"; exit 1; }; \
	echo "building PyCUDA against the CUDA toolkit in $$root"; \
	PATH=$$root/bin:$$PATH $(PY) -m pip install -q --no-build-isolation '.[gpu]'

demo: install
	$(VENV)/bin/gpumr demo --output demo-out

# Two pytest workers (pytest-xdist), each test file's tests in one of them (--dist loadfile: a module's
# cluster, pilot or server starts once): most tests wait on a framework's processes, so two overlap well
# on two cores (CI's 2-core machine: 14-34 minutes by its processor, against about 32 one test at a time).
# PYTEST_ARGS="-n 0": one test at a time.
test: install
	cd tests && ../$(PY) -m pytest -q -rs -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# PyFlink (the flink extra) pins Apache Beam, whose cloudpickle 2.2 dask refuses, and older numpy and pyarrow: it
# gets an environment of its own, with this checkout's gpumr; tests/test_flink.py runs its jobs there
# (GPUMR_FLINK_PYTHON=.venv-flink/bin/python). About 90 s and 1.4 GB.
FLINK_VENV ?= .venv-flink
$(FLINK_VENV)/.ready: setup.cfg setup.py
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(FLINK_VENV)/bin/python -m pip install -q --no-build-isolation '.[flink]'
	touch $@

flink-env: $(FLINK_VENV)/.ready
	rm -rf build
	$(FLINK_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation .

# -W: a warning (a broken link, a command missing from the reference) fails the build; --keep-going lists them all.
docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "the documentation is in docs/_build/html/index.html"

# The wheel (pure Python: py3-none-any) and the sdist, built with this checkout's setuptools (no download).
# setuptools' hundreds of lines go to build/dist.log; a failed build shows the log's end. (build/ emptied
# first, as by install: a module moved in the checkout would stay in setuptools' staging copy, and in the wheel)
dist: $(VENV)/.ready
	@$(PY) -m pip install -q build
	@rm -rf build && mkdir build
	@$(PY) -m build --no-isolation --sdist --wheel --outdir dist . > build/dist.log 2>&1 \
	  || { tail -n 30 build/dist.log; echo "make dist failed: its whole log is build/dist.log"; exit 1; }
	@echo "built into dist/ (the build's log: build/dist.log):"
	@ls dist/gpumr-*

bench: install
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(FLINK_VENV) build dist *.egg-info demo-out .demo-out.gpumr bench-out docs/_build docs/_generated
