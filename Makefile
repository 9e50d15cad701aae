# transformer-mt: every target creates the virtual environment on first use.
#   make demo       train and translate the built-in English -> German numbers task (~5 min)
#   make test       the whole test suite on two pytest-xdist workers (about 4 minutes on a 2-core EPYC), the 15 slowest listed
#   make bench      the quick benchmarks
#   make browser    install Debian's chromium + chromedriver for the browser test (as root)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev,data,interop]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/transformer-mt demo

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/train_speed.py --quick
	$(BIN)/python benchmarks/decode_speed.py --quick
	$(BIN)/python benchmarks/lm_speed.py --quick

# The browser test drives Debian's chromium; install it where we may (root + apt-get),
# otherwise that one test is skipped with the reason.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
		|| echo "note: could not install chromium; the browser test will be skipped"; \
	else echo "note: chromium/chromedriver missing (apt-get install chromium chromium-driver); the browser test will be skipped"; fi

clean:
	rm -rf runs build dist .pytest_cache
