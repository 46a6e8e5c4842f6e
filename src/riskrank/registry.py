"""Tools and tool registries: load, validate, normalise.

A registry is the set of tools an agent could be shown. Tools are indexed 0..N-1 in file
order; every score array in riskrank is aligned with that order.

Accepted formats (auto-detected, or named with ``fmt=``):

* ``plain``: a JSON list (or ``{"tools": [...]}``) or JSONL of records with ``name``,
  ``description`` and optional ``risk_level``, ``parameters``, ``reason``;
* ``labels``: an object mapping name -> ``{"risk_level", "description", ...}`` (the shape of
  the paper's released label files and of ``riskrank audit`` output);
* ``openai``: an OpenAI function-calling list, ``[{"type": "function", "function": {...}}]``
  or the legacy ``[{"name", "description", "parameters"}]``;
* ``mcp``: an MCP ``tools/list`` result ``{"tools": [{"name", "description",
  "inputSchema", "annotations"}]}``, bare or inside a JSON-RPC response;
* ``sealtools``: Seal-Tools ``tool.jsonl`` records (``api_name``, ``api_description``).

Files are read strictly (:func:`riskrank.fileio.loads_strict`: no duplicate keys, no NaN or
infinite numbers, no runaway numbers or nesting; UTF-8 with or without a BOM, or UTF-16/32),
and every value is checked once more after parsing (no lone surrogates, nesting at most
:data:`MAX_DEPTH`), because what a registry holds is later served as JSON and shown to
operators: a value that cannot be written back, or a name with a control or invisible
character, must fail at load, naming the file, the record and the field, not in a response.
Names must be printable; control and format characters are removed from descriptions (they
carry no meaning for the encoder and can rewrite a terminal or reorder text). MCP annotation
values of ``null`` mean absent, as the MCP Python SDK writes them.

Error messages show at most a short, escaped piece of a bad value
(:func:`riskrank.fileio.show`). A reload on a running server asks for ``redact=True``: the
messages then name the record and the field but no value and no tool name, because the file
may not be a registry at all and its contents must not reach the caller.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import RegistryError, UnknownToolError
from riskrank.fileio import (
    RefusedNumber,
    check_json_values,
    decode_json_bytes,
    jsonl_records,
    loads_strict,
    redacted_values,
    show,
    values_redacted,
)
from riskrank.names import first_invisible, look_alikes
from riskrank.risk import (
    PERMISSION_CATEGORIES,
    permission_categories,
    permission_matrix,
    split_name,
)

#: Default text given to the encoder for a tool: its name split into words, then the
#: description ("file delete: Delete a file ...").
DEFAULT_TOOL_TEMPLATE = "{name_words}: {description}"

#: MCP tool annotations riskrank reads as risk evidence (MCP spec, 2025-03-26 onwards).
MCP_ANNOTATION_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
#: How deep a registry's values may nest (root list -> record -> parameters -> ...); real JSON
#: schemas stay far below it, and serving recurses through what a tool holds.
MAX_DEPTH = 64
#: Size bounds, checked before a value is processed (a 20 MB description would otherwise be
#: cleaned, split into permission cues and encoded): the longest name, description, and any
#: other string a record may hold, and the largest registry file.
MAX_NAME_CHARS = 256
MAX_DESCRIPTION_CHARS = 65_536
MAX_STRING_CHARS = 262_144
MAX_REGISTRY_BYTES = 256 * 1024 * 1024

def _got(value: Any) -> str:
    """The ", got VALUE" tail of a message (a short escaped value; the type only when redacting)."""
    return f", got {show(value)}"


def _named(where: str, name: str) -> str:
    return where if values_redacted() else f"{where} ({show(name)})"


def _type(value: Any) -> str:
    return "a refused number" if isinstance(value, RefusedNumber) else type(value).__name__


def _check_values(where: str, fields: Mapping[str, Any]) -> None:
    """Every value of a record's free-form fields is servable JSON (see the module docstring)."""
    for name, value in fields.items():
        if value is not None:
            check_json_values(value, f"{where}: {show(name)}", RegistryError, max_depth=MAX_DEPTH - 3,
                              max_string=MAX_STRING_CHARS)


def _first_unprintable(text: str) -> tuple[int, str] | None:
    for i, ch in enumerate(text):
        if not ch.isprintable() and ch != " ":
            return i, ch
    return None


# Whitespace controls collapse to single spaces (str.split); every other control character
# and every format character (zero-width, bidi overrides, soft hyphen, BOM) is removed.
def _clean_description(text: str) -> str:
    if not text.isprintable():
        text = "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf"))
    return " ".join(text.split())


@dataclass(frozen=True)
class Tool:
    """One executable tool as riskrank sees it.

    ``risk_level`` is the audited level 1..5 or None when nobody has labelled the tool;
    ``permissions`` are the keyword categories of :mod:`riskrank.risk` (computed from the
    name and description unless given). ``annotations`` keeps MCP tool annotations.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] | None = None
    risk_level: int | None = None
    permissions: frozenset[str] = field(default=None)  # type: ignore[assignment]  # None: computed
    annotations: Mapping[str, Any] | None = None
    reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """A tool built directly (not by :func:`make_tool`, which checks every field in full)
        is checked for what would otherwise fail later, far from here: a name and a
        description that are strings, a level 1..5 or None; its permissions are computed when
        not given (the broad-permission cap reads them)."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise RegistryError(f"Tool: 'name' must be a non-empty string{_got(self.name)}")
        if not isinstance(self.description, str):
            raise RegistryError(f"Tool {show(self.name)}: 'description' must be a string, got {_type(self.description)}")
        object.__setattr__(self, "risk_level", _check_risk(self.risk_level, f"Tool {show(self.name)}"))
        if self.permissions is None:
            object.__setattr__(self, "permissions", permission_categories(self.name, self.description))

    def text(self, template: str = DEFAULT_TOOL_TEMPLATE) -> str:
        """The text the encoder embeds for this tool."""
        return template.format(
            name=self.name, name_words=split_name(self.name), description=self.description
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``plain`` format, plus permissions and annotations)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.risk_level is not None:
            out["risk_level"] = self.risk_level
        if self.parameters is not None:
            out["parameters"] = dict(self.parameters)
        out["permissions"] = sorted(self.permissions)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        if self.reason:
            out["reason"] = self.reason
        return out


def _check_risk(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise RegistryError(f"{where}: risk_level must be an integer 1-5{_got(value)}")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise RegistryError(f"{where}: risk_level must be an integer 1-5{_got(value)}")
    if not 1 <= value <= 5:
        raise RegistryError(f"{where}: risk_level must be between 1 and 5{_got(value)}")
    return int(value)


def make_tool(
    name: Any,
    description: Any,
    *,
    where: str,
    parameters: Any = None,
    risk_level: Any = None,
    annotations: Any = None,
    reason: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> Tool:
    """Validate one record's fields and build a :class:`Tool`; ``where`` names the record
    in error messages (``file.json: record 12 ('delete_file')``)."""
    if not isinstance(name, str) or not name.strip():
        raise RegistryError(f"{where}: 'name' must be a non-empty string{_got(name)}")
    if len(name) > MAX_NAME_CHARS:
        raise RegistryError(f"{where}: 'name' is {len(name):,} characters; a tool name has at most {MAX_NAME_CHARS}")
    name = name.strip()
    bad = _first_unprintable(name)
    if bad is not None:
        i, ch = bad
        what = ("a lone surrogate (invalid Unicode)" if unicodedata.category(ch) == "Cs"
                else f"an unprintable character ({unicodedata.name(ch, unicodedata.category(ch))})")
        raise RegistryError(f"{where}: 'name' holds {what}, U+{ord(ch):04X} at position {i}"
                            f"{'' if values_redacted() else ' of ' + show(name)}; a tool name must be printable")
    hidden = first_invisible(name)
    if hidden is not None:
        i, ch = hidden
        raise RegistryError(f"{where}: 'name' holds an invisible character ({unicodedata.name(ch, 'unnamed')}), U+{ord(ch):04X} "
                            f"at position {i}{'' if values_redacted() else ' of ' + show(name)}; a tool name must read as it is")
    where = _named(where, name)
    if description is not None and not isinstance(description, str):
        raise RegistryError(f"{where}: 'description' must be a string, got {_type(description)}")
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        raise RegistryError(f"{where}: 'description' is {len(description):,} characters; at most {MAX_DESCRIPTION_CHARS:,} "
                            "are accepted")
    if description is None or not description.strip():
        # A registry of names only: the name's words are all there is to rank by.
        description = split_name(name)
    cleaned = _clean_description(description)
    if not cleaned:
        raise RegistryError(f"{where}: 'description' is empty (only invisible characters)")
    description = cleaned
    if parameters is not None and not isinstance(parameters, Mapping):
        raise RegistryError(f"{where}: 'parameters' must be a JSON object (a JSON schema), got {_type(parameters)}")
    if annotations is not None:
        if not isinstance(annotations, Mapping):
            raise RegistryError(f"{where}: 'annotations' must be a JSON object, got {_type(annotations)}")
        # null means absent (the MCP Python SDK writes every hint, most of them null)
        annotations = {k: v for k, v in annotations.items() if v is not None}
        for key in MCP_ANNOTATION_KEYS:
            if key in annotations and not isinstance(annotations[key], bool):
                raise RegistryError(f"{where}: annotation {key!r} must be true, false or null{_got(annotations[key])}")
    if reason is not None and not isinstance(reason, str):
        raise RegistryError(f"{where}: 'reason' must be a string, got {_type(reason)}")
    risk = _check_risk(risk_level, where)
    _check_values(where, {"parameters": parameters, "annotations": annotations, "reason": reason, **(extra or {})})
    return Tool(
        name=name,
        description=description,
        parameters=parameters,
        risk_level=risk,
        permissions=permission_categories(name, description),
        annotations=annotations or None,
        reason=reason,
        extra=dict(extra or {}),
    )


class ToolRegistry:
    """An ordered, validated set of tools with array views for the scoring stages."""

    def __init__(self, tools: Iterable[Tool], source: str = "<memory>") -> None:
        self.tools: list[Tool] = list(tools)
        self.source = source
        if not self.tools:
            raise RegistryError(f"{source}: the registry holds no tools")
        for i, tool in enumerate(self.tools):
            if not isinstance(tool, Tool):
                raise RegistryError(f"{source}: record {i} is a {_type(tool)}, not a Tool (records as dicts are read with "
                                    "ToolRegistry.from_data({'tools': [...]}); one tool is built with make_tool)")
        self._index: dict[str, int] = {}
        for i, tool in enumerate(self.tools):
            if tool.name in self._index:
                raise RegistryError(
                    f"{source}: duplicate tool name{'' if values_redacted() else ' ' + show(tool.name)} (records {self._index[tool.name]} and {i})"
                )
            self._index[tool.name] = i
        alike = look_alikes([t.name for t in self.tools])
        if alike:
            i, j = next(iter(alike.items()))
            names = "" if values_redacted() else f" {show(self.tools[j].name)} and {show(self.tools[i].name)}"
            raise RegistryError(f"{source}: tool names{names} (records {j} and {i}) look alike (the same after NFKC, case "
                                "folding and Unicode's confusables): one name must be one tool")
        self.risk_levels = np.array([t.risk_level or 0 for t in self.tools], dtype=np.int8)
        """Audited risk level per tool, 0 where unknown."""
        self.permissions = permission_matrix(t.permissions for t in self.tools)
        """Boolean [N, 5] permission-category matrix (column order PERMISSION_CATEGORIES)."""
        self.perm_counts = self.permissions.sum(axis=1).astype(np.int8)

    # -- container protocol -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, key: int | str) -> Tool:
        if isinstance(key, str):
            return self.tools[self.index_of(key)]
        return self.tools[key]

    def index_of(self, name: str) -> int:
        """Position of a tool by name; :class:`UnknownToolError` names it if absent."""
        try:
            return self._index[name]
        except KeyError:
            raise UnknownToolError(f"unknown tool {show(name)} (not in registry {self.source})") from None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def has_labels(self) -> bool:
        """True when every tool carries an audited risk level."""
        return bool((self.risk_levels > 0).all())

    @property
    def n_unlabelled(self) -> int:
        return int((self.risk_levels == 0).sum())

    def texts(self, template: str = DEFAULT_TOOL_TEMPLATE) -> list[str]:
        """Encoder input for every tool, in registry order."""
        try:
            return [t.text(template) for t in self.tools]
        except (KeyError, IndexError, ValueError) as exc:
            raise RegistryError(
                f"tool text template {template!r} is invalid ({exc}); use the fields {{name}}, {{name_words}}, {{description}}"
            ) from None

    def fingerprint(self) -> str:
        """sha256 over names and descriptions: identifies the registry a checkpoint or an
        embedding matrix was built for."""
        h = hashlib.sha256()
        for t in self.tools:
            h.update(t.name.encode())
            h.update(b"\x00")
            h.update(t.description.encode())
            h.update(b"\x01")
        return h.hexdigest()

    def with_risk_levels(self, levels: Mapping[str, int | None], *, strict: bool = False, unknown: str = "ignore") -> ToolRegistry:
        """A copy with risk levels taken from ``levels`` (name -> level); tools missing from
        the mapping keep their level (or raise with ``strict``). Names in ``levels`` that are
        not tools of the registry are ignored, or (``unknown="error"``: a labels file meant for
        this registry) one error naming them."""
        if unknown == "error":
            missing = [n for n in levels if n not in self._index]
            if missing:
                shown = "" if values_redacted() else ": " + ", ".join(show(n) for n in missing[:5]) + (" ..." if len(missing) > 5 else "")
                raise RegistryError(f"{self.source}: the labels name {len(missing)} tool(s) not in the registry{shown}")
        tools = []
        for t in self.tools:
            if t.name in levels:
                tools.append(replace(t, risk_level=_check_risk(levels[t.name], f"{self.source}: {show(t.name)}")))
            elif strict:
                raise RegistryError(f"{self.source}: no risk level given for tool {show(t.name)}")
            else:
                tools.append(t)
        return ToolRegistry(tools, self.source)

    def subset(self, names: Sequence[str]) -> ToolRegistry:
        return ToolRegistry([self[n] for n in names], self.source)

    def to_records(self) -> list[dict[str, Any]]:
        return [t.to_dict() for t in self.tools]

    def summary(self) -> dict[str, Any]:
        levels = self.risk_levels
        return {
            "source": self.source,
            "n_tools": len(self),
            "risk_levels": {f"L{k}": int((levels == k).sum()) for k in range(1, 6)},
            "unlabelled": self.n_unlabelled,
            "permissions": {c: int(self.permissions[:, j].sum()) for j, c in enumerate(PERMISSION_CATEGORIES)},
        }

    # -- loading ------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, fmt: str = "auto", *, redact: bool = False) -> ToolRegistry:
        """Load and validate a registry file; errors name the file and the record (and, with
        ``redact``, no value and no tool name: see the module docstring)."""
        path = Path(path)
        if not path.exists():
            raise RegistryError(f"{path}: no such file")
        if path.is_dir():
            raise RegistryError(f"{path}: is a directory, expected a JSON or JSONL registry file")
        if path.stat().st_size > MAX_REGISTRY_BYTES:
            raise RegistryError(f"{path}: {path.stat().st_size:,} bytes; a registry file has at most {MAX_REGISTRY_BYTES:,}")
        return cls.from_bytes(path.read_bytes(), str(path), fmt=fmt, redact=redact)

    @classmethod
    def from_bytes(cls, data: bytes, source: str, fmt: str = "auto", *, redact: bool = False) -> ToolRegistry:
        """A registry from a file's bytes (JSON or JSONL; see :meth:`load`)."""
        with redacted_values(redact):
            text = decode_json_bytes(data, source, RegistryError)
            parsed = _parse_json_or_jsonl(text, source)
            if isinstance(parsed, Mapping) and (source.endswith(".jsonl") or _looks_like_record(parsed)):
                parsed = [parsed]  # a one-line JSONL file (or a file of one record)
            return cls.from_data(parsed, fmt=fmt, source=source)

    @classmethod
    def from_data(cls, data: Any, fmt: str = "auto", source: str = "<memory>", *, redact: bool = False) -> ToolRegistry:
        """Build a registry from already-parsed JSON (see the module docstring for formats)."""
        with redacted_values(redact):
            if fmt == "auto":
                fmt = detect_format(data, source)
            try:
                parser = _PARSERS[fmt]
            except KeyError:
                raise RegistryError(f"unknown registry format {fmt!r}; choose from {', '.join(['auto', *_PARSERS])}") from None
            tools = parser(data, source)  # each record's fields checked where the record is named
            check_json_values(data, source, RegistryError, max_depth=MAX_DEPTH,
                              max_string=MAX_STRING_CHARS)  # and what lies outside the records
            return cls(tools, source)


_TOOL_KEYS = frozenset({"description", "inputSchema", "input_schema", "parameters", "arguments", "risk_level", "function",
                        "api_name", "annotations", "title"})


def servers_not_tools(data: Any, source: str) -> None:
    """Refuse a name -> record map whose records are MCP servers (a ``command`` or ``url``)
    rather than tools: a servers file whose ``mcpServers`` key is misspelled, or the VS Code
    ``{"mcp": {"servers": ...}}`` shape, would otherwise read as a registry of one or two
    "tools" named after its keys, and a scan would pass it as clean without starting anything."""

    def server_at(node: Any, path: tuple[str, ...]) -> tuple[str, ...] | None:
        if not isinstance(node, Mapping) or len(path) > 3 or (path and _TOOL_KEYS & node.keys()):
            return None  # a tool record's schema may hold a "url" or a "command" of its own
        if path and (isinstance(node.get("command"), str) or isinstance(node.get("url"), str)):
            return path
        for key, value in node.items():
            found = server_at(value, (*path, str(key)))
            if found is not None:
                return found
        return None

    if isinstance(data, Mapping) and not isinstance(data.get("tools"), list) and "result" not in data:
        where = server_at(data, ())
        if where is not None:
            raise RegistryError(f"{source}: {'.'.join(where)!r} is an MCP server (a command or url), not a tool definition: "
                                "a servers file keeps its servers under \"mcpServers\"")


def _looks_like_record(data: Mapping[str, Any]) -> bool:
    """One tool record rather than a registry object (``{"tools": [...]}``, a label file)."""
    return isinstance(data.get("name"), str) or isinstance(data.get("api_name"), str) or isinstance(data.get("function"), Mapping)


def _parse_json_or_jsonl(text: str, source: str) -> Any:
    if not text.strip():
        raise RegistryError(f"{source}: file is empty")
    try:
        # unstripped, so error line numbers are the file's own; refused numbers stay in place
        # (RefusedNumber) so that the record and the field can be named
        return loads_strict(text, source, RegistryError, mark_numbers=True)
    except RegistryError as first:
        # JSONL: one JSON value per non-empty line. If the first value does not parse on its
        # own line, the file is a (broken) JSON document: report the JSON error.
        records: list[Any] = []
        try:
            records.extend(rec for _, rec in jsonl_records(text.splitlines(), source, RegistryError, mark_numbers=True))
        except RegistryError:
            if not records:
                raise first from None
            raise
        return records


def _record_kind(rec: Any) -> str | None:
    """The format one record's own keys declare (None: any format reads it)."""
    if not isinstance(rec, Mapping):
        return None
    if "function" in rec or rec.get("type") == "function":
        return "openai"
    if "api_name" in rec:
        return "sealtools"
    if "inputSchema" in rec:
        return "mcp"
    if "parameters" in rec or "arguments" in rec:
        return "plain"
    return None


def _format_of(records: list[Any], source: str, default: str) -> str:
    """The format of a list of records, decided from every record (not the first alone: a
    first record without an ``inputSchema`` must not drop every later tool's schema); records
    that declare two formats are an error naming one of each."""
    first: dict[str, int] = {}
    for i, rec in enumerate(records):
        kind = _record_kind(rec)
        if kind is not None:
            first.setdefault(kind, i)
    if len(first) > 1:
        (a, i), (b, j) = sorted(first.items(), key=lambda kv: kv[1])[:2]
        raise RegistryError(f"{source}: the records mix formats: record {i} is {a}, record {j} is {b}; "
                            "write every record in one format")
    if first:
        return next(iter(first))
    if default == "plain" and any(isinstance(r, Mapping) and "annotations" in r for r in records):
        return "mcp"
    return default


def detect_format(data: Any, source: str) -> str:
    """The registry format, from the shape of the parsed JSON and every record's keys."""
    if isinstance(data, Mapping):
        if "result" in data:
            result = data["result"]
            if not isinstance(result, Mapping) or not isinstance(result.get("tools"), list):
                raise RegistryError(f"{source}: 'result' must be an MCP tools/list result, {{\"tools\": [...]}}")
            return "mcp"
        if "tools" in data:
            if not isinstance(data["tools"], list):
                raise RegistryError(f"{source}: 'tools' must be a list of tool records, got {_type(data['tools'])}")
            return _format_of(data["tools"], source, "plain")
        if data and all(isinstance(v, Mapping) for v in data.values()):
            servers_not_tools(data, source)
            return "labels"
        odd = next((k for k, v in data.items() if not isinstance(v, Mapping)), None)
        if data and isinstance(data.get(odd), (int, float, str, bool, list)) and any(isinstance(v, Mapping) for v in data.values()):
            raise RegistryError(f"{source}: entry {show(odd)} is {_type(data[odd])}, not a tool record (a name -> record map "
                                "holds an object per tool)")
        raise RegistryError(f"{source}: unrecognised registry shape (an object that is neither {{'tools': [...]}} nor a name -> record map)")
    if isinstance(data, list):
        if not data:
            raise RegistryError(f"{source}: the registry holds no tools")
        first = data[0]
        if isinstance(first, str):
            return "plain"  # a list of names only
        if not isinstance(first, Mapping):
            raise RegistryError(f"{source}: record 0 must be a JSON object, got {type(first).__name__}")
        return _format_of(data, source, "plain")
    raise RegistryError(f"{source}: expected a JSON list or object of tools, got {type(data).__name__}")


def _records(data: Any, source: str, key: str = "tools") -> list[Any]:
    if isinstance(data, Mapping):
        if key not in data:
            raise RegistryError(f"{source}: expected a list of tools or an object with {key!r}")
        data = data[key]
    if not isinstance(data, list):
        raise RegistryError(f"{source}: {key!r} must be a list, got {type(data).__name__}")
    return data


def _each(data: list[Any], source: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for i, rec in enumerate(data):
        where = f"{source}: record {i}"
        if not isinstance(rec, Mapping):
            raise RegistryError(f"{where}: must be a JSON object, got {type(rec).__name__}")
        yield where, rec


def _plain(data: Any, source: str) -> list[Tool]:
    tools = []
    records = _records(data, source)
    # A list of names (every record a string) is a registry of names only.
    if isinstance(records, list) and records and all(isinstance(r, str) for r in records):
        records = [{"name": r} for r in records]
    for where, rec in _each(records, source):
        known = {"name", "description", "risk_level", "parameters", "reason", "annotations", "permissions"}
        tools.append(
            make_tool(
                rec.get("name"), rec.get("description"), where=where,
                parameters=rec.get("parameters", rec.get("arguments")),
                risk_level=rec.get("risk_level"), annotations=rec.get("annotations"),
                reason=rec.get("reason"), extra={k: v for k, v in rec.items() if k not in known},
            )
        )
    return tools


def _labels(data: Any, source: str) -> list[Tool]:
    if not isinstance(data, Mapping):
        raise RegistryError(f"{source}: a label file must be a JSON object mapping tool name -> {{risk_level, description}}, got {type(data).__name__}")
    tools = []
    for i, (name, rec) in enumerate(data.items()):
        where = f"{source}: entry {i}"
        if not isinstance(rec, Mapping):
            raise RegistryError(f"{_named(where, name)}: must be a JSON object, got {type(rec).__name__}")
        known = {"risk_level", "description", "reason", "parameters", "annotations"}
        tools.append(
            make_tool(
                name, rec.get("description"), where=where, risk_level=rec.get("risk_level"),
                parameters=rec.get("parameters"), annotations=rec.get("annotations"),
                reason=rec.get("reason"), extra={k: v for k, v in rec.items() if k not in known},
            )
        )
    return tools


def _openai(data: Any, source: str) -> list[Tool]:
    tools = []
    for where, rec in _each(_records(data, source), source):
        fn = rec.get("function", rec)
        if not isinstance(fn, Mapping):
            raise RegistryError(f"{where}: 'function' must be a JSON object")
        tools.append(
            make_tool(
                fn.get("name"), fn.get("description"), where=where, parameters=fn.get("parameters"),
                risk_level=rec.get("risk_level", fn.get("risk_level")),
            )
        )
    return tools


def _mcp(data: Any, source: str) -> list[Tool]:
    if isinstance(data, Mapping) and "result" in data:
        data = data["result"]
    tools = []
    for where, rec in _each(_records(data, source), source):
        description = rec.get("description")
        annotations = rec.get("annotations")
        if description is None or (isinstance(description, str) and not description.strip()):
            # MCP makes description optional; fall back to the human title when given (the
            # tool's own, else its annotations'), as riskrank.adapters reads the same record
            title = rec.get("title") or (annotations.get("title") if isinstance(annotations, Mapping) else None)
            description = title if title is not None else description
        tools.append(
            make_tool(
                rec.get("name"), description, where=where, parameters=rec.get("inputSchema"),
                risk_level=rec.get("risk_level"), annotations=annotations,
            )
        )
    return tools


def _sealtools(data: Any, source: str) -> list[Tool]:
    tools = []
    for where, rec in _each(_records(data, source), source):
        params, required = rec.get("parameters"), rec.get("required")
        schema = None
        if params is not None and not isinstance(params, Mapping):
            raise RegistryError(f"{where}: 'parameters' must be a JSON object (parameter name -> spec), got {_type(params)}")
        if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
            raise RegistryError(f"{where}: 'required' must be a list of parameter names{_got(required)}")
        if params is not None:
            schema = {"type": "object", "properties": dict(params), "required": list(required or [])}
        tools.append(
            make_tool(
                rec.get("api_name"), rec.get("api_description"), where=where, parameters=schema,
                risk_level=rec.get("risk_level"), extra={"field": rec.get("field")} if rec.get("field") else None,
            )
        )
    return tools


_PARSERS = {"plain": _plain, "labels": _labels, "openai": _openai, "mcp": _mcp, "sealtools": _sealtools}
REGISTRY_FORMATS = ("auto", *_PARSERS)
