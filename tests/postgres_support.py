"""A PostgreSQL server for the tests (and the state store's benchmark).

``$RISKRANK_TEST_POSTGRES`` (a URL: CI starts a server and sets it) is used as it is. Else a
throwaway cluster is started with ``.ci/postgres.sh`` (initdb in a temporary directory, a
free loopback port, as ``nobody`` when run as root, since PostgreSQL refuses root) and
stopped at the end. Without PostgreSQL's binaries, or without psycopg (the ``teams`` extra),
the tests that need it skip saying why; with ``CI=true`` they fail instead, so CI can never
pass without having run them.

Each test gets its own schema (:func:`fresh_schema`): the URL's ``search_path`` points into
it, so tests never see each other's tables, and it is dropped afterwards.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "postgres.sh"
ENV_URL = "RISKRANK_TEST_POSTGRES"


def unavailable(reason: str) -> None:
    """Skip, or under ``CI=true`` fail: a CI run must not pass by skipping PostgreSQL."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: PostgreSQL tests must run in CI)", pytrace=False)
    pytest.skip(reason)


def have_binaries() -> bool:
    if os.environ.get("RISKRANK_PG_BIN"):
        return (Path(os.environ["RISKRANK_PG_BIN"]) / "initdb").is_file()
    return any(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or shutil.which("initdb") is not None


def need_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        unavailable(f"psycopg is not installed ({exc.name}): pip install 'riskrank[teams]'")


class Cluster:
    """A throwaway cluster in its own temporary directory: :meth:`start`, :meth:`stop`
    (and :meth:`start` again, on the same port), :meth:`remove`."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: as root, that is 0700 and `nobody` could not enter it.
        self.dir = Path(tempfile.mkdtemp(prefix="riskrank-pg-"))
        self.url: str | None = None

    def start(self) -> str:
        res = subprocess.run(["bash", str(SCRIPT), "start", str(self.dir)], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"could not start a throwaway PostgreSQL: {res.stderr.strip()[-2000:]}")
        self.url = res.stdout.strip()
        return self.url

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.dir)], capture_output=True, text=True, timeout=120)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_cluster() -> Cluster:
    """A started throwaway cluster, or skip (fail under CI) when there are no binaries."""
    if not have_binaries():
        unavailable(f"no PostgreSQL binaries (initdb, pg_ctl) found: install postgresql or set {ENV_URL}")
    cluster = Cluster()
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        cluster.remove()
        unavailable(str(exc))
    return cluster


def with_search_path(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def fresh_schema(url: str) -> tuple[str, str]:
    """(a new schema's name, ``url`` with its search_path set to it)."""
    import psycopg

    name = "t_" + secrets.token_hex(6)
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return name, with_search_path(url, name)


def drop_schema(url: str, name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    except psycopg.Error:
        pass  # the server is gone (a test stopped it): its schemas went with it
