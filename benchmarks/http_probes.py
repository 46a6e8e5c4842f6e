"""Hand-made HTTP probes of a live ``riskrank serve``: admin separation, the reload path,
protocol details. Prints ``case | expected | observed | verdict``.

    python benchmarks/http_probes.py [--json out.json] [--skip-dev-zero]

Starts ``riskrank serve`` (the installed console script) on a free loopback port (``--port 0``,
the port read back from its log) with a test bearer token, over the bundled demo registry in
mode ``dense+rule`` (no checkpoint), and sends raw requests with ``http.client`` (so bodies can
be invalid UTF-8, methods can be HEAD or DELETE). Server A has no admin token (the admin
endpoints must not exist for the bearer token) and takes the protocol probes; server R has a
distinct admin token, ``--reload-dir`` the probe's registry folder and ``--max-registry-bytes``
below the 20 MiB probe file, and takes the reload probes (secrets in files, paths outside the
allow-list, ``/proc``, a FIFO in the allowed folder: the reload must refuse it at once, not
block in ``open``). Two more short-lived servers check the admin token rules (equal tokens
refused; a distinct admin token), the last one with ``/dev/zero`` (the server's memory is
watched and the server is killed past ``--rss-limit-mb``).

Verdicts: ``ok`` (observed what a hardened server does), ``FAIL`` (the issue's defect is
present), ``info`` (recorded, no expectation).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN = "probe-token-0123456789abcdef"
ADMIN_TOKEN = "probe-admin-token-fedcba9876543210"
SECRET = "hunter2-SECRET-PASSWORD"


def riskrank_script() -> str:
    cand = Path(sys.executable).with_name("riskrank")
    return str(cand) if cand.exists() else (shutil.which("riskrank") or "riskrank")


@dataclass
class Resp:
    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""
    error: str | None = None

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None

    @property
    def code(self) -> str | None:
        j = self.json
        return j.get("error", {}).get("code") if isinstance(j, dict) and isinstance(j.get("error"), dict) else None

    @property
    def message(self) -> str:
        j = self.json
        return j.get("error", {}).get("message", "") if isinstance(j, dict) and isinstance(j.get("error"), dict) else ""

    def short(self) -> str:
        if self.status is None:
            return f"no response ({self.error})"
        s = f"{self.status}"
        if self.code:
            s += f" {self.code}"
        return s


class LiveServer:
    """``riskrank serve`` in a subprocess on a free loopback port."""

    def __init__(self, *, registry: str | None = None, mode: str = "dense+rule", env: dict[str, str] | None = None,
                 token: str | None = TOKEN, admin_token: str | None = None, extra: list[str] | None = None, cwd: str | None = None,
                 start_timeout: float = 300) -> None:
        self.env = dict(env or os.environ)
        self.env.setdefault("HF_HUB_OFFLINE", "1")
        self.env.pop("RISKRANK_ADMIN_TOKEN", None)
        if token:
            self.env["RISKRANK_TOKEN"] = token
        else:
            self.env.pop("RISKRANK_TOKEN", None)
        if admin_token:
            self.env["RISKRANK_ADMIN_TOKEN"] = admin_token
        self.token = token
        self.argv = [riskrank_script(), "serve", "--host", "127.0.0.1", "--port", "0", "--mode", mode, "--threads", "1",
                     "--encoder-backend", "torch", "--log-level", "warning", *(["--registry", registry] if registry else []), *(extra or [])]
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.log: list[str] = []
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.exit_code: int | None = None

    def __enter__(self) -> LiveServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> bool:
        """True once listening and ready; False when the process exited first (see .log)."""
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.env, cwd=self.cwd, text=True,
                                     errors="replace")
        ready = threading.Event()

        def pump() -> None:
            assert self.proc and self.proc.stderr
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        ready.wait(self.start_timeout)
        if self.port is None:
            try:
                self.exit_code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
                self.exit_code = self.proc.returncode
            return False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.request("GET", "/readyz").status == 200:
                return True
            time.sleep(0.2)
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.exit_code = self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def request(self, method: str, path: str, body: Any = None, *, token: str | bool | None = True, headers: dict[str, str] | None = None,
                timeout: float = 60) -> Resp:
        """``token=True``: the server's bearer token; a string: that token; None/False: none."""
        hdrs = dict(headers or {})
        tok = self.token if token is True else (token or None)
        if tok:
            hdrs.setdefault("Authorization", f"Bearer {tok}")
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            r = conn.getresponse()
            raw = r.read() if method != "HEAD" else b""
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, raw)
        except (OSError, http.client.HTTPException) as exc:
            return Resp(None, error=f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()


# -- the probes ---------------------------------------------------------------------------------
@dataclass
class Probe:
    item: str
    case: str
    expected: str
    observed: str
    verdict: str  # ok | FAIL | info


class Probes:
    def __init__(self) -> None:
        self.rows: list[Probe] = []

    def add(self, item: str, case: str, expected: str, observed: str, ok: bool | None) -> None:
        self.rows.append(Probe(item, case, expected, observed, "info" if ok is None else ("ok" if ok else "FAIL")))
        print(f"  [{self.rows[-1].verdict:4s}] {item} {case}: {observed}", flush=True)


def write_registries(d: Path) -> dict[str, Path]:
    d.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(name: str, content: str | bytes) -> None:
        p = d / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        files[name] = p

    put("all_l1.json", json.dumps([{"name": n, "description": desc, "risk_level": 1} for n, desc in [
        ("delete_everything", "Deletes every file in the user's home directory, recursively, without confirmation."),
        ("wire_money", "Transfers money from the user's bank account to any account."),
        ("read_file", "Reads a text file."), ("list_directory", "Lists a directory.")]]))
    put("nan_params.json", '[{"name": "nan_tool", "description": "Reads a number.", "parameters": {"type": "object", '
        '"properties": {"x": {"type": "number", "default": NaN}}}}, {"name": "read_file", "description": "Reads a text file."}]')
    put("surrogate.json", '[{"name": "bad\\ud800name", "description": "Reads a file."}, {"name": "read_file", "description": "Reads a text file."}]')
    put("surrogate_desc.json", '[{"name": "bad_desc", "description": "Reads \\udc00 a file."}]')
    # secrets in shapes a config file might have; the probe asks whether the error echoes them
    put("secret_name.json", json.dumps([{"name": SECRET, "password": "x"}]))
    put("secret_risk.json", json.dumps([{"name": "db", "description": "prod", "risk_level": SECRET}]))
    put("secret_labels.json", json.dumps({"prod": {"password": SECRET}}))
    put("secret_param.json", json.dumps([{"name": "db", "description": "prod", "parameters": SECRET}]))
    put("secret_annotation.json", json.dumps({"tools": [{"name": "db", "description": "d", "inputSchema": {}, "annotations": {"readOnlyHint": SECRET}}]}))
    put("secret_env.txt", f"DB_PASSWORD={SECRET}\n")
    put("secret_jsonl.jsonl", json.dumps({"name": "a", "description": "b"}) + "\n" + json.dumps({"token": SECRET}) + "\n")
    put("big_whitespace.json", b" " * (20 * 1024 * 1024) + b"[]")
    return files


def run_probes(args: argparse.Namespace) -> Probes:
    pr = Probes()
    tmp = Path(tempfile.mkdtemp(prefix="riskrank-probes-"))
    env = dict(os.environ)
    env["RISKRANK_CACHE"] = args.cache or str(tmp / "cache")
    env.setdefault("OMP_NUM_THREADS", "1")
    files = write_registries(tmp / "reg")

    print("server A: bearer token, no admin token, demo registry, dense+rule", flush=True)
    srv = LiveServer(env=env)
    if not srv.start():
        raise SystemExit("server A did not start:\n" + "\n".join(srv.log[-20:]))
    try:
        info = srv.request("GET", "/v1/info").json or {}
        demo = info.get("registry")
        reload = lambda body, **kw: srv.request("POST", "/v1/admin/reload", {"wait": True, **body}, **kw)  # noqa: E731

        # ---- item 2: admin separation ----------------------------------------------------------
        r = reload({"registry": str(files["all_l1.json"]), "mode": "dense"})
        after = srv.request("GET", "/v1/info").json or {}
        pr.add("2", "bearer token POSTs /v1/admin/reload (no admin token configured)",
               "401/403/404: admin endpoints exist only with an admin token",
               f"{r.short()}; /v1/info now registry={Path(after.get('registry') or '?').name}, mode={after.get('mode')}",
               r.status in (401, 403, 404))
        if r.status == 200:
            res = srv.request("POST", "/v1/retrieve", {"task": "delete all files in my home folder", "k": 3}).json or {}
            pr.add("2", "...then every client gets the swapped catalogue", "(consequence)",
                   "top-3 for 'delete all files': " + ", ".join(f"{t['name']} L{t['risk_level']}" for t in res.get("tools", [])), None)
        reload({"registry": demo, "mode": "dense+rule"})
        r = srv.request("GET", "/v1/admin/reload")
        pr.add("2", "bearer token GETs /v1/admin/reload (status, with paths)", "401/403/404", r.short() + (f" state={(r.json or {}).get('state')}" if r.status == 200 else ""),
               r.status in (401, 403, 404))
        r = srv.request("POST", "/v1/admin/reload", {"wait": True}, token=False)
        pr.add("2", "no token POSTs /v1/admin/reload", "401", r.short(), r.status == 401)

        # ---- item 8: protocol details ---------------------------------------------------------------
        for method, path in (("DELETE", "/v1/retrieve"), ("GET", "/v1/retrieve"), ("PUT", "/healthz"), ("POST", "/healthz"), ("DELETE", "/v1/tools/read_file")):
            r = srv.request(method, path, b"{}" if method in ("PUT", "POST") else None)
            pr.add("8", f"{method} {path}", "405 with an Allow header", f"{r.short()}, Allow: {r.headers.get('allow')!r}",
                   r.status == 405 and bool(r.headers.get("allow")))
        for path in ("/healthz", "/readyz", "/v1/info", "/v1/tools/read_file", "/openapi.json"):
            r = srv.request("HEAD", path)
            pr.add("8", f"HEAD {path}", "200 (HEAD is GET without a body)", r.short(), r.status == 200)
        base = {"task": "list the files in my downloads folder"}
        r = srv.request("POST", "/v1/retrieve", {**base, "k": 74.0})
        pr.add("8", "k: 74.0", "200 with 74 tools (an integral JSON number is an integer)",
               r.short() + (f", {len((r.json or {}).get('tools', []))} tools" if r.status == 200 else f": {r.message[:80]!r}"), r.status == 200)
        r = srv.request("POST", "/v1/retrieve", {**base, "k": 5.5})
        pr.add("8", "k: 5.5 (control)", "422 k_out_of_range or invalid_request", r.short(), r.status == 422)
        r = srv.request("POST", "/v1/retrieve", b'{"task": "list \xff\xfe files"}')
        pr.add("8", "invalid UTF-8 in the body", "400 malformed_json", r.short() + f": {r.message[:80]!r}", r.status == 400 and r.code == "malformed_json")
        r = srv.request("POST", "/v1/retrieve", b"[" * 20000 + b"]" * 20000)
        pr.add("8", "20,000-deep JSON array body", "400 malformed_json", r.short() + f": {r.message[:80]!r}", r.status == 400 and r.code == "malformed_json")
        r = srv.request("POST", "/v1/retrieve", b'{"task": "x", "k": ' + b"1" * 5000 + b"}")
        pr.add("8", "5,000-digit number for k", "400 malformed_json (or 422 k_out_of_range)", r.short() + f": {r.message[:80]!r}",
               (r.status, r.code) in ((400, "malformed_json"), (422, "k_out_of_range")))
        r = srv.request("POST", "/v1/retrieve", b'{"task": "x", "lambda": ' + b"1" * 5000 + b"}")
        pr.add("8", "5,000-digit number for lambda", "400 malformed_json (or 422 lambda_out_of_range)", r.short() + f": {r.message[:80]!r}",
               (r.status, r.code) in ((400, "malformed_json"), (422, "lambda_out_of_range")))
        r = srv.request("POST", "/v1/retrieve", b'{"task": "x", "lambda": NaN}')
        pr.add("8", "lambda: NaN (a non-JSON token)", "400 malformed_json or 422 lambda_out_of_range", r.short(), r.status in (400, 422))
        r = srv.request("POST", "/v1/retrieve", b'{"task": "x", "lambda": 1e400}')
        pr.add("8", "lambda: 1e400", "422 lambda_out_of_range", r.short(), (r.status, r.code) == (422, "lambda_out_of_range"))
        r = srv.request("POST", "/v1/retrieve", b'{"task": "delete \\ud800 my files"}')
        pr.add("8", "a lone surrogate in the task", "422 (or 200); never 500", r.short() + f": {r.message[:80]!r}", r.status in (200, 422))
        r = srv.request("POST", "/v1/retrieve", b'{"task": "read a file", "task": "delete every file"}')
        pr.add("8", "duplicate key in the request body (task twice)", "400/422 (ambiguous request) [recommendation]",
               r.short() + (f", answered for task {(r.json or {}).get('task')!r}" if r.status == 200 else ""), r.status in (400, 422))
        r = srv.request("POST", "/v1/retrieve", b'\xef\xbb\xbf{"task": "read a file"}')
        pr.add("8", "UTF-8 BOM before the JSON body", "200 or 400 malformed_json (not 500)", r.short(), r.status in (200, 400))
        r = srv.request("GET", "/v1/tools/does_not_exist")
        r2 = srv.request("GET", "/v1/tools/does_not_exist", token="wrong-token-0123456789")
        r3 = srv.request("GET", "/v1/nope", token="wrong-token-0123456789")
        pr.add("auth", "wrong token on an existing tool vs a missing path (control)", "401 for both", f"{r2.short()} / {r3.short()} (with the token: {r.short()})",
               r2.status == 401 and r3.status == 401)

    finally:
        srv.stop()

    # ---- items 3 and 5: the reload path, on a server with an admin token and an allow-list ----------
    print(f"server R: a distinct admin token, --reload-dir {tmp / 'reg'}, --max-registry-bytes {args.registry_cap}", flush=True)
    srv = LiveServer(env=env, admin_token=ADMIN_TOKEN, extra=["--reload-dir", str(tmp / "reg"), "--max-registry-bytes", str(args.registry_cap)])
    if not srv.start():
        raise SystemExit("server R did not start:\n" + "\n".join(srv.log[-20:]))
    try:
        demo = (srv.request("GET", "/v1/info").json or {}).get("registry")
        reload = lambda body, **kw: srv.request("POST", "/v1/admin/reload", {"wait": True, **body}, token=ADMIN_TOKEN, **kw)  # noqa: E731
        admin_get = lambda path: srv.request("GET", path, token=ADMIN_TOKEN)  # noqa: E731
        # ---- item 3: the reload path -------------------------------------------------------------
        def leak(r: Resp) -> bool:
            return SECRET in r.raw.decode("utf-8", "replace")

        for name in ("secret_name.json", "secret_risk.json", "secret_labels.json", "secret_param.json", "secret_annotation.json",
                     "secret_env.txt", "secret_jsonl.jsonl"):
            r = reload({"registry": str(files[name])})
            st = admin_get("/v1/admin/reload")
            echoed = leak(r) or leak(st)
            pr.add("3", f"reload a secrets file ({name}) - content echoed?", "422 naming the problem, never the file's content",
                   f"{r.short()}; secret {'ECHOED' if echoed else 'not echoed'}: {r.message[:150]!r}", r.status == 422 and not echoed)
        r = reload({"registry": "/proc/self/environ"})
        tok_leak = TOKEN in r.raw.decode("utf-8", "replace")
        pr.add("3", "reload /proc/self/environ (holds the bearer token)", "422 not a regular file / not allowed; token never echoed",
               f"{r.short()}; token {'ECHOED' if tok_leak else 'not echoed'}: {r.message[:120]!r}",
               r.status == 422 and not tok_leak and ("regular" in r.message or "not allowed" in r.message))
        # existence oracle: missing vs existing-but-not-a-registry vs directory vs unreadable
        unreadable = tmp / "unreadable.json"
        unreadable.write_text("[]")
        unreadable.chmod(0)
        probes = {"missing": "/nonexistent/dir/tools.json", "existing non-JSON": "/etc/hostname", "directory": "/etc",
                  "unreadable": str(unreadable), "relative ../": "../../../../etc/passwd"}
        msgs = {}
        for label, p in probes.items():
            r = reload({"registry": p})
            msgs[label] = r.message.replace(p, "<path>")
            pr.add("3", f"reload {label} path ({p})", "the same 422 message for every path outside the allow-list", f"{r.short()}: {r.message[:110]!r}", None)
        distinct = len(set(msgs.values()))
        pr.add("3", "path existence oracle: distinct messages over the 5 paths above", "1 (no way to tell which paths exist)",
               f"{distinct} distinct messages", distinct == 1)
        if os.geteuid() == 0:
            pr.add("3", "note: the server runs as root here, so 'unreadable' (mode 000) is readable", "-", "uid 0", None)
        rss0 = srv.rss_mb()
        t0 = time.perf_counter()
        r = reload({"registry": str(files["big_whitespace.json"])})
        pr.add("3", f"reload a 20 MiB file (whitespace + []) over a cap of {args.registry_cap:,} bytes", "422 over the size cap, without reading it",
               f"{r.short()} after {time.perf_counter() - t0:.1f}s, RSS {rss0:.0f} -> {srv.rss_mb():.0f} MB: {r.message[:80]!r}",
               r.status == 422 and ("size" in r.message or "large" in r.message or "bytes" in r.message))

        # ---- item 5 over HTTP: registries the loader accepts or mishandles -----------------------
        r = reload({"registry": str(files["nan_params.json"])})
        t = srv.request("GET", "/v1/tools/nan_tool")
        pr.add("5", "reload a registry with NaN inside a tool's parameters, then GET /v1/tools/nan_tool",
               "reload 422 (non-finite number rejected at load)", f"reload {r.short()}; GET tool {t.short()}", r.status == 422)
        r = reload({"registry": str(files["surrogate.json"])})
        pr.add("5", "reload a registry with a lone surrogate in a name", "422 invalid_registry", r.short() + f": {r.message[:100]!r}", r.status == 422)
        r = reload({"registry": str(files["surrogate_desc.json"])})
        pr.add("5", "reload a registry with a lone surrogate in a description", "422 invalid_registry", r.short() + f": {r.message[:100]!r}", r.status == 422)
        reload({"registry": demo, "mode": "dense+rule"})

        # ---- item 3, the wedging case, last: a FIFO (inside the allowed directory) -------------------
        fifo = tmp / "reg" / "tools.fifo"
        os.mkfifo(fifo)
        r = srv.request("POST", "/v1/admin/reload", {"registry": str(fifo), "wait": False}, token=ADMIN_TOKEN)
        time.sleep(2.0)
        st = admin_get("/v1/admin/reload").json or {}
        r2 = reload({"registry": demo})
        pr.add("3", "reload a FIFO (nobody writes to it)", "422 not a regular file, at once; later reloads unaffected",
               f"{r.short()}; 2 s later state={st.get('state')!r}; the next reload: {r2.short()}",
               r.status == 422 or (st.get("state") != "loading" and r2.status == 200))
        # unblock the reader: open for writing and close (the server reads EOF)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
            time.sleep(1.0)
            st = admin_get("/v1/admin/reload").json or {}
            pr.add("3", "...after a writer opens and closes the FIFO", "(recovery)", f"state={st.get('state')!r}: {str(st.get('error', {}).get('message', ''))[:80]!r}", None)
        except OSError as exc:
            pr.add("3", "...unblocking the FIFO", "(recovery)", f"could not open for writing: {exc}", None)
    finally:
        srv.stop()

    # ---- item 2: admin token equal to the bearer token ----------------------------------------
    print("server B: admin token == bearer token", flush=True)
    b = LiveServer(env=env, admin_token=TOKEN)
    started = b.start()
    b.stop()
    last = next((line for line in reversed(b.log) if line.strip()), "")
    pr.add("2", "start with RISKRANK_ADMIN_TOKEN equal to RISKRANK_TOKEN", "refuses to start: exit 2, one error line",
           "started and served" if started else f"exit {b.exit_code}: {last[:120]!r}", not started and b.exit_code == 2)

    print("server C: distinct admin token", flush=True)
    c = LiveServer(env=env, admin_token=ADMIN_TOKEN)
    if not c.start():
        pr.add("2", "server C", "starts", "did not start: " + " | ".join(c.log[-3:]), False)
        return pr
    try:
        r = c.request("POST", "/v1/admin/reload", {"wait": True})
        pr.add("2", "distinct admin token: bearer token POSTs reload (control)", "401", r.short(), r.status == 401)
        r = c.request("POST", "/v1/admin/reload", {"wait": True}, token=ADMIN_TOKEN)
        pr.add("2", "distinct admin token: admin token POSTs reload (control)", "200", r.short(), r.status == 200)
        r = c.request("POST", "/v1/retrieve", {"task": "read a file"}, token=ADMIN_TOKEN)
        pr.add("2", "admin token on /v1/retrieve", "401 (each token opens only its own endpoints) [recommendation]", r.short(), r.status == 401)
        if not args.skip_dev_zero:
            # ---- item 3: /dev/zero, with the server's memory watched --------------------------------
            rss0 = c.rss_mb()
            result: dict[str, Resp] = {}

            def go() -> None:
                result["r"] = c.request("POST", "/v1/admin/reload", {"registry": "/dev/zero", "wait": True}, token=ADMIN_TOKEN, timeout=args.dev_zero_seconds + 5)

            th = threading.Thread(target=go, daemon=True)
            t0 = time.perf_counter()
            th.start()
            peak, killed = rss0, False
            while th.is_alive() and time.perf_counter() - t0 < args.dev_zero_seconds:
                peak = max(peak, c.rss_mb())
                if peak > args.rss_limit_mb:
                    c.kill()
                    killed = True
                    break
                time.sleep(0.1)
            dt = time.perf_counter() - t0
            th.join(timeout=10)
            r = result.get("r")
            if killed:
                obs = f"RSS {rss0:.0f} -> {peak:.0f} MB in {dt:.1f}s; the probe killed the server at the {args.rss_limit_mb} MB limit"
            elif r is not None:
                obs = f"{r.short()} after {dt:.1f}s, peak RSS {peak:.0f} MB: {r.message[:80]!r}"
            else:
                obs = f"no answer in {dt:.1f}s, peak RSS {peak:.0f} MB"
            pr.add("3", "reload /dev/zero", "422 not a regular file, at once, memory flat", obs,
                   (not killed) and r is not None and r.status == 422 and peak - rss0 < 100)
    finally:
        c.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return pr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--cache", default=None, help="RISKRANK_CACHE for the servers [default: a fresh temporary one].")
    ap.add_argument("--skip-dev-zero", action="store_true")
    ap.add_argument("--dev-zero-seconds", type=float, default=8.0)
    ap.add_argument("--rss-limit-mb", type=int, default=1500)
    ap.add_argument("--registry-cap", type=int, default=10 * 1024 * 1024,
                    help="--max-registry-bytes of the reload server (below the 20 MiB probe file) [default: 10 MiB].")
    args = ap.parse_args()
    pr = run_probes(args)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _verdicts import report

    report(pr.rows, "item", (4, 64, 58), "probes", args.json_out)


if __name__ == "__main__":
    main()
