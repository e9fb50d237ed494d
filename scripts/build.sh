#!/usr/bin/env bash
# Configure and build one build tree.
#   scripts/build.sh [DIR] [extra cmake args...]     default DIR=build (gcc, RelWithDebInfo)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" "${gen[@]}" "$@" >/dev/null
else
    cmake -S . -B "$dir" "$@" >/dev/null
fi
cmake --build "$dir" -j "${KM_JOBS:-2}"
