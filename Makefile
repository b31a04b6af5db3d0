# Two commands that work on a fresh machine, each doing its own set-up:
#   make demo   - the face-detection job end to end on built-in sample data
#   make test   - the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

.PHONY: demo test install bench clean

$(VENV)/.ready: setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	touch $@

install: $(VENV)/.ready
	$(PY) -m pip install -q --no-build-isolation '.[dev]'

demo: install
	$(VENV)/bin/gpumr demo --output demo-out

test: install
	cd tests && ../$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: install
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info demo-out bench-out
