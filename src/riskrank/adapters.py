"""Agent-framework integration: show the model only the risk-aware top-k of its tools.

:class:`ToolGuard` takes a task and the tools an agent could use, in the shapes agent code
already holds them, and returns the same objects, filtered to the risk-aware top-k and
ranked. Accepted tool shapes:

- OpenAI chat-completions tools ``{"type": "function", "function": {name, description, parameters}}``,
  Responses-API function tools ``{"type": "function", "name", "description", "parameters"}``
  and legacy functions ``{"name", "description", "parameters"}``;
- MCP tools, as ``tools/list`` dicts (``inputSchema``, ``annotations``) or ``mcp.types.Tool``
  objects (anything with ``model_dump``);
- objects with ``name``/``description`` attributes (for example an OpenAI Agents SDK
  ``FunctionTool``, whose ``params_json_schema`` is read).

For per-tool hooks such as the OpenAI Agents SDK's MCP ``tool_filter`` (a ``(context, tool)
-> bool`` callable), :meth:`ToolGuard.tool_filter` builds the predicate.

Two backends, one interface:

- in-process (default): a :class:`~riskrank.pipeline.RiskAwareRetriever` over the tools
  (or over ``registry``, a file of audited tools); unlabelled tools get the keyword
  annotator's level, which reads MCP annotations (docs/serving.md says exactly how);
- remote (``url=``): a ``riskrank serve`` instance, over HTTP with the standard library.

This module imports nothing outside the standard library and :mod:`riskrank.errors` when it
is imported; the retriever (numpy, torch, the encoder) loads on the first ranking.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.modes import MAX_K

__all__ = ["ToolGuard", "tool_name", "tool_record"]


class GuardError(RiskrankError):
    """A tool spec the guard cannot read, or a failed call to a remote riskrank server."""

    code = "guard_error"


# -- reading tool specs ------------------------------------------------------------------------------
def _as_mapping(tool: Any) -> Mapping[str, Any] | None:
    if isinstance(tool, Mapping):
        return tool
    dump = getattr(tool, "model_dump", None)  # pydantic models: mcp.types.Tool and friends
    if callable(dump):
        try:
            return dump(by_alias=True, exclude_none=True, mode="json")
        except TypeError:
            return dump()
    return None


def tool_name(tool: Any) -> str:
    """The name of a tool in any accepted shape."""
    m = _as_mapping(tool)
    if m is not None:
        fn = m.get("function") if isinstance(m.get("function"), Mapping) else m
        name = fn.get("name")
    else:
        name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise GuardError(f"cannot read a tool name from {type(tool).__name__} {str(tool)[:80]!r}")
    return name.strip()


def tool_record(tool: Any) -> dict[str, Any]:
    """One tool as a riskrank registry record: name, description, parameters (JSON schema),
    annotations (MCP hints) and risk_level when the spec carries one."""
    m = _as_mapping(tool)
    if m is not None:
        fn = m.get("function") if isinstance(m.get("function"), Mapping) else m
        description = fn.get("description")
        params = next((fn[k] for k in ("parameters", "inputSchema", "input_schema", "params_json_schema") if fn.get(k) is not None), None)
        annotations = m.get("annotations", fn.get("annotations"))
        risk = m.get("risk_level", fn.get("risk_level"))
        title = m.get("title") or (annotations.get("title") if isinstance(annotations, Mapping) else None)
    else:
        description = getattr(tool, "description", None)
        params = next((getattr(tool, k) for k in ("params_json_schema", "parameters", "inputSchema", "input_schema")
                       if getattr(tool, k, None) is not None), None)
        annotations = _as_mapping(getattr(tool, "annotations", None)) if getattr(tool, "annotations", None) is not None else None
        risk, title = getattr(tool, "risk_level", None), getattr(tool, "title", None)
    name = tool_name(tool)
    if not isinstance(description, str) or not description.strip():
        # MCP makes description optional; rank on the title, else on the name's words.
        description = title if isinstance(title, str) and title.strip() else name.replace("_", " ").replace("-", " ")
    rec: dict[str, Any] = {"name": name, "description": description}
    if isinstance(params, Mapping):
        rec["parameters"] = dict(params)
    if isinstance(annotations, Mapping) and annotations:
        rec["annotations"] = {k: v for k, v in annotations.items() if v is not None}
    if risk is not None:
        rec["risk_level"] = risk
    return rec


# -- the guard ---------------------------------------------------------------------------------------
class ToolGuard:
    """Filter an agent's tools to the risk-aware top-k for each task.

    >>> guard = ToolGuard(k=3, mode="dense+rule")
    >>> visible = guard.select("delete the old log files", openai_tools)   # same dicts, 3 of them

    ``registry``: a registry file (or :class:`~riskrank.registry.ToolRegistry`) of audited
    tools. Without ``tools``, the guard ranks the whole registry; with ``tools``, it ranks the
    agent's tools, taking descriptions and audited levels from the registry where it knows
    the name. ``checkpoint`` enables the dual-head modes (``core``, ``graph``, ``rule``);
    without one, ``dense`` and ``dense+rule`` (the default here: relevance plus the strict
    exposure policy) are available. ``fill_levels="keyword"`` (default) gives unlabelled
    tools the keyword annotator's level; ``"none"`` leaves them to the rule filter's
    fail-closed path. ``url``/``token``: use a ``riskrank serve`` instance instead; its
    registry decides, and the agent's tools outside its top-k are not shown.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        checkpoint: str | None = None,
        k: int = 5,
        mode: str | None = None,
        lam: float | None = None,
        encoder: Any = None,
        fill_levels: str = "keyword",
        url: str | None = None,
        token: str | None = None,
        timeout: float = 10.0,
        cache_size: int = 16,
    ) -> None:
        if url and (registry is not None or checkpoint):
            raise GuardError("give either url (a riskrank server) or registry/checkpoint (in-process), not both")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise GuardError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
        self.registry, self.checkpoint, self.k, self.lam, self.encoder_spec = registry, checkpoint, k, lam, encoder
        self.mode = mode or ("core+graph+rule" if checkpoint else "dense+rule")
        self.fill_levels = fill_levels
        self.url, self.token, self.timeout = (url.rstrip("/") if url else None), token, timeout
        self._encoder: Any = None
        self._catalogues: OrderedDict[str, Any] = OrderedDict()
        self._allowed: OrderedDict[str, list[str]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    # -- public surface ------------------------------------------------------------------------
    def select(self, task: str, tools: Sequence[Any] | None = None) -> list[Any]:
        """The agent's tools (the same objects) that the risk-aware top-k keeps, best first.
        Without ``tools``: the ranked entries of the registry's (or server's) top-k, as dicts."""
        if tools is None:
            return self.rank(task)["tools"]
        by_name = {tool_name(t): t for t in tools}
        return [by_name[n] for n in self.names(task, tools)]

    def names(self, task: str, tools: Sequence[Any] | None = None) -> list[str]:
        """Names of the kept tools, best first."""
        names = [t["name"] for t in self.rank(task, tools)["tools"]]
        if tools is not None and self.url:  # the server ranked its registry: keep what the agent has
            have = {tool_name(t) for t in tools}
            names = [n for n in names if n in have]
        return names[: self.k]

    def rank(self, task: str, tools: Sequence[Any] | None = None) -> dict[str, Any]:
        """The full retrieval result (scores, f_rel, f_risk, levels and their provenance, and
        in rule modes the deferred tools with reasons), as ``POST /v1/retrieve`` returns it."""
        if not isinstance(task, str) or not task.strip():
            raise GuardError("the task text is empty")
        if self.url:
            return self._remote(task)
        cat = self._catalogue(tools)
        res = cat.retriever.retrieve(task, k=min(self.k, len(cat.registry)), mode=self.mode, lam=self.lam)
        return cat.result_dict(res)

    def tool_filter(self, task: str | Callable[[Any], str], tools: Sequence[Any] | None = None) -> Callable[[Any, Any], bool]:
        """A per-tool predicate ``(context, tool) -> bool`` in the shape of the OpenAI Agents
        SDK's MCP ``tool_filter``: True for the tools in the risk-aware top-k for the task.
        ``task`` is a string or a function of the context (e.g. ``lambda ctx:
        ctx.run_context.context["task"]``). A per-tool hook never sees the whole list, so the
        candidates are ``tools``, else the registry (or the remote server's)."""
        if tools is None and self.registry is None and not self.url:
            raise GuardError("tool_filter needs the candidate tools: pass tools=, or build the guard with registry= or url=")

        def allowed(context: Any, tool: Any) -> bool:
            text = task(context) if callable(task) else task
            return tool_name(tool) in self._allowed_names(text, tools)

        return allowed

    # -- internals -----------------------------------------------------------------------------
    def _allowed_names(self, task: str, tools: Sequence[Any] | None) -> list[str]:
        key = task + "\x00" + (",".join(sorted(tool_name(t) for t in tools)) if tools is not None else "")
        with self._lock:
            if key in self._allowed:
                self._allowed.move_to_end(key)
                return self._allowed[key]
        names = self.names(task, tools)
        with self._lock:
            self._allowed[key] = names
            while len(self._allowed) > self._cache_size:
                self._allowed.popitem(last=False)
        return names

    def _records(self, tools: Sequence[Any] | None, known: Any) -> list[dict[str, Any]]:
        records = []
        for t in tools or ():
            rec = tool_record(t)
            if known is not None and rec["name"] in known:
                rec = {**known[rec["name"]].to_dict(), **{k: v for k, v in rec.items() if k == "annotations"}}
            records.append(rec)
        if not records:
            raise GuardError("no tools to choose from")
        names = [r["name"] for r in records]
        if len(set(names)) != len(names):
            raise GuardError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
        return records

    def _base_registry(self) -> Any:
        from riskrank.registry import ToolRegistry

        if self.registry is None or isinstance(self.registry, ToolRegistry):
            return self.registry
        self.registry = ToolRegistry.load(self.registry)
        return self.registry

    def _catalogue(self, tools: Sequence[Any] | None) -> Any:
        """The catalogue for a tool set, built once per distinct set (an agent's tool list is
        usually the same from one turn to the next)."""
        from riskrank.catalogue import ArtefactSpec, load_catalogue
        from riskrank.encoder import make_encoder
        from riskrank.registry import ToolRegistry

        base = self._base_registry()
        if tools is None:
            if base is None:
                raise GuardError("no tools given and no registry: pass tools= or build the guard with registry=")
            key, source, reg = "registry", base.source, base
        else:
            records = self._records(tools, base)
            key = hashlib.sha256(json.dumps(records, sort_keys=True, default=str).encode()).hexdigest()
            source, reg = "<agent tools>", None
        with self._lock:
            if key in self._catalogues:
                self._catalogues.move_to_end(key)
                return self._catalogues[key]
            if self._encoder is None:
                self._encoder = make_encoder(self.encoder_spec)
        if reg is None:
            reg = ToolRegistry.from_data(records, fmt="plain", source=source)
        cat = load_catalogue(ArtefactSpec(source, self.checkpoint, self.mode, "labels", self.fill_levels), self._encoder, registry=reg)
        with self._lock:
            self._catalogues[key] = cat
            while len(self._catalogues) > self._cache_size:
                self._catalogues.popitem(last=False)
        return cat

    def _remote(self, task: str) -> dict[str, Any]:
        body: dict[str, Any] = {"task": task, "k": self.k, "mode": self.mode}
        if self.lam is not None:
            body["lambda"] = self.lam
        req = urllib.request.Request(
            self.url + "/v1/retrieve", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {self.token}"} if self.token else {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read())["error"]
                raise GuardError(f"riskrank server: {err['code']}: {err['message']}") from None
            except (ValueError, KeyError, TypeError):
                raise GuardError(f"riskrank server answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise GuardError(f"cannot reach the riskrank server at {self.url}: {getattr(exc, 'reason', exc)}") from None


def select_tools(task: str, tools: Iterable[Any], **kwargs: Any) -> list[Any]:
    """One-shot form of :meth:`ToolGuard.select` (builds a guard each call; keep a
    :class:`ToolGuard` in a loop)."""
    return ToolGuard(**kwargs).select(task, list(tools))
