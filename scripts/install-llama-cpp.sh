#!/usr/bin/env bash
# Install llama-cpp-python into the venv from a wheel cached per version, backend and build flags.
#
#   install-llama-cpp.sh VENV_PYTHON              into the venv (the backend of llama-backend.sh)
#   install-llama-cpp.sh VENV_PYTHON --site DIR   into DIR alone (pip --target), for a lane that
#                                                 puts DIR first on PYTHONPATH; the venv is untouched
#
# The default native build crashes on AMX CPUs, so the wheel is built with the flags of
# scripts/llama-cpp-flags.sh (explicit ISA flags, never AMX), shared with build-llama-server.sh.
# The vulkan backend adds GGML_VULKAN=ON (the CPU backend stays in) and Vulkan 1.4 headers
# (scripts/vulkan-headers.sh); it needs glslc and libvulkan-dev (make vulkan-deps).
# Building takes minutes on 2 cores (about 20 for vulkan); the wheel is kept in $ZEST_CACHE/wheels
# and reused. Only a finished build is moved there, so a failed one is never taken for a wheel.
set -euo pipefail

python=${1:?usage: install-llama-cpp.sh VENV_PYTHON [--site DIR]}
site=
if [ "${2:-}" = --site ]; then site=${3:?--site needs a folder}; fi
here=$(cd "$(dirname "$0")" && pwd)
version=${LLAMA_CPP_VERSION:-0.3.36}
cache=${ZEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zest}

backend=$("$here/llama-backend.sh")
flags=$("$here/llama-cpp-flags.sh")
pyver=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
keyed="$version|$pyver|$flags"
build_flags=$flags
name="llama-cpp-python-$version"
if [ "$backend" = vulkan ]; then
    if ! command -v glslc >/dev/null; then
        echo "the vulkan build of llama.cpp needs glslc and libvulkan-dev: run make vulkan-deps" \
            "(or choose ZEST_LLAMA_BACKEND=cpu)" >&2
        exit 1
    fi
    headers=$("$here/vulkan-headers.sh")
    headers_version=$(basename "$(dirname "$(dirname "$headers")")")
    keyed="$keyed|vulkan|$headers_version"
    build_flags="$flags -DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$headers"
    name="$name-vulkan"
fi
key=$(printf '%s' "$keyed" | sha256sum | cut -c1-16)
dir="$cache/wheels/$name-$key"

if [ -n "$site" ]; then
    marker="$site/.zest-llama-wheel"
    if [ "$(cat "$marker" 2>/dev/null)" = "$name-$key" ]; then
        exit 0 # this wheel is already in that folder
    fi
else
    marker="$("$python" -c 'import sys; print(sys.prefix)')/.zest-llama-wheel"
    installed=$("$python" -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))" 2>/dev/null || true)
    if [ "$(cat "$marker" 2>/dev/null)" = "$name-$key" ] ||
        { [ ! -e "$marker" ] && [ "$installed" = "$version" ] && [ "$backend" = cpu ]; }; then
        exit 0 # already in this venv (a venv from before the marker has the cpu build)
    fi
fi

if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version, $backend backend (minutes; cached in $dir)" >&2
    echo "  CMAKE_ARGS=$build_flags" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT # a failed build leaves nothing behind
    start=$SECONDS
    CMAKE_ARGS="$build_flags" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$python" -m pip wheel --quiet --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$tmp"
    echo "  built in $((SECONDS - start)) s" >&2
    rm -rf "$dir.part"
    mkdir -p "$dir.part"
    mv "$tmp"/llama_cpp_python-*.whl "$dir.part"/
    mv "$dir.part" "$dir"
    rm -rf "$tmp"
fi
if [ -n "$site" ]; then
    rm -rf "$site"
    "$python" -m pip install --quiet --no-deps --target "$site" "$dir"/llama_cpp_python-*.whl
else
    "$python" -m pip install --quiet --force-reinstall --no-deps "$dir"/llama_cpp_python-*.whl
    "$python" -m pip install --quiet "numpy>=1.20" "typing-extensions>=4.5" "diskcache>=5.6.1" "jinja2>=2.11.3"
fi
echo "$name-$key" >"$marker"
