"""The HTTP service: ``riskrank serve``.

One :class:`~riskrank.pipeline.RiskAwareRetriever` behind a small JSON API (FastAPI on
uvicorn); nothing is scored here. ``POST /v1/retrieve`` returns the risk-aware top-k for a
task, ``GET /v1/tools/{name}`` one tool's spec and risk evidence, ``/healthz`` and ``/readyz``
the probes, ``POST /v1/admin/reload`` swaps the registry/checkpoint without a restart.

Guarantees, each tested over real HTTP (tests/test_server*.py):

- every error is ``{"error": {"code", "message"}}`` with a stable code, never a traceback;
- a missing or wrong bearer token is a 401 before routing, so an unauthenticated caller
  cannot learn which tools or paths exist; only a loopback bind with ``--insecure`` runs
  without a token;
- limits: body size, task length, k, lambda and alpha ranges, per-request timeout, in-flight
  requests;
- hot swap: new artefacts load and validate in a worker thread, then replace the old ones
  in one assignment; a request reads the active artefacts once, so in-flight requests finish
  on the old ones, and a bad artefact leaves the old one serving.

Concurrent queries are encoded in one batch by :class:`BatchingEncoder` (a single thread
owns the model, which also keeps the tokenizer out of concurrent use); scoring runs in the
request threads.

FastAPI, pydantic and uvicorn are imported inside the functions that need them, so the
``riskrank`` CLI starts without them. This module deliberately has no
``from __future__ import annotations``: FastAPI reads the request models of
:func:`create_app`'s endpoints, which are local classes, from real annotations.
"""

import hmac
import ipaddress
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click

from riskrank.catalogue import (
    FILL_LEVELS,
    PROVENANCE,
    ArtefactSpec,
    Catalogue,
    LiveCatalogue,
    load_catalogue,
)
from riskrank.encoder import make_encoder
from riskrank.errors import RiskrankError, error_body
from riskrank.modes import MAX_K, MODES, RISK_SOURCES

TOKEN_ENV = "RISKRANK_TOKEN"
ADMIN_TOKEN_ENV = "RISKRANK_ADMIN_TOKEN"
MIN_TOKEN_CHARS = 16
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
ADMIN_PREFIX = "/v1/admin/"


# -- configuration ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """Per-request limits; the OpenAPI schema states the ones the request model checks."""

    max_body_bytes: int = 64 * 1024
    max_task_chars: int = 4000
    max_k: int = 100
    max_lambda: float = 10.0
    timeout_s: float = 10.0
    max_inflight: int = 256

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_task_chars", "max_k", "max_inflight"):
            if getattr(self, name) < 1:
                raise RiskrankError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_k > MAX_K:
            raise RiskrankError(f"max_k cannot exceed the retriever's limit {MAX_K}")
        if not self.max_lambda >= 0 or not self.timeout_s > 0:
            raise RiskrankError("max_lambda must be >= 0 and timeout_s > 0")


# -- the service: the active catalogue and its hot swap -------------------------------------------------
class ApiError(RiskrankError):
    """An error response: HTTP status, stable code, message."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


class Service(LiveCatalogue):
    def __init__(self, catalogue: Catalogue | None, encoder: Any, limits: Limits | None = None) -> None:
        super().__init__(catalogue, encoder)
        self.limits = limits or Limits()
        self.inflight = 0

    @classmethod
    def from_spec(cls, spec: ArtefactSpec, encoder: Any = None, limits: Limits | None = None, **enc: Any) -> "Service":
        encoder = make_encoder(encoder, **enc)
        return cls(load_catalogue(spec, encoder), encoder, limits)


# -- authentication and binding -------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(token_file: str | None, env: str | None) -> str | None:
    """The bearer token from a file (first line) or an environment variable; None if neither
    is set. Tokens are never taken from the command line (visible in ``ps``)."""
    value: str | None = None
    source = ""
    if token_file:
        path = Path(token_file)
        try:
            value = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise RiskrankError(f"cannot read the token file {path}: {exc}") from None
        source = str(path)
    elif env and os.environ.get(env):
        value, source = os.environ[env].strip(), f"${env}"
    if value is None:
        return None
    if len(value) < MIN_TOKEN_CHARS or any(c.isspace() for c in value) or not value.isascii():
        raise RiskrankError(f"the token in {source} must be at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces")
    return value


def check_bind(host: str, token: str | None, insecure: bool) -> None:
    """A token is required unless the server is bound to loopback and ``--insecure`` is given."""
    if insecure and not is_loopback(host):
        raise RiskrankError(f"--insecure is allowed only on a loopback address (127.0.0.1, ::1, localhost), not {host!r}")
    if token is None and not insecure:
        raise RiskrankError(
            f"no bearer token: set ${TOKEN_ENV} or pass --token-file FILE "
            "(or, on a loopback address only, --insecure to run without one)"
        )


class Gate:
    """ASGI middleware in front of everything: bearer auth, then the body-size limit.

    Auth runs before routing, so a caller without the token gets the same 401 for every
    path, existing or not. Bodies are buffered up to the limit, then replayed to the app."""

    def __init__(self, app: Any, *, token: str | None, admin_token: str | None = None, max_body_bytes: int = 64 * 1024) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.admin_token = admin_token.encode() if admin_token else None
        self.max_body = max_body_bytes

    def _authorised(self, scope: dict, path: str) -> bool:
        required = self.admin_token if (self.admin_token and path.startswith(ADMIN_PREFIX)) else self.token
        if required is None:
            return True
        given = b""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                scheme, _, cred = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = cred.strip()
                break
        return hmac.compare_digest(given, required)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path not in PUBLIC_PATHS and not self._authorised(scope, path):
            await _send_json(send, 401, ApiError(401, "unauthorized", "missing or invalid bearer token").body(),
                             {"www-authenticate": 'Bearer realm="riskrank"'})
            return
        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length")
        has_body = length not in (None, b"0") or b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if has_body and scope.get("method") in ("POST", "PUT", "PATCH") and not _is_json(headers.get(b"content-type")):
            await _send_json(send, 415, ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json").body())
            return
        if length is not None:
            try:
                too_big = int(length) > self.max_body
            except ValueError:
                await _send_json(send, 400, ApiError(400, "malformed_request", "invalid Content-Length").body())
                return
            if too_big:
                await _send_json(send, 413, _too_large(self.max_body))
                return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send_json(send, 413, _too_large(self.max_body))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _is_json(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";")[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _too_large(limit: int) -> dict[str, Any]:
    return ApiError(413, "body_too_large", f"request body exceeds {limit} bytes").body()


async def _send_json(send: Callable, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body, separators=(",", ":")).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": raw})


# -- the application --------------------------------------------------------------------------------
_RANGE_ERRORS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than", "finite_number"}
_FIELD_CODES = {"task": "task", "k": "k", "lambda": "lambda", "alpha": "alpha"}


def _validation_error(errors: Sequence[dict]) -> "ApiError":
    """pydantic errors -> one ApiError with a stable code (first error decides the code)."""
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    fieldname = loc[0] if loc else ""
    kind = err.get("type", "")
    if kind in ("json_invalid", "json_type"):
        return ApiError(400, "malformed_json", f"the request body is not valid JSON ({err.get('msg', '')})")
    if not loc and kind in ("model_attributes_type", "model_type", "dict_type", "missing"):
        return ApiError(400, "malformed_json", "the request body must be a JSON object")
    where = ".".join(loc) or "body"
    message = f"{where}: {err.get('msg', 'invalid')}"
    if kind == "extra_forbidden":
        return ApiError(422, "unknown_field", f"unknown field {where!r}")
    if fieldname == "task" and kind == "string_too_long":
        return ApiError(422, "task_too_long", message)
    if fieldname in _FIELD_CODES and kind in _RANGE_ERRORS:
        return ApiError(422, f"{_FIELD_CODES[fieldname]}_out_of_range", message)
    if fieldname == "mode" and kind == "literal_error":
        return ApiError(422, "invalid_mode", message)
    if fieldname == "risk_source" and kind == "literal_error":
        return ApiError(422, "invalid_risk_source", message)
    return ApiError(422, "invalid_request", message)


def create_app(service: Service | None, *, limits: Limits | None = None, token: str | None = None,
               admin_token: str | None = None) -> Any:
    """The ASGI application: the FastAPI app behind :class:`Gate`. ``service`` may be None to
    render the OpenAPI schema only (``riskrank serve --write-openapi``)."""
    from typing import Annotated, Literal

    import anyio
    import anyio.to_thread
    from fastapi import Body, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException

    from riskrank import __version__

    limits = limits or (service.limits if service is not None else Limits())
    Mode = Literal[MODES]
    strict = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=True)

    class RetrieveRequest(BaseModel):
        model_config = strict
        task: Annotated[str, Field(min_length=1, max_length=limits.max_task_chars,
                                   description="The user's task, in natural language.")]
        k: Annotated[int, Field(ge=1, le=limits.max_k, description="How many tools to return.")] = 5
        lam: Annotated[float | None, Field(alias="lambda", ge=0, le=limits.max_lambda,
                                           description="Risk weight lambda in s = f_rel - lambda * f_risk [default: the checkpoint's; 0 for dense].")] = None
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
        risk_level: int | None = Field(description="Audited (or keyword-filled) level 1-5; null if unlabelled.")
        effective_level: int = Field(description="The level the rule filter reads with risk_source=labels.")
        risk_provenance: Literal[tuple(PROVENANCE)]
        predicted_level: int | None
        permissions: list[str]
        description: str

    class Deferral(BaseModel):
        name: str
        index: int
        reasons: list[str]
        redundant_with: str | None

    class RetrieveResponse(BaseModel):
        task: str
        mode: str
        lam: float = Field(alias="lambda")
        alpha: float
        risk_source: str
        tools: list[RankedTool]
        deferred: list[Deferral]
        fallback: list[str]
        unlabelled: list[str]
        generation: int

    class ToolSpec(BaseModel):
        name: str
        description: str
        input_schema: dict[str, Any]
        risk_level: int | None
        effective_level: int
        risk_provenance: Literal[tuple(PROVENANCE)]
        risk_evidence: list[str]
        predicted_level: int | None
        f_risk: float
        permissions: list[str]
        annotations: dict[str, Any] | None

    class ReloadRequest(BaseModel):
        model_config = strict
        registry: str | None = Field(None, description="Registry file on the server [default: the current one, re-read].")
        checkpoint: str | None = Field(None, description="Checkpoint directory; null for none [default: the current one].")
        mode: Mode | None = None
        risk_source: Literal[RISK_SOURCES] | None = None
        fill_levels: Literal[FILL_LEVELS] | None = None
        wait: bool = Field(True, description="Answer when the new artefacts serve (or failed); false: answer 202 at once.")

    class ErrorDetail(BaseModel):
        code: str
        message: str

    class ErrorBody(BaseModel):
        error: ErrorDetail

    errors = {s: {"model": ErrorBody} for s in (400, 401, 413, 415, 422, 503, 504)}
    app = FastAPI(
        title="riskrank", version=__version__, docs_url=None, redoc_url=None,
        description="Risk-aware tool retrieval for LLM agents: the top-k tools for a task, ranked by relevance "
                    "and operational risk. Every error is {\"error\": {\"code\", \"message\"}}.",
    )

    def active() -> Catalogue:
        cat = service.active if service is not None else None
        if cat is None:
            raise ApiError(503, "not_ready", "the service is still loading")
        return cat

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        e = _validation_error(exc.errors())
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = {404: "no such endpoint", 405: "method not allowed on this endpoint"}.get(exc.status_code, str(exc.detail))
        return JSONResponse({"error": {"code": code, "message": msg}}, status_code=exc.status_code)

    @app.exception_handler(RiskrankError)
    async def _riskrank(request: Request, exc: RiskrankError) -> JSONResponse:
        return JSONResponse(error_body(exc), status_code=422)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        import logging

        logging.getLogger("riskrank.server").exception("internal error on %s", request.url.path)
        return JSONResponse(error_body(exc), status_code=500)

    @app.get("/healthz", tags=["probes"], summary="Liveness: the process answers.")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"], summary="Readiness: artefacts loaded and validated.",
             responses={503: {"model": ErrorBody}})
    async def readyz() -> dict[str, Any]:
        return {"status": "ready", "generation": active().generation}

    @app.post("/v1/retrieve", response_model=RetrieveResponse, tags=["retrieval"], responses=errors,
              summary="The risk-aware top-k tools for a task.")
    async def retrieve(req: RetrieveRequest) -> Any:
        if not req.task.strip():
            raise ApiError(422, "task_empty", "task: the task text is empty")
        cat = active()  # read once: this request finishes on these artefacts whatever a reload does
        cat.check_request(req.mode, req.risk_source)
        if service.inflight >= limits.max_inflight:
            raise ApiError(503, "overloaded", f"more than {limits.max_inflight} requests in flight; retry later", {"retry-after": "1"})
        service.inflight += 1
        t0 = time.perf_counter()
        try:
            def work() -> dict[str, Any]:
                res = cat.retriever.retrieve(req.task, k=req.k, lam=req.lam, mode=req.mode, alpha=req.alpha, risk_source=req.risk_source)
                return cat.result_dict(res, req.alpha)

            try:
                with anyio.fail_after(limits.timeout_s):
                    out = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
            except TimeoutError:
                raise ApiError(504, "timeout", f"the request took longer than {limits.timeout_s:g} s") from None
        finally:
            service.inflight -= 1
        return JSONResponse(out, headers={"server-timing": f"retrieve;dur={(time.perf_counter() - t0) * 1000:.2f}"})

    @app.get("/v1/tools/{name:path}", response_model=ToolSpec, tags=["catalogue"], responses=errors,
             summary="One tool's spec, risk level and the evidence for it.")
    async def tool(name: str) -> Any:
        cat = active()
        if name not in cat.registry:
            raise ApiError(404, "unknown_tool", f"no tool named {name!r}")
        return JSONResponse(cat.tool_spec(cat.registry.index_of(name)))

    @app.get("/v1/info", tags=["catalogue"], responses=errors, summary="The registry, checkpoint and modes being served.")
    async def info() -> dict[str, Any]:
        return {**active().summary(), "limits": asdict(limits)}

    @app.post("/v1/admin/reload", tags=["admin"], status_code=200, responses={**errors, 409: {"model": ErrorBody}, 202: {}},
              summary="Load new artefacts in the background and swap them in atomically.")
    async def reload(req: Annotated[ReloadRequest | None, Body()] = None) -> Any:
        import asyncio

        cur = active()
        req = req or ReloadRequest()  # no body: re-read the current artefacts
        given = req.model_fields_set
        spec = replace(
            cur.spec,
            **{name: getattr(req, name) for name in ("registry", "checkpoint", "mode", "risk_source", "fill_levels")
               if name in given and (getattr(req, name) is not None or name in ("checkpoint", "mode"))},
        )
        if not service.begin_reload():
            raise ApiError(409, "reload_in_progress", "a reload is already running")
        future = asyncio.get_running_loop().run_in_executor(None, service.reload, spec)
        if not req.wait:
            future.add_done_callback(lambda f: f.exception())  # retrieved: no "never retrieved" warning
            return JSONResponse({"status": "loading", "spec": spec.to_dict()}, status_code=202)
        try:
            new = await future
        except BaseException as exc:
            body = error_body(exc)
            body["error"]["message"] = f"reload failed, generation {cur.generation} still serving: {body['error']['message']}"
            return JSONResponse(body, status_code=500 if body["error"]["code"] == "internal_error" else 422)
        return {"status": "reloaded", **new.summary()}

    @app.get("/v1/admin/reload", tags=["admin"], responses=errors, summary="The state of the last reload.")
    async def reload_status() -> dict[str, Any]:
        return dict(service.reload_status) if service is not None else {"state": "idle"}

    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            for path, ops in schema["paths"].items():
                if path not in PUBLIC_PATHS:
                    for op in ops.values():
                        op["security"] = [{"bearer": []}]
                        op.setdefault("responses", {}).setdefault("401", {
                            "description": "Missing or invalid bearer token",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                        })
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    gated = Gate(app, token=token, admin_token=admin_token, max_body_bytes=limits.max_body_bytes)
    gated.fastapi = app  # for tests and embedding
    return gated


def openapi_schema(limits: Limits | None = None) -> dict[str, Any]:
    """The OpenAPI document (docs/openapi.json is this, for the default limits)."""
    return create_app(None, limits=limits).fastapi.openapi()


def write_openapi(path: str | Path) -> None:
    Path(path).write_text(json.dumps(openapi_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")


# -- running ---------------------------------------------------------------------------------------------
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket (port 0: a free port, read back with ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only when it does, and
    # without it a keep-alive response (headers, then body) waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise RiskrankError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def uvicorn_server(app: Any, sock: socket.socket, log_level: str = "warning", lifespan: str = "off") -> Any:
    import uvicorn

    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=log_level == "debug",
                            server_header=False, timeout_graceful_shutdown=10, lifespan=lifespan)
    return uvicorn.Server(config)


def token_options(f: Callable) -> Callable:
    """The auth and bind options ``serve`` and ``mcp --transport streamable-http`` share."""
    opts = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind."),
        click.option("--port", type=int, default=8000, show_default=True, help="Port (0: any free port)."),
        click.option("--token-file", type=click.Path(dir_okay=False), default=None,
                     help=f"File holding the bearer token [default: ${TOKEN_ENV}]."),
        click.option("--token-env", default=TOKEN_ENV, show_default=True, help="Environment variable holding the token."),
        click.option("--insecure", is_flag=True, help="Run without a token (loopback addresses only)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def catalogue_options(f: Callable) -> Callable:
    """Artefact options shared by ``serve`` and ``mcp``."""
    opts = [
        click.option("--registry", type=click.Path(dir_okay=False), default=None,
                     help="Tool registry file (JSON/JSONL, OpenAI functions, MCP tools/list) [default: the bundled demo registry]."),
        click.option("--checkpoint", type=click.Path(file_okay=False), default=None, help="Checkpoint directory from `riskrank train`."),
        click.option("--mode", type=click.Choice(MODES), default=None,
                     help="Default pipeline [default: core with a checkpoint, else dense]."),
        click.option("--risk-source", type=click.Choice(RISK_SOURCES), default="labels", show_default=True,
                     help="Levels the rule filter reads."),
        click.option("--fill-levels", type=click.Choice(FILL_LEVELS), default="none", show_default=True,
                     help="keyword: give unlabelled tools the keyword annotator's level (reads MCP annotations)."),
        click.option("--encoder", default=None, help="Encoder name or folder (must match the checkpoint's)."),
        click.option("--device", default="cpu", show_default=True, help="Encoder device (cpu, cuda)."),
        click.option("--encoder-backend", type=click.Choice(["auto", "torch", "onnx"]), default="auto", show_default=True,
                     help="Encoder forward pass: ONNX Runtime (same embeddings, ~2x faster on CPU; exported once "
                          "and cached) or PyTorch; auto = ONNX where the model allows it."),
        click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
                     help="torch and BLAS threads per process (more help only long texts or very large registries)."),
        click.option("--candidates", type=click.IntRange(1), default=None,
                     help="Rerank the first stage's top-M tools instead of the full pool [default: full pool]."),
        click.option("--first-stage", type=click.Choice(["exact", "ann"]), default="exact", show_default=True,
                     help="How the top-M is found: exact cosine, or an approximate IVF index (10^5+ tools; M = 100 unless --candidates)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _echo(msg: str) -> None:
    click.echo(f"riskrank: {msg}", err=True)


@click.command("serve")
@catalogue_options
@token_options
@click.option("--admin-token-file", type=click.Path(dir_okay=False), default=None,
              help=f"Separate token for /v1/admin/* [default: ${ADMIN_TOKEN_ENV}, else the bearer token].")
@click.option("--max-body-bytes", type=int, default=Limits.max_body_bytes, show_default=True)
@click.option("--max-task-chars", type=int, default=Limits.max_task_chars, show_default=True)
@click.option("--max-lambda", type=float, default=Limits.max_lambda, show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=Limits.timeout_s, show_default=True, help="Per-request timeout (s).")
@click.option("--max-inflight", type=int, default=Limits.max_inflight, show_default=True, help="Requests in flight before 503.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True)
@click.option("--write-openapi", "openapi_out", type=click.Path(dir_okay=False), default=None,
              help="Write the OpenAPI schema to FILE and exit.")
def serve_command(registry: str | None, checkpoint: str | None, mode: str | None, risk_source: str, fill_levels: str,
                  encoder: str | None, device: str, encoder_backend: str, threads: int | None, candidates: int | None, first_stage: str, host: str, port: int, token_file: str | None,
                  token_env: str, insecure: bool, admin_token_file: str | None, max_body_bytes: int, max_task_chars: int,
                  max_lambda: float, timeout_s: float, max_inflight: int, log_level: str, openapi_out: str | None) -> None:
    """Serve risk-aware tool retrieval over HTTP (POST /v1/retrieve; docs/serving.md).

    A bearer token (from $RISKRANK_TOKEN or --token-file) is required unless the server
    binds a loopback address with --insecure."""
    if openapi_out:
        write_openapi(openapi_out)
        _echo(f"wrote {openapi_out}")
        return
    limits = Limits(max_body_bytes=max_body_bytes, max_task_chars=max_task_chars, max_lambda=max_lambda,
                    timeout_s=timeout_s, max_inflight=max_inflight)
    token = read_token(token_file, token_env)
    admin_token = read_token(admin_token_file, ADMIN_TOKEN_ENV)
    check_bind(host, token, insecure)
    sock = bind_socket(host, port)
    spec = ArtefactSpec(registry or _demo_registry(), checkpoint, mode, risk_source, fill_levels, candidates, first_stage)
    _echo(f"loading {spec.registry}" + (f" with checkpoint {checkpoint}" if checkpoint else ""))
    service = Service.from_spec(spec, encoder, limits, device=device, threads=threads, backend=encoder_backend)
    service.encoder.warm()
    s = service.active.summary()
    bound = sock.getsockname()
    url_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    auth = "none (--insecure, loopback)" if token is None else f"bearer token from {token_file or '$' + token_env}"
    backend = getattr(service.encoder.inner, "backend", None)
    _echo(f"serving {s['n_tools']} tools, mode {s['mode']} (modes: {', '.join(s['modes'])}), encoder {s['encoder']}"
          + (f" ({'ONNX Runtime' if backend == 'onnx' else 'PyTorch'})" if backend else "")
          + (f", first stage {s['first_stage']} top-{s['candidates']}" if s.get("candidates") else ""))
    _echo(f"listening on http://{url_host}:{bound[1]}  auth: {auth}")
    server = uvicorn_server(create_app(service, limits=limits, token=token, admin_token=admin_token), sock, log_level)
    server.run(sockets=[sock])


def _demo_registry() -> str:
    from riskrank.datasets.demo import demo_registry_path

    _echo("no --registry: serving the bundled demo registry")
    return str(demo_registry_path())


if __name__ == "__main__":  # pragma: no cover - `python -m riskrank.server --write-openapi FILE`
    sys.exit(serve_command())
