#!/usr/bin/env bash
# The reference MCP servers the gateway tests run against (package.json + package-lock.json
# here, exact versions), installed once with `npm ci` into a cache directory outside the clone
# and reused, offline, while the lockfile is unchanged.
# Usage: .ci/npm/install.sh CACHE_DIR   -> prints the bin directory (exit 0 when usable).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: install.sh CACHE_DIR}"
stamp="$dest/.lock-sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
bins=(mcp-server-filesystem mcp-server-memory mcp-server-everything)
ready() {
    [[ "$(cat "$stamp" 2>/dev/null)" == "$want" ]] || return 1
    for b in "${bins[@]}"; do [[ -x "$dest/node_modules/.bin/$b" ]] || return 1; done
}
if ! ready; then
    mkdir -p "$dest"
    rm -f "$stamp"
    cp "$here/package.json" "$here/package-lock.json" "$dest/"
    # --prefer-offline: the npm cache answers what it holds; the timeout keeps CI from hanging
    # on an unreachable registry.
    timeout 300 npm ci --prefix "$dest" --cache "$dest/.npm" --prefer-offline --no-audit --no-fund \
        --loglevel=error >&2
    echo "$want" > "$stamp"
    ready || { echo "CI: npm ci finished but the MCP server bins are missing in $dest" >&2; exit 1; }
fi
echo "$dest/node_modules/.bin"
