"""``riskrank serve`` (the HTTP API) and ``riskrank mcp`` (find_tools over MCP).

The options are plain click; the servers are imported when a command runs, so the CLI starts
without FastAPI or the MCP SDK, and a missing extra is one line naming its ``pip install``.
Log lines go to stderr (stdout is the protocol for MCP over stdio).
"""

from __future__ import annotations

from collections.abc import Callable

import click

from riskrank.catalogue import FILL_LEVELS, ReloadPolicy
from riskrank.cli.common import demo_registry, log, mode_option, trust_annotations_option
from riskrank.errors import RiskrankError
from riskrank.modes import FIRST_STAGES, MAX_K, RISK_SOURCES
from riskrank.serving.auth import (
    ADMIN_TOKEN_ENV,
    TOKEN_ENV,
    check_bind,
    check_distinct_tokens,
    read_token,
)
from riskrank.serving.requests import Limits


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
        mode_option("Default pipeline [default: core with a checkpoint, else dense]."),
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
        click.option("--first-stage", type=click.Choice(FIRST_STAGES), default="exact", show_default=True,
                     help="How the top-M is found: exact cosine, or an approximate IVF index (10^5+ tools; M = 100 unless --candidates)."),
        trust_annotations_option,
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.command("serve")
@catalogue_options
@token_options
@click.option("--admin-token-file", type=click.Path(dir_okay=False), default=None,
              help=f"Token for /v1/admin/* (reload), distinct from the bearer token [default: ${ADMIN_TOKEN_ENV}]; "
                   "without one the server has no admin endpoints.")
@click.option("--reload-dir", "reload_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory reloads may read registries and checkpoints from (repeat for several) "
                   "[default: none: a reload re-reads only the artefacts the server started with].")
@click.option("--max-registry-bytes", type=click.IntRange(1), default=ReloadPolicy.max_bytes, show_default=True,
              help="The largest registry file a reload reads.")
@click.option("--max-body-bytes", type=int, default=Limits.max_body_bytes, show_default=True)
@click.option("--max-task-chars", type=int, default=Limits.max_task_chars, show_default=True)
@click.option("--max-lambda", type=float, default=Limits.max_lambda, show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=Limits.timeout_s, show_default=True, help="Per-request timeout (s).")
@click.option("--max-inflight", type=int, default=Limits.max_inflight, show_default=True, help="Requests in flight before 503.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True)
@click.option("--write-openapi", "openapi_out", type=click.Path(dir_okay=False), default=None,
              help="Write the OpenAPI schema to FILE and exit.")
def serve_command(registry: str | None, checkpoint: str | None, mode: str | None, risk_source: str, fill_levels: str,
                  encoder: str | None, device: str, encoder_backend: str, threads: int | None, candidates: int | None,
                  first_stage: str, trust_annotations: bool, host: str, port: int, token_file: str | None, token_env: str,
                  insecure: bool, admin_token_file: str | None, reload_dirs: tuple[str, ...], max_registry_bytes: int,
                  max_body_bytes: int, max_task_chars: int, max_lambda: float, timeout_s: float, max_inflight: int,
                  log_level: str, openapi_out: str | None) -> None:
    """Serve risk-aware tool retrieval over HTTP (POST /v1/retrieve; docs/serving.md).

    A bearer token (from $RISKRANK_TOKEN or --token-file) is required unless the server
    binds a loopback address with --insecure. POST /v1/admin/reload exists only with an admin
    token of its own, and reads only the served artefacts and files under --reload-dir.
    Needs the serve extra (pip install 'riskrank[serve]')."""
    from riskrank.serving.http import (  # first: a missing extra fails before any work
        create_app,
        write_openapi,
    )

    if openapi_out:
        write_openapi(openapi_out)
        log(f"wrote {openapi_out}")
        return
    from riskrank.catalogue import ArtefactSpec, LiveCatalogue
    from riskrank.serving.listen import bind_socket, uvicorn_server

    limits = Limits(max_body_bytes=max_body_bytes, max_task_chars=max_task_chars, max_lambda=max_lambda,
                    timeout_s=timeout_s, max_inflight=max_inflight)
    token = read_token(token_file, token_env)
    admin_token = read_token(admin_token_file, ADMIN_TOKEN_ENV)
    check_distinct_tokens(token, admin_token)
    check_bind(host, token, insecure)
    if reload_dirs and admin_token is None:
        raise RiskrankError(f"--reload-dir needs an admin token (${ADMIN_TOKEN_ENV} or --admin-token-file): without one there is no reload")
    sock = bind_socket(host, port)
    spec = ArtefactSpec(registry or demo_registry(announce=True), checkpoint, mode, risk_source, fill_levels, candidates, first_stage,
                        trust_annotations)
    log(f"loading {spec.registry}" + (f" with checkpoint {checkpoint}" if checkpoint else ""))
    live = LiveCatalogue.from_spec(spec, encoder, reload_dirs=reload_dirs, max_registry_bytes=max_registry_bytes,
                                   device=device, threads=threads, backend=encoder_backend)
    live.encoder.warm()
    s = live.active.summary()
    bound = sock.getsockname()
    url_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    auth = "none (--insecure, loopback)" if token is None else f"bearer token from {token_file or '$' + token_env}"
    backend = getattr(live.encoder.inner, "backend", None)
    log(f"serving {s['n_tools']} tools, mode {s['mode']} (modes: {', '.join(s['modes'])}), encoder {s['encoder']}"
        + (f" ({'ONNX Runtime' if backend == 'onnx' else 'PyTorch'})" if backend else "")
        + (f", first stage {s['first_stage']} top-{s['candidates']}" if s.get("candidates") else ""))
    log(f"listening on http://{url_host}:{bound[1]}  auth: {auth}; admin endpoints: "
        + ("on (admin token" + (f", reloads from {', '.join(reload_dirs)})" if reload_dirs else ", reloads re-read the served artefacts)")
           if admin_token else "off (no admin token)"))
    server = uvicorn_server(create_app(live, limits=limits, token=token, admin_token=admin_token), sock, log_level)
    server.run(sockets=[sock])


@click.command("mcp")
@catalogue_options
@click.option("--upstream", default=None, metavar="CMD",
              help="Proxy mode: start this MCP server (a command line), audit its tools/list, serve find_tools over it.")
@click.option("--forward", is_flag=True, help="Proxy mode: also expose call_tool, forwarding calls to tools find_tools returned.")
@click.option("-k", "k", type=click.IntRange(1, MAX_K), default=5, show_default=True, help="Default k of find_tools.")
@click.option("--transport", type=click.Choice(["stdio", "streamable-http"]), default="stdio", show_default=True)
@token_options
def mcp_command(registry: str | None, checkpoint: str | None, mode: str | None, risk_source: str, fill_levels: str,
                encoder: str | None, device: str, encoder_backend: str, threads: int | None, candidates: int | None,
                first_stage: str, trust_annotations: bool, upstream: str | None, forward: bool, k: int, transport: str, host: str, port: int,
                token_file: str | None, token_env: str, insecure: bool) -> None:
    """Serve find_tools (risk-aware tool search) over MCP: stdio, or streamable HTTP.

    The catalogue is --registry (default: the bundled demo registry) or, with --upstream CMD,
    the tools of another MCP server, audited by the keyword annotator and their MCP
    annotations. Log lines go to stderr; stdout is the protocol. Needs the mcp extra
    (pip install 'riskrank[mcp]'; mcp 1.x or 2.x)."""
    from riskrank.serving import mcp_compat

    mcp_compat.sdk_major()  # first: a missing extra fails before any work
    import anyio

    from riskrank.catalogue import ArtefactSpec
    from riskrank.encoder import make_encoder
    from riskrank.serving.listen import bind_socket
    from riskrank.serving.mcp import run

    if upstream and registry:
        raise RiskrankError("give --registry or --upstream, not both")
    if forward and not upstream:
        raise RiskrankError("--forward needs --upstream")
    sock, token = None, None
    if transport == "streamable-http":
        token = read_token(token_file, token_env)
        check_bind(host, token, insecure)
        sock = bind_socket(host, port)
    spec = ArtefactSpec(registry or ("" if upstream else demo_registry(announce=True)), checkpoint, mode, risk_source,
                        fill_levels, candidates, first_stage, trust_annotations)
    enc = make_encoder(encoder, device=device, threads=threads, backend=encoder_backend)
    anyio.run(lambda: run(spec, enc, upstream=upstream, forward=forward, k=k, transport=transport, sock=sock,
                          token=token, echo=log))
