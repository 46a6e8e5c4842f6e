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
# A port nothing listens on (kept in DIR/port, so a restart keeps the URL).
if [ -f "$dir/port" ]; then
    port="$(cat "$dir/port")"
else
    port=""
    for _ in $(seq 50); do
        candidate=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
            port="$candidate"
            break
        fi
    done
    [ -n "$port" ] || { echo "postgres.sh: no free loopback port found" >&2; exit 1; }
    echo "$port" >"$dir/port"
fi
echo "postgres.sh: starting PostgreSQL $(cat "$data/PG_VERSION") on 127.0.0.1:$port" >&2
"${as[@]}" "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k '$dir' -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2 \
    || { tail -n 20 "$dir/server.log" >&2; exit 1; }
echo "postgresql://postgres@127.0.0.1:$port/postgres"
