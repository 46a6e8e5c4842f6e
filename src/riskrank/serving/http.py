"""The HTTP API: ``riskrank serve``.

A :class:`~riskrank.catalogue.LiveCatalogue` behind a small JSON API (FastAPI on uvicorn);
nothing is scored here. ``POST /v1/retrieve`` returns the risk-aware top-k for a task,
``GET /v1/tools/{name}`` one tool's spec and risk evidence, ``/healthz`` and ``/readyz`` the
probes, ``POST /v1/admin/reload`` swaps the registry/checkpoint without a restart.

Guarantees, each tested over real HTTP (tests/test_server*.py):

- every error is ``{"error": {"code", "message"}}`` with a stable code, never a traceback;
  request bodies are read strictly (:func:`riskrank.fileio.loads_strict`: a duplicate key,
  NaN, a runaway number or nesting, invalid UTF-8 are ``400 malformed_json``);
- the bearer-token gate and the bind rules of :mod:`riskrank.serving.auth`; the admin
  endpoints exist only when an admin token (distinct from the bearer token) is configured,
  and a reload reads only what :class:`~riskrank.catalogue.ReloadPolicy` allows;
- every status a route can answer is declared in the OpenAPI document, with a typed body;
  operation ids are the endpoints' names; HEAD answers on every GET route, and a 405
  carries ``Allow``;
- limits (:class:`~riskrank.serving.requests.Limits`): body size, task length, k, lambda and
  alpha ranges, per-request timeout, in-flight requests;
- hot swap: a request reads the active catalogue once (the :func:`active_catalogue`
  dependency), so in-flight requests finish on the old artefacts, and a bad artefact
  leaves the old one serving.

The app grows by routers (probes, retrieval, catalogue, admin); what they share arrives
through ``Depends``: the :class:`HttpState` of the app, and from it the active catalogue.
The request models hold no per-server number: the limits a server was started with are
checked by :mod:`~riskrank.serving.requests` (the codes MCP gives too) and written into the
OpenAPI document. Concurrent queries are encoded in one batch by
:class:`~riskrank.encoder.BatchingEncoder`; scoring runs in worker threads.

No ``from __future__ import annotations`` here: FastAPI reads the endpoints' request models
and dependencies from real annotations.
"""

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from riskrank._version import __version__
from riskrank.base import NO_CHECKPOINT
from riskrank.catalogue import FILL_LEVELS, PROVENANCE, Catalogue, LiveCatalogue
from riskrank.errors import RiskrankError, error_body
from riskrank.extras import requires
from riskrank.fileio import loads_strict, show, terminal_safe, write_json
from riskrank.modes import MAX_K, MODES, NO_MIN_SCORE, RISK_SOURCES
from riskrank.serving.auth import ADMIN_PREFIX, PUBLIC_PATHS, Gate
from riskrank.serving.console.host import ConsoleHost
from riskrank.serving.requests import ApiError, Limits, check_k, check_lambda, check_task

with requires("serve", "the HTTP server (riskrank serve)"):
    import anyio
    import anyio.to_thread
    from fastapi import APIRouter, Body, Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from fastapi.routing import APIRoute
    from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
    from starlette.exceptions import HTTPException

Mode = Literal[MODES]
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=True)


def _integral(value: Any) -> Any:
    """An integral JSON number is an integer (``74.0`` is 74); anything else is left for the
    strict integer check to refuse."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# -- strict JSON bodies -------------------------------------------------------------------------------
class MalformedBody(HTTPException):
    """A body that is not strict JSON (FastAPI re-raises HTTP exceptions from body parsing)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message)


class _StrictRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                text = body.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise MalformedBody("the request body is not valid JSON (not UTF-8)") from None
            try:
                # non-finite numbers pass, so that the schema names the field out of range
                self._json = loads_strict(text, "the request body", non_finite=True)
            except RiskrankError as exc:
                raise MalformedBody(str(exc).replace("the request body: ", "the request body is not valid JSON (", 1) + ")") from None
        return self._json


class StrictJSONRoute(APIRoute):
    """Routes whose JSON bodies are read by :func:`riskrank.fileio.loads_strict`."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Any:
            return await handler(_StrictRequest(request.scope, request.receive))

        return strict


# -- request and response models ------------------------------------------------------------------
class RetrieveRequest(BaseModel):
    model_config = _STRICT
    task: Annotated[str, Field(min_length=1, description="The user's task, in natural language.")]
    k: Annotated[int, BeforeValidator(_integral), Field(ge=1, le=MAX_K, description="How many tools to return.")] = 5
    lam: Annotated[float | None, Field(alias="lambda", ge=0,
                                       description="Risk weight lambda in s = relevance - lambda * penalty [default: the checkpoint's for this pipeline; 0 without heads].")] = None
    mode: Annotated[Mode | None, Field(description="Pipeline stages [default: the server's].")] = None
    alpha: Annotated[float | None, Field(ge=0, le=1, description="Graph smoothing alpha (graph modes).")] = None
    risk_source: Annotated[Literal[RISK_SOURCES] | None, Field(description="Levels the rule filter reads.")] = None


class RankedTool(BaseModel):
    rank: int
    name: str
    index: int
    score: float
    f_rel: float
    f_risk: float
    risk_level: int = Field(description="The tool's one level 1-5: what the rule filter reads with risk_source=labels, "
                                        "what a gateway checks a call at, what the console shows (unlabelled: 5, fail closed).")
    audited_level: int | None = Field(None, description="The registry's audited level; null if unaudited.")
    effective_level: int = Field(description="Deprecated: the old name of risk_level (the same value).", deprecated=True)
    risk_provenance: Literal[tuple(PROVENANCE)]
    risk_evidence: list[str] = Field(default_factory=list, description="Why: audited, or the risk head's level and score, "
                                                                         "keyword hits, MCP annotations.")
    predicted_level: int | None
    permissions: list[str]
    description: str
    named: bool = Field(False, description="The task names this tool (its identifier occurs in the task): it ranks first.")
    context: str | None = Field(None, description="Context modes: why this risky tool was admitted (need, relevance margin, risk cap).")
    reasons: list[str] = Field(default_factory=list, description="Why it is shown where a rule would hold it back (fallback), "
                                                                  "and the context stage's reason.")
    input_schema: dict[str, Any] = Field(default_factory=dict, description="The tool's JSON Schema for its arguments.")
    annotations: dict[str, Any] | None = Field(None, description="The tool's MCP annotations, if any (hints, never authority).")
    needs_confirmation: bool = Field(False, description="A call of it needs the user's confirmation (a gateway's policy; "
                                                        "always false on this API, which runs no calls).")


class Deferral(BaseModel):
    name: str
    index: int
    reasons: list[str]
    redundant_with: str | None
    named: bool = Field(False, description="The task named this tool; the rule filter's caps deferred it all the same.")
    context: str | None = Field(None, description="Context modes: why the context stage withheld this risky tool (need, margin, cap).")


class ContextDecision(BaseModel):
    need: float = Field(description="The need head's P(the task needs a tool of risk level >= 3).")
    needs_risk: bool = Field(description="need >= threshold.")
    threshold: float
    margin: float | None = Field(description="How far (logits) the risky tool's relevance may trail the best safe tool's; null: no limit.")
    lam: float = Field(alias="lambda", description="The risk penalty this task was ranked with (need lambda or hold-back lambda).")
    risk_cap: int | None = Field(description="The rule filter's risk cap for this task (+rule): the validated cap (1-3) when it "
                                            "needs a risky tool, else 0; null without the rule filter (no cap).")
    relevance_gap: float | None = Field(description="Relevance of the most relevant risky tool minus the best safe tool's (logits).")
    admitted: str | None
    best_safe: str | None
    best_risky: str | None


class CallSettings(BaseModel):
    mode: str
    k: int
    lam: float = Field(alias="lambda")
    alpha: float
    normalisation: str
    risk_source: str
    fill: str | None
    min_score: float | None
    candidates: int


class RetrieveResponse(BaseModel):
    task: str
    mode: str
    lam: float = Field(alias="lambda")
    alpha: float
    risk_source: str
    k: int | None = Field(None, description="How many tools were asked for.")
    tools: list[RankedTool]
    withheld: list[Deferral] = Field(description="What was held back and is not shown (rule filter, context stage), with why.")
    deferred: list[Deferral] = Field(description="Deprecated: every deferral, including tools shown as fallback; read "
                                                 "withheld and fallback.", deprecated=True)
    fallback: list[str]
    unlabelled: list[str]
    fill: str | None = Field(None, description="The rule filter's fill policy that ran (rule modes).")
    min_score: float | None = Field(None, description="The relevance floor applied to f_rel; null: none.")
    below_min_score: list[str] = Field(default_factory=list, description="Tools cut by the relevance floor.")
    settings: CallSettings | None = Field(None, description="Everything this call ran with, resolved once.")
    notes: list[str] = Field(default_factory=list, description="Where the result departs from what was asked (e.g. predicted "
                                                               "levels that are the keyword annotator's: the risk head has not learned).")
    need: float | None = Field(None, description="Context modes: the need head's estimate for this task.")
    context: ContextDecision | None = Field(None, description="Context modes: what the context stage decided, and why.")
    generation: int


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]
    risk_level: int = Field(description="The tool's one level (as in a retrieval result).")
    audited_level: int | None
    effective_level: int = Field(description="Deprecated: the old name of risk_level.", deprecated=True)
    risk_provenance: Literal[tuple(PROVENANCE)]
    risk_evidence: list[str]
    predicted_level: int | None
    f_risk: float
    permissions: list[str]
    annotations: dict[str, Any] | None


class ReloadRequest(BaseModel):
    model_config = _STRICT
    registry: str | None = Field(None, description="Registry file on the server [default: the current one, re-read].")
    checkpoint: str | None = Field(None, description="Checkpoint directory; null for none [default: the current one].")
    mode: Mode | None = None
    risk_source: Literal[RISK_SOURCES] | None = None
    fill_levels: Literal[FILL_LEVELS] | None = None
    trust_annotations: bool | None = Field(None, description="Let MCP readOnlyHints lower unlabelled tools' levels.")
    wait: bool = Field(True, description="Answer when the new artefacts serve (or failed); false: answer 202 at once.")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    generation: int


class LimitsInfo(BaseModel):
    max_body_bytes: int
    max_task_chars: int
    max_k: int
    max_lambda: float
    timeout_s: float
    max_inflight: int


class CatalogueSummary(BaseModel):
    """What one generation serves (``Catalogue.summary``); keys a newer catalogue adds pass through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    generation: int
    registry: str
    registry_fingerprint: str
    n_tools: int
    risk_levels: dict[str, int] = Field(description="Tools per served level (L1..L5): the level every response "
                                                    "carries and the rule filter reads, whatever its provenance.")
    risk_levels_by_provenance: dict[str, dict[str, int]] = Field(
        description="The same counts per provenance (policy, audited, predicted, keyword, annotation, unlabelled).")
    risk_provenance: dict[str, int]
    checkpoint: str | None
    mode: str
    modes: list[str]
    risk_source: str
    candidates: int | None
    first_stage: str
    lam: float = Field(alias="lambda", description="The lambda a retrieve with no overrides runs (the default mode's pipeline).")
    alpha: float = Field(description="The alpha a retrieve with no overrides runs.")
    defaults: CallSettings | None = Field(None, description="Everything a retrieve with no overrides runs with.")
    encoder: str
    query_encoder: str | None = Field(None, description="The identity of the forward pass that encodes tasks: the encoder's "
                                                        "own, or with `--query-weights int8` its identity with '+int8-v1' (the int8 "
                                                        "pass's version).")
    trust_annotations: bool
    loaded_at: str
    load_seconds: float


class Info(CatalogueSummary):
    limits: LimitsInfo


class Reloaded(CatalogueSummary):
    status: Literal["reloaded"]


class SpecInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    registry: str
    checkpoint: str | None
    mode: str | None
    risk_source: str
    fill_levels: str
    candidates: int | None
    first_stage: str
    trust_annotations: bool


class ReloadAccepted(BaseModel):
    status: Literal["loading"]
    spec: SpecInfo


class ReloadStatus(BaseModel):
    state: Literal["idle", "loading", "succeeded", "failed"]
    started_at: float | None = None
    finished_at: float | None = None
    spec: SpecInfo | None = None
    generation: int | None = None
    error: ErrorDetail | None = None


_WHY = {
    400: "Malformed request: the body is not strict JSON (malformed_json), or not an object",
    404: "No tool of that name (unknown_tool)",
    409: "A reload is already running (reload_in_progress)",
    413: "The request body exceeds the server's limit (body_too_large)",
    415: "The body is not sent as application/json (unsupported_media_type)",
    422: "The request breaks a rule of its schema or of the server's limits; the code says which",
    500: "A bug: the message holds no internals (internal_error); the server log has the traceback",
    503: "Still loading (not_ready) or overloaded (overloaded, with Retry-After)",
    504: "The request took longer than the server's timeout (timeout)",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route answers (500 always)."""
    return {c: {"model": ErrorBody, "description": _WHY[c]} for c in (*codes, 500)}


# -- what the routes share --------------------------------------------------------------------------
class HttpState:
    """One app's shared state: the live catalogue (None: render the schema only), the limits,
    and the requests in flight."""

    def __init__(self, live: LiveCatalogue | None, limits: Limits) -> None:
        self.live = live
        self.limits = limits
        self.inflight = 0
        self._lock = threading.Lock()

    def claim(self) -> bool:
        """Take a slot for one request's work (False: every slot is taken)."""
        with self._lock:
            if self.inflight >= self.limits.max_inflight:
                return False
            self.inflight += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.inflight -= 1


async def get_state(request: Request) -> HttpState:
    return request.app.state.riskrank


async def active_catalogue(state: Annotated[HttpState, Depends(get_state)]) -> Catalogue:
    """The active catalogue, read once per request: the request finishes on these artefacts
    whatever a reload does meanwhile."""
    cat = state.live.active if state.live is not None else None
    if cat is None:
        raise ApiError(503, "not_ready", "the service is still loading")
    return cat


State = Annotated[HttpState, Depends(get_state)]
Active = Annotated[Catalogue, Depends(active_catalogue)]


def retrieve_dict(cat: Catalogue, task: str, k: int, **options: Any) -> dict[str, Any]:
    """``POST /v1/retrieve``'s answer for a checked request (blocking): the console's search
    box runs this too."""
    res = cat.retrieve(task, k=k, **options)
    return cat.result_dict(res)


def console_host(live: LiveCatalogue, limits: Limits | None = None) -> ConsoleHost:
    """What the console shows of a served catalogue: every tool with its evidence, and the
    search box answered by :func:`retrieve_dict` (this server's own retrieval), in the
    console's shape. The HTTP API asks nobody to confirm anything and logs no decisions,
    so its console has no approvals and no call log."""
    limits = limits or Limits()

    def describe() -> dict[str, Any]:
        cat = live.active
        if cat is None:
            return {}
        s = cat.summary()
        return {"source": s["registry"], "mode": s["mode"], "tools": s["n_tools"], "checkpoint": s["checkpoint"] or "none",
                "encoder": s["encoder"], "generation": s["generation"]}

    def tools() -> list[dict[str, Any]]:
        cat = live.active
        if cat is None:
            return []
        rows = []
        for i in range(len(cat.registry)):
            t = cat.tool_spec(i)
            rows.append({"name": t["name"], "description": t["description"], "level": t["risk_level"],
                         "provenance": t["risk_provenance"], "evidence": t["risk_evidence"], "permissions": t["permissions"],
                         "annotations": t["annotations"], "upstream": None, "not_offered": None, "needs_confirmation": False})
        return rows

    def _active() -> Catalogue:
        if live.active is None:
            raise ApiError(503, "not_ready", "the service is still loading")
        return live.active

    def search(task: str, k: int) -> dict[str, Any]:
        return retrieve_dict(_active(), check_task(task, limits), check_k(k, limits))

    def baseline(task: str, k: int) -> list[dict[str, Any]]:
        cat = _active()
        res = cat.retriever.retrieve(task, k=k, mode="dense", min_score=NO_MIN_SCORE)
        return [{"rank": t.rank, "name": t.name, "score": t.score, "risk_level": cat.effective_levels[t.index]} for t in res.tools]

    return ConsoleHost("HTTP API", describe, tools, search, baseline, max_k=limits.max_k)


# -- routes -----------------------------------------------------------------------------------------
probes = APIRouter(tags=["probes"], route_class=StrictJSONRoute)
retrieval = APIRouter(tags=["retrieval"], route_class=StrictJSONRoute)
catalogue = APIRouter(tags=["catalogue"], route_class=StrictJSONRoute)
admin = APIRouter(tags=["admin"], route_class=StrictJSONRoute)


@probes.get("/healthz", response_model=Health, responses=errors(), summary="Liveness: the process answers.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@probes.get("/readyz", response_model=Ready, responses=errors(503), summary="Readiness: artefacts loaded and validated.")
async def readyz(cat: Active) -> dict[str, Any]:
    return {"status": "ready", "generation": cat.generation}


@retrieval.post("/v1/retrieve", response_model=RetrieveResponse, responses=errors(400, 413, 415, 422, 503, 504),
                summary="The risk-aware top-k tools for a task.")
async def retrieve(req: RetrieveRequest, cat: Active, state: State) -> Any:
    limits = state.limits
    check_task(req.task, limits)
    if "k" in req.model_fields_set:  # as the schema's maximum did: a given k, not the default
        check_k(req.k, limits)
    check_lambda(req.lam, limits)
    cat.check_request(req.mode, req.risk_source)
    if not state.claim():
        raise ApiError(503, "overloaded", f"more than {limits.max_inflight} requests in flight; retry later", {"retry-after": "1"})
    t0 = time.perf_counter()
    # The slot is held until the work itself ends: a request that timed out leaves its thread
    # running, and that thread still counts against --max-inflight. Whoever comes first (the
    # thread starting, or the request giving up before it started) decides who releases it.
    owner: list[str] = []
    owner_lock = threading.Lock()

    def work() -> dict[str, Any] | None:
        with owner_lock:
            if owner:  # given up before it started: released already
                return None
            owner.append("thread")
        try:
            return retrieve_dict(cat, req.task, req.k, lam=req.lam, mode=req.mode, alpha=req.alpha, risk_source=req.risk_source)
        finally:
            state.release()

    try:
        with anyio.fail_after(limits.timeout_s):
            out = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except BaseException as exc:
        with owner_lock:
            if not owner:
                owner.append("request")
                state.release()
        if isinstance(exc, TimeoutError):
            raise ApiError(504, "timeout", f"the request took longer than {limits.timeout_s:g} s") from None
        raise
    return JSONResponse(out, headers={"server-timing": f"retrieve;dur={(time.perf_counter() - t0) * 1000:.2f}"})


@catalogue.get("/v1/tools/{name:path}", response_model=ToolSpec, responses=errors(404, 503),
               summary="One tool's spec, risk level and the evidence for it.")
async def get_tool(name: str, cat: Active) -> Any:
    if name not in cat.registry:
        raise ApiError(404, "unknown_tool", f"no tool named {show(name)}")
    return JSONResponse(cat.tool_spec(cat.registry.index_of(name)))


@catalogue.get("/v1/info", response_model=Info, responses=errors(503), summary="The registry, checkpoint and modes being served.")
async def get_info(cat: Active, state: State) -> dict[str, Any]:
    return {**cat.summary(), "limits": asdict(state.limits)}


@admin.post("/v1/admin/reload", status_code=200, response_model=Reloaded,
            responses={202: {"model": ReloadAccepted, "description": "Loading in the background (wait: false)"},
                       **errors(400, 409, 413, 415, 422, 503)},
            summary="Load new artefacts in the background and swap them in atomically.")
async def reload(cur: Active, state: State, req: Annotated[ReloadRequest | None, Body()] = None) -> Any:
    import asyncio

    live = state.live
    req = req or ReloadRequest()  # no body: re-read the current artefacts
    given = req.model_fields_set
    changes = {name: getattr(req, name) for name in ("registry", "checkpoint", "mode", "risk_source", "fill_levels", "trust_annotations")
               if name in given and (getattr(req, name) is not None or name in ("checkpoint", "mode"))}
    if "checkpoint" in given and req.checkpoint is None:  # null drops the heads, as the schema says (None in a spec: the base model)
        changes["checkpoint"] = NO_CHECKPOINT
    spec = replace(cur.spec, **changes)
    if not live.begin_reload():
        raise ApiError(409, "reload_in_progress", "a reload is already running")
    future = asyncio.get_running_loop().run_in_executor(None, live.reload, spec)
    if not req.wait:
        future.add_done_callback(lambda f: f.exception())  # retrieved: no "never retrieved" warning
        return JSONResponse({"status": "loading", "spec": spec.to_dict()}, status_code=202)
    try:
        new = await future
    except BaseException as exc:
        body = error_body(exc)
        body["error"]["message"] = f"reload failed, generation {cur.generation} still serving: {body['error']['message']}"
        internal = body["error"]["code"] == "internal_error"
        log = logging.getLogger("riskrank.server")
        if internal:  # the message points to the server log: the traceback is there
            log.error("reload failed, generation %s still serving", cur.generation, exc_info=exc)
        else:
            log.warning("%s", terminal_safe(" ".join(body["error"]["message"].split()))[:2000])  # one line: a path cannot forge another
        return JSONResponse(body, status_code=500 if internal else 422)
    logging.getLogger("riskrank.server").info("reloaded: generation %s serving", new.generation)
    return {"status": "reloaded", **new.summary()}


@admin.get("/v1/admin/reload", response_model=ReloadStatus, responses=errors(), summary="The state of the last reload.")
async def get_reload_status(state: State) -> dict[str, Any]:
    return dict(state.live.reload_status) if state.live is not None else {"state": "idle"}


# -- errors -----------------------------------------------------------------------------------------
_RANGE_ERRORS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than", "finite_number"}
_FIELD_CODES = {"task": "task", "k": "k", "lambda": "lambda", "alpha": "alpha"}


def validation_error(errors: Sequence[dict]) -> ApiError:
    """pydantic errors -> one ApiError with a stable code (first error decides the code)."""
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    fieldname = loc[0] if loc else ""
    kind = err.get("type", "")
    if kind in ("json_invalid", "json_type"):
        why = (err.get("ctx") or {}).get("error") or err.get("msg", "")
        return ApiError(400, "malformed_json", f"the request body is not valid JSON ({why})")
    if not loc and kind in ("model_attributes_type", "model_type", "dict_type", "missing"):
        return ApiError(400, "malformed_json", "the request body must be a JSON object")
    where = ".".join(loc) or "body"
    message = f"{where}: {err.get('msg', 'invalid')}"
    if kind == "extra_forbidden":
        return ApiError(422, "unknown_field", f"unknown field {where!r}")
    if fieldname in _FIELD_CODES and kind in _RANGE_ERRORS:
        return ApiError(422, f"{_FIELD_CODES[fieldname]}_out_of_range", message)
    if fieldname == "task" and kind == "string_too_short":
        return ApiError(422, "task_empty", "task: the task text is empty")
    bad = err.get("input")
    if fieldname == "k" and isinstance(bad, float) and not math.isfinite(bad):
        return ApiError(422, "k_out_of_range", f"k: must be between 1 and {MAX_K}, got {bad}")
    if fieldname == "mode" and kind == "literal_error":
        return ApiError(422, "invalid_mode", message)
    if fieldname == "risk_source" and kind == "literal_error":
        return ApiError(422, "invalid_risk_source", message)
    return ApiError(422, "invalid_request", message)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    e = validation_error(exc.errors())
    return JSONResponse(e.body(), status_code=e.status)


async def _http(request: Request, exc: HTTPException) -> JSONResponse:
    if isinstance(exc, MalformedBody):
        return JSONResponse({"error": {"code": "malformed_json", "message": str(exc.detail)}}, status_code=400)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    msg = {404: "no such endpoint", 405: "method not allowed on this endpoint"}.get(exc.status_code, str(exc.detail))
    # Starlette puts the 405's Allow header on the exception: keep it
    return JSONResponse({"error": {"code": code, "message": msg}}, status_code=exc.status_code, headers=exc.headers)


async def _riskrank(request: Request, exc: RiskrankError) -> JSONResponse:
    return JSONResponse(error_body(exc), status_code=422)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    logging.getLogger("riskrank.server").exception("internal error on %s", request.url.path)
    return JSONResponse(error_body(exc), status_code=500)


# -- the application --------------------------------------------------------------------------------
def _openapi(app: FastAPI, limits: Limits) -> dict[str, Any]:
    """FastAPI's document plus the bearer schemes (the admin token on /v1/admin/*) on every
    non-public path and the limits this server enforces (the request model holds none)."""
    if app.openapi_schema is None:
        schema = FastAPI.openapi(app)  # FastAPI's own document (cached on the app), completed here
        props = schema["components"]["schemas"]["RetrieveRequest"]["properties"]
        props["task"]["maxLength"] = limits.max_task_chars
        props["k"]["maximum"] = limits.max_k
        next(s for s in props["lambda"]["anyOf"] if s.get("type") == "number")["maximum"] = limits.max_lambda
        schema["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "admin": {"type": "http", "scheme": "bearer",
                      "description": "The admin token (RISKRANK_ADMIN_TOKEN, distinct from the bearer token); "
                                     "without one the server has no /v1/admin/* endpoints."},
        }
        for path, ops in schema["paths"].items():
            if path not in PUBLIC_PATHS:
                for op in ops.values():
                    op["security"] = [{"admin" if path.startswith(ADMIN_PREFIX) else "bearer": []}]
                    op.setdefault("responses", {}).setdefault("401", {
                        "description": "Missing or invalid bearer token",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                    })
                    # FastAPI adds a 422 model of its own for routes with parameters: ours is ErrorBody
                    if "422" in op["responses"]:
                        op["responses"]["422"]["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                        op["responses"]["422"].setdefault("description", _WHY[422])
        for name in ("HTTPValidationError", "ValidationError"):
            schema["components"]["schemas"].pop(name, None)
    return app.openapi_schema


class _HeadAsGet:
    """HEAD on a GET route answers as GET does, without the body (RFC 9110, 9.3.2)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: dict) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, without_body)


def create_app(live: LiveCatalogue | None, *, limits: Limits | None = None, token: str | None = None,
               admin_token: str | None = None) -> Gate:
    """The ASGI application: the FastAPI app behind :class:`~riskrank.serving.auth.Gate`.
    ``live`` may be None to render the OpenAPI schema only (``riskrank serve --write-openapi``:
    the document describes the admin endpoints too). A serving app has the admin endpoints
    only when ``admin_token`` is given (it must differ from ``token``)."""
    limits = limits or Limits()
    app = FastAPI(
        title="riskrank", version=__version__, docs_url=None, redoc_url=None,
        generate_unique_id_function=lambda route: route.name,
        description="Risk-aware tool retrieval for LLM agents: the top-k tools for a task, ranked by relevance "
                    "and operational risk. Every error is {\"error\": {\"code\", \"message\"}}. "
                    "The /v1/admin/* endpoints exist only on a server started with an admin token.",
    )
    app.state.riskrank = HttpState(live, limits)
    routers = (probes, retrieval, catalogue) + ((admin,) if admin_token is not None or live is None else ())
    for router in routers:
        app.include_router(router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(RiskrankError, _riskrank)
    app.add_exception_handler(Exception, _internal)
    app.openapi = lambda: _openapi(app, limits)
    gated = Gate(_HeadAsGet(app), token=token, admin_token=admin_token, max_body_bytes=limits.max_body_bytes)
    gated.fastapi = app  # for tests and embedding
    return gated


def openapi_schema(limits: Limits | None = None) -> dict[str, Any]:
    """The OpenAPI document (docs/openapi.json is this, for the default limits)."""
    return create_app(None, limits=limits).fastapi.openapi()


def write_openapi(path: str | Path) -> None:
    write_json(path, openapi_schema(), sort_keys=True)
