# The README's two commands: `make demo` (train on the embedded default) and `make test`.
# Both run scripts/bootstrap.sh first, which installs whatever is missing and is quick when
# nothing is.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: bootstrap demo test lint unit bench-launch clean

bootstrap:
	@RINGTRAIN_VENV=$(VENV) bash scripts/bootstrap.sh

demo: bootstrap
	@bash scripts/demo.sh

lint: bootstrap
	$(BIN)/ruff check ringtrain tests
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

unit: bootstrap
	$(BIN)/python -m pytest tests/unit -q

bench-launch: bootstrap
	$(BIN)/python -m ringtrain.bench.launcher.launch_overhead

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
