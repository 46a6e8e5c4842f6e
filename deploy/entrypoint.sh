#!/bin/sh
# The entry point of riskrank's container image.
#
#   gateway [OPTION...]   (the default) riskrank mcp over streamable HTTP on
#                         $RISKRANK_HOST:$RISKRANK_PORT (0.0.0.0:8080), with the files of
#                         $RISKRANK_CONFIG_DIR (/etc/riskrank): servers.json (required), and
#                         policy.json and clients.json where present. OPTIONs go to riskrank mcp.
#   anything else         riskrank with those arguments (`policy check /etc/riskrank/policy.json`).
#
# The state: $RISKRANK_STATE (postgresql://USER@HOST/DB, or a directory for SQLite), migrated
# before the gateway starts (replicas migrating at once is safe); without it the audit log is
# $RISKRANK_AUDIT_LOG (/var/lib/riskrank/audit.jsonl). The bearer token: $RISKRANK_TOKEN, or the
# file $RISKRANK_TOKEN_FILE. An admin token ($RISKRANK_ADMIN_TOKEN, or the file
# $RISKRANK_ADMIN_TOKEN_FILE) turns the operator's console on, at /console.
# A mistake is one `error:` line and exit status 2, as everywhere in riskrank.
set -eu

if [ "${1:-gateway}" != gateway ]; then
    exec riskrank "$@"
fi
[ "$#" -gt 0 ] && shift

conf="${RISKRANK_CONFIG_DIR:-/etc/riskrank}"
if [ ! -f "$conf/servers.json" ]; then
    echo "error: $conf/servers.json: no such file: mount the gateway's servers file there (or set RISKRANK_CONFIG_DIR)" >&2
    exit 2
fi
# Options are put in front of the caller's, then `mcp` in front of all: the caller's come last.
if [ -f "$conf/policy.json" ]; then
    set -- --policy "$conf/policy.json" "$@"
fi
if [ -f "$conf/clients.json" ]; then
    set -- --clients "$conf/clients.json" "$@"
fi
if [ -n "${RISKRANK_STATE:-}" ]; then
    riskrank state migrate --state "$RISKRANK_STATE" >&2
    set -- --state "$RISKRANK_STATE" "$@"
else
    set -- --audit-log "${RISKRANK_AUDIT_LOG:-/var/lib/riskrank/audit.jsonl}" "$@"
fi
if [ -n "${RISKRANK_TOKEN_FILE:-}" ]; then
    set -- --token-file "$RISKRANK_TOKEN_FILE" "$@"
fi
if [ -n "${RISKRANK_ADMIN_TOKEN_FILE:-}" ]; then
    set -- --console --admin-token-file "$RISKRANK_ADMIN_TOKEN_FILE" "$@"
elif [ -n "${RISKRANK_ADMIN_TOKEN:-}" ]; then
    set -- --console "$@"
fi
exec riskrank mcp --config "$conf/servers.json" --transport streamable-http \
    --host "${RISKRANK_HOST:-0.0.0.0}" --port "${RISKRANK_PORT:-8080}" "$@"
