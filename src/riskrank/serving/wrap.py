"""Putting the gateway in front of the MCP clients on this machine (``riskrank wrap``) and
taking it out again (``riskrank unwrap``).

Each client keeps its servers in a JSON file of its own (:data:`CLIENT_FILES`: where, per
OS, and how each reads it). Wrapping one moves the servers riskrank can run into a servers
file of riskrank's and leaves the client one entry, ``riskrank``, that runs ``riskrank mcp``
on that file and a policy. The file is never re-serialised: the servers object's bytes are
replaced in place, so comments, key order, indentation, line endings and every other key stay
as the client (or the user) wrote them, and the original bytes are kept whole beside the
servers file, so ``unwrap`` restores the file byte for byte. A server riskrank cannot run as
written (a ``${input:...}`` or ``${env:...}`` substitution, an ``envFile``, a name outside
riskrank's alphabet) stays in the client, with the reason.

Every decision is a pure function of the bytes read (:func:`inspect`, :func:`plan_wrap`,
:func:`plan_unwrap`); :func:`apply_wrap` and :func:`apply_unwrap` are the thin shell that
writes, atomically, re-checking first that nothing changed the file meanwhile.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.fileio import (
    atomic_write_bytes,
    loads_strict,
    read_regular_file,
    replace_if_unchanged,
)
from riskrank.serving.auth import ADMIN_TOKEN_ENV, TOKEN_ENV
from riskrank.serving.gateway.config import ConfigError, check_server_entry

#: The name of the entry a wrapped client keeps (``riskrank-2`` ... when a kept server has it).
ENTRY_NAME = "riskrank"
#: The largest client file read (``~/.claude.json`` grows with history; a few MB at most).
MAX_CONFIG_BYTES = 64 * 1024 * 1024
RECORD_VERSION = 1
BOM = "\ufeff"


class WrapError(RiskrankError):
    """A client configuration ``wrap`` or ``unwrap`` cannot change (read-only, changed meanwhile)."""

    code = "wrap_error"


@dataclass(frozen=True)
class ClientFile:
    """One client configuration file: where it is on each OS (``~``, ``$XDG_CONFIG_HOME``,
    ``%APPDATA%``, ``%USERPROFILE%`` and ``<project>`` are filled in), the objects in it that
    hold servers, and how the client reads it."""

    client: str
    scope: str
    paths: dict[str, str]
    sections: tuple[tuple[str, ...], ...]
    jsonc: bool = False
    """The client reads comments and trailing commas (VS Code's JSONC)."""
    projects: bool = False
    """Claude Code's ``~/.claude.json``: ``projects.<path>.mcpServers`` hold servers too."""
    typed: bool = False
    """The client's entries carry ``"type": "stdio"`` (riskrank's entry does too)."""
    url_key: str = "url"
    """The key of a remote server's URL in the client's format (Windsurf: ``serverUrl``)."""


def _all(path: str) -> dict[str, str]:
    return {"darwin": path, "linux": path, "win32": path.replace("/", "\\").replace("~\\", "%USERPROFILE%\\")}


#: The clients, as their documentation describes their files (docs/wrap.md says which versions).
CLIENTS = {"claude-desktop": "Claude Desktop", "cursor": "Cursor", "vscode": "VS Code", "windsurf": "Windsurf",
           "claude-code": "Claude Code"}
CLIENT_FILES: tuple[ClientFile, ...] = (
    ClientFile("claude-desktop", "user", {
        "darwin": "~/Library/Application Support/Claude/claude_desktop_config.json",
        "linux": "$XDG_CONFIG_HOME/Claude/claude_desktop_config.json",
        "win32": "%APPDATA%\\Claude\\claude_desktop_config.json"}, (("mcpServers",),)),
    ClientFile("cursor", "user", _all("~/.cursor/mcp.json"), (("mcpServers",),)),
    ClientFile("cursor", "project", _all("<project>/.cursor/mcp.json"), (("mcpServers",),)),
    ClientFile("vscode", "user", {
        "darwin": "~/Library/Application Support/Code/User/mcp.json",
        "linux": "$XDG_CONFIG_HOME/Code/User/mcp.json",
        "win32": "%APPDATA%\\Code\\User\\mcp.json"}, (("servers",),), jsonc=True, typed=True),
    ClientFile("vscode", "user settings", {
        "darwin": "~/Library/Application Support/Code/User/settings.json",
        "linux": "$XDG_CONFIG_HOME/Code/User/settings.json",
        "win32": "%APPDATA%\\Code\\User\\settings.json"}, (("mcp", "servers"),), jsonc=True, typed=True),
    ClientFile("vscode", "workspace", _all("<project>/.vscode/mcp.json"), (("servers",),), jsonc=True, typed=True),
    ClientFile("windsurf", "user", _all("~/.codeium/windsurf/mcp_config.json"), (("mcpServers",),), url_key="serverUrl"),
    ClientFile("claude-code", "project", _all("<project>/.mcp.json"), (("mcpServers",),), typed=True),
    ClientFile("claude-code", "user", _all("~/.claude.json"), (("mcpServers",),), projects=True, typed=True),
)


def platform_key(platform: str | None = None) -> str:
    """``darwin``, ``win32`` or ``linux`` (every other POSIX system reads as Linux)."""
    p = platform or sys.platform
    return p if p in ("darwin", "win32") else "linux"


def expand(template: str, *, home: Path, project: Path, env: dict[str, str] | None = None) -> Path:
    """A table path on this machine: ``~`` and ``%USERPROFILE%`` are ``home``,
    ``$XDG_CONFIG_HOME`` is that variable or ``~/.config``, ``%APPDATA%`` that variable or
    ``~/AppData/Roaming``, ``<project>`` the project directory."""
    env = dict(os.environ) if env is None else env
    roots = {"~": home, "%USERPROFILE%": home, "<project>": project,
             "$XDG_CONFIG_HOME": Path(env.get("XDG_CONFIG_HOME") or home / ".config"),
             "%APPDATA%": Path(env.get("APPDATA") or home / "AppData" / "Roaming")}
    parts = PureWindowsPath(template).parts if "\\" in template else tuple(template.split("/"))
    return roots[parts[0]].joinpath(*parts[1:])


def config_dir(*, home: Path | None = None, platform: str | None = None, env: dict[str, str] | None = None) -> Path:
    """riskrank's own configuration directory: ``%APPDATA%\\riskrank`` on Windows, else
    ``$XDG_CONFIG_HOME/riskrank`` (``~/.config/riskrank``), where the pin keys live too."""
    home = Path.home() if home is None else home
    key = "%APPDATA%\\riskrank" if platform_key(platform) == "win32" else "$XDG_CONFIG_HOME/riskrank"
    return expand(key, home=home, project=home, env=env)


# -- reading JSON and JSONC without re-serialising ----------------------------------------------------
_WS = " \t\r\n"


def blank_jsonc(text: str) -> str:
    """``text`` with its comments (``//`` and ``/* */``) and trailing commas turned into spaces
    (line breaks kept), so that strict JSON reads it at the same offsets. :class:`ValueError`
    for a comment that is not closed."""
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # a comma that a '}' or ']' may still turn into a trailing one
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            last_comma = -1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                line = text.count("\n", 0, i) + 1
                raise ValueError(f"a /* comment opened at line {line} is not closed")
            out[i:end + 2] = [ch if ch in "\r\n" else " " for ch in text[i:end + 2]]
            i = end + 2
        else:
            if c == ",":
                last_comma = i
            elif c in "}]" and last_comma >= 0:
                out[last_comma] = " "
                last_comma = -1
            elif c not in _WS:
                last_comma = -1
            i += 1
    return "".join(out)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def object_members(text: str, start: int) -> dict[str, tuple[int, int]]:
    """The span ``(start, end)`` of each member's value of the JSON object at ``text[start]``
    (strict JSON, as :func:`blank_jsonc` leaves it)."""
    decoder = json.JSONDecoder()
    spans: dict[str, tuple[int, int]] = {}
    i = _skip_ws(text, start + 1)
    if text[i] == "}":
        return spans
    while True:
        key, i = json.decoder.scanstring(text, _skip_ws(text, i) + 1)  # type: ignore[attr-defined]
        i = _skip_ws(text, _skip_ws(text, i) + 1)  # past the ':'
        _, end = decoder.raw_decode(text, i)
        spans[key] = (i, end)
        i = _skip_ws(text, end)
        if text[i] == "}":
            return spans
        i += 1  # the ','


def find_span(text: str, path: tuple[str, ...]) -> tuple[int, int] | None:
    """The span of the value at ``path`` (object keys from the top), or None where a key is
    missing or a step is not an object."""
    span = (_skip_ws(text, 0), len(text.rstrip(_WS)))
    for key in path:
        if text[span[0]] != "{":
            return None
        found = object_members(text, span[0]).get(key)
        if found is None:
            return None
        span = found
    return span


@dataclass
class Parsed:
    """A client file read: its text (BOM dropped), the strict-JSON view at the same offsets,
    its value, and the servers objects in it (section path -> servers)."""

    text: str
    strict: str
    value: dict[str, Any]
    bom: bool
    sections: dict[tuple[str, ...], dict[str, Any]]


class Unreadable(Exception):
    """Why a file cannot be read as its client's configuration (one line; it is left untouched)."""


def parse(raw: bytes, spec: ClientFile, source: str) -> Parsed:
    """A client file's bytes as that client reads them; :class:`Unreadable` says why not."""
    bom = raw.startswith(BOM.encode())
    try:
        text = raw.decode("utf-8")[1 if bom else 0:]
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text") from None
    if not text.strip():
        return Parsed(text, text, {}, bom, {})
    try:
        strict = blank_jsonc(text)
    except ValueError as exc:
        raise Unreadable(f"invalid JSON{'C' if spec.jsonc else ''}: {exc}") from None
    if not spec.jsonc and strict != text:
        try:
            loads_strict(strict, source, ConfigError)
        except ConfigError:
            pass
        else:
            raise Unreadable(f"it has comments or trailing commas, which {CLIENTS[spec.client]} does not read") from None
    try:
        value = loads_strict(strict, source, ConfigError)
    except ConfigError as exc:
        raise Unreadable(str(exc).removeprefix(f"{source}: ")) from None
    if not isinstance(value, dict):
        raise Unreadable("the file does not hold a JSON object")
    paths = list(spec.sections)
    projects = value.get("projects")
    if spec.projects and isinstance(projects, dict):
        paths += [("projects", p, "mcpServers") for p, body in projects.items() if isinstance(body, dict) and "mcpServers" in body]
    sections: dict[tuple[str, ...], dict[str, Any]] = {}
    for path in paths:
        node: Any = value
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            continue
        if not isinstance(node, dict):
            raise Unreadable(f"{'.'.join(path)} is not an object of servers")
        if node:
            sections[path] = node
    return Parsed(text, strict, value, bom, sections)


# -- what is found ---------------------------------------------------------------------------------
@dataclass
class Found:
    """One client file on this machine and what ``wrap`` would do with it: ``state`` is
    ``wrap``, ``wrapped`` (already behind riskrank), ``no servers``, ``unreadable`` or
    ``read-only``; ``why`` says more."""

    spec: ClientFile
    path: Path
    raw: bytes
    state: str
    why: str = ""
    parsed: Parsed | None = None

    @property
    def client(self) -> str:
        return CLIENTS[self.spec.client]

    @property
    def servers(self) -> int:
        return sum(len(s) for s in self.parsed.sections.values()) if self.parsed else 0


def record_id(spec: ClientFile, path: Path) -> str:
    """The name of a wrapped file's records in the servers directory: client, scope and a
    digest of the file's real path (two projects' ``.mcp.json`` do not collide)."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]
    return f"{spec.client}-{spec.scope.replace(' ', '-')}-{digest}"


def read_only(path: Path) -> str | None:
    """Why ``path`` cannot be rewritten in place, or None: no write permission for this user,
    no write bit at all (a file marked read-only is respected even by root), or a directory
    where the new file cannot be created."""
    info = path.stat()
    if not os.access(path, os.W_OK) or not info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return f"read-only (mode {stat.S_IMODE(info.st_mode):04o})"
    if not os.access(path.resolve().parent, os.W_OK | os.X_OK):
        return f"its directory {path.resolve().parent} is not writable"
    return None


def runs_riskrank(entry: Any) -> bool:
    """Whether a server entry runs ``riskrank mcp`` (``riskrank``, ``riskrank.exe`` or
    ``python -m riskrank``): a client already behind riskrank."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    args = entry.get("args")
    argv = [entry["command"], *[a for a in (args if isinstance(args, list) else []) if isinstance(a, str)]]
    for i, arg in enumerate(argv):
        name = PureWindowsPath(arg).name if "\\" in arg else Path(arg).name
        if name in ("riskrank", "riskrank.exe") and "mcp" in argv[i + 1:]:
            return True
    return False


def discover(*, clients: tuple[str, ...] = (), project: Path | None = None, home: Path | None = None,
             platform: str | None = None, env: dict[str, str] | None = None,
             servers_dir: Path | None = None) -> list[Found]:
    """Every client file of :data:`CLIENT_FILES` that exists here (``clients``: only those),
    read and judged. Nothing is written."""
    home = Path.home() if home is None else home
    project = Path.cwd() if project is None else project
    key = platform_key(platform)
    out: list[Found] = []
    seen: set[Path] = set()
    for spec in CLIENT_FILES:
        if clients and spec.client not in clients:
            continue
        path = expand(spec.paths[key], home=home, project=project, env=env)
        if path.resolve() in seen or not path.is_file():
            continue
        seen.add(path.resolve())
        out.append(judge(spec, path, servers_dir))
    return out


def judge(spec: ClientFile, path: Path, servers_dir: Path | None) -> Found:
    """One file read and judged (what :func:`discover` does for each)."""
    try:
        raw = read_regular_file(path, max_bytes=MAX_CONFIG_BYTES, timeout_s=10)
    except (OSError, RiskrankError) as exc:
        return Found(spec, path, b"", "unreadable", f"cannot read it: {getattr(exc, 'strerror', None) or exc}")
    try:
        parsed = parse(raw, spec, str(path))
    except Unreadable as exc:
        return Found(spec, path, raw, "unreadable", str(exc))
    found = Found(spec, path, raw, "wrap", parsed=parsed)
    wrapped = [f"{'.'.join(p)}.{n}" for p, s in parsed.sections.items() for n, e in s.items() if runs_riskrank(e)]
    if servers_dir is not None and (servers_dir / f"{record_id(spec, path)}.wrap.json").exists():
        found.state, found.why = "wrapped", f"already wrapped (riskrank unwrap restores it; record in {servers_dir})"
    elif wrapped:
        found.state, found.why = "wrapped", f"already behind riskrank mcp ({wrapped[0]})"
    elif not parsed.sections:
        found.state, found.why = "no servers", "no MCP servers in it"
    else:
        reason = read_only(path)
        if reason:
            found.state, found.why = "read-only", reason
    return found


# -- wrapping --------------------------------------------------------------------------------------
def to_riskrank(spec: ClientFile, entry: Any) -> Any:
    """A client's server entry in riskrank's servers-file format (Windsurf's ``serverUrl`` is
    riskrank's ``url``); anything else is taken as written and judged by the gateway's reader."""
    if spec.url_key != "url" and isinstance(entry, dict) and spec.url_key in entry and "url" not in entry:
        entry = {("url" if k == spec.url_key else k): v for k, v in entry.items()}
    return entry


@dataclass
class SectionPlan:
    """One servers object of a client file: what moves to riskrank's servers file, what stays
    (with why), and the object the client keeps."""

    path: tuple[str, ...]
    servers_file: Path
    moved: dict[str, Any]
    kept: dict[str, str]
    new_value: dict[str, Any]


@dataclass
class WrapPlan:
    """What wrapping one file writes: its new bytes, the servers files, the record."""

    found: Found
    new_raw: bytes
    sections: list[SectionPlan]
    record_id: str
    servers_dir: Path
    skipped: dict[str, str] = field(default_factory=dict)
    """Section -> why it is left as it is (no server in it riskrank can run)."""


def riskrank_entry(spec: ClientFile, command: list[str], servers_file: Path, policy: Path) -> dict[str, Any]:
    """The one entry a wrapped client keeps: ``riskrank mcp`` on the servers file and policy."""
    entry: dict[str, Any] = {"type": "stdio"} if spec.typed else {}
    entry["command"] = command[0]
    entry["args"] = [*command[1:], "mcp", "--config", str(servers_file), "--policy", str(policy)]
    return entry


def _layout(text: str, start: int) -> tuple[str, str, str]:
    """(newline, indent unit, the indentation of the line holding ``start``) as the file writes them."""
    newline = "\r\n" if "\r\n" in text else "\n"
    line_start = text.rfind("\n", 0, start) + 1
    base = text[line_start:start][: len(text[line_start:start]) - len(text[line_start:start].lstrip(" \t"))]
    unit = "  "
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and stripped != line:
            unit = line[: len(line) - len(stripped)]
            break
    return newline, unit, base


def _object_text(members: list[tuple[str, str]], newline: str, unit: str, base: str) -> str:
    """A JSON object from (key, value text) pairs, laid out as the surrounding file is."""
    if not members:
        return "{}"
    inner = base + unit
    body = f",{newline}".join(f"{inner}{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in members)
    return f"{{{newline}{body}{newline}{base}}}"


def _value_text(value: Any, newline: str, unit: str, indent: str) -> str:
    """``value`` as JSON indented by ``unit``, its lines after the first at ``indent``."""
    return f"{newline}{indent}".join(json.dumps(value, indent=unit, ensure_ascii=False).split("\n"))


def plan_wrap(found: Found, *, servers_dir: Path, policy: Path, command: list[str]) -> WrapPlan:
    """What wrapping ``found`` writes (pure: nothing is written). Each servers object's servers
    that riskrank can run move to a servers file of their own; the object keeps the others and
    the ``riskrank`` entry. The new text is read back as the client reads it, and must hold the
    same value as before but for those objects."""
    assert found.parsed is not None and found.state == "wrap"
    parsed, spec = found.parsed, found.spec
    rid = record_id(spec, found.path)
    secret_names = frozenset({TOKEN_ENV, ADMIN_TOKEN_ENV})
    plans: list[SectionPlan] = []
    skipped: dict[str, str] = {}
    for path, servers in parsed.sections.items():
        moved: dict[str, Any] = {}
        kept: dict[str, str] = {}
        for name, entry in servers.items():
            try:
                check_server_entry(str(found.path), ".".join(path), name, to_riskrank(spec, entry), secret_names)
            except ConfigError as exc:
                kept[name] = str(exc).removeprefix(f"{found.path}: ")
            else:
                moved[name] = to_riskrank(spec, entry)
        if not moved:
            skipped[".".join(path)] = "; ".join(kept.values())
            continue
        suffix = "" if path == spec.sections[0] else "-" + hashlib.sha256("\0".join(path).encode()).hexdigest()[:8]
        servers_file = servers_dir / f"{rid}{suffix}.servers.json"
        name = next(n for n in (ENTRY_NAME, *(f"{ENTRY_NAME}-{i}" for i in range(2, 100))) if n not in kept)
        new_value = {**{k: servers[k] for k in kept}, name: riskrank_entry(spec, command, servers_file, policy)}
        plans.append(SectionPlan(path, servers_file, moved, kept, new_value))
    text = parsed.text
    for sp in sorted(plans, key=lambda s: find_span(parsed.strict, s.path)[0], reverse=True):  # type: ignore[index]
        start, end = find_span(parsed.strict, sp.path)  # type: ignore[misc]
        newline, unit, base = _layout(text, start)
        spans = object_members(parsed.strict, start)
        members = [(k, text[spans[k][0]:spans[k][1]]) for k in sp.kept]
        entry_name = list(sp.new_value)[-1]
        members.append((entry_name, _value_text(sp.new_value[entry_name], newline, unit, base + unit)))
        text = text[:start] + _object_text(members, newline, unit, base) + text[end:]
    new_raw = ((BOM if parsed.bom else "") + text).encode("utf-8")
    _check_rewrite(found, new_raw, {sp.path: sp.new_value for sp in plans})
    return WrapPlan(found, new_raw, plans, rid, servers_dir, skipped)


def _check_rewrite(found: Found, new_raw: bytes, replaced: dict[tuple[str, ...], Any]) -> None:
    """The rewritten file, read as its client reads it, holds the old value with exactly the
    ``replaced`` objects changed (a bug here would break a user's client: refused instead)."""
    try:
        new = parse(new_raw, found.spec, str(found.path)).value
    except Unreadable as exc:  # pragma: no cover - a bug, not an input
        raise WrapError(f"{found.path}: the rewritten file would not read back ({exc}); left as it is") from None
    expected = copy.deepcopy(found.parsed.value if found.parsed else {})
    for path, value in replaced.items():
        node = expected
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    if new != expected:  # pragma: no cover - a bug, not an input
        raise WrapError(f"{found.path}: the rewritten file would not hold what it should; left as it is")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply_wrap(plan: WrapPlan, policy: Path) -> None:
    """Write what :func:`plan_wrap` planned: the backup (the original bytes, 0600), the servers
    files (0600: they may hold credentials), the record, and last the client file (its own
    mode kept), after checking that it still holds the bytes the plan was made from."""
    found = plan.found
    backup = plan.servers_dir / f"{plan.record_id}.backup"
    record_path = plan.servers_dir / f"{plan.record_id}.wrap.json"
    written = [backup, record_path, *(sp.servers_file for sp in plan.sections)]
    try:
        atomic_write_bytes(backup, found.raw, mode=0o600)
        sections = []
        for sp in plan.sections:
            data = servers_file_bytes(sp)
            atomic_write_bytes(sp.servers_file, data, mode=0o600)
            sections.append({"path": list(sp.path), "servers_file": str(sp.servers_file), "servers_sha256": sha256(data),
                             "moved": list(sp.moved), "kept": sp.kept, "value": sp.new_value})
        record = {"version": RECORD_VERSION, "client": found.spec.client, "scope": found.spec.scope,
                  "config": str(found.path), "backup": backup.name, "original_sha256": sha256(found.raw),
                  "wrapped_sha256": sha256(plan.new_raw), "mode": stat.S_IMODE(found.path.resolve().stat().st_mode),
                  "policy": str(policy), "sections": sections, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        atomic_write_bytes(record_path, (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode(), mode=0o600)
        _replace(found.path, found.raw, plan.new_raw, record["mode"])
    except BaseException:
        # the client file is as it was: nothing of this wrap may stay behind (a record would
        # call the file wrapped)
        for path in written:
            path.unlink(missing_ok=True)
        raise


def servers_file_bytes(section: SectionPlan) -> bytes:
    """The servers file of one servers object: riskrank's ``mcpServers`` format."""
    return (json.dumps({"mcpServers": section.moved}, indent=2, ensure_ascii=False) + "\n").encode()


def _replace(path: Path, expected: bytes, new: bytes, mode: int) -> None:
    """Replace the client file (through a symlink, its target) with ``new``, only if it still
    holds ``expected``: a client that saved the file meanwhile keeps its save."""
    replace_if_unchanged(path, expected, new, mode, WrapError(f"{path}: changed while riskrank was writing; nothing of it was "
                                                               "changed, run the command again"), max_bytes=MAX_CONFIG_BYTES)


# -- unwrapping ------------------------------------------------------------------------------------
@dataclass
class UnwrapPlan:
    """What unwrapping one record writes: ``new_raw`` for the client file (the backup itself
    when the file is as wrap left it), ``exact`` when that is the case, and the files to remove."""

    record: dict[str, Any]
    record_path: Path
    config: Path
    current: bytes
    new_raw: bytes
    exact: bool
    note: str = ""
    keep: list[Path] = field(default_factory=list)


def records(servers_dir: Path, clients: tuple[str, ...] = ()) -> list[tuple[Path, dict[str, Any]]]:
    """The wrap records in ``servers_dir`` (``clients``: only theirs), oldest first."""
    out = []
    if not servers_dir.is_dir():
        return out
    for path in sorted(servers_dir.glob("*.wrap.json")):
        try:
            rec = loads_strict(path.read_text(encoding="utf-8"), str(path), WrapError)
        except (OSError, UnicodeDecodeError) as exc:
            raise WrapError(f"{path}: cannot read the wrap record: {exc}") from None
        if not isinstance(rec, dict) or rec.get("version") != RECORD_VERSION or not isinstance(rec.get("sections"), list):
            raise WrapError(f"{path}: not a wrap record of this riskrank (version {RECORD_VERSION})")
        if not clients or rec.get("client") in clients:
            out.append((path, rec))
    return sorted(out, key=lambda r: r[1].get("time", ""))


def _spec(record: dict[str, Any]) -> ClientFile:
    for spec in CLIENT_FILES:
        if spec.client == record.get("client") and spec.scope == record.get("scope"):
            return spec
    raise WrapError(f"unknown client {record.get('client')!r} / {record.get('scope')!r} in a wrap record")


def plan_unwrap(record_path: Path, record: dict[str, Any]) -> UnwrapPlan:
    """What unwrapping one record writes (pure). The client file as wrap left it gets the
    backup's bytes back. One its client has saved since (``~/.claude.json`` is rewritten all
    the time) gets only its servers objects back, the rest of it as it is now, provided those
    objects still hold what wrap put there; otherwise it is an error and nothing changes."""
    servers_dir = record_path.parent
    config = Path(record["config"])
    backup = servers_dir / record["backup"]
    try:
        original = backup.read_bytes()
    except OSError as exc:
        raise WrapError(f"{config}: its backup {backup} cannot be read ({exc.strerror}); left wrapped") from None
    if sha256(original) != record["original_sha256"]:
        raise WrapError(f"{config}: its backup {backup} is not the file wrap saved (sha256 differs); left wrapped")
    try:
        current = read_regular_file(config.resolve(), max_bytes=MAX_CONFIG_BYTES, timeout_s=10)
    except FileNotFoundError:
        raise WrapError(f"{config}: no longer exists; its original is kept at {backup}") from None
    keep = [Path(s["servers_file"]) for s in record["sections"] if _changed(Path(s["servers_file"]), s["servers_sha256"])]
    if sha256(current) == record["wrapped_sha256"]:
        return UnwrapPlan(record, record_path, config, current, original, True, keep=keep)
    spec = _spec(record)
    try:
        now = parse(current, spec, str(config))
        before = parse(original, spec, str(config))
    except Unreadable as exc:
        raise WrapError(f"{config}: changed since wrap and cannot be read now ({exc}); its original is at {backup}") from None
    text = now.text
    restore = []
    for sec in record["sections"]:
        path = tuple(sec["path"])
        if _get(now.value, path) != sec["value"]:
            raise WrapError(f"{config}: its servers ({'.'.join(path)}) changed since wrap; restore them by hand from "
                            f"{backup}")
        restore.append((find_span(now.strict, path), find_span(before.strict, path)))
    for (start, end), (ostart, oend) in sorted(restore, key=lambda r: r[0][0], reverse=True):  # type: ignore[index]
        text = text[:start] + before.text[ostart:oend] + text[end:]
    new_raw = ((BOM if now.bom else "") + text).encode("utf-8")
    note = "changed since wrap: its servers are restored, its other changes kept (the original is kept at " + str(backup) + ")"
    return UnwrapPlan(record, record_path, config, current, new_raw, False, note, keep=[*keep, backup])


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _changed(path: Path, digest: str) -> bool:
    try:
        return sha256(path.read_bytes()) != digest
    except FileNotFoundError:
        return False


def apply_unwrap(plan: UnwrapPlan) -> list[Path]:
    """Write the client file back (its mode as before wrap), then remove the record and the
    files wrap made, except those kept (a servers file edited since, a backup still needed).
    Returns what was kept."""
    if read_only(plan.config):
        raise WrapError(f"{plan.config}: {read_only(plan.config)}; riskrank unwrap cannot restore it")
    _replace(plan.config, plan.current, plan.new_raw, int(plan.record.get("mode", 0o644)))
    servers_dir = plan.record_path.parent
    for path in [*(Path(s["servers_file"]) for s in plan.record["sections"]), servers_dir / plan.record["backup"]]:
        if path not in plan.keep:
            path.unlink(missing_ok=True)
    plan.record_path.unlink()
    return plan.keep


def diff(path: Path, old: bytes, new: bytes, *, new_path: Path | None = None) -> str:
    """A unified diff of a file's bytes as text (``old`` empty: a new file)."""
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, fromfile="/dev/null" if not old else str(path), tofile=str(new_path or path))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
