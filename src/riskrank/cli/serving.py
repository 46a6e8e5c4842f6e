"""``riskrank serve`` (the HTTP API) and ``riskrank mcp`` (find_tools over MCP, and the gateway).

The options are plain click; the servers are imported when a command runs, so the CLI starts
without FastAPI or the MCP SDK, and a missing extra is one line naming its ``pip install``.
Log lines go to stderr (stdout is the protocol for MCP over stdio).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from riskrank.catalogue import FILL_LEVELS, ReloadPolicy
from riskrank.cli.common import (
    demo_registry,
    level_model_option,
    log,
    mode_option,
    not_an_input,
    trust_annotations_option,
)
from riskrank.errors import RiskrankError
from riskrank.modes import FIRST_STAGES, MAX_K, NO_MIN_SCORE, RISK_SOURCES
from riskrank.rules import FILL_POLICIES
from riskrank.serving.auth import (
    ADMIN_TOKEN_ENV,
    TOKEN_ENV,
    check_bind,
    check_distinct_tokens,
    read_token,
)
from riskrank.serving.requests import Limits
from riskrank.timeline import TIMELINE, mark


def token_options(f: Callable) -> Callable:
    """The auth and bind options ``serve`` and ``mcp --transport streamable-http`` share."""
    opts = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind."),
        click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free port)."),
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
        click.option("--checkpoint", type=click.Path(file_okay=False), default=None,
                     help="Checkpoint directory from `riskrank train` [default: the shipped base model; `none`: no heads]."),
        mode_option("Default pipeline [default: the strongest safe one: core+graph+rule with heads (a checkpoint or the base model), else dense+rule]."),
        click.option("--risk-source", type=click.Choice(RISK_SOURCES), default="labels", show_default=True,
                     help="Levels the rule filter reads."),
        click.option("--fill-levels", type=click.Choice(FILL_LEVELS), default="none", show_default=True,
                     help="keyword: give unlabelled tools the keyword annotator's level (reads MCP annotations)."),
        click.option("--encoder", default=None, help="Encoder name or folder (must match the checkpoint's)."),
        click.option("--device", default="cpu", show_default=True, help="Encoder device (cpu, cuda)."),
        click.option("--encoder-backend", type=click.Choice(["auto", "numpy", "torch", "onnx"]), default="auto", show_default=True,
                     help="Encoder forward pass: ONNX Runtime (a graph riskrank writes from the model's own weights, "
                          "cached), NumPy (no extra import) or PyTorch, all giving the same embeddings; auto = ONNX "
                          "Runtime where it is installed and runs the model, else NumPy where it runs it, else PyTorch."),
        click.option("--query-weights", type=click.Choice(["int8", "float32"]), default="int8", show_default=True,
                     help="Weights the tasks are encoded with: int8 (the same model's weight products quantised, "
                          "on ONNX Runtime: a task encoded about twice as fast; tools are always encoded in float32; "
                          "float32 where ONNX Runtime cannot run the model) or float32 (docs/serving.md)."),
        click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
                     help="BLAS (scoring) and PyTorch threads per process (more help only very large registries); "
                          "ONNX Runtime's encoder uses its own (the cores, at most 4, parked when idle)."),
        click.option("--candidates", type=click.IntRange(1), default=None,
                     help="Rerank the first stage's top-M tools instead of the full pool [default: full pool]."),
        click.option("--first-stage", type=click.Choice(FIRST_STAGES), default="exact", show_default=True,
                     help="How the top-M is found: exact cosine, or an approximate IVF index (10^5+ tools; M = 100 unless --candidates)."),
        trust_annotations_option,
        level_model_option,
        click.option("--fill", type=click.Choice(FILL_POLICIES), default="safe", show_default=True,
                     help="When fewer than k tools meet the rule filter's rules: safe tops up only with tools below the "
                          "risky level, none never tops up (fewer tools come back), deferred is the paper's (tops up "
                          "with the withheld tools)."),
        click.option("--min-score", type=str, default=None, metavar="FLOAT|none",
                     help="Relevance floor on f_rel: tools below it are not returned [default: measured per score "
                          "scale (docs/serving.md); none: no floor]."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def console_options(f: Callable) -> Callable:
    """``--console`` and the audit files it reviews (``serve`` and ``mcp``)."""
    opts = [
        click.option("--console", is_flag=True,
                     help="Serve the operator's console at /console: approvals, call log, catalogue, audit review, "
                          "pictures (loopback only without an admin token; with one, a login form asks for it)."),
        click.option("--labels", type=click.Path(dir_okay=False), default=None, metavar="LABELS.json",
                     help="The console's audit: the label file of `riskrank audit` (review queue, apply, agreement heat map)."),
        click.option("--review", type=click.Path(dir_okay=False), default=None, metavar="REVIEW.jsonl",
                     help="The review queue the console edits [default: beside --labels, LABELS.review.jsonl]."),
        click.option("--verbose", is_flag=True,
                     help="Print the start-up timeline on stderr: where the time to the first answer goes."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def console_setup(console: bool, host: str, admin_token: str | None, labels: str | None, review: str | None,
                  state_dir: str | None = None) -> Any:
    """The console's options, after its rules: loopback only without an admin token; the
    label file must exist. None without ``--console``."""
    from pathlib import Path

    from riskrank.serving.auth import is_loopback
    from riskrank.serving.console.host import ConsoleOptions

    if not console:
        if labels or review:
            raise RiskrankError("--labels and --review are the console's: add --console")
        return None
    if admin_token is None and not is_loopback(host):
        raise RiskrankError(f"--console on {host} needs an admin token (${ADMIN_TOKEN_ENV} or --admin-token-file): "
                            "without one the console is served on a loopback address only")
    if labels is not None and not Path(labels).is_file():
        raise RiskrankError(f"--labels {labels}: no such label file")
    if review is not None and labels is None:
        raise RiskrankError("--review needs --labels (the label file its decisions are applied to)")
    return ConsoleOptions(admin_token=admin_token, labels=Path(labels) if labels else None,
                          review=Path(review) if review else None, state_dir=Path(state_dir) if state_dir else None)


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
@console_options
def serve_command(registry: str | None, checkpoint: str | None, mode: str | None, risk_source: str, fill_levels: str,
                  encoder: str | None, device: str, encoder_backend: str, query_weights: str, threads: int | None, candidates: int | None,
                  first_stage: str, trust_annotations: bool, level_model: str, fill: str, min_score: str | None, host: str, port: int,
                  token_file: str | None, token_env: str, insecure: bool, admin_token_file: str | None,
                  reload_dirs: tuple[str, ...], max_registry_bytes: int, max_body_bytes: int, max_task_chars: int,
                  max_lambda: float, timeout_s: float, max_inflight: int, log_level: str, openapi_out: str | None,
                  console: bool, labels: str | None, review: str | None, verbose: bool) -> None:
    """Serve risk-aware tool retrieval over HTTP (POST /v1/retrieve; docs/serving.md).

    A bearer token (from $RISKRANK_TOKEN or --token-file) is required unless the server
    binds a loopback address with --insecure. POST /v1/admin/reload exists only with an admin
    token of its own, and reads only the served artefacts and files under --reload-dir.
    --console serves the operator's console at /console (docs/console.md).
    Needs the serve extra (pip install 'riskrank[serve]')."""
    start_timeline(verbose)
    from riskrank.serving.http import (  # first: a missing extra fails before any work
        create_app,
        write_openapi,
    )

    if openapi_out:
        not_an_input({"--write-openapi": openapi_out}, (registry, checkpoint, token_file, admin_token_file, labels, review))
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
    console_opts = console_setup(console, host, admin_token, labels, review)
    if console_opts is not None:
        # a missing extra fails here, before anything loads
        from riskrank.serving.console.app import create_console, with_console
    sock = bind_socket(host, port)
    spec = ArtefactSpec(registry or demo_registry(announce=True), checkpoint, mode, risk_source, fill_levels, candidates, first_stage,
                        trust_annotations=trust_annotations, fill=fill, min_score=parse_min_score(min_score),
                        level_model=level_model)
    log(f"loading {spec.registry}" + (f" with checkpoint {checkpoint}" if checkpoint else ""))
    live = LiveCatalogue.from_spec(spec, encoder, reload_dirs=reload_dirs, max_registry_bytes=max_registry_bytes,
                                   device=device, threads=threads, backend=encoder_backend, query_weights=query_weights)
    mark("catalogue loaded (levels, embeddings, indexes, probe query)")
    live.encoder.warm()
    mark("encoder loaded")
    s = live.active.summary()
    if s.get("base_model"):
        log(f"no --checkpoint: the base model ({s['checkpoint']})")
    for note in s.get("notes", []):
        log(f"note: {note}")
    bound = sock.getsockname()
    url_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    auth = "none (--insecure, loopback)" if token is None else f"bearer token from {token_file or '$' + token_env}"
    log(f"serving {s['n_tools']} tools, mode {s['mode']} (modes: {', '.join(s['modes'])}), encoder {s['encoder']}"
        + _backends(live.encoder, int8=s.get("query_encoder") not in (None, s["encoder"]))
        + (f", first stage {s['first_stage']} top-{s['candidates']}" if s.get("candidates") else ""))
    log(f"listening on http://{url_host}:{bound[1]}  auth: {auth}; admin endpoints: "
        + ("on (admin token" + (f", reloads from {', '.join(reload_dirs)})" if reload_dirs else ", reloads re-read the served artefacts)")
           if admin_token else "off (no admin token)"))
    app = create_app(live, limits=limits, token=token, admin_token=admin_token)
    if console_opts is not None:
        from riskrank.serving.http import console_host

        app = with_console(app, create_console(console_host(live, limits), console_opts))
        log(f"console at http://{url_host}:{bound[1]}/console  auth: "
            + ("the admin token (log in at the page)" if admin_token else "none (no admin token: loopback only)"))
    server = uvicorn_server(app, sock, log_level)
    mark("serving")
    server.run(sockets=[sock])


#: What the start-up line calls each forward pass.
BACKEND_NAMES = {"onnx": "ONNX Runtime", "numpy": "NumPy", "torch": "PyTorch"}


def _backends(encoder: object, *, int8: bool) -> str:
    """What runs where, as the start-up line says it: the tasks' forward pass (loaded by
    ``warm``) and the tools' (loaded only when a tool is not in the embedding cache)."""
    query, tools = getattr(encoder, "query", None), getattr(encoder, "inner", None)
    tasks = BACKEND_NAMES.get(getattr(query, "backend", None) or "")
    if tasks is None:
        return ""
    out = f" (tasks on {tasks}" + (", int8 weights" if int8 else "")
    if tools is not None and tools is not query:
        loaded = BACKEND_NAMES.get(getattr(tools, "backend", None) or "")
        out += f"; tools on {loaded}" if loaded else "; tools from the embedding cache, their pass loaded when a new tool comes"
    return out + ")"


def start_timeline(verbose: bool) -> None:
    """Mark the end of the interpreter's start-up and riskrank's imports; ``--verbose`` echoes
    the timeline from here on (:mod:`riskrank.timeline`)."""
    mark("interpreter, imports and arguments")
    if verbose:
        TIMELINE.follow(log)


def parse_min_score(value: str | None) -> float | None:
    """``--min-score``: a number, or ``none`` for no floor; absent: the measured default."""
    if value is None:
        return None
    if value.strip().lower() == "none":
        return NO_MIN_SCORE
    try:
        number = float(value)
    except ValueError:
        raise click.BadParameter(f"must be a number or 'none', got {value!r}", param_hint="--min-score") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise click.BadParameter("must be a finite number or 'none'", param_hint="--min-score")
    return number


@click.command("mcp")
@catalogue_options
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, metavar="SERVERS.json",
              help="Gateway mode: the upstream MCP servers, in the mcpServers format (Claude Desktop, Cursor, VS Code).")
@click.option("--upstream", default=None, metavar="CMD",
              help="One upstream MCP server, a command line (with --config: one more, named 'upstream').")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), default=None, metavar="POLICY.json",
              help="The call-time policy: max_level, confirm_level, allow, deny, exposure_ttl_s, client_choices, levels, "
                   "preset (untrusted: confirm every call), untrusted, call_timeouts, and the session guard's scope, flow, "
                   "confirm, sources, sinks (docs/session-guard.md) [default: max_level 4, confirm_level 3, everything "
                   "allowed, no client choices, the session guard on].")
@click.option("--audit-log", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Append every decision (found, allowed, refused, confirmed; upstreams up and down) to FILE as JSONL.")
@click.option("--forward/--no-forward", default=None,
              help="Expose call_tool, forwarding calls to tools find_tools returned [default: with upstream servers].")
@click.option("--startup-timeout", type=click.FloatRange(0.1, 600), default=30.0, show_default=True,
              help="Seconds each upstream server has to start, answer initialize and list its tools.")
@click.option("-k", "k", type=click.IntRange(1, MAX_K), default=5, show_default=True, help="Default k of find_tools.")
@click.option("--transport", type=click.Choice(["stdio", "streamable-http"]), default="stdio", show_default=True)
@token_options
@console_options
@click.option("--console-host", default=None,
              help="Over stdio: the console's own HTTP listener [default: 127.0.0.1] (over streamable HTTP the console "
                   "is at /console of --host:--port).")
@click.option("--console-port", type=click.IntRange(0, 65535), default=None,
              help="Over stdio: the console listener's port (0: any free port) [default: 8790].")
@click.option("--admin-token-file", type=click.Path(dir_okay=False), default=None,
              help=f"The console's login token, distinct from the bearer token [default: ${ADMIN_TOKEN_ENV}]; "
                   "without one the console is for loopback only.")
@click.option("--confirm-by", type=click.Choice(["console", "elicitation"]), default=None,
              help="Who confirms a call at confirm_level: an operator at the console, or the MCP client's user by "
                   "elicitation [default: console with --console, else elicitation].")
@click.option("--confirm-timeout", type=click.FloatRange(1, 86400), default=120.0, show_default=True,
              help="Seconds a call waits for an operator's decision before it fails with confirmation_required.")
@click.option("--call-timeout", type=click.FloatRange(0.1, 86400), default=60.0, show_default=True,
              help="Seconds a forwarded call may take before it fails with call_timeout (the policy's call_timeouts "
                   "override it per tool).")
@click.option("--max-argument-bytes", type=click.IntRange(1), default=1024 * 1024, show_default=True,
              help="The largest arguments (as JSON) call_tool forwards; larger ones fail with arguments_too_large.")
@click.option("--max-result-bytes", type=click.IntRange(1), default=16 * 1024 * 1024, show_default=True,
              help="The largest upstream answer (as JSON) passed to the agent; larger ones fail with result_too_large.")
@click.option("--scan-results", type=click.Choice(["off", "flag", "redact"]), default="off", show_default=True,
              help="Read each upstream answer for text addressed to the model: flag it in the audit log, or also "
                   "replace a poisoned answer by a notice of what was removed (docs/trust.md).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the pins of the upstreams' tool definitions here (trust on first use): a tool a pinned server "
                   "changes or adds is quarantined until approved (riskrank pins approve; docs/trust.md).")
@click.option("--pin-key", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The key that signs the pins (kept outside the state directory; made on first use if missing) "
                   "[default: $RISKRANK_PIN_KEY, else one of the store's own under ~/.config/riskrank/pin-keys/]. "
                   "Replicas on one --state share one.")
@click.option("--state", "state_url", default=None, metavar="STORE",
              help="Keep the audit log, approvals, pins and exposures in a state store: postgresql://USER@HOST/DB "
                   "(replicas share it; needs the teams extra), a directory (SQLite), or 'sqlite' (SQLite in "
                   "--state-dir). Without it: --audit-log's JSONL and --state-dir's pins file (docs/teams.md).")
@click.option("--replica", default=None, metavar="NAME",
              help="This process's name on audit lines and approvals, with --state [default: HOST:PID].")
@click.option("--operators", "operators_file", type=click.Path(dir_okay=False), default=None, metavar="OPERATORS.json",
              help="With --console: the named operators' token digests, for the JSON approvals API "
                   "(POST /console/api/decide with Authorization: Bearer TOKEN; docs/teams.md).")
@click.option("--notify", "notify_urls", multiple=True, metavar="URL",
              help="Post each held call and each decision to this webhook (repeatable), signed with "
                   "--notify-secret-file (docs/teams.md); needs the console's approvals (--console).")
@click.option("--notify-secret-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The HMAC-SHA256 key the webhook bodies are signed with (at least 16 bytes).")
@click.option("--notify-format", type=click.Choice(["json", "slack"]), default="json", show_default=True,
              help="The webhook body: riskrank's JSON event, or a Slack-compatible {\"text\": ...}.")
@click.option("--replica-lapse", type=click.FloatRange(1, 3600), default=15.0, show_default=True, metavar="SECONDS",
              help="With --state: a replica whose heartbeat in the store (the store's clock) is older than this is "
                   "gone; the calls it held cannot be approved and are withdrawn.")
@click.option("--clients", "clients_file", type=click.Path(dir_okay=False), default=None, metavar="CLIENTS.json",
              help="Over streamable HTTP: each client's token digest and the named policy of --policy it gets, and "
                   "optionally OAuth bearer JWTs (docs/teams.md); re-read when it changes.")
@click.option("--metrics", is_flag=True,
              help="Over streamable HTTP: GET /metrics in the Prometheus text format, behind the admin token "
                   f"(${ADMIN_TOKEN_ENV} or --admin-token-file; loopback only without one; needs the ops extra; "
                   "docs/serving.md).")
def mcp_command(registry: str | None, checkpoint: str | None, mode: str | None, risk_source: str, fill_levels: str,
                encoder: str | None, device: str, encoder_backend: str, query_weights: str, threads: int | None, candidates: int | None,
                first_stage: str, trust_annotations: bool, level_model: str, fill: str, min_score: str | None, config_file: str | None,
                upstream: str | None, policy_file: str | None, audit_log: str | None, forward: bool | None,
                startup_timeout: float, k: int, transport: str, host: str, port: int, token_file: str | None,
                token_env: str, insecure: bool, console: bool, labels: str | None, review: str | None,
                console_host: str | None, console_port: int | None, admin_token_file: str | None,
                confirm_by: str | None, confirm_timeout: float, call_timeout: float, max_argument_bytes: int,
                max_result_bytes: int, state_dir: str | None, pin_key: str | None, scan_results: str, state_url: str | None,
                replica: str | None, operators_file: str | None, notify_urls: tuple[str, ...],
                notify_secret_file: str | None, notify_format: str, replica_lapse: float, clients_file: str | None,
                metrics: bool, verbose: bool) -> None:
    """Serve risk-aware tool search over MCP (stdio, or streamable HTTP), alone or as a gateway.

    The catalogue is --registry (default: the bundled demo registry), or, as a gateway, the
    tools of the upstream servers of --config SERVERS.json (and/or --upstream CMD), audited
    on connect. find_tools(task, k) ranks it with the server's mode; call_tool(name,
    arguments) forwards a call only to a tool of the caller's latest find_tools result that
    the --policy allows at its current level, after the user's confirmation at or above
    confirm_level. --console serves the operator's console (approvals, call log, catalogue,
    audit review; docs/console.md), and with it an operator confirms those calls. Log lines
    go to stderr; stdout is the protocol. Needs the mcp extra (pip install 'riskrank[mcp]';
    mcp 1.x or 2.x)."""
    import os

    start_timeline(verbose)
    from riskrank.serving import mcp_compat

    mcp_compat.sdk_major()  # first: a missing extra fails before any work
    import anyio

    from riskrank.catalogue import ArtefactSpec
    from riskrank.encoder import make_encoder
    from riskrank.serving.gateway.config import (
        ConfigError,
        load_policies,
        load_servers,
        upstream_from_command,
    )
    from riskrank.serving.gateway.limits import CallLimits
    from riskrank.serving.listen import bind_socket
    from riskrank.serving.mcp import run

    gateway = config_file is not None or upstream is not None
    if gateway and registry:
        raise RiskrankError("give --registry, or upstream servers (--config / --upstream), not both")
    if forward and not gateway:
        raise RiskrankError("--forward needs upstream servers (--config SERVERS.json or --upstream CMD)")
    secret_names = frozenset({TOKEN_ENV, ADMIN_TOKEN_ENV, token_env})
    problems: list[str] = []  # a bad entry leaves that server out, not the gateway
    left_out: list[str] = []  # the servers file's entries left out: the agent's find_tools names them
    upstreams = (load_servers(config_file, secret_names=secret_names, problems=problems, left_out=left_out)
                 if config_file is not None else [])
    if upstream is not None:
        upstreams.append(upstream_from_command(upstream))
    policies = load_policies(policy_file)
    if clients_file is not None and transport != "streamable-http":
        raise RiskrankError("--clients names the callers of a streamable-HTTP gateway: add --transport streamable-http "
                            "(over stdio the one caller is the process that started it)")
    sock, token = None, None
    if transport == "streamable-http":
        token = read_token(token_file, token_env)
        check_bind(host, token, insecure, clients=clients_file is not None)
    gateway_forwards = gateway if forward is None else forward
    if transport == "streamable-http" and (console_host is not None or console_port is not None):
        raise RiskrankError("--console-host and --console-port are for stdio; over streamable HTTP the console is at /console "
                            "of --host:--port")
    if not console and (console_host is not None or console_port is not None):
        raise RiskrankError("--console-host and --console-port are the console's: add --console")
    if admin_token_file and not (console or metrics):
        raise RiskrankError("--admin-token-file is the console's and /metrics': add --console or --metrics")
    if metrics and transport != "streamable-http":
        raise RiskrankError("--metrics serves GET /metrics on the HTTP listener: add --transport streamable-http")
    confirm_by = confirm_by or ("console" if console and gateway_forwards else "elicitation")
    if confirm_by == "console" and not console:
        raise RiskrankError("--confirm-by console needs --console (the page where an operator approves calls)")
    # the audit log is appended to: never one of the files the gateway reads
    not_an_input({"--audit-log": audit_log}, (registry, config_file, policy_file, clients_file, operators_file, token_file,
                                              admin_token_file, notify_secret_file, labels, review, pin_key))
    if state_url is not None and audit_log:
        raise RiskrankError("--state keeps the audit log in the store: drop --audit-log (riskrank state export writes it "
                            "as JSONL or CSV)")
    if replica is not None and state_url is None:
        raise RiskrankError("--replica names this process in a shared state store: add --state")
    if console and gateway_forwards and not audit_log and state_url is None:
        raise RiskrankError("--console on a gateway needs --audit-log FILE (or --state STORE): the call log reads it, and "
                            "every operator decision is recorded there")
    admin_token = read_token(admin_token_file, ADMIN_TOKEN_ENV) if console or metrics else None
    check_distinct_tokens(token, admin_token)
    if metrics:
        from riskrank.extras import requires
        from riskrank.serving.auth import is_loopback

        with requires("ops", "--metrics"):  # a missing extra fails here, before anything loads
            import prometheus_client  # noqa: F401
        if admin_token is None and not is_loopback(host):
            raise RiskrankError(f"--metrics on {host} needs an admin token (${ADMIN_TOKEN_ENV} or --admin-token-file): "
                                "/metrics names the clients and upstreams")
    clients = None
    if clients_file is not None:
        from pathlib import Path

        from riskrank.serving.gateway.clients import ClientBook, token_digest

        reserved = {token_digest(t): role for t, role in ((token, "bearer token"), (admin_token, "admin token")) if t}
        clients = ClientBook(Path(clients_file), policies, reserved, log=log)
        log(f"clients: {len(clients.clients)} from {clients_file} ("
            + ", ".join(f"{c.name}: {c.policy}" for c in clients.clients)
            + ("; and OAuth bearer tokens" if clients.oauth is not None else "") + ")")
    console_host = console_host or "127.0.0.1"
    console_opts = console_setup(console, host if transport == "streamable-http" else console_host, admin_token, labels, review,
                                 state_dir)
    console_sock = None
    notifier = None
    if notify_urls or notify_secret_file is not None:
        from riskrank.serving.gateway.notify import Notifier, NotifyError, check_url

        if not notify_urls or notify_secret_file is None:
            raise NotifyError("--notify URL and --notify-secret-file FILE go together: every webhook body is signed")
        if console_opts is None or confirm_by == "elicitation":
            raise NotifyError("--notify posts the calls held for the console's operators: add --console")
        try:
            with open(notify_secret_file, "rb") as f:
                secret = f.read().strip()
        except OSError as exc:
            raise NotifyError(f"--notify-secret-file {notify_secret_file}: cannot read it ({exc.strerror or exc})") from None
        notifier = Notifier([check_url(u) for u in notify_urls], secret, notify_format)
        log(f"notify: {', '.join(notify_urls)} ({notify_format}, signed)")
    if operators_file is not None:
        if console_opts is None:
            raise RiskrankError("--operators names who may decide through the console's approvals API: add --console")
        from riskrank.serving.console.security import read_operators

        console_opts = dataclasses.replace(console_opts, operators=read_operators(operators_file))
        log(f"operators: {', '.join(sorted(set(console_opts.operators.values())))} (the approvals API, {operators_file})")
    if console_opts is not None:
        # a missing extra fails here, before anything loads
        from riskrank.serving.console.app import create_console  # noqa: F401
    secrets = {v for n in secret_names if (v := os.environ.get(n))} | ({token} if token else set())
    for up in list(upstreams):
        if any(v in secrets for v in up.target.env.values()):
            problems.append(f"{config_file}: mcpServers.{up.name}.env: holds riskrank's own token; it cannot be passed "
                            "to an upstream server")
            upstreams.remove(up)
            left_out.append(up.name)
    if gateway and not upstreams:
        raise ConfigError(problems[0] if problems else f"{config_file}: no server to start")
    for problem in problems:
        log(f"warning: {problem}; that server is left out")
    if transport == "streamable-http":
        sock = bind_socket(host, port)
    elif console_opts is not None:
        # 8790: clear of the API's 8000 and of the fake LLM endpoint's 8765 (docs/audit.md)
        console_sock = bind_socket(console_host, 8790 if console_port is None else console_port)
    spec = ArtefactSpec(registry or ("" if gateway else demo_registry(announce=True)), checkpoint, mode, risk_source,
                        fill_levels, candidates, first_stage, trust_annotations=trust_annotations, fill=fill,
                        min_score=parse_min_score(min_score), level_model=level_model)
    pins, store = None, None
    if state_url is not None:
        import socket

        from riskrank.serving.gateway.pins import StorePinStore
        from riskrank.serving.gateway.store import open_store

        if state_url == "sqlite":
            if state_dir is None:
                raise RiskrankError("--state sqlite keeps the store in --state-dir: give --state-dir DIR")
            state_url = state_dir
        store = open_store(state_url)  # unreachable, or at an older schema: one line, before anything starts
        store.check()
        replica = replica or f"{socket.gethostname()}:{os.getpid()}"
        log(f"state: {store.url} ({store.backend}); replica {replica}")
        pins = StorePinStore(store, key=pin_key) if gateway else None
        if console_opts is not None:
            console_opts = dataclasses.replace(console_opts, state_store=store, pin_key=pin_key)
    elif state_dir is not None:
        if not gateway:
            raise RiskrankError("--state-dir keeps the pins of upstream servers: give --config SERVERS.json or --upstream CMD")
        from riskrank.serving.gateway.pins import PinStore

        pins = PinStore(state_dir, key=pin_key)  # a second gateway on one directory fails here, in one line
        if console_opts is not None:
            console_opts = dataclasses.replace(console_opts, pin_key=pin_key)
    elif pin_key is not None:
        raise RiskrankError("--pin-key signs the pins of --state-dir or --state: give one of them")
    enc = make_encoder(encoder, device=device, threads=threads, backend=encoder_backend, query_weights=query_weights)
    try:
        anyio.run(lambda: run(spec, enc, upstreams=upstreams or None, left_out=left_out, policies=policies, clients=clients,
                              audit_log=audit_log, forward=gateway_forwards, k=k, transport=transport, sock=sock,
                              token=token, startup_timeout=startup_timeout, echo=log, console=console_opts,
                              console_sock=console_sock, confirm_by=confirm_by, confirm_timeout=confirm_timeout,
                              call_limits=CallLimits(call_timeout, max_argument_bytes, max_result_bytes), pins=pins,
                              scan_results=scan_results, store=store, replica=replica or "gateway",
                              replica_lapse=replica_lapse, notifier=notifier,
                              metrics_token=admin_token if metrics else None, metrics=metrics))
    finally:
        if store is not None:
            store.close()
