#!/usr/bin/env bash
# Install llama-cpp-python into the venv from a wheel cached per version and build flags.
#
# The default native build crashes on AMX CPUs, so the wheel is built with the flags of
# scripts/llama-cpp-flags.sh (explicit ISA flags, never AMX), shared with build-llama-server.sh.
# Building takes minutes on 2 cores; the wheel is kept in $ZEST_CACHE/wheels and reused.
set -euo pipefail

python=${1:?usage: install-llama-cpp.sh VENV_PYTHON}
version=${LLAMA_CPP_VERSION:-0.3.36}
cache=${ZEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zest}

flags=$("$(dirname "$0")/llama-cpp-flags.sh")
pyver=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
key=$(printf '%s|%s|%s' "$version" "$pyver" "$flags" | sha256sum | cut -c1-16)
dir="$cache/wheels/llama-cpp-python-$version-$key"

if "$python" -c "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$version')" 2>/dev/null; then
    exit 0  # already in this venv
fi

if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version (a few minutes; cached in $dir)" >&2
    echo "  CMAKE_ARGS=$flags" >&2
    tmp=$(mktemp -d)
    CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$python" -m pip wheel --quiet --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$tmp"
    mkdir -p "$dir"
    mv "$tmp"/llama_cpp_python-*.whl "$dir"/
    rm -rf "$tmp"
fi
"$python" -m pip install --quiet --force-reinstall --no-deps "$dir"/llama_cpp_python-*.whl
"$python" -m pip install --quiet "numpy>=1.20" "typing-extensions>=4.5" "diskcache>=5.6.1" "jinja2>=2.11.3"
