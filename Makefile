# transformer-mt: every target creates the virtual environment on first use.
#   make demo       train and translate the built-in English -> German numbers task (~5 min)
#   make test       the whole test suite (under 10 minutes on 2 CPU cores)
#   make test-slow  the slow tests kept out of `make test`
#   make bench      the quick benchmarks

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/transformer-mt demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/train_speed.py --quick
	$(BIN)/python benchmarks/decode_speed.py --quick

clean:
	rm -rf runs build dist .pytest_cache
