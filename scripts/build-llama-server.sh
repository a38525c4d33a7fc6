#!/usr/bin/env bash
# Build llama.cpp's own llama-server for `zest bench` from the sources vendored in the
# llama-cpp-python sdist that the wheel is built from (same commit), with the wheel's CMake
# flags (scripts/llama-cpp-flags.sh: never AMX). Cached per version and flags in
# $ZEST_CACHE/tools; prints the binary's path. Several minutes on 2 cores, once.
set -euo pipefail

python=${1:?usage: build-llama-server.sh VENV_PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
version=${LLAMA_CPP_VERSION:-0.3.36}
cache=${ZEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zest}
flags=$("$here/llama-cpp-flags.sh")
key=$(printf '%s|%s' "$version" "$flags" | sha256sum | cut -c1-16)
dir="$cache/tools/llama-server-$version-$key"

if [ -x "$dir/llama-server" ]; then
    echo "$dir/llama-server"
    exit 0
fi
echo "building llama-server from llama-cpp-python $version's sources (minutes; cached in $dir)" >&2
echo "  cmake flags: $flags" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$tmp"
# shellcheck disable=SC2086  # $flags is a list of words
cmake -S "$tmp/llama_cpp_python-$version/vendor/llama.cpp" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON $flags >&2
cmake --build "$tmp/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$dir"
cp "$tmp/build/bin/llama-server" "$dir/llama-server.part"
mv "$dir/llama-server.part" "$dir/llama-server"
echo "$dir/llama-server"
