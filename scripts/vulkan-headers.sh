#!/usr/bin/env bash
# Print an include folder holding Vulkan headers new enough for ggml's Vulkan backend.
#
# Debian 12's libvulkan-dev (1.3.239) lacks vk::LayerSettingEXT, which ggml-vulkan.cpp needs;
# Debian 13's (1.4.x) has it. Its package is fetched with `apt-get download` from the mirror
# this machine's own apt sources name, only the suite changed to trixie (no package host is
# written here), and unpacked with dpkg-deb -x (never installed) into $ZEST_CACHE, once.
# apt's own state is left alone: the lookup uses a private list folder.
set -euo pipefail

cache=${ZEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zest}
suite=${ZEST_VULKAN_HEADERS_SUITE:-trixie}
root="$cache/vulkan-headers"

found=$(ls -d "$root"/*/usr/include 2>/dev/null | sort -V | tail -1 || true)
if [ -n "$found" ] && [ -f "$found/vulkan/vulkan.hpp" ]; then
    echo "$found"
    exit 0
fi

# The first Debian mirror of the machine's sources (one-line or deb822 format).
mirror() {
    {
        grep -hE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            sed -E 's/\[[^]]*\]//' | awk '{print $2}'
        grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    } | grep -E '/debian/?$' | head -1
}
uri=$(mirror)
if [ -z "$uri" ]; then
    echo "vulkan-headers: no Debian mirror in /etc/apt/sources.list(.d); add one, or set" \
        "ZEST_LLAMA_CMAKE_EXTRA=-DVulkan_INCLUDE_DIR=<Vulkan 1.4 headers>" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt fetches as its _apt user when run as root
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
echo "deb $uri $suite main" >"$tmp/sources.list"
apt_opts=(-q -o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o "Dir::State::status=/dev/null")
echo "vulkan-headers: fetching $suite's libvulkan-dev from $uri (once; kept in $root)" >&2
apt-get "${apt_opts[@]}" update >&2
(cd "$tmp" && apt-get "${apt_opts[@]}" download libvulkan-dev >&2)
deb=$(ls "$tmp"/libvulkan-dev_*.deb)
version=$(dpkg-deb -f "$deb" Version)
dest="$root/$version"
mkdir -p "$root"
rm -rf "$dest.part"
dpkg-deb -x "$deb" "$dest.part"
test -f "$dest.part/usr/include/vulkan/vulkan.hpp"
rm -rf "$dest"
mv "$dest.part" "$dest"
echo "$dest/usr/include"
