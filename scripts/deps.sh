#!/usr/bin/env bash
# Install what building and testing kmirror needs on Debian 12 (bookworm), skipping what is
# already there. Safe to run again. Needs root or sudo for apt-get.
set -euo pipefail

PKGS=(build-essential cmake ninja-build pkg-config python3 python3-venv python3-pip clang clang-format
      libclang-rt-14-dev libssl-dev libzstd-dev liblz4-dev zlib1g-dev libsnappy-dev
      libpcre2-dev libprotobuf-c-dev protobuf-c-compiler libcunit1-dev
      default-jdk-headless maven kcat rpm file procps iproute2)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A JDK 17+ and Maven already on PATH (e.g. a Temurin install) are as good as Debian's.
if command -v javac >/dev/null && command -v mvn >/dev/null; then
    filtered=()
    for p in "${missing[@]}"; do
        case "$p" in default-jdk-headless|maven) ;; *) filtered+=("$p") ;; esac
    done
    missing=("${filtered[@]+"${filtered[@]}"}")
fi

if [ "${#missing[@]}" -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "deps: all Debian packages present"
fi

jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -z "$jv" ] || [ "$jv" -lt 17 ]; then
    echo "deps: Java 17 or newer is required (found: ${jv:-none})" >&2
    exit 1
fi
