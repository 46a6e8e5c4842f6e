"""What the gateway offers, one generation at a time: :class:`View` (every tool's level,
provenance, route, schema, capabilities and session-guard roles, the catalogue of the tools the
policy may allow, and what trust withholds), built by :func:`build_view` from the upstreams'
``tools/list`` records (:func:`upstream_records`, :func:`record_registry`). ``find_tools``, the
call-time guards (:mod:`.guards`), the audit log and the console all read one view.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from riskrank.capabilities import name_only_reads
from riskrank.catalogue import ArtefactSpec, Catalogue, audit_tools, load_catalogue
from riskrank.errors import RegistryError
from riskrank.levels import own_capabilities
from riskrank.names import look_alikes
from riskrank.registry import ToolRegistry
from riskrank.risk import split_name
from riskrank.scan import Scan
from riskrank.serving.gateway.config import Policies
from riskrank.serving.gateway.policy import Policy
from riskrank.serving.gateway.session import tool_roles
from riskrank.serving.gateway.upstreams import UpstreamManager
from riskrank.timeline import mark


@dataclass
class View:
    """One generation of what the server offers: the catalogue of the tools the policy may
    allow (None when there is none), every tool's current level and provenance (offered or
    not), the route of each upstream tool, and the tools the policy never offers."""

    catalogue: Catalogue | None
    generation: int
    levels: dict[str, tuple[int, str]] = field(default_factory=dict)
    routes: dict[str, tuple[str, str]] = field(default_factory=dict)
    not_offered: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every tool as an operator reads it (offered or not): description, level, provenance,
    evidence, permission categories, annotations."""
    withdrawn: dict[str, str] = field(default_factory=dict)
    """Tools neither offered nor callable (name -> why): their server's latest list could not
    be built into the catalogue (they come back with the next good list), or trust holds them
    (a changed or new tool awaiting approval, a poisoned definition: see ``held``)."""
    held: dict[str, str] = field(default_factory=dict)
    """The refusal code of a withdrawn tool when it is not ``withdrawn``: ``quarantined`` (a
    pin change awaiting approval) or ``poisoned`` (the scan's verdict, withheld by policy).
    These are refused whether or not the caller's ``find_tools`` showed them."""

    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each tool's ``inputSchema`` as its server lists it: a call's arguments are checked
    against it before the upstream is called (``invalid_arguments``)."""
    others: dict[str, View] = field(default_factory=dict)
    """The same generation under each other named policy (:func:`build_views`): a client is
    served the view of its own policy, never this one in its stead."""
    withheld_tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each withdrawn tool as an operator reads it (the console's catalogue lists these too):
    description, upstream, its own name, ``withheld`` (``quarantined``, ``poisoned``,
    ``suspicious`` or ``withdrawn``) and ``why``. Never offered, never ranked."""

    def needs_confirmation(self, name: str) -> bool:
        """Whether a call of ``name`` needs confirmation (what ``find_tools`` shows and the
        call-time check enforces, from one computation in :func:`build_view`)."""
        return bool(self.tools.get(name, {}).get("needs_confirmation", True))

    def under(self, policy: str | None, default: str) -> View:
        """The view a client with ``policy`` is served: this one for the default policy, its
        own otherwise; a policy this generation was not built for sees nothing (fail closed)."""
        if policy is None or policy == default:
            return self
        got = self.others.get(policy)
        if got is None:
            return View(None, self.generation, withdrawn={n: f"no catalogue was built for the policy {policy!r}"
                                                          for n in self.levels})
        return got


def record_registry(records: list[dict[str, Any]], source: str) -> tuple[ToolRegistry | None, dict[str, str]]:
    """A registry of upstream ``tools/list`` records, each validated on its own: a malformed
    tool is skipped (with the reason) instead of failing the whole catalogue; None when no
    tool is left (every one held back or skipped: the gateway serves nothing and says why,
    it does not fail). Two records with one name raise :class:`RegistryError` (the caller
    withdraws that server's list)."""
    names = collections.Counter(str(rec.get("name")) for rec in records)
    twice = sorted(n for n, c in names.items() if c > 1)
    if twice:  # which of the two is meant cannot be known: the list is refused whole
        raise RegistryError(f"{source}: duplicate tool name {twice[0]!r} ({names[twice[0]]} tools)")
    tools, skipped = [], {}
    for rec in records:
        try:
            tools.extend(ToolRegistry.from_data({"tools": [rec]}, fmt="mcp", source=source))
        except RegistryError as exc:
            skipped[str(rec.get("name"))] = str(exc)
    # A look-alike of a tool already listed is refused, with the finding.
    alike = look_alikes([t.name for t in tools])
    for i, j in alike.items():
        skipped[tools[i].name] = f"looks like {tools[j].name!r} (the same after NFKC, case folding and Unicode's confusables)"
    kept = [t for i, t in enumerate(tools) if i not in alike]
    return (ToolRegistry(kept, source) if kept else None), skipped


def capability_keys(served: list[str]) -> list[str]:
    """The capability keys of the level model's served form (``"outbound_send (T1567)"`` ->
    ``"outbound_send"``): what the sink test reads."""
    return [c.split(" ", 1)[0] for c in served]


def build_view(registry: ToolRegistry | None, spec: ArtefactSpec, encoder: Any, policy: Policy, generation: int, *,
               routes: dict[str, tuple[str, str]] | None = None, skipped: dict[str, str] | None = None,
               withdrawn: dict[str, str] | None = None, held: dict[str, str] | None = None,
               scans: dict[str, Scan] | None = None, withheld_records: dict[str, dict[str, Any]] | None = None) -> View:
    """Resolve every tool's level once (:func:`riskrank.catalogue.audit_tools`: the policy's
    pins first, audits, the base model's or the checkpoint's risk head with keywords and MCP
    hints), keep the tools the policy may allow, and load a catalogue of those with the same
    levels (blocking: run it in a worker thread). ``find_tools``, the call-time check, the
    audit log and the console all read these levels. ``scans``: the definitions' scan results (their
    findings join each tool's evidence; a verdict the policy confirms makes every call
    confirmed). ``withheld_records``: the ``tools/list`` records of the withdrawn tools (the
    operator's rows of :attr:`View.withheld_tools`)."""
    withheld = _withheld_rows(withdrawn or {}, held or {}, scans or {}, withheld_records or {}, routes)
    if registry is None:  # no tool left to serve: an empty catalogue, each withdrawn tool with its reason
        return View(None, generation, {}, routes or {}, {}, skipped or {}, {}, withdrawn or {}, held or {}, withheld_tools=withheld)
    own = {t.name: (routes or {}).get(t.name, (None, t.name))[1] for t in registry}  # its name at its server
    pins = {t.name: lvl for t in registry if (lvl := policy.pinned_level(t.name)) is not None}
    # each tool's server: a description opening shared by one server's tools is counted there only
    groups = [(routes or {}).get(t.name, ("", t.name))[0] or "" for t in registry]
    audit = audit_tools(spec, encoder, registry, pins, groups)
    # a pin written for a name two servers now list holds for both as a floor (it may be the
    # other server's tool: raised to it, never lowered)
    floors = {t.name: f for t in registry if (f := policy.floor_for(t.name, own[t.name])) is not None}
    raised = {n: f for n, f in floors.items() if f > int(audit.levels.levels[registry.index_of(n)])}
    if raised:
        audit = audit_tools(spec, encoder, registry, {**pins, **raised}, groups)
    # The scan's findings join each tool's evidence where its level is read (find_tools, the
    # call-time check, the audit log, the console); the policy decides what the verdict does.
    found = {name: [f"scan {f.verdict}: {f.kind} in {f.field}: {f.evidence}" for f in sc.findings]
             for name, sc in (scans or {}).items() if sc.findings}
    if found:
        audit = audit.with_evidence(found)
    mark(f"levels of {len(registry)} tools resolved (model files, tool embeddings, risk head, keywords)", once=True)
    lv = audit.levels
    levels = {t.name: (int(lv.levels[i]), lv.provenance[i]) for i, t in enumerate(registry)}
    not_offered = {n: code for n, (lvl, _) in levels.items() if (code := policy.refusal(n, lvl, own[n])) is not None}
    offered = [t.name for t in registry if t.name not in not_offered]
    cat = load_catalogue(spec, encoder, generation, audit=audit.subset(offered)) if offered else None
    mark("catalogue built (lexical index, tool graph, probe query)", once=True)
    rows = {t.name: {"name": t.name, "description": t.description, "level": int(lv.levels[i]), "provenance": lv.provenance[i],
                     "evidence": list(lv.evidence[i]), "permissions": sorted(t.permissions),
                     "annotations": dict(t.annotations) if t.annotations else None,
                     "upstream": (routes or {}).get(t.name, (None, None))[0], "not_offered": not_offered.get(t.name),
                     "needs_confirmation": policy.needs_confirmation(int(lv.levels[i]), (routes or {}).get(t.name, (None,))[0])
                     or _scan_confirms(policy, (scans or {}).get(t.name))}
            for i, t in enumerate(registry)}
    for name, sc in (scans or {}).items():
        if name in rows and sc.findings:
            rows[name]["scan"] = sc.verdict
    # the level model's doubt about the policy's confirm line (riskrank levels review): what to
    # check first; none where the level decides no question (never offered, or every call of
    # its server asked)
    for t, d in zip(registry, lv.doubt(policy.confirm_level), strict=True):
        row = rows[t.name]
        moot = row["not_offered"] is not None or policy.untrusted_server(row["upstream"])
        row["doubt"] = round(float(d), 3) if d == d and not moot else None
    # without the level model's capabilities, read them as it would: each tool by its own words
    own_caps = own_capabilities(list(registry), groups) if not lv.capabilities else []
    for i, t in enumerate(registry):  # what the session guard reads: capabilities, and whether it is a source or a sink
        row = rows[t.name]
        # the level model's capabilities where it served the levels ("outbound_send (T1567)": the
        # key, then the ATT&CK technique), else read from the definition
        served = lv.capabilities_of(i) if lv.capabilities else []
        caps = capability_keys(served) if lv.capabilities else [h.key for h in own_caps[i]]
        row["capabilities"] = served or caps
        row["source"], row["sink"] = tool_roles(t.name, t.description, t.parameters, t.annotations, caps, row["upstream"],
                                                policy, own=own[t.name])
        # whose arguments the flow guard checks: a sink, and any tool whose name does not say it only
        # reads (a level read too low must not let an attacker's path or account through), unless trusted
        row["flow_checked"] = row["sink"] is not None or not (policy.trusted_sinks.matches(t.name, row["upstream"])
                                                              or name_only_reads(t.name))
        # confirmed at every call whatever the session: an untrusted server's tools, a scan verdict the policy confirms
        row["confirm_every_call"] = policy.untrusted_server(row["upstream"]) or _scan_confirms(policy, (scans or {}).get(t.name))
    for name, row in rows.items():
        _original(row, routes, name)
    return View(cat, generation, levels, routes or {}, not_offered, skipped or {}, rows, withdrawn or {}, held or {},
                withheld_tools=withheld, schemas={t.name: dict(t.parameters) for t in registry if t.parameters is not None})


def _withheld_rows(withdrawn: dict[str, str], held: dict[str, str], scans: dict[str, Scan],
                   records: dict[str, dict[str, Any]], routes: dict[str, tuple[str, str]] | None) -> dict[str, dict[str, Any]]:
    """Each withdrawn tool as an operator reads it (:attr:`View.withheld_tools`)."""
    out = {}
    for name, why in withdrawn.items():
        rec, sc = records.get(name, {}), scans.get(name)
        out[name] = _original({
            "name": name, "description": str(rec.get("description") or ""), "level": None, "provenance": None,
            "evidence": [f"scan {f.verdict}: {f.kind} in {f.field}: {f.evidence}" for f in sc.findings] if sc else [],
            "permissions": [], "annotations": rec.get("annotations"), "upstream": (routes or {}).get(name, (None, None))[0],
            "not_offered": None, "needs_confirmation": True, "withheld": held.get(name, "withdrawn"), "why": why},
            routes, name)
    return out


def _original(row: dict[str, Any], routes: dict[str, tuple[str, str]] | None, name: str) -> dict[str, Any]:
    """``row`` with ``original``: the tool's own name at its server when it is offered under
    another (a name outside MCP's alphabet, or one two servers share), for the operator."""
    own = (routes or {}).get(name, (None, name))[1]
    row["original"] = own if own != name else None
    return row


def build_views(registry: ToolRegistry, spec: ArtefactSpec, encoder: Any, policies: Policies, generation: int,
                **kw: Any) -> View:
    """:func:`build_view` under the default policy, with the view of every other named policy
    in its ``others`` (blocking). Trust (``held``, ``withdrawn``, the scan) is the same for
    all: the pin store and the scan are the gateway's, not a client's."""
    view = build_view(registry, spec, encoder, policies.default_policy, generation, **kw)
    view.others = {name: build_view(registry, spec, encoder, p, generation, **kw)
                   for name, p in policies.named.items() if name != policies.default}
    return view


def _scan_confirms(policy: Policy, sc: Scan | None) -> bool:
    """Whether the scan's verdict on a tool makes each of its calls need confirmation."""
    return sc is not None and ((sc.verdict == "suspicious" and policy.on_suspicious == "confirm")
                               or (sc.verdict == "poisoned" and policy.on_poisoned == "confirm"))


def withdrawn_view(previous: View, generation: int, why: str) -> View:
    """The view when a rebuild failed as a whole: nothing offered, every tool of ``previous``
    withdrawn with ``why`` (fail closed: a tool is never served at a level that is no longer
    its server's word)."""
    names = set(previous.levels) | set(previous.withdrawn)
    out = View(None, generation, {}, {}, {}, {}, {}, {n: previous.withdrawn.get(n, why) if n in previous.held else why
                                                       for n in names}, dict(previous.held))
    out.others = {name: withdrawn_view(v, generation, why) for name, v in previous.others.items()}
    return out


def upstream_records(manager: UpstreamManager) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """The live upstream tools as ``tools/list`` records under their public names, and the
    route of each (upstream, its own name). A tool without a description gets its title or
    its name's words (MCP makes description optional; riskrank ranks on it)."""
    records, routes = [], {}
    for public, up, tool in manager.tools():
        records.append(served_record(tool, public))
        routes[public] = (up.name, tool["name"])
    return records, routes


def served_record(tool: dict[str, Any], public: str) -> dict[str, Any]:
    """A server's ``tools/list`` record as the gateway serves it: under its public name, and
    with its title or its own name's words where it has no description."""
    rec = {**tool, "name": public}
    if not str(rec.get("description") or "").strip():
        rec["description"] = rec.get("title") or (rec.get("annotations") or {}).get("title") or split_name(str(tool.get("name") or ""))
    return rec
