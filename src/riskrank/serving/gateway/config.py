"""The gateway's two files, read strictly: the upstream servers and the policy.

**Servers** (``--config SERVERS.json``): the ``mcpServers`` format Claude Desktop, Cursor and
others use (VS Code's ``servers`` spelling too)::

    {"mcpServers": {
       "filesystem": {"command": "npx", "args": ["--offline", "-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                      "env": {"npm_config_cache": "/var/cache/npm"}},
       "remote": {"url": "http://127.0.0.1:3001/mcp", "headers": {"X-Team": "ops"}},
       "ops": {"type": "sse", "url": "https://mcp.ops.example/sse", "headersFromEnv": {"Authorization": "OPS_MCP_AUTH"},
               "tls": {"ca_file": "/etc/ssl/ops-ca.pem"}},
       "old": {"command": "legacy-server", "disabled": true}}}

A stdio server runs with the MCP SDK's safe default environment (HOME, LOGNAME, PATH, SHELL,
TERM, USER) plus its ``env``, never this process's environment; riskrank's own secrets
cannot be passed on. A URL server (``type`` ``http``, the default with a ``url``, or ``sse``)
sends its ``headers`` and, for each ``headersFromEnv`` entry, a header whose value is the
named variable of this process's environment, read once at start (a credential stays out of
the file; the value is never shown); https is verified unless ``tls`` says otherwise.
**Policy** (``--policy POLICY.json``): see :class:`Policy` and docs/serving.md. Every mistake
is one line naming the file and the field; unknown keys, duplicate keys, bad globs and a
command that is not on the child's PATH are mistakes.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.fileio import loads_strict
from riskrank.modes import MODES, RISK_SOURCES
from riskrank.serving.gateway.policy import (
    CHOOSABLE,
    CONFIRM_MODES,
    FLOW_ACTIONS,
    SCOPE_ACTIONS,
    Globs,
    Policy,
)
from riskrank.serving.mcp_compat import ServerTarget

#: The child environment's variables when ``env`` gives none (the MCP SDK's default list).
DEFAULT_PATH = os.defpath


class ConfigError(RiskrankError):
    """A servers or policy file that cannot be used as written."""

    code = "invalid_config"


@dataclass(frozen=True)
class UpstreamConfig:
    """One upstream server: its name (the namespace of its tools on collision) and target.
    ``header_vars``: for a URL server, each ``headersFromEnv`` header and the variable of this
    process's environment its value comes from (what a scan shows before it connects)."""

    name: str
    target: ServerTarget
    header_vars: tuple[tuple[str, str], ...] = ()

    def shown(self) -> dict[str, Any]:
        """What starting this server does, as a scan shows it before (or instead of) doing
        it: the command, its arguments, working directory and the names (never the values) of
        the variables it is given; or the URL, its header names, and the variable of this
        process's environment each ``headersFromEnv`` header would carry."""
        t = self.target
        if t.url:
            from_env = dict(self.header_vars)
            return {"name": self.name, "url": t.describe(), "headers": sorted(h for h in t.headers if h not in from_env),
                    "headers_from_env": from_env}
        return {"name": self.name, "command": t.command, "args": list(t.args), "cwd": t.cwd or os.getcwd(),
                "env": sorted(t.env)}

    def plan(self) -> str:
        """:meth:`shown` in one line: ``start NAME: COMMAND ARGS [cwd DIR; env A, B]`` or
        ``connect NAME: URL [headers ...]``; a line break or tab in a value is shown escaped
        (``\\n``), so a servers file cannot print a line of its own under the plan."""
        line = self._plan()
        return line.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")

    def _plan(self) -> str:
        t, shown = self.target, self.shown()
        if t.url:
            parts = ([f"headers {', '.join(shown['headers'])}"] if shown["headers"] else []) + (
                [f"headers from this environment: {', '.join(f'{h}=${v}' for h, v in self.header_vars)}"]
                if self.header_vars else [])
            return f"connect {self.name}: {t.describe()}" + (f"  [{'; '.join(parts)}]" if parts else "")
        return (f"start {self.name}: {t.describe()}  [cwd {shown['cwd']}; env {', '.join(shown['env']) or 'none'} "
                "(beside HOME, LOGNAME, PATH, SHELL, TERM, USER)]")


SERVER_KEYS = {"command", "args", "env", "cwd", "url", "headers", "headersFromEnv", "tls", "type", "transport", "disabled"}
HTTP_TYPES = ("http", "streamable-http", "streamableHttp")
#: ``type`` of an upstream over the older HTTP+SSE transport (a GET event stream, POSTed messages).
SSE_TYPES = ("sse",)
#: The keys only a URL server takes (a stdio server with one of them is a mistake).
URL_KEYS = ("url", "headers", "headersFromEnv", "tls")
TLS_KEYS = {"ca_file", "verify"}
#: An HTTP header name (RFC 9110 ``token``) and an environment variable's name.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
#: A header value HTTP can carry: visible ASCII, spaces and tabs (no line breaks).
_HEADER_VALUE = re.compile(r"^[\x20-\x7e\t]+$")
POLICY_KEYS = {"max_level", "confirm_level", "allow", "deny", "exposure_ttl_s", "client_choices", "levels", "preset",
               "untrusted", "call_timeouts", "on_poisoned", "on_suspicious", "first_seen", "learned_scan",
               "scope", "drift_level", "flow", "confirm", "cover_level", "sources", "trusted_sources", "sinks", "trusted_sinks"}
#: The session guard's keys that name servers and tools (:class:`Globs`).
GLOB_SETS = ("sources", "trusted_sources", "sinks", "trusted_sinks")
#: What a scan verdict may do (``on_poisoned``, ``on_suspicious``), and a first connect (``first_seen``).
VERDICT_ACTIONS = ("withhold", "confirm", "allow")
FIRST_SEEN = ("trust", "quarantine")
#: ``preset``'s values: ``untrusted`` confirms every call of every server.
PRESETS = ("untrusted",)
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_GLOB_CHARS = re.compile(r"^[\x21-\x7e]+$")


def _read_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``, read by the project's strict reader (duplicate keys,
    non-finite or runaway numbers are errors: the last of two equal keys would otherwise win
    silently); anything but an object at the top is an error too."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the {what} file: {exc}") from None
    data = loads_strict(text, str(path), ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the {what} file must hold a JSON object")
    return data


def check_object(value: Any, keys: set[str], where: str, shape: str = "an object", hint: str = "") -> dict[str, Any]:
    """``value`` as an object whose keys are all among ``keys``: else one line naming
    ``where``, what it must be (``shape``) or the unknown keys (and ``hint``)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be {shape}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} (known: {', '.join(sorted(keys))}){hint}")
    return value


def _no_substitution(value: str, where: str) -> None:
    """Other clients expand ``${VAR}`` in a servers file; riskrank does not, so one left in
    would reach the server as literal text: refused, naming the field."""
    if "${" in value:
        raise ConfigError(f"{where}: variable substitution (${{...}}) is not supported; write the value itself")


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where}: must be an object of strings")
    for k, v in value.items():
        _no_substitution(v, f"{where}.{k}")
    return dict(value)


def load_servers(path: str | Path, *, secret_names: frozenset[str] = frozenset(),
                 problems: list[str] | None = None, offline: bool = False,
                 left_out: list[str] | None = None) -> list[UpstreamConfig]:
    """The enabled servers of an ``mcpServers`` (or ``servers``) file, in file order.
    ``secret_names``: environment variables no upstream may be given (riskrank's tokens).
    With a ``problems`` list, a server entry that cannot be used is left out and its one-line
    reason appended there (one bad entry does not deny the others); the file itself must
    still parse, and at least one entry must be usable (``left_out``, when given, gets the
    names of the entries left out). ``offline``: read the file to show
    what it would start, not to start it: no command is looked up on PATH, no directory or
    CA file is checked, and no ``headersFromEnv`` variable is read (its header is empty)."""
    data = _read_object(path, "servers")
    # A client's own file (Claude Desktop's config, VS Code's mcp.json) holds its other settings
    # beside the servers: they are not riskrank's to read, and are left alone.
    keys = [k for k in ("mcpServers", "servers") if k in data]
    if len(keys) != 1:
        why = "it has both" if keys else f"it has {sorted(data)[:5]}" if data else "it is empty"
        raise ConfigError(f'{path}: expected {{"mcpServers": {{"NAME": {{"command": ...}}}}}} or {{"servers": ...}} ({why})')
    servers = data[keys[0]]
    if not isinstance(servers, dict) or not servers:
        raise ConfigError(f"{path}: {keys[0]}: must be a non-empty object of servers")
    out = []
    for name, entry in servers.items():
        try:
            server = _server(path, keys[0], name, entry, secret_names, offline)
        except ConfigError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
            if left_out is not None:
                left_out.append(str(name))
            continue
        if server is not None:
            out.append(server)
    if not out:
        if problems:
            raise ConfigError(f"{path}: no server entry can be used; the first: {problems[0]}")
        raise ConfigError(f"{path}: every server is disabled")
    return out


def check_server_entry(where: str, key: str, name: str, entry: Any, secret_names: frozenset[str]) -> UpstreamConfig | None:
    """One entry of a servers object read as the gateway reads it, offline (no command looked
    up, no variable read): whether a server another client's file names can move into a
    servers file (``riskrank wrap``). :class:`ConfigError` names ``where``, ``key`` and the
    field; None for a disabled entry."""
    return _server(where, key, name, entry, secret_names, offline=True)


def _server(path: str | Path, key: str, name: str, entry: Any, secret_names: frozenset[str],
            offline: bool = False) -> UpstreamConfig | None:
    """One entry of the servers file (None when it is disabled)."""
    where = f"{path}: {key}.{name}"
    if not _NAME.match(name):
        raise ConfigError(f"{where}: a server name is 1-64 letters, digits, '_', '-' or '.'")
    check_object(entry, SERVER_KEYS, where)
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ConfigError(f"{where}.disabled: must be true or false")
    if disabled:
        return None
    kind = entry.get("type", entry.get("transport"))
    if kind is None:
        kind = "http" if "url" in entry else "stdio"
    if kind in HTTP_TYPES or kind in SSE_TYPES:
        target = _http_target(entry, where, secret_names, "sse" if kind in SSE_TYPES else "streamable-http", offline)
        header_vars = entry.get("headersFromEnv", {})
        return UpstreamConfig(name, target, tuple(sorted(header_vars.items())))
    if kind == "stdio":
        return UpstreamConfig(name, _stdio_target(entry, where, secret_names, offline))
    raise ConfigError(f"{where}.type: must be 'stdio', 'http' or 'sse', got {kind!r}")


def _http_target(entry: dict[str, Any], where: str, secret_names: frozenset[str], transport: str,
                 offline: bool = False) -> ServerTarget:
    """A URL server (streamable HTTP or SSE): its literal ``headers``, its ``headersFromEnv``
    (values read from this process's environment now, at start) and its ``tls`` choice."""
    what = "an sse" if transport == "sse" else "an http"
    url = entry.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise ConfigError(f"{where}.url: {what} server needs a url (http[s]://HOST[:PORT]/PATH)")
    _no_substitution(url, f"{where}.url")
    for key in ("command", "args", "env", "cwd"):
        if key in entry:
            raise ConfigError(f"{where}.{key}: not used by {what} server (it has a url)")
    headers = _strings(entry.get("headers", {}), f"{where}.headers")
    headers.update(_headers_from_env(entry.get("headersFromEnv", {}), headers, f"{where}.headersFromEnv", secret_names,
                                     offline))
    verify, ca_file = (True, None) if offline else _tls(entry.get("tls"), url, f"{where}.tls")
    return ServerTarget(url=url, headers=headers, transport=transport, verify=verify, ca_file=ca_file)


def _headers_from_env(value: Any, literal: dict[str, str], where: str, secret_names: frozenset[str],
                      offline: bool = False) -> dict[str, str]:
    """``{"Header": "VARIABLE"}``: each header's value is that variable of this process's
    environment, so a credential lives in the gateway's environment (a secret store, a unit's
    ``EnvironmentFile``) and never in the servers file, nor anywhere an agent can reach. Every
    error names the header and the variable, never the value; riskrank's own secrets
    (``secret_names``) cannot be sent to an upstream."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where}: must be an object of header name -> environment variable name")
    taken = {k.lower() for k in literal}
    out: dict[str, str] = {}
    for header, var in value.items():
        at = f"{where}.{header}"
        if not _HEADER_NAME.match(header):
            raise ConfigError(f"{at}: {header!r} is not an HTTP header name")
        if header.lower() in taken:
            raise ConfigError(f"{at}: the header is given twice (in headers and in headersFromEnv); keep one")
        taken.add(header.lower())
        if not _ENV_NAME.match(var):
            raise ConfigError(f"{at}: {var!r} is not an environment variable name (letters, digits, '_')")
        if var in secret_names:
            raise ConfigError(f"{at}: {var} is riskrank's own secret and cannot be sent to an upstream server")
        if offline:
            out[header] = ""
            continue
        secret = os.environ.get(var, "").strip()
        if not secret:
            raise ConfigError(f"{at}: the environment variable {var} is not set or is empty")
        if not _HEADER_VALUE.match(secret):
            raise ConfigError(f"{at}: the value of {var} cannot be an HTTP header (a line break or a non-ASCII character)")
        out[header] = secret
    return out


def _tls(value: Any, url: str, where: str) -> tuple[bool, str | None]:
    """``{"ca_file": PATH}`` (trust a private CA: the file must hold PEM certificates) or
    ``{"verify": false}`` (the explicit opt-out the gateway warns about at start); verification
    against the default trust store otherwise. Only an https url takes it: on http it would
    read as protection that is not there."""
    if value is None:
        return True, None
    if not url.lower().startswith("https://"):
        raise ConfigError(f"{where}: the url is not https, so there is no TLS to configure")
    check_object(value, TLS_KEYS, where, 'an object, {"ca_file": "/path/ca.pem"} or {"verify": false}')
    verify = value.get("verify", True)
    if not isinstance(verify, bool):
        raise ConfigError(f"{where}.verify: must be true or false")
    ca_file = value.get("ca_file")
    if ca_file is None:
        return verify, None
    if not verify:
        raise ConfigError(f"{where}: give ca_file or verify false, not both")
    if not isinstance(ca_file, str) or not Path(ca_file).is_file():
        raise ConfigError(f"{where}.ca_file: must be an existing file (PEM certificates of the CA to trust)")
    import ssl

    try:
        ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"{where}.ca_file: {ca_file}: cannot load CA certificates from it: {exc}") from None
    return True, ca_file


def remote_warnings(config: UpstreamConfig) -> list[str]:
    """The lines a gateway prints at start for a URL server that is reachable but exposed: TLS
    verification switched off, or plain http to a host that is not this machine (its headers,
    credentials included, and every call cross the network in clear)."""
    target = config.target
    if not target.url:
        return []
    from urllib.parse import urlsplit

    parts = urlsplit(target.url)
    out = []
    if parts.scheme == "https" and not target.verify:
        out.append(f"warning: upstream {config.name!r}: TLS verification is off (tls.verify false): anyone on the "
                   "network path can impersonate the server and read its headers")
    if parts.scheme == "http" and not _is_loopback(parts.hostname or ""):
        out.append(f"warning: upstream {config.name!r}: http://{parts.hostname} is not encrypted: its headers "
                   "(credentials included) and every call cross the network in clear; use https")
    return out


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _stdio_target(entry: dict[str, Any], where: str, secret_names: frozenset[str], offline: bool = False) -> ServerTarget:
    command = entry.get("command")
    if command is not None and not isinstance(command, str):
        raise ConfigError(f"{where}.command: must be a string (the program to run), got {type(command).__name__}")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}.command: a stdio server needs a command")
    if any(key in entry for key in URL_KEYS):
        extra = next(key for key in URL_KEYS if key in entry)
        raise ConfigError(f"{where}.{extra}: not used by a stdio server (it has a command); give a command or a url, not both")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}.args: must be a list of strings")
    for i, a in enumerate(args):
        _no_substitution(a, f"{where}.args[{i}]")
    _no_substitution(command, f"{where}.command")
    env = _strings(entry.get("env", {}), f"{where}.env")
    leaked = sorted(set(env) & secret_names)
    if leaked:
        raise ConfigError(f"{where}.env.{leaked[0]}: riskrank's own secret cannot be passed to an upstream server")
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not (offline or Path(cwd).is_dir())):
        raise ConfigError(f"{where}.cwd: must be an existing directory")
    if not offline:
        check_command(command, env, f"{where}.command")
    return ServerTarget(command=command, args=tuple(args), env=env, cwd=cwd)


def check_command(command: str, env: dict[str, str], where: str) -> None:
    """A command that would fail to start is an error now, named, not a start-up failure later."""
    path = env.get("PATH") or os.environ.get("PATH") or DEFAULT_PATH
    if shutil.which(command, path=path) is None:
        raise ConfigError(f"{where}: {command!r} is not an executable file or a command on PATH")


def upstream_from_command(command: str) -> UpstreamConfig:
    """``--upstream CMD``: one server named ``upstream``, split like a shell would."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"--upstream: cannot split the command line: {exc}") from None
    if not argv:
        raise ConfigError("--upstream needs a command, e.g. --upstream 'npx -y @modelcontextprotocol/server-filesystem /tmp'")
    check_command(argv[0], {}, "--upstream")
    return UpstreamConfig("upstream", ServerTarget(command=argv[0], args=tuple(argv[1:])))


# -- the policy file -------------------------------------------------------------------------------
def _level(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise ConfigError(f"{where}: must be a risk level, an integer from 1 to 5")
    return value


def check_glob(glob: Any, where: str) -> str:
    """A tool-name glob: printable, no spaces, brackets closed (``fnmatch`` would read a
    stray ``[`` as a literal, and the rule would silently match nothing)."""
    if not isinstance(glob, str) or not _GLOB_CHARS.match(glob) or len(glob) > 200:
        raise ConfigError(f"{where}: {glob!r} is not a tool-name glob (printable characters, no spaces, at most 200)")
    depth = 0
    for ch in glob:
        if ch == "[":
            if depth:
                raise ConfigError(f"{where}: {glob!r}: '[' inside a bracket expression")
            depth = 1
        elif ch == "]" and depth:
            depth = 0
    if depth:
        raise ConfigError(f"{where}: {glob!r}: a '[' is not closed")
    return glob


def _globs(value: Any, where: str, over: str = "tool names") -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list of globs over {over}")
    return tuple(check_glob(g, f"{where}[{i}]") for i, g in enumerate(value))


def _glob_set(value: Any, where: str) -> Globs:
    """``{"servers": [globs], "tools": [globs]}`` (either may be left out)."""
    check_object(value, {"servers", "tools"}, where, 'an object, {"servers": ["GLOB"], "tools": ["GLOB"]}')
    return Globs(_globs(value.get("servers", []), f"{where}.servers", "upstream server names"),
                 _globs(value.get("tools", []), f"{where}.tools"))


@dataclass(frozen=True)
class Policies:
    """The policy file's named policies and the one a caller without a client identity gets
    (stdio, the shared bearer token, ``--insecure``): ``default``. A file of one flat policy is
    ``{"default": it}``. A client's policy is looked up by name here and nowhere else, so no
    request can name or widen one."""

    named: dict[str, Policy]
    default: str = "default"

    @property
    def default_policy(self) -> Policy:
        return self.named[self.default]

    def to_dict(self) -> dict[str, Any]:
        """The file resolved: every named policy with every default filled in (``preset``
        folded into ``untrusted``), in the named form :func:`load_policies` reads back to
        the same policies. The gateway-wide settings (:data:`GATEWAY_WIDE`) appear in the
        default policy only: that is where the gateway reads them, whoever calls."""
        return {"default": self.default, "policies": {
            name: {k: v for k, v in p.to_dict().items() if name == self.default or k not in GATEWAY_WIDE}
            for name, p in self.named.items()}}

    def get(self, name: str | None) -> Policy:
        """The policy ``name`` (None: the default); :class:`ConfigError` for a name the file lacks."""
        if name is None:
            return self.default_policy
        try:
            return self.named[name]
        except KeyError:
            raise ConfigError(f"no policy named {name!r} (the policy file has {', '.join(sorted(self.named))})") from None


#: What a gateway-wide setting is: the trust of upstream definitions is one for every client
#: (one pin store, one scan), so only the default policy may set these.
GATEWAY_WIDE = ("on_poisoned", "on_suspicious", "first_seen", "learned_scan")


def load_policies(path: str | Path | None) -> Policies:
    """The policy file as named policies: ``{"policies": {"NAME": {...}, ...}, "default": "NAME"}``,
    or one flat policy (then named ``default``). Names follow the servers' rule (letters,
    digits, ``_.-``); ``default`` must name one of them; the trust settings
    (:data:`GATEWAY_WIDE`) may be set by the default policy only."""
    if path is None:
        return Policies({"default": Policy()})
    return policies_from(_read_object(path, "policy"), path)


def policies_from(data: dict[str, Any], path: str | Path) -> Policies:
    """The policies of a policy document already read (:func:`load_policies`; ``path`` names
    it in every error): what a command that edits the file checks before it writes."""
    if "policies" not in data:
        return Policies({"default": _policy(data, str(path))})
    extra = sorted(set(data) - {"policies", "default"})
    if extra:
        raise ConfigError(f"{path}: unknown key(s) {extra} beside policies (a file of named policies holds policies and default)")
    named_raw = data["policies"]
    if not isinstance(named_raw, dict) or not named_raw:
        raise ConfigError(f"{path}: policies: must be a non-empty object of policy name -> policy")
    named = {}
    for name, body in named_raw.items():
        if not _NAME.match(name):
            raise ConfigError(f"{path}: policies: {name!r} is not a policy name (letters, digits, '_', '.', '-'; at most 64)")
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: policies.{name}: must be an object (a policy)")
        named[name] = _policy(body, f"{path} policy {name!r}")
    default = data.get("default")
    if not isinstance(default, str) or default not in named:
        raise ConfigError(f"{path}: default: must name one of the policies ({', '.join(sorted(named))}): what a caller "
                          "without a client identity gets")
    for name, body in named_raw.items():
        wide = sorted(k for k in GATEWAY_WIDE if k in body and name != default)
        if wide:
            raise ConfigError(f"{path}: policies.{name}: {', '.join(wide)} apply to the whole gateway (one pin store, one "
                              f"scan): set them in the default policy {default!r}")
    return Policies(named, default)


def load_policy(path: str | Path | None) -> Policy:
    """The policy file's default policy (the default policy without one)."""
    return load_policies(path).default_policy


def _policy(data: dict[str, Any], where: str) -> Policy:
    """One policy object of the policy file (``where`` names it in every error)."""
    check_object(data, POLICY_KEYS, where)
    d = Policy()
    max_level = _level(data.get("max_level", d.max_level), f"{where}: max_level")
    confirm_level = _level(data.get("confirm_level", d.confirm_level), f"{where}: confirm_level")
    drift_level = _level(data.get("drift_level", d.drift_level), f"{where}: drift_level")
    cover_level = data.get("cover_level")
    if cover_level is not None:
        cover_level = _level(cover_level, f"{where}: cover_level")
        if cover_level > max_level:
            raise ConfigError(f"{where}: cover_level: {cover_level} is above max_level {max_level} (a level the policy "
                              "refuses cannot be approved)")
    ttl = data.get("exposure_ttl_s")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0):
        raise ConfigError(f"{where}: exposure_ttl_s: must be a positive number of seconds, or null")
    choices_raw = data.get("client_choices", {})
    if not isinstance(choices_raw, dict):
        raise ConfigError(f"{where}: client_choices: must be an object, e.g. {{\"mode\": [\"dense+rule\", \"rule\"]}}")
    choices: dict[str, tuple[Any, ...]] = {}
    for key, values in choices_raw.items():
        at = f"{where}: client_choices.{key}"
        if key not in CHOOSABLE:
            raise ConfigError(f"{at}: a client may be allowed to pick {', '.join(CHOOSABLE)}, not {key!r}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{at}: must be a non-empty list of the values a client may pick")
        if key == "lambda":
            if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 10
                       for v in values):
                raise ConfigError(f"{at}: lambdas are numbers from 0 to 10")
            choices[key] = tuple(float(v) for v in values)
        else:
            allowed = MODES if key == "mode" else RISK_SOURCES
            bad = [v for v in values if v not in allowed]
            if bad:
                raise ConfigError(f"{at}: {bad[0]!r} is not one of {', '.join(allowed)}")
            choices[key] = tuple(values)
    levels_raw = data.get("levels", {})
    if not isinstance(levels_raw, dict):
        raise ConfigError(f"{where}: levels: must be an object of tool-name glob -> risk level")
    levels = {check_glob(g, f"{where}: levels"): _level(v, f"{where}: levels.{g}") for g, v in levels_raw.items()}
    preset = data.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"{where}: preset: must be one of {', '.join(PRESETS)}, got {preset!r}")
    untrusted = _globs(data.get("untrusted", []), f"{where}: untrusted") + (("*",) if preset == "untrusted" else ())
    timeouts_raw = data.get("call_timeouts", {})
    if not isinstance(timeouts_raw, dict):
        raise ConfigError(f"{where}: call_timeouts: must be an object of tool-name glob -> seconds")
    timeouts = {}
    for g, v in timeouts_raw.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v <= 86400:
            raise ConfigError(f"{where}: call_timeouts.{g}: must be a number of seconds, more than 0 and at most 86400")
        timeouts[check_glob(g, f"{where}: call_timeouts")] = float(v)
    trust: dict[str, str] = {}
    for key, choices_, default in (("on_poisoned", VERDICT_ACTIONS, "withhold"), ("on_suspicious", VERDICT_ACTIONS, "confirm"),
                                   ("first_seen", FIRST_SEEN, "trust")):
        value = data.get(key, default)
        if value not in choices_:
            raise ConfigError(f"{where}: {key}: must be one of {', '.join(choices_)}, got {value!r}")
        trust[key] = value
    learned = data.get("learned_scan", False)
    if not isinstance(learned, bool):
        raise ConfigError(f"{where}: learned_scan: must be true or false, got {learned!r}")
    guard: dict[str, Any] = {}
    for key, choices_, default in (("scope", SCOPE_ACTIONS, "confirm"), ("flow", FLOW_ACTIONS, "confirm"),
                                   ("confirm", CONFIRM_MODES, "once_per_session")):
        value = data.get(key, default)
        if value not in choices_:
            raise ConfigError(f"{where}: {key}: must be one of {', '.join(choices_)}, got {value!r}")
        guard[key] = value
    for key in GLOB_SETS:
        guard[key] = _glob_set(data.get(key, {}), f"{where}: {key}")
    return Policy(
        **trust, **guard, learned_scan=learned,
        max_level=max_level, confirm_level=confirm_level, drift_level=drift_level, cover_level=cover_level,
        allow=_globs(data.get("allow", list(d.allow)), f"{where}: allow"),
        deny=_globs(data.get("deny", list(d.deny)), f"{where}: deny"),
        exposure_ttl_s=None if ttl is None else float(ttl), client_choices=choices, levels=levels, untrusted=untrusted,
        call_timeouts=timeouts, source=where,
    )
