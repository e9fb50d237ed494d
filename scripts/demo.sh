#!/usr/bin/env bash
# The demo. Until the mirror plugin mirrors, it installs, builds, shows what was built, and
# loads the plugin skeleton through the host loader test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
echo
echo "Built:"
ls -1 build/bin build/lib/kmirror.so 2>/dev/null | sed 's/^/  /'
echo
echo "The mirror itself is not built yet: the reference broker (kbroker), the mirror plugin's"
echo "data path and the kafka-mirrors CLI are the next issues. What exists now is checked by:"
echo "  scripts/test.sh"
