"""Tests for riskrank.datasets.fetch: local-mirror copy, skip-when-present, and download
against a loopback HTTP server (no internet), including corrupt and missing files."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from riskrank.datasets.fetch import (
    UPSTREAM_URL_ENV,
    FetchReport,
    ManifestEntry,
    fetch,
    load_manifest,
    sha256_file,
)
from riskrank.errors import DataError

# A real dataset mirror: $RISKRANK_MIRROR (CI sets it).
REAL_MIRROR = Path(os.environ["RISKRANK_MIRROR"]) if os.environ.get("RISKRANK_MIRROR") else None

UT = "JoeYing1019/UltraTool"
ST = "fairyshine/Seal-Tools"
GOOD = b'{"tools": ["a", "b"]}\n'
OTHER = b'{"query": "q", "calling": []}\n'


def _entry(repo: str, path: str, data: bytes | None, *, mirrored: bool = True) -> ManifestEntry:
    """Manifest entry for ``data``; ``None`` means hash and size unknown."""
    return ManifestEntry(
        repo=repo,
        commit="c0ffee",
        path=path,
        bytes=None if data is None else len(data),
        sha256=None if data is None else hashlib.sha256(data).hexdigest(),
        mirrored=mirrored,
    )


def _write(root: Path, entry: ManifestEntry, data: bytes) -> Path:
    p = root / entry.rel_path
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.part")]


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, list[ManifestEntry]]:
    """A small mirror: two required files, one optional file with unknown hash (present),
    one optional file (UltraTool dev.json) not in the mirror."""
    mirror = tmp_path / "mirror"
    test = _entry(UT, "data/English-dataset/test.json", GOOD)
    tool = _entry(ST, "Seal-Tools_Dataset/tool.jsonl", OTHER)
    train = _entry(ST, "Seal-Tools_Dataset/train.jsonl", None, mirrored=False)
    dev = _entry(UT, "data/English-dataset/dev.json", None, mirrored=False)
    _write(mirror, test, GOOD)
    _write(mirror, tool, OTHER)
    _write(mirror, train, b"train\n")
    return mirror, [test, tool, train, dev]


# --- manifest and hashing ----------------------------------------------------------------


def test_packaged_manifest_loads() -> None:
    entries = load_manifest()
    by_path = {e.rel_path: e for e in entries}
    dev = by_path[f"{UT}/data/English-dataset/dev.json"]
    assert dev.optional and dev.sha256 is None
    assert by_path[f"{ST}/Seal-Tools_Dataset/test_out_domain.jsonl"].optional
    assert sum(e.optional for e in entries) == 3
    assert dev.upstream_url == (
        "https://raw.githubusercontent.com/JoeYing1019/UltraTool/"
        "9f3793c3f9396b840631833ef76fe4f20c057c39/data/English-dataset/dev.json"
    )


def test_manifest_rejects_unsafe_and_malformed(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"files": [{"repo": "a/b", "commit": "c", "path": "../../etc/x"}]}')
    with pytest.raises(DataError, match="unsafe path"):
        load_manifest(bad)
    bad.write_text('{"files": [{"repo": "a/b"}]}')
    with pytest.raises(DataError, match=r"files\[0\] is malformed"):
        load_manifest(bad)
    with pytest.raises(DataError, match="not found"):
        load_manifest(tmp_path / "missing.json")


def test_sha256_file(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(GOOD * 1000)
    assert sha256_file(p) == hashlib.sha256(GOOD * 1000).hexdigest()


# --- local mirror ------------------------------------------------------------------------


def test_copy_from_local_mirror_then_skip(fake: tuple[Path, list[ManifestEntry]], tmp_path: Path):
    mirror, entries = fake
    dest = tmp_path / "data"
    report = fetch(mirror, dest, manifest=entries, progress=False)
    assert report.ok
    assert report.with_status("fetched") == [e.rel_path for e in entries[:2]]
    # the mirror has train.jsonl, but the manifest pins no sha256 for it: not installed, said in one line
    assert report.with_status("unverified") == [entries[2].rel_path] and not (dest / entries[2].rel_path).exists()
    line = next(x for x in report.format().splitlines() if entries[2].rel_path in x and "sha256" in x)
    assert "not installed" in line and "--allow-unverified" in line
    assert report.with_status("absent") == [entries[3].rel_path]
    assert not _leftovers(dest)
    assert "UltraTool dev.json absent" in report.format()
    assert "5-fold cross-fitting" in report.format()
    # installed on request, and the report says it was not verified
    report = fetch(mirror, dest, manifest=entries, progress=False, allow_unverified=True)
    assert report.with_status("fetched") == [entries[2].rel_path]
    assert "installed WITHOUT verification" in report.format()
    for e in entries[:3]:
        assert (dest / e.rel_path).read_bytes() == (mirror / e.rel_path).read_bytes()

    mtimes = {e.rel_path: (dest / e.rel_path).stat().st_mtime_ns for e in entries[:3]}
    again = fetch(mirror, dest, manifest=entries, progress=False)
    assert again.with_status("present") == [e.rel_path for e in entries[:3]]
    assert mtimes == {e.rel_path: (dest / e.rel_path).stat().st_mtime_ns for e in entries[:3]}


def test_local_refetches_damaged_dest_and_rejects_corrupt_source(
    fake: tuple[Path, list[ManifestEntry]], tmp_path: Path
) -> None:
    mirror, entries = fake
    dest = tmp_path / "data"
    _write(dest, entries[0], b"truncated")
    report = fetch(mirror, dest, manifest=entries, progress=False)
    assert report.status(entries[0].rel_path) == "fetched"
    assert (dest / entries[0].rel_path).read_bytes() == GOOD

    _write(mirror, entries[1], b"corrupt")
    (dest / entries[1].rel_path).unlink()
    with pytest.raises(DataError, match=r"Seal-Tools_Dataset/tool\.jsonl: sha256 mismatch") as ei:
        fetch(mirror, dest, manifest=entries, progress=False)
    assert not (dest / entries[1].rel_path).exists()
    assert not _leftovers(dest)
    assert ei.value.report.status(entries[1].rel_path) == "error"  # type: ignore[attr-defined]


def test_local_missing_required_and_optional_exclusion(
    fake: tuple[Path, list[ManifestEntry]], tmp_path: Path
) -> None:
    mirror, entries = fake
    (mirror / entries[0].rel_path).unlink()
    with pytest.raises(DataError, match=r"1 required file.*test\.json: required file not found"):
        fetch(mirror, tmp_path / "data", manifest=entries, progress=False)

    dest = tmp_path / "data2"
    _write(mirror, entries[0], GOOD)
    report = fetch(mirror, dest, manifest=entries, progress=False, include_optional=False)
    assert report.status(entries[2].rel_path) == "absent"
    assert not (dest / entries[2].rel_path).exists()
    assert "training uses dev.jsonl" in report.format()


def test_source_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a directory"):
        fetch(tmp_path / "nope", tmp_path / "data", manifest=[], progress=False)


@pytest.mark.skipif(REAL_MIRROR is None or not REAL_MIRROR.is_dir(), reason="no dataset mirror (set RISKRANK_MIRROR)")
def test_copy_real_mirror_with_packaged_manifest(tmp_path: Path) -> None:
    dest = tmp_path / "data"
    report = fetch(REAL_MIRROR, dest, progress=False)
    entries = load_manifest()
    assert report.ok
    assert set(report.with_status("fetched")) == {e.rel_path for e in entries if e.mirrored}
    assert set(report.with_status("absent")) == {e.rel_path for e in entries if e.optional}
    for e in entries:
        if e.mirrored:
            assert sha256_file(dest / e.rel_path) == e.sha256
    text = report.format()
    assert "UltraTool dev.json absent" in text
    assert "Seal-Tools train.jsonl absent" in text
    assert "test_out_domain.jsonl absent" in text


# --- download over loopback HTTP ---------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """Serve ``tmp_path/www`` (mirror layout) on loopback; yields (root, URL template)."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(_QuietHandler, directory=str(root))
    )
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}/{{repo}}/{{path}}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_download_good_and_optional_404(server: tuple[Path, str], tmp_path: Path) -> None:
    root, template = server
    good = _entry(UT, "data/English-dataset/test.json", GOOD)
    ood = _entry(ST, "Seal-Tools_Dataset/test_out_domain.jsonl", OTHER, mirrored=False)
    _write(root, good, GOOD)
    dest = tmp_path / "data"
    report = fetch(
        "upstream", dest, manifest=[good, ood], upstream_url_template=template, progress=True
    )
    assert isinstance(report, FetchReport) and report.ok
    assert report.items == [(good.rel_path, "fetched"), (ood.rel_path, "absent")]
    assert (dest / good.rel_path).read_bytes() == GOOD
    assert "no out-of-domain" in report.format()


def test_download_template_from_env(
    server: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, template = server
    good = _entry(UT, "data/English-dataset/test.json", GOOD)
    _write(root, good, GOOD)
    monkeypatch.setenv(UPSTREAM_URL_ENV, template)
    report = fetch("upstream", tmp_path / "data", manifest=[good], progress=False)
    assert report.items == [(good.rel_path, "fetched")]


def test_download_corrupt_never_lands(server: tuple[Path, str], tmp_path: Path) -> None:
    root, template = server
    good = _entry(UT, "data/English-dataset/test.json", GOOD)
    _write(root, good, bytes(reversed(GOOD)))  # tampered, the same length (a longer one is cut off by size first)
    dest = tmp_path / "data"

    with pytest.raises(DataError, match=r"UltraTool/data/English-dataset/test\.json: sha256"):
        fetch("upstream", dest, manifest=[good], upstream_url_template=template, progress=False)
    assert not (dest / good.rel_path).exists()
    assert not _leftovers(dest)

    # A damaged-but-existing dest file is re-fetched; the corrupt download must not replace it.
    existing = _write(dest, good, b"old")
    with pytest.raises(DataError, match="sha256 mismatch"):
        fetch("upstream", dest, manifest=[good], upstream_url_template=template, progress=False)
    assert existing.read_bytes() == b"old"
    assert not _leftovers(dest)

    # A good dest file is kept as present, never downloaded over.
    existing.write_bytes(GOOD)
    report = fetch("upstream", dest, manifest=[good], upstream_url_template=template)
    assert report.items == [(good.rel_path, "present")]
    assert existing.read_bytes() == GOOD


def test_a_mirror_sending_more_than_the_file_is_cut_off(server: tuple[Path, str], tmp_path: Path) -> None:
    """A mirror that sends more bytes than the manifest names (an endless answer fills the
    disk) is stopped there, and nothing lands."""
    root, template = server
    good = _entry(UT, "data/English-dataset/test.json", GOOD)
    _write(root, good, GOOD + b"x" * 100_000)
    dest = tmp_path / "data"
    with pytest.raises(DataError, match="sent more than the manifest's"):
        fetch("upstream", dest, manifest=[good], upstream_url_template=template, progress=False)
    assert not (dest / good.rel_path).exists() and not _leftovers(dest)


def test_download_required_404_is_error(server: tuple[Path, str], tmp_path: Path) -> None:
    _, template = server
    req = _entry(ST, "Seal-Tools_Dataset/tool.jsonl", OTHER)
    with pytest.raises(DataError, match=r"tool\.jsonl: required file not found at http://127"):
        fetch("upstream", tmp_path / "d", manifest=[req], upstream_url_template=template)


def test_download_network_error_names_url(tmp_path: Path) -> None:
    # Bind and close a socket to get a loopback port with nothing listening.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    req = _entry(ST, "Seal-Tools_Dataset/tool.jsonl", OTHER)
    with pytest.raises(DataError, match=rf"download from http://127\.0\.0\.1:{port}/\S+ failed"):
        fetch(
            "upstream",
            tmp_path / "d",
            manifest=[req],
            upstream_url_template=f"http://127.0.0.1:{port}/{{repo}}/{{path}}",
            timeout=5.0,
            progress=False,
        )


def test_an_unreachable_host_stops_the_fetch_at_the_first_file(fake: tuple[Path, list[ManifestEntry]], tmp_path: Path) -> None:
    """No network: the fetch stops at once, naming the host, instead of failing every file of
    the manifest one by one (1,178 identical lines over four minutes)."""
    import socket

    _, entries = fake
    with socket.socket() as s:  # a loopback port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    template = f"http://127.0.0.1:{port}/{{repo}}/{{path}}"
    with pytest.raises(DataError, match=r"cannot reach 127\.0\.0\.1: .*nothing more was tried") as info:
        fetch("upstream", tmp_path / "dest", manifest=entries, upstream_url_template=template, progress=False)
    assert str(info.value).count("cannot reach") == 1
