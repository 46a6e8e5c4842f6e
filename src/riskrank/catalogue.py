"""What a served registry is: the artefacts it loads from, the provenance of every tool's risk
level, the retriever over them, and the hot swap that replaces one generation with the next.

Every surface that answers for a registry (the HTTP service, the MCP server and gateway,
the in-process agent guard) stands on this module and on nothing of each other's. A
:class:`Catalogue` is one validated generation; :class:`LiveCatalogue` holds the active one
and swaps it atomically: new artefacts load and validate in a worker thread, then replace
the old ones in one assignment, so a request that read the active catalogue finishes on it
whatever a reload does, and a bad artefact leaves the old one serving.

Nothing is scored here: ranking is :class:`~riskrank.pipeline.RiskAwareRetriever`'s, imported
when a catalogue is loaded (the retriever brings torch; naming a catalogue does not).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError, error_body
from riskrank.fileio import UnsafeFileError, read_regular_file, show
from riskrank.modes import MODES, parse_mode, safe_default_mode
from riskrank.registry import ToolRegistry
from riskrank.risk import FILL_LEVELS, PROVENANCE, ToolLevels

#: One query through the default mode at load time: encoder, heads, graph and rule filter run
#: once, so a bad artefact fails the load, not a user's request.
PROBE_TASK = "riskrank readiness probe: list the files in a folder"


class ModeUnavailableError(RiskrankError):
    """A mode or risk source that needs the dual head, asked of a catalogue without one."""

    code = "mode_unavailable"


@dataclass(frozen=True)
class ArtefactSpec:
    """What a catalogue is loaded from; a reload changes any of these fields."""

    registry: str
    checkpoint: str | None = None
    mode: str | None = None
    risk_source: str = "labels"
    fill_levels: str = "none"
    """``keyword``: give unlabelled tools the keyword annotator's level (the gateway's audit)."""
    candidates: int | None = None
    """Rerank the first stage's top-M instead of the full pool (large registries)."""
    first_stage: str = "exact"
    """``ann``: an IVF index finds the top-M (with ``candidates``), for 10^5+ tools."""
    trust_annotations: bool = False
    """Let an MCP ``readOnlyHint`` lower an unlabelled tool's level (by default hints only raise)."""
    fill: str = "safe"
    """The rule filter's fill policy (:data:`riskrank.rules.FILL_POLICIES`)."""
    min_score: float | None = None
    """The relevance floor on f_rel; None: the score scale's default (``RiskAwareRetriever.relevance_floor``)."""
    level_model: str = "auto"
    """What serves an unaudited tool's level: ``auto`` (the shipped level model, with the base
    model), ``none`` (the risk head with the keyword rule) or a level-model directory."""

    @property
    def served_mode(self) -> str:
        """The mode a catalogue of this spec runs by default: ``mode``, else the strongest safe
        one available (:func:`riskrank.modes.safe_default_mode`; without a checkpoint named,
        the base model's heads)."""
        from riskrank.base import NO_CHECKPOINT, default_checkpoint

        heads = self.checkpoint != NO_CHECKPOINT and (self.checkpoint is not None or default_checkpoint() is not None)
        return self.mode or safe_default_mode(heads)

    def announced(self, encoder_identity: str | None) -> tuple[str, str, float | None]:
        """(mode, fill, relevance floor) that a catalogue of this spec serves, known before any
        tool is: a gateway describes ``find_tools`` with them while its upstreams start. The
        same values as the loaded retriever's (:meth:`riskrank.pipeline.RiskAwareRetriever.relevance_floor`);
        a bad checkpoint is its error here, before anything serves."""
        from riskrank.base import resolve_checkpoint
        from riskrank.checkpoint import load_checkpoint
        from riskrank.modes import default_min_score

        path, _ = resolve_checkpoint(self.checkpoint, encoder_identity)
        mode = self.mode or safe_default_mode(path is not None)
        stages = parse_mode(mode)
        if stages.heads and path is None:
            raise RiskrankError(f"mode {mode} needs a checkpoint (the learned heads)")
        floor = self.min_score
        if floor is None:
            inference = load_checkpoint(path, encoder_identity=encoder_identity).inference if stages.heads and path else {}
            floor = default_min_score(stages.heads, encoder_identity or "", inference, stages.relevance)
        return mode, self.fill, None if floor is None or floor == float("-inf") else float(floor)

    def to_dict(self) -> dict[str, Any]:
        return {"registry": self.registry, "checkpoint": self.checkpoint, "mode": self.mode,
                "risk_source": self.risk_source, "fill_levels": self.fill_levels, "candidates": self.candidates,
                "first_stage": self.first_stage, "trust_annotations": self.trust_annotations, "fill": self.fill,
                "min_score": self.min_score, "level_model": self.level_model}


def _level_counts(levels: Any) -> dict[str, int]:
    """Tools per level, ``{"L1": n, ..., "L5": n}``."""
    counts = collections.Counter(int(v) for v in levels)
    return {f"L{k}": counts[k] for k in range(1, 6)}


def _schema(tool: Any) -> dict[str, Any]:
    return dict(tool.parameters) if tool.parameters is not None else {"type": "object", "properties": {}}


@dataclass
class Catalogue:
    """The artefacts one generation of a served registry answers from."""

    retriever: Any
    spec: ArtefactSpec
    generation: int
    loaded_at: float = field(default_factory=time.time)
    load_seconds: float = 0.0

    checkpoint: str | None = None
    """The checkpoint loaded: the spec's, or the base model's when the spec names none."""
    notes: list[str] = field(default_factory=list)
    _batcher: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from riskrank.batching import Batcher

        # made here, not on first use: two first requests at once must share one batcher
        self._batcher = Batcher(lambda key, tasks: self.retriever.retrieve_many(list(tasks), key[0], **dict(key[1])))

    def retrieve(self, task: str, k: int = 5, **options: Any) -> Any:
        """``retriever.retrieve(task, k, **options)``, batched with concurrent callers' tasks of
        the same settings (:class:`riskrank.batching.Batcher`): what the servers call."""
        return self._batcher.submit((k, tuple(sorted(options.items()))), task)

    @property
    def levels(self) -> ToolLevels:
        """Every tool's level, provenance and evidence: the retriever's, resolved once."""
        return self.retriever.tool_levels

    @property
    def effective_levels(self) -> list[int]:
        return [int(v) for v in self.levels.levels]

    @property
    def provenance(self) -> list[str]:
        return list(self.levels.provenance)

    @property
    def registry(self) -> ToolRegistry:
        return self.retriever.registry

    @property
    def has_heads(self) -> bool:
        return self.retriever.scorer is not None

    def modes(self) -> list[str]:
        has_need = self.has_heads and self.retriever.need_head is not None
        return [m for m in MODES if (self.has_heads or not parse_mode(m).heads) and (has_need or not parse_mode(m).context)]

    def check_request(self, mode: str | None, risk_source: str | None) -> None:
        """Modes and risk sources this catalogue can serve (clear codes before any work)."""
        if mode is not None and parse_mode(mode).heads and not self.has_heads:
            raise ModeUnavailableError(f"mode {mode!r} needs a checkpoint; this server has none (modes: {', '.join(self.modes())})")
        if mode is not None and parse_mode(mode).context and self.retriever.need_head is None:
            raise ModeUnavailableError(f"mode {mode!r} needs a checkpoint with a need head; this server's has none "
                                       f"(modes: {', '.join(self.modes())})")
        if risk_source == "predicted" and not self.has_heads:
            raise ModeUnavailableError("risk_source 'predicted' needs a checkpoint (the learned risk head)")

    def tool_spec(self, index: int) -> dict[str, Any]:
        """One tool as an agent or an operator needs it: the spec plus its risk evidence."""
        t = self.registry[index]
        predicted = self.retriever.predicted_levels
        one = self.levels.of(index)
        return {
            "name": t.name,
            "description": t.description,
            "input_schema": _schema(t),
            **one,
            "audited_level": t.risk_level,
            "effective_level": one["risk_level"],  # deprecated name of risk_level
            "predicted_level": int(predicted[index]) if predicted is not None else None,
            "f_risk": float(self.retriever.f_risk[index]),
            "permissions": sorted(t.permissions),
            "annotations": dict(t.annotations) if t.annotations else None,
        }

    def result_dict(self, result: Any, needs_confirmation: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """The one wire shape of a result (:meth:`riskrank.modes.RetrievalResult.to_dict`) with
        what the catalogue knows: each tool's input schema and MCP annotations, whether a call
        of it needs confirmation (``needs_confirmation(name)``, a gateway's view's answer;
        without one nothing is confirmed), and the generation."""
        out = result.to_dict()
        for tool in out["tools"]:
            t = self.registry[tool["index"]]
            tool["input_schema"] = _schema(t)
            tool["annotations"] = dict(t.annotations) if t.annotations else None
            tool["needs_confirmation"] = bool(needs_confirmation(tool["name"])) if needs_confirmation is not None else False
        out["generation"] = self.generation
        return out

    def summary(self) -> dict[str, Any]:
        """What the catalogue serves; ``lambda``, ``alpha``, ``fill`` and ``min_score`` are what a
        retrieve with no overrides runs (``defaults``: the whole resolved call)."""
        r = self.retriever
        call = r.resolve_call()
        return {
            "generation": self.generation,
            "registry": self.spec.registry,
            "registry_fingerprint": self.registry.fingerprint(),
            "n_tools": len(self.registry),
            "risk_levels": _level_counts(self.effective_levels),
            "risk_levels_by_provenance": {p: _level_counts(lv for lv, q in zip(self.effective_levels, self.provenance, strict=True)
                                                           if q == p) for p in PROVENANCE if p in self.provenance},
            "risk_provenance": {p: self.provenance.count(p) for p in PROVENANCE if p in self.provenance},
            "checkpoint": self.checkpoint,
            "base_model": self.checkpoint is not None and self.spec.checkpoint is None,
            "notes": list(self.notes),
            "mode": r.mode,
            "modes": self.modes(),
            "fill": r.rule_config.fill,
            "min_score": call.min_score,
            "risk_source": r.risk_source,
            "candidates": None if r.full_pool else r.candidates,
            "first_stage": r.first_stage,
            "lambda": call.lam,
            "alpha": call.alpha,
            "defaults": call.to_dict(),
            "encoder": r.encoder.identity,
            "query_encoder": getattr(getattr(r.encoder, "query", r.encoder), "identity", r.encoder.identity),
            "trust_annotations": r.trust_annotations,
            "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.loaded_at)),
            "load_seconds": round(self.load_seconds, 3),
        }


@dataclass(frozen=True)
class ToolAudit:
    """Every tool of a registry with the one level it will have everywhere, before a caller
    decides which of them to serve: a gateway checks its policy against these levels, then
    loads a catalogue of the offered tools from :meth:`subset` (same levels, same embeddings,
    the same loaded checkpoint)."""

    registry: ToolRegistry
    levels: ToolLevels
    tool_emb: Any
    checkpoint: Any
    """The loaded :class:`~riskrank.checkpoint.Checkpoint`, or None (no heads)."""
    note: str | None = None

    def with_evidence(self, extra: dict[str, list[str]]) -> ToolAudit:
        """The audit with ``extra`` evidence lines on the named tools (levels unchanged)."""
        return ToolAudit(self.registry, self.levels.with_evidence([extra.get(t.name, []) for t in self.registry]),
                         self.tool_emb, self.checkpoint, self.note)

    def subset(self, names: list[str]) -> ToolAudit:
        idx = [self.registry.index_of(n) for n in names]
        return ToolAudit(self.registry.subset(names), self.levels.subset(idx), self.tool_emb[idx], self.checkpoint, self.note)


def _retriever(spec: ArtefactSpec, encoder: Any, registry: ToolRegistry, checkpoint: Any, **given: Any) -> Any:
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.rules import RuleConfig

    if spec.fill_levels not in FILL_LEVELS:
        raise RiskrankError(f"fill_levels must be one of {', '.join(FILL_LEVELS)}, got {spec.fill_levels!r}")
    return RiskAwareRetriever(
        registry, encoder=encoder, checkpoint=checkpoint, mode=spec.mode or safe_default_mode(checkpoint is not None),
        risk_source=spec.risk_source, progress=False, candidates=spec.candidates, first_stage=spec.first_stage,
        rule_config=RuleConfig(fill=spec.fill), min_score=spec.min_score, trust_annotations=spec.trust_annotations,
        fill_levels=spec.fill_levels, level_model=level_model_arg(spec.level_model), **given)


def level_model_arg(value: str | None) -> str | None:
    """``--level-model`` as :class:`~riskrank.pipeline.RiskAwareRetriever` takes it (``none``: None)."""
    return None if value is None or value == "none" else value


def audit_tools(spec: ArtefactSpec, encoder: Any, registry: ToolRegistry, level_pins: dict[str, int] | None = None,
                groups: Sequence[str] | None = None) -> ToolAudit:
    """Resolve every tool's level once (:attr:`riskrank.pipeline.RiskAwareRetriever.tool_levels`:
    the operator's ``level_pins`` first, audits, the spec's checkpoint or the base model's risk
    head with keywords and MCP hints, the spec's fill), as :class:`ToolAudit`. ``groups``: each
    tool's server, where the registry merges several."""
    from riskrank.base import resolve_checkpoint

    path, note = resolve_checkpoint(spec.checkpoint, getattr(encoder, "identity", None))
    # a policy pins tools of every server it knows; this registry holds those listed now
    pins = {n: v for n, v in (level_pins or {}).items() if n in registry}
    r = _retriever(spec, encoder, registry, path, level_pins=pins, tool_groups=groups)
    return ToolAudit(registry, r.tool_levels, r.tool_emb, r.checkpoint, note)


def load_catalogue(spec: ArtefactSpec, encoder: Any, generation: int = 1, *, registry: ToolRegistry | None = None,
                   audit: ToolAudit | None = None) -> Catalogue:
    """Load and validate one generation: the registry (or the given ``registry`` object, or
    the tools of ``audit`` with the levels resolved there), the checkpoint, a retriever over
    them, and a probe query through the default mode (encoder, heads, graph and rule filter
    all run once), so a bad artefact fails here, not on a user's request."""
    from riskrank.base import resolve_checkpoint

    t0 = time.perf_counter()
    if audit is not None:
        checkpoint, note = audit.checkpoint, audit.note
        retriever = _retriever(spec, encoder, audit.registry, checkpoint, tool_emb=audit.tool_emb, tool_levels=audit.levels)
    else:
        reg = registry if registry is not None else ToolRegistry.load(spec.registry)
        # No checkpoint named: the base model (unless the encoder is not its own; the note says so).
        checkpoint, note = resolve_checkpoint(spec.checkpoint, getattr(encoder, "identity", None))
        retriever = _retriever(spec, encoder, reg, checkpoint)
    if retriever.scorer is not None:
        _ = retriever.graph  # built (or taken from the cache) at load, not on a user's first graph query
    retriever.retrieve(PROBE_TASK, k=1)  # resolves every tool's level too
    path = getattr(retriever.checkpoint, "path", None)
    return Catalogue(retriever, spec, generation, load_seconds=time.perf_counter() - t0,
                     checkpoint=str(path) if path is not None else None, notes=[note] if note else [])


class ReloadRefused(RiskrankError):
    """A reload asked for a path the server may not read, or a file it will not read."""

    code = "reload_not_allowed"


@dataclass(frozen=True)
class ReloadPolicy:
    """What a reload, asked for over the network, may read.

    Only paths under ``dirs`` (resolved, symlinks followed), plus the exact artefacts the
    server started with (``pinned``: a reload with no body re-reads them). A registry must be
    a regular file of at most ``max_bytes``, read within ``timeout_s``
    (:func:`riskrank.fileio.read_regular_file`: no FIFO, device or ``/proc`` file can wedge or
    exhaust the server). A path outside the allow-list, a missing one, an unreadable one and
    one that is not a regular file all get the same message, so a caller cannot probe which
    paths exist; registry errors name the record and the field but never the file's values.
    """

    dirs: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    max_bytes: int = 256 * 1024 * 1024
    timeout_s: float = 30.0

    def _pinned(self, real: Path) -> bool:
        """Whether ``real`` (resolved) is one of the artefacts the server started with."""
        return str(real) in {os.path.realpath(p) for p in self.pinned}

    def _allowed(self, path: str) -> Path | None:
        if "\x00" in path:  # no file has such a name (and the OS refuses it with an exception)
            return None
        real = Path(os.path.realpath(path))
        if self._pinned(real):
            return real
        for d in self.dirs:
            root = Path(os.path.realpath(d))
            if real == root or root in real.parents:
                return real
        return None

    def _refuse(self, what: str, path: str) -> ReloadRefused:
        where = "; reloads read only the served artefacts and paths under --reload-dir" if not self.dirs else " (under --reload-dir)"
        return ReloadRefused(f"{what} {show(path)}: not found or not allowed{where}")  # escaped and cut: it goes to the log

    def read_registry(self, path: str) -> ToolRegistry:
        real = self._allowed(path)
        if real is None:
            raise self._refuse("registry", path)
        try:
            data = read_regular_file(real, max_bytes=self.max_bytes, timeout_s=self.timeout_s)
        except UnsafeFileError as exc:
            if "not a regular file" in str(exc):
                raise self._refuse("registry", path) from None
            raise ReloadRefused(f"registry {path}: {exc}") from None
        except OSError:
            raise self._refuse("registry", path) from None
        return ToolRegistry.from_bytes(data, path, redact=True)

    def check_checkpoint(self, path: str | None) -> None:
        from riskrank.base import NO_CHECKPOINT

        if path is None or path == NO_CHECKPOINT:  # the base model (package data), or none
            return
        real = self._allowed(path)
        if real is None or not real.is_dir():
            raise self._refuse("checkpoint", path)
        if self._pinned(real):
            return  # the operator's own, served at start
        # a file inside an allowed folder that links out of the allowed folders is not read
        for member in real.iterdir():
            if self._allowed(str(member)) is None:
                raise self._refuse("checkpoint", path)


class LiveCatalogue:
    """The active :class:`Catalogue` of a running service, replaced atomically on reload.

    A request reads ``live.active`` once and uses that object to the end, so a swap never
    changes the artefacts under a running request; the old generation is freed when the last
    request holding it finishes. ``encoder`` (shared by every generation) is usually a
    :class:`~riskrank.encoder.BatchingEncoder`."""

    def __init__(self, catalogue: Catalogue | None, encoder: Any, policy: ReloadPolicy | None = None) -> None:
        self.active = catalogue
        self.encoder = encoder
        spec = catalogue.spec if catalogue is not None else None
        pinned = tuple(p for p in ((spec.registry, spec.checkpoint) if spec else ()) if p)
        self.policy = policy if policy is not None else ReloadPolicy(pinned=pinned)
        self._reload_lock = threading.Lock()
        self.reload_status: dict[str, Any] = {"state": "idle"}

    @classmethod
    def from_spec(cls, spec: ArtefactSpec, encoder: Any = None, *, reload_dirs: tuple[str, ...] = (),
                  max_registry_bytes: int | None = None, **encoder_options: Any) -> LiveCatalogue:
        """Load ``spec`` over ``encoder`` (an encoder object or a model name/folder;
        ``encoder_options`` as :func:`riskrank.encoder.make_encoder` takes them). Reloads may
        read the artefacts of ``spec`` and paths under ``reload_dirs`` (:class:`ReloadPolicy`)."""
        from riskrank.encoder import make_encoder

        encoder = make_encoder(encoder, **encoder_options)
        pinned = tuple(p for p in (spec.registry, spec.checkpoint) if p)
        policy = ReloadPolicy(dirs=tuple(reload_dirs), pinned=pinned,
                              **({"max_bytes": max_registry_bytes} if max_registry_bytes is not None else {}))
        return cls(load_catalogue(spec, encoder), encoder, policy)

    def begin_reload(self) -> bool:
        """Claim the single reload slot; False if a reload is already running."""
        return self._reload_lock.acquire(blocking=False)

    def reload(self, spec: ArtefactSpec) -> Catalogue:
        """Load ``spec`` and make it active (the caller holds the slot from :meth:`begin_reload`).
        On any error the active catalogue stays and the error is raised."""
        old = self.active
        generation = (old.generation if old is not None else 0) + 1
        self.reload_status = {"state": "loading", "started_at": time.time(), "spec": spec.to_dict()}
        try:
            registry = self.policy.read_registry(spec.registry)
            self.policy.check_checkpoint(spec.checkpoint)
            new = load_catalogue(spec, self.encoder, generation, registry=registry)
            self.active = new  # the swap: one reference assignment
            self.reload_status = {**self.reload_status, "state": "succeeded", "finished_at": time.time(), "generation": generation}
            return new
        except BaseException as exc:
            self.reload_status = {**self.reload_status, "state": "failed", "finished_at": time.time(), "error": error_body(exc)["error"]}
            raise
        finally:
            self._reload_lock.release()
