"""The operator's console: ``--console`` on ``riskrank serve`` and ``riskrank mcp``, at ``/console``.

Five pages, server-rendered (Jinja2, autoescaped; one small script that refreshes the
approvals page, no build step, every asset in the package):

1. **Approvals**: the gateway's pending confirmation requests (task, why held, tool, level, provenance,
   evidence, arguments); approve or deny with a note. The agent's call waits meanwhile and
   then runs, or fails with ``denied`` (or ``confirmation_required`` once it times out); the
   gateway logs the decision with the operator's name.
2. **Call log**: the audit log as a table (time, task, tool, level, decision, reason, who),
   filtered, newest first, paged; the filtered log as JSONL or CSV.
3. **Catalogue**: every tool with its level, provenance, evidence and permission categories;
   a search box that runs the surface's own retrieval (``find_tools``'s code on a gateway)
   and shows the ranked list beside what was withheld and why, and beside the
   relevance-only ranking.
4. **Review**: the audit's span >= 2 tools with their votes and evidence; a reviewer picks a
   level and a reason, saved atomically into the review file; an apply button writes the
   labels as ``riskrank audit --apply-review`` does; progress n of m.
5. **Pictures**: the catalogue's level distribution, the audit's agreement heat map, the
   decisions over time (PNG drawn on the server).

What the console shows comes through :class:`~riskrank.serving.console.host.ConsoleHost`
(the seam to the surface that serves it); who may see it and what protects its forms is
:mod:`riskrank.serving.console.security`. :func:`with_console` mounts it in front of a
surface's own ASGI app: ``/console`` is the console's, every other path the surface's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from riskrank.errors import RiskrankError
from riskrank.extras import requires
from riskrank.serving.console import calllog, pictures
from riskrank.serving.console.host import ConsoleHost, ConsoleOptions
from riskrank.serving.console.security import (
    HEADERS,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    LoginThrottle,
    Session,
    Sessions,
    check_name,
    cookies,
    host_is_loopback,
    operator_of,
    origin_ok,
    same_value,
    set_cookie,
)

with requires("console", "the console (--console)"):
    import anyio.to_thread
    import jinja2
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import (
        HTMLResponse,
        JSONResponse,
        RedirectResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Route

PREFIX = "/console"
MAX_FORM_BYTES = 64 * 1024
MAX_NOTE_CHARS = 2000
MAX_TASK_CHARS = 4000
PAGES = (("approvals", "Approvals"), ("changes", "Changes"), ("log", "Call log"), ("catalogue", "Catalogue"),
         ("review", "Review"), ("pictures", "Pictures"))
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
log = logging.getLogger("riskrank.console")


class Refused(Exception):
    """A request the console answers with an error page (status, one line)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _static() -> dict[str, tuple[bytes, str]]:
    root = resources.files("riskrank.serving.console") / "static"
    out = {}
    for entry in root.iterdir():
        suffix = Path(entry.name).suffix
        if suffix in _STATIC_TYPES:
            out[entry.name] = (entry.read_bytes(), _STATIC_TYPES[suffix])
    return out


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _clock(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else ""


class Console:
    """The console of one process: its pages over a :class:`ConsoleHost`."""

    def __init__(self, host: ConsoleHost, options: ConsoleOptions | None = None) -> None:
        self.host = host
        self.options = options or ConsoleOptions()
        self.sessions = Sessions(self.options.admin_token)
        self.throttle = LoginThrottle()
        self.static = _static()
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("riskrank.serving.console", "templates"),
            autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.filters["pretty"] = _pretty
        self.env.filters["clock"] = _clock
        self._review_lock = threading.Lock()
        self._pictures: dict[str, tuple[Any, bytes]] = {}
        self._pictures_lock = threading.Lock()
        self.app = Starlette(routes=self._routes(), exception_handlers={Refused: self._refused, 404: self._not_found,
                                                                       405: self._not_allowed, 500: self._internal})

    # -- the gate in front of every page ---------------------------------------------------------------
    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}

        async def secured(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        if not self.sessions.needs_token and not host_is_loopback(headers.get("host")):
            # No token: loopback only, and a page served under another name (DNS rebinding) is refused.
            await Response("this console answers only on a loopback address (it has no admin token)", 403,
                           media_type="text/plain")(scope, receive, secured)
            return
        await self.app(scope, receive, secured)

    def cookie(self, request: Request, base: str) -> str:
        port = (request.scope.get("server") or (None, 0))[1]
        return f"{base}_{port}"

    def session_of(self, request: Request) -> tuple[str | None, Session | None]:
        sid = cookies(request.headers.get("cookie")).get(self.cookie(request, SESSION_COOKIE))
        return sid, self.sessions.get(sid)

    def need_session(self, request: Request) -> Session:
        _, session = self.session_of(request)
        if session is None:
            raise Refused(401, "log in first")
        return session

    async def form(self, request: Request, session: Session | None) -> dict[str, str]:
        """The POSTed form, checked: same origin, urlencoded, not too large, and its CSRF
        token the session's (or, for the login form, its double-submit cookie)."""
        if not origin_ok(request.headers.get("origin"), request.url.scheme, request.headers.get("host")):
            raise Refused(403, "this form was sent from another site")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise Refused(413, f"the form exceeds {MAX_FORM_BYTES} bytes")
        if media != "application/x-www-form-urlencoded" and (body or media):
            raise Refused(415, "send the form as application/x-www-form-urlencoded")
        try:
            fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=40))
        except (UnicodeDecodeError, ValueError):
            raise Refused(400, "the form could not be read") from None
        expected = session.csrf if session is not None else cookies(request.headers.get("cookie")).get(
            self.cookie(request, LOGIN_COOKIE))
        if not same_value(fields.get("csrf"), expected):
            raise Refused(403, "the form's CSRF token is missing or stale: reload the page and send it again")
        return fields

    # -- rendering ---------------------------------------------------------------------------------------
    def pages(self) -> list[tuple[str, str]]:
        return [(slug, title) for slug, title in PAGES
                if (slug != "approvals" or self.host.broker is not None) and (slug != "log" or self.host.audit_log is not None)
                and (slug != "changes" or self.options.state_dir is not None or self.options.state_store is not None)]

    def render(self, request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        _, session = self.session_of(request)
        describe: dict[str, Any] = {}
        if session is not None:  # what is served is shown to operators only, not on the login page
            try:
                describe = self.host.describe()
            except Exception:  # the header must not take a page down
                log.exception("the console's host could not describe itself")
        flash, flash_kind = "", "done"
        if session is not None and status < 400:  # an error page says its error alone; the note waits for the next page
            flash, flash_kind, session.flash, session.flash_kind = session.flash, session.flash_kind, "", "done"
        html = self.env.get_template(template).render(
            prefix=PREFIX, pages=self.pages(), session=session, csrf=session.csrf if session else "",
            host_kind=self.host.kind, describe=describe, page=ctx.pop("page", ""), flash=flash, flash_kind=flash_kind,
            **ctx)
        return HTMLResponse(html, status)

    async def _refused(self, request: Request, exc: Refused) -> Response:
        if exc.status == 401 and request.method in ("GET", "HEAD"):
            return RedirectResponse(f"{PREFIX}/login", 303)
        return self.render(request, "error.html", exc.status, title="Refused", message=exc.message)

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        if self.session_of(request)[1] is None:  # without a session, one answer for every path
            return await self._refused(request, Refused(401, "log in first"))
        return self.render(request, "error.html", 404, title="Not found", message="no such console page")

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        if self.session_of(request)[1] is None:
            return await self._refused(request, Refused(401, "log in first"))
        return self.render(request, "error.html", 405, title="Not allowed", message="method not allowed on this page")

    async def _internal(self, request: Request, exc: Exception) -> Response:
        log.exception("console error on %s", request.url.path)
        return HTMLResponse("<!doctype html><title>error</title><p>internal error; the server log has the details</p>", 500)

    # -- routes ------------------------------------------------------------------------------------------
    def _routes(self) -> list[Any]:
        p = PREFIX
        return [
            Route(p, self.home), Route(p + "/", self.home),
            Route(p + "/login", self.login_page, methods=["GET"]), Route(p + "/login", self.login, methods=["POST"]),
            Route(p + "/logout", self.logout, methods=["POST"]),
            Route(p + "/static/{name}", self.static_file),
            Route(p + "/approvals", self.approvals), Route(p + "/approvals/decide", self.decide, methods=["POST"]),
            Route(p + "/api/pending", self.pending_api),
            Route(p + "/api/decide", self.decide_api, methods=["POST"]),
            Route(p + "/log", self.call_log), Route(p + "/log.jsonl", self.log_jsonl), Route(p + "/log.csv", self.log_csv),
            Route(p + "/catalogue", self.catalogue),
            Route(p + "/changes", self.changes), Route(p + "/changes/approve", self.changes_approve, methods=["POST"]),
            Route(p + "/review", self.review), Route(p + "/review/save", self.review_save, methods=["POST"]),
            Route(p + "/review/apply", self.review_apply, methods=["POST"]),
            Route(p + "/pictures", self.pictures_page), Route(p + "/pictures/{name}.png", self.picture),
        ]

    async def home(self, request: Request) -> Response:
        self.need_session(request)
        return RedirectResponse(f"{PREFIX}/{self.pages()[0][0]}", 303)

    async def static_file(self, request: Request) -> Response:
        found = self.static.get(request.path_params["name"])
        if found is None:
            raise Refused(404, "no such file")
        data, media = found
        return Response(data, media_type=media)

    # -- login -------------------------------------------------------------------------------------------
    def _login_form(self, request: Request, status: int = 200, error: str = "") -> Response:
        nonce = secrets.token_urlsafe(24)
        resp = self.render(request, "login.html", status, page="login", login_csrf=nonce, error=error,
                           needs_token=self.sessions.needs_token)
        resp.headers.append("set-cookie", set_cookie(self.cookie(request, LOGIN_COOKIE), nonce, secure=request.url.scheme == "https",
                                                     max_age=1800))
        return resp

    async def login_page(self, request: Request) -> Response:
        return self._login_form(request)

    async def login(self, request: Request) -> Response:
        fields = await self.form(request, None)
        name = check_name(fields.get("name", ""))
        if name is None:
            return self._login_form(request, 400, "Give your name (at most 64 printable characters): it is recorded with your decisions.")
        address = request.client.host if request.client else "unknown"
        if self.sessions.needs_token:
            wait = self.throttle.wait(address)
            if wait > 0:  # the token is not even looked at: a throttle that checked it would still answer the guess
                refused = self.throttle.throttled(address)
                if refused:
                    await self._login_failure("login_throttled", address, name, (
                        f"{refused} login(s) refused without a check: too many wrong admin tokens "
                        + ("from this address" if self.throttle.scope(address) == address else "from all addresses")
                        + f" within {self.throttle.window_s:g} s"))
                resp = self._login_form(request, 429, f"Too many failed logins; try again in {math.ceil(wait)} s.")
                resp.headers["retry-after"] = str(math.ceil(wait))
                return resp
            held_back = self.throttle.flush(address)
            if held_back:
                await self._login_failure("login_throttled", address, name, (
                    f"{held_back} more login(s) were refused without a check while the throttle held them"))
        if not self.sessions.token_ok(fields.get("token", "")):
            self.throttle.failed(address)
            await self._login_failure("wrong_token", address, name, "a console login with a wrong admin token")
            return self._login_form(request, 401, "Wrong admin token.")
        self.throttle.succeeded(address)
        old, _ = self.session_of(request)
        self.sessions.drop(old)
        sid, _ = self.sessions.create(name)
        resp = RedirectResponse(f"{PREFIX}/", 303)
        secure = request.url.scheme == "https"
        resp.headers.append("set-cookie", set_cookie(self.cookie(request, SESSION_COOKIE), sid, secure=secure))
        resp.headers.append("set-cookie", set_cookie(self.cookie(request, LOGIN_COOKIE), "", secure=secure, max_age=0))
        return resp

    async def _login_failure(self, code: str, address: str, name: str, reason: str) -> None:
        """One audit line per failed login (the address, the time, the name given; never the
        token), or a log line where the surface keeps no audit log."""
        if self.host.audit is None:
            log.warning("console login failed (%s) from %s as %r: %s", code, address, name, reason)
            return
        with contextlib.suppress(RiskrankError):  # the refusal stands whether or not it is logged
            await self.host.audit.append(tool=None, decision="login_failed", code=code, reason=reason, address=address,
                                         name=name)

    async def logout(self, request: Request) -> Response:
        sid, _ = self.session_of(request)
        await self.form(request, self.need_session(request))
        self.sessions.drop(sid)
        resp = RedirectResponse(f"{PREFIX}/login", 303)
        resp.headers.append("set-cookie", set_cookie(self.cookie(request, SESSION_COOKIE), "", secure=request.url.scheme == "https",
                                                     max_age=0))
        return resp

    # -- 1. approvals ------------------------------------------------------------------------------------
    def _broker(self) -> Any:
        if self.host.broker is None:
            raise Refused(404, f"this {self.host.kind} asks no operator to confirm calls (start a gateway with --console)")
        return self.host.broker

    async def approvals(self, request: Request) -> Response:
        self.need_session(request)
        broker = self._broker()
        notifier = getattr(broker, "notifier", None)
        return self.render(request, "approvals.html", page="approvals", pending=broker.waiting(), recent=list(broker.recent),
                           timeout_s=broker.timeout_s, now=time.time(), webhooks=notifier.stats() if notifier else [])

    async def decide(self, request: Request) -> Response:
        session = self.need_session(request)
        broker = self._broker()
        fields = await self.form(request, session)
        action = fields.get("action")
        if action not in ("approve", "deny"):
            raise Refused(400, "choose approve or deny")
        note = " ".join(fields.get("note", "").split())[:MAX_NOTE_CHARS]
        waiting = broker.pending.get(fields.get("id", ""))
        if waiting is not None and fields.get("digest") != waiting.request.digest:
            raise Refused(409, "that decision was not made on this call's arguments (its digest differs); reload the page")
        item = broker.decide(fields.get("id", ""), action == "approve", session.name, note or None)
        if item is None:
            raise Refused(409, broker.why_not(fields.get("id", "")) or "that request is no longer pending (decided, timed "
                          "out, or its caller went away)")
        session.flash = (f"Approved {item.request.tool}: the agent's call runs now." if action == "approve" else
                         f"Denied {item.request.tool}: the agent's call fails with 'denied'.")
        session.flash_kind = "done" if action == "approve" else "refused"
        return RedirectResponse(f"{PREFIX}/approvals", 303)

    async def pending_api(self, request: Request) -> Response:
        """The pending requests: ``pending`` (their ids) and ``holds`` (what an operator decides
        on: tool, level, task, why it is held beyond its level, client, replica, the arguments'
        digest and the arguments), for a
        console session or an operator's bearer token."""
        if request.headers.get("authorization"):
            if operator_of(request.headers.get("authorization"), self.options.operators) is None:
                return _api_error(401, "unauthorized", "an operator's bearer token (--operators) is needed")
        else:
            self.need_session(request)
        broker = self._broker()
        waiting = broker.waiting()
        return JSONResponse({"pending": [p.id for p in waiting], "holds": [{
            "id": p.id, "tool": p.request.tool, "level": p.request.level, "task": p.request.task,
            "held_because": p.request.reasons(),
            "client": p.request.client, "policy": p.request.policy, "session": p.request.session, "replica": p.replica,
            "digest": p.request.digest, "arguments": p.request.arguments, "asked_at": p.asked_at, "deadline": p.deadline,
            "replica_gone": p.gone} for p in waiting]})

    async def decide_api(self, request: Request) -> Response:
        """``POST /console/api/decide``: JSON ``{"id", "digest", "action": "approve"|"deny", "note"?}``
        with a named operator's bearer token (no CSRF form: no cookie is read). The same rules
        as the page: the digest must be the arguments' shown (409), a request no longer
        pending is 409 saying why, an unknown id 404, a wrong token 401; a decision is taken
        once (the store's conditional update), so a call never runs twice."""
        name = operator_of(request.headers.get("authorization"), self.options.operators)
        if name is None:
            return _api_error(401, "unauthorized", "an operator's bearer token (--operators) is needed")
        broker = self._broker()
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _api_error(415, "unsupported_media_type", "send the decision as application/json")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return _api_error(413, "body_too_large", f"the decision exceeds {MAX_FORM_BYTES} bytes")
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return _api_error(400, "malformed_json", "the body is not JSON")
        problem = _decision_problem(data)
        if problem is not None:
            return _api_error(422, "invalid_request", problem)
        rid, note = data["id"], " ".join(str(data.get("note") or "").split())[:MAX_NOTE_CHARS]

        def decide() -> tuple[int, str, str, Any]:
            waiting = broker.pending.get(rid)
            if waiting is None:
                why = broker.why_not(rid)
                return (404, "unknown_request", f"no request has the id {rid!r}", None) if why is None else (
                    409, "not_pending", why, None)
            if not same_value(data["digest"], waiting.request.digest):
                return 409, "digest_mismatch", ("that decision was not made on this call's arguments (its digest "
                                                "differs): read the request again"), None
            if waiting.gone:
                return 409, "replica_gone", waiting.gone, None
            item = broker.decide(rid, data["action"] == "approve", name, note or None)
            if item is None:
                return 409, "not_pending", broker.why_not(rid) or "that request is no longer pending", None
            return 200, "", "", item

        status, code, message, item = decide()  # on the loop, as the page decides (an in-process broker's event)
        if item is None:
            return _api_error(status, code, message)
        return JSONResponse({"id": rid, "tool": item.request.tool, "action": item.answer.action,
                             "decided_by": item.answer.by, "note": item.answer.note})

    # -- 2. call log -------------------------------------------------------------------------------------
    def _audit(self) -> Path:
        if self.host.audit_log is None:
            raise Refused(404, f"this {self.host.kind} writes no audit log (start it with --audit-log FILE)")
        return self.host.audit_log

    async def call_log(self, request: Request) -> Response:
        self.need_session(request)
        path = self._audit()
        flt = calllog.Filter.from_query(request.query_params)
        number = request.query_params.get("page", "1")
        number = int(number) if number.isdigit() and 0 < int(number) < 10**6 else 1
        rows, older = await anyio.to_thread.run_sync(calllog.page, path, flt, number, self.options.page_size)
        return self.render(request, "log.html", page="log", rows=rows, flt=flt, number=number, older=older,
                           decisions=calllog.DECISIONS, path=str(path))

    def _download(self, request: Request, kind: str) -> Response:
        self.need_session(request)
        path = self._audit()
        flt = calllog.Filter.from_query(request.query_params)
        lines = calllog.jsonl(path, flt) if kind == "jsonl" else calllog.csv_lines(path, flt)
        media = "application/x-ndjson" if kind == "jsonl" else "text/csv; charset=utf-8"
        return StreamingResponse(lines, media_type=media,
                                 headers={"content-disposition": f'attachment; filename="riskrank-audit.{kind}"'})

    async def log_jsonl(self, request: Request) -> Response:
        return self._download(request, "jsonl")

    async def log_csv(self, request: Request) -> Response:
        return self._download(request, "csv")

    # -- 3. catalogue ------------------------------------------------------------------------------------
    async def catalogue(self, request: Request) -> Response:
        self.need_session(request)
        q = request.query_params.get("q", "").strip()[:200]
        task = request.query_params.get("task", "")[:MAX_TASK_CHARS + 1]
        k_text = request.query_params.get("k", "5")
        tools = await anyio.to_thread.run_sync(self.host.tools)
        shown = [t for t in tools if not q or q.lower() in (t["name"] + " " + t["description"]).lower()]
        by_doubt = request.query_params.get("sort") == "doubt"
        if by_doubt:  # the levels to check first (riskrank levels review's order); tools without a doubt last
            shown.sort(key=lambda t: -(t.get("doubt") if t.get("doubt") is not None else -1.0))
        result, baseline, error = None, None, ""
        if task.strip():
            try:
                k = int(k_text)
            except ValueError:
                k = 0
            try:
                if not 1 <= k <= self.host.max_k:
                    raise RiskrankError(f"k must be between 1 and {self.host.max_k}")
                result = await anyio.to_thread.run_sync(self.host.search, task, k)
                if self.host.baseline is not None:
                    baseline = await anyio.to_thread.run_sync(self.host.baseline, task, k)
            except RiskrankError as exc:
                error = str(exc)
        by_name = {t["name"]: t for t in tools}
        counts = {lvl: sum(t["level"] == lvl for t in tools) for lvl in range(1, 6)}
        return self.render(request, "catalogue.html", page="catalogue", tools=shown, n_tools=len(tools), q=q, task=task,
                           k=k_text, result=result, baseline=baseline, error=error, by_name=by_name, counts=counts, by_doubt=by_doubt,
                           has_doubt=any(t.get("doubt") is not None for t in tools),
                           not_offered=sum(1 for t in tools if t["not_offered"]),
                           withheld=sum(1 for t in tools if t.get("withheld")))

    # -- changes: the pin store's held tools ------------------------------------------------------------
    def _pins(self) -> Any:
        from riskrank.serving.gateway.pins import PinStore, StorePinStore

        if self.options.state_store is not None:  # every replica reads the same pins
            return StorePinStore(self.options.state_store, key=self.options.pin_key)
        if self.options.state_dir is None:
            return None
        # the gateway holds the lock; it watches the file
        return PinStore(self.options.state_dir, lock=False, key=self.options.pin_key)

    async def changes(self, request: Request) -> Response:
        self.need_session(request)

        def read() -> dict[str, Any]:
            store = self._pins()
            if store is None:
                return {"pins_path": None, "changes": [], "broken": None}
            rows = [{"upstream": c.upstream, "name": c.name, "kind": c.kind, "at": c.at, "anchor": _digest(c.upstream + "/" + c.name),
                     "sha256": store.servers[c.upstream]["pending"][c.name]["sha256"],
                     "text": c.diff() if c.pinned else json.dumps(c.seen, indent=2, sort_keys=True, ensure_ascii=False)}
                    for c in store.changes()]
            return {"pins_path": store.path, "changes": rows, "broken": store.broken}

        return self.render(request, "changes.html", page="changes", **await anyio.to_thread.run_sync(read))

    async def changes_approve(self, request: Request) -> Response:
        from riskrank.serving.gateway.pins import PinError

        session = self.need_session(request)
        fields = await self.form(request, session)
        upstream, name = fields.get("upstream", ""), fields.get("tool", "")

        def approve() -> None:
            store = self._pins()
            if store is None:
                raise Refused(404, "no pin store (start the gateway with --state-dir DIR)")
            if store.broken:
                raise Refused(409, f"the pin store is not trusted ({store.broken}); check it, then riskrank pins reset")
            pending = store.servers.get(upstream, {}).get("pending", {}).get(name)
            if pending is None:
                raise Refused(409, f"{upstream!r} has no tool {name!r} awaiting approval (approved already, or listed again)")
            if not same_value(fields.get("sha256", ""), pending["sha256"]):
                raise Refused(409, f"the definition of {name!r} changed again since the page was shown; reload the page")
            try:
                store.approve(upstream, name)
            except PinError as exc:
                raise Refused(409, str(exc)) from None

        await anyio.to_thread.run_sync(approve)
        if self.host.audit is not None:
            self.host.audit.write(tool=name, decision="pins", code="pin_approved", upstream=upstream, decided_by=session.name,
                                  reason=f"{session.name} approved the listed definition of {name!r} of {upstream!r}")
        session.flash = f"Approved {name} of {upstream}: the gateway offers it again within a second."
        return RedirectResponse(f"{PREFIX}/changes", 303)

    # -- 4. review ---------------------------------------------------------------------------------------
    def _review_paths(self) -> tuple[Path | None, Any]:
        """The label file and its review queue: the file beside it, or (a gateway on a state
        store) the queue every replica's console shares in the store."""
        from riskrank.audit import default_side_paths

        labels, review = self.options.labels, self.options.review
        if labels is not None and self.options.state_store is not None:
            from riskrank.serving.gateway.store import StoreReview

            return labels, StoreReview(self.options.state_store, labels)
        if review is None and labels is not None:
            review = default_side_paths(labels)[1]
        return labels, review

    def _review_state(self) -> dict[str, Any]:
        from riskrank.audit import PENDING, REVIEWED, AuditError, read_json_file, read_review

        labels_path, review_path = self._review_paths()
        state: dict[str, Any] = {"labels_path": labels_path, "review_path": review_path, "entries": [], "error": "",
                                 "labels": {}, "review_exists": False, "pending_in_labels": 0}
        if review_path is None:
            return state
        try:
            labels = read_json_file(labels_path, "label file") if labels_path is not None and labels_path.is_file() else {}
            state["review_exists"] = review_path.is_file()
            entries = read_review(review_path) if state["review_exists"] else []
        except (AuditError, OSError) as exc:
            state["error"] = str(exc)
            return state
        labels = labels if isinstance(labels, dict) else {}
        # Tools the label file holds as awaiting review: with no review file where the console
        # looked, the page says which file it looked for instead of "nothing to review".
        state["pending_in_labels"] = sum(isinstance(v, dict) and v.get("resolution") == PENDING for v in labels.values())
        for e in entries:
            lab = labels.get(e["name"]) if isinstance(labels.get(e["name"]), dict) else {}
            e["evidence"] = lab.get("evidence") or {}
            e["applied"] = lab.get("resolution") == REVIEWED and lab.get("risk_level") == e.get("risk_level")
            e["votes_digest"] = _digest(e.get("votes"))
            e["anchor"] = _digest(e["name"])
        state.update(entries=entries, labels=labels)
        return state

    async def review(self, request: Request) -> Response:
        self.need_session(request)
        state = await anyio.to_thread.run_sync(self._review_state)
        entries = state["entries"]
        return self.render(request, "review.html", page="review", **state,
                           decided=sum(e.get("risk_level") is not None for e in entries),
                           applied=sum(e["applied"] for e in entries), levels=pictures.LEVEL_NAMES)

    async def review_save(self, request: Request) -> Response:
        from riskrank.audit import AuditError, save_review_decision

        session = self.need_session(request)
        fields = await self.form(request, session)
        _, review_path = self._review_paths()
        if review_path is None:
            raise Refused(404, "no review file (start the console with --labels LABELS.json)")
        name, level, reason = fields.get("tool", ""), fields.get("level", ""), " ".join(fields.get("reason", "").split())
        if level not in ("1", "2", "3", "4", "5"):
            raise Refused(400, f"pick a level 1-5 for {name!r}")
        if not reason:
            raise Refused(400, f"give a reason for the level of {name!r}")

        def save() -> None:
            with self._review_lock:
                entries = {e["name"]: e for e in _read_review(review_path)}
                entry = entries.get(name)
                if entry is None:
                    raise AuditError(f"no tool {name!r} awaits review in {review_path}")
                if not same_value(fields.get("votes", ""), _digest(entry.get("votes"))):
                    raise AuditError(f"the votes of {name!r} changed since the page was shown (the audit was rerun); "
                                     "reload the review queue")
                save_review_decision(review_path, name, int(level), session.name, reason[:MAX_NOTE_CHARS])

        try:
            await anyio.to_thread.run_sync(save)
        except AuditError as exc:
            raise Refused(409, str(exc)) from None
        session.flash = f"Saved L{level} for {name} in {review_path.name}."
        return RedirectResponse(f"{PREFIX}/review#t-{_digest(name)}", 303)

    async def review_apply(self, request: Request) -> Response:
        from riskrank.audit import AuditError, apply_review

        session = self.need_session(request)
        await self.form(request, session)
        labels_path, review_path = self._review_paths()
        if labels_path is None or review_path is None:
            raise Refused(404, "no label file (start the console with --labels LABELS.json)")

        def apply() -> tuple[int, int]:
            with self._review_lock:
                return apply_review(labels_path, review_path)

        try:
            applied, pending = await anyio.to_thread.run_sync(apply)
        except AuditError as exc:
            raise Refused(409, str(exc)) from None
        session.flash = (f"Applied {applied} decision(s) to {labels_path.name}"
                         + (f"; {pending} tool(s) still await review." if pending else "."))
        return RedirectResponse(f"{PREFIX}/review", 303)

    # -- 5. pictures -------------------------------------------------------------------------------------
    def _agreement(self) -> tuple[Any, str]:
        """(the agreement report of the label file's votes, or None, and why not)."""
        from riskrank.agreement import agreement, load_ratings

        labels, _ = self._review_paths()
        if labels is None or not labels.is_file():
            return None, "no label file (start the console with --labels LABELS.json)"
        try:
            ratings, sources, _names, notes = load_ratings([labels])
            return agreement(ratings, sources, bootstrap=0, notes=notes), ""
        except RiskrankError as exc:
            return None, str(exc)

    async def pictures_page(self, request: Request) -> Response:
        self.need_session(request)
        tools = await anyio.to_thread.run_sync(self.host.tools)
        report, why = await anyio.to_thread.run_sync(self._agreement)
        buckets = None
        if self.host.audit_log is not None:
            records = await anyio.to_thread.run_sync(lambda: list(_records(self.host.audit_log)))
            buckets = pictures.decision_buckets(records)
        return self.render(request, "pictures.html", page="pictures", level_counts=pictures.level_counts(tools),
                           n_tools=len(tools), report=report, agreement_why=why, buckets=buckets,
                           has_log=self.host.audit_log is not None)

    async def picture(self, request: Request) -> Response:
        self.need_session(request)
        name = request.path_params["name"]
        if name == "levels":
            tools = await anyio.to_thread.run_sync(self.host.tools)
            key: Any = tuple((t["name"], t["level"], t["provenance"]) for t in tools)
            draw: Callable[[], bytes] = lambda: pictures.levels_png(tools)  # noqa: E731
        elif name == "decisions" and self.host.audit_log is not None:
            path = self.host.audit_log
            key = _stat(path)
            draw = lambda: pictures.decisions_png(_records(path))  # noqa: E731
        elif name == "agreement":
            labels, _ = self._review_paths()
            key = _stat(labels) if labels is not None else None

            def draw() -> bytes:
                from riskrank.agreement import confusion_png_bytes

                report, why = self._agreement()
                if report is None:
                    raise Refused(404, why)
                return confusion_png_bytes(report)
        else:
            raise Refused(404, "no such picture")

        def cached() -> bytes:
            with self._pictures_lock:  # matplotlib draws one figure at a time here
                hit = self._pictures.get(name)
                if hit is not None and hit[0] == key:
                    return hit[1]
                data = draw()
                self._pictures[name] = (key, data)
                return data

        return Response(await anyio.to_thread.run_sync(cached), media_type="image/png")


def _api_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status)


#: A decision's fields and their types (``note`` optional).
DECISION_FIELDS = {"id": str, "digest": str, "action": str, "note": str}


def _decision_problem(data: Any) -> str | None:
    """What is wrong with a decision body, in one line (None: nothing)."""
    if not isinstance(data, dict):
        return "the body must be a JSON object"
    extra = sorted(set(data) - set(DECISION_FIELDS))
    if extra:
        return f"unknown field(s) {extra}: a decision has id, digest, action and note"
    for key, kind in DECISION_FIELDS.items():
        if key not in data:
            if key != "note":
                return f"{key} is missing"
        elif not isinstance(data[key], kind) and not (key == "note" and data[key] is None):
            return f"{key} must be a string"
    if data["action"] not in ("approve", "deny"):
        return "action must be approve or deny"
    return None


def _records(path: Path) -> Any:
    from riskrank.serving.gateway.auditlog import read_records

    return read_records(path)


def _read_review(path: Any) -> list[dict[str, Any]]:
    from riskrank.audit import read_review

    return read_review(path) if path.is_file() else []


def _stat(path: Path | None) -> Any:
    with contextlib.suppress(OSError):
        st = path.stat() if path is not None else None
        return (st.st_size, st.st_mtime_ns) if st else None
    return None


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def create_console(host: ConsoleHost, options: ConsoleOptions | None = None) -> Console:
    """The console's ASGI app for ``host`` (serve it at ``/console``: :func:`with_console`)."""
    return Console(host, options)


class _WithConsole:
    def __init__(self, app: Any, console: Console) -> None:
        self.app, self.console = app, console

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == PREFIX or path.startswith(PREFIX + "/"):
            await self.console(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def with_console(app: Any, console: Console) -> Any:
    """``app`` with the console in front of it at ``/console`` (the console's own gate: its
    login and session cookie; every other path reaches ``app`` and its gate unchanged)."""
    wrapped = _WithConsole(app, console)
    wrapped.fastapi = getattr(app, "fastapi", None)  # type: ignore[attr-defined]
    return wrapped
