#!/usr/bin/env bash
# The CMake flags every llama.cpp build of this project uses: the llama-cpp-python wheel
# (install-llama-cpp.sh) and the benchmark's llama-server (build-llama-server.sh), so the two
# run the same kernels. The default native build crashes on AMX CPUs (SIGSEGV in
# ggml_backend_amx_mul_mat): GGML_NATIVE=OFF and explicit ISA flags, AVX-512 when the CPU has
# it, never AMX.
set -euo pipefail

flags="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    flags="$flags -DGGML_AVX512=ON"
    grep -qw avx512vbmi /proc/cpuinfo && flags="$flags -DGGML_AVX512_VBMI=ON"
    grep -qw avx512_vnni /proc/cpuinfo && flags="$flags -DGGML_AVX512_VNNI=ON"
fi
if [ -n "${ZEST_LLAMA_CMAKE_EXTRA:-}" ]; then flags="$flags $ZEST_LLAMA_CMAKE_EXTRA"; fi
echo "$flags"
