#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the state store's tests and benchmark: nothing is
# installed, nothing outside DIR is touched.
#
#   .ci/postgres.sh start DIR   initdb (once) + start on a free loopback port; prints the URL
#   .ci/postgres.sh stop DIR    stop it (DIR stays; start it again on the same port)
#
# Trust authentication on 127.0.0.1 only, the unix socket inside DIR. PostgreSQL refuses to
# run as root, so as root the cluster runs as `nobody` (DIR is handed to it). The binaries:
# $RISKRANK_PG_BIN, else the newest /usr/lib/postgresql/*/bin (Debian), else initdb on PATH.
# Progress goes to stderr, the URL alone to stdout.
set -euo pipefail
cmd="${1:-}"
dir="${2:-}"
if [ -z "$dir" ] || { [ "$cmd" != start ] && [ "$cmd" != stop ]; }; then
    echo "usage: $0 start|stop DIR" >&2
    exit 2
fi
bin="${RISKRANK_PG_BIN:-}"
if [ -z "$bin" ]; then
    bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
fi
if [ -z "$bin" ] && command -v initdb >/dev/null; then
    bin="$(dirname "$(command -v initdb)")"
fi
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ]; then
    echo "postgres.sh: no PostgreSQL binaries (initdb, pg_ctl) found; set RISKRANK_PG_BIN or install postgresql" >&2
    exit 3
fi
as=()
if [ "$(id -u)" = 0 ]; then
    if command -v runuser >/dev/null; then
        as=(runuser -u nobody --)
    else
        as=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)
    fi
fi
data="$dir/data"

if [ "$cmd" = stop ]; then
    if [ -f "$data/postmaster.pid" ]; then
        "${as[@]}" "$bin/pg_ctl" -D "$data" -m fast -w -t 30 stop >&2
    else
        echo "postgres.sh: no cluster running in $dir" >&2
    fi
    exit 0
fi

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
data="$dir/data"
if [ "${#as[@]}" -gt 0 ]; then
    chown nobody "$dir"
fi
chmod 700 "$dir"
if [ ! -f "$data/PG_VERSION" ]; then
    echo "postgres.sh: initdb $data" >&2
    "${as[@]}" "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
fi
# A port nothing listens on (kept in DIR/port, so a restart keeps the URL), below the
# kernel's ephemeral range: a port above it may be the local end of some connection (free to
# a connect test, taken to a bind).
low=32768
if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then read -r low _ </proc/sys/net/ipv4/ip_local_port_range; fi
span=$((low - 10000))
[ "$span" -ge 1000 ] || span=20000
pick_port() {
    port=""
    for _ in $(seq 50); do
        candidate=$((10000 + RANDOM % span))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
            port="$candidate"
            break
        fi
    done
    [ -n "$port" ] || { echo "postgres.sh: no free loopback port found" >&2; exit 1; }
    echo "$port" >"$dir/port"
}
fresh=0
if [ -f "$dir/port" ]; then
    port="$(cat "$dir/port")"
else
    pick_port
    fresh=1
fi
# A freshly picked port taken between the test and the bind: pick another (a restart keeps its port).
for attempt in 1 2 3 4 5; do
    echo "postgres.sh: starting PostgreSQL $(cat "$data/PG_VERSION") on 127.0.0.1:$port" >&2
    if "${as[@]}" "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port -k '$dir' -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2; then
        break
    fi
    if [ "$fresh" = 1 ] && [ "$attempt" -lt 5 ] && grep -q "Address already in use" "$dir/server.log"; then
        pick_port
        continue
    fi
    tail -n 20 "$dir/server.log" >&2
    exit 1
done
echo "postgresql://postgres@127.0.0.1:$port/postgres"
