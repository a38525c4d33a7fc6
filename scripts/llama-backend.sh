#!/usr/bin/env bash
# Print the llama.cpp backend to build: cpu or vulkan.
#
# ZEST_LLAMA_BACKEND=cpu|vulkan chooses; auto (the default) picks vulkan only when the machine
# has a real Vulkan GPU (discrete, integrated or virtual). Mesa's software device (llvmpipe,
# "lavapipe") is a CPU in disguise and never counts: it runs the Vulkan lane, not the default.
# Without vulkaninfo (vulkan-tools), a GPU render node plus a Vulkan driver other than
# lavapipe's counts.
set -euo pipefail

choice=${ZEST_LLAMA_BACKEND:-auto}
case "$choice" in
cpu | vulkan)
    echo "$choice"
    exit 0
    ;;
auto) ;;
*)
    echo "ZEST_LLAMA_BACKEND=$choice: use cpu, vulkan or auto" >&2
    exit 2
    ;;
esac

gpu_type='deviceType *= *PHYSICAL_DEVICE_TYPE_(DISCRETE|INTEGRATED|VIRTUAL)_GPU'
if command -v vulkaninfo >/dev/null; then
    if vulkaninfo --summary 2>/dev/null | grep -qE "$gpu_type"; then
        echo vulkan
    else
        echo cpu
    fi
    exit 0
fi
icds=$(ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json 2>/dev/null | grep -v '/lvp_icd' || true)
if [ -n "$icds" ] && ls /dev/dri/renderD* /dev/nvidia0 >/dev/null 2>&1; then
    echo vulkan
else
    echo cpu
fi
