"""Shared fixtures for the server, MCP and adapter tests (no tests here).

``HashEncoder`` is a deterministic bag-of-words encoder: it makes a retriever in
milliseconds, without loading a model, so the HTTP and MCP tests exercise the serving code
and not sentence-transformers. One slow test per front end runs the real default encoder.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from pathlib import Path

import numpy as np

from riskrank.datasets.demo import demo_registry_path

TOKEN = "test-token-0123456789abcdef"
ADMIN_TOKEN = "admin-token-0123456789abcdef"


class HashEncoder:
    """Signed feature hashing of words and word pairs, L2-normalised: lexical overlap as cosine.

    ``gate``: when set to a :class:`threading.Event`, every encode waits for it (a test holds
    requests in flight for as long as it needs, with no sleep racing a timeout); ``entered``
    counts the encodes that reached the gate."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.identity = self.display_name = f"hash-encoder-{dim}"
        self.gate: threading.Event | None = None
        self.entered = 0
        self.calls: list[int] = []

    def encode(self, texts, *, desc: str = "") -> np.ndarray:
        self.calls.append(len(texts))
        if self.gate is not None:
            self.entered += 1
            self.gate.wait()
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", text.lower())
            for w in words + [a + " " + b for a, b in itertools.pairwise(words)]:
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            out[i, 0] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def make_checkpoint(path: Path, registry_path: Path | str | None = None, encoder: HashEncoder | None = None,
                    lam: float = 0.2, need: bool = False) -> Path:
    """An untrained (randomly initialised, seeded) checkpoint for HashEncoder: the serving
    code needs valid heads, not good ones, and training would cost seconds. ``need``: with a
    need head (candidate-risk features, fixed weights) and context settings."""
    import torch

    from riskrank.checkpoint import save_checkpoint
    from riskrank.registry import ToolRegistry
    from riskrank.training import TrainConfig, TrainResult
    from riskrank.training.modules import DualHead

    encoder = encoder or HashEncoder()
    reg = ToolRegistry.load(registry_path or demo_registry_path())
    torch.manual_seed(0)
    model = DualHead(encoder.dim)
    result = TrainResult(model, TrainConfig(), lam, [], {}, {"train_queries": 0, "val_queries": 0}, 0.0)
    inference: dict = {"alpha": 0.1, "normalisation": "row"}
    if need:
        import numpy as np

        from riskrank.context import CONTEXT_PIPELINES, NeedHead

        result.need_head = NeedHead(("cand",), np.ones(5), -2.5, np.zeros(5), np.ones(5), {"val_auc": None})
        inference["context"] = {p: {"tau": 0.5, "margin": 1.0, "lam_need": 0.0} for p in CONTEXT_PIPELINES}
    return save_checkpoint(
        result, path, encoder={"identity": encoder.identity, "name": encoder.display_name, "dim": encoder.dim},
        registry_fingerprint=reg.fingerprint(), inference=inference,
    )


MCP_TOOLS = {
    "tools": [
        {"name": "read_notes", "description": "Return the text of a saved note.",
         "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
         "annotations": {"readOnlyHint": True}},
        {"name": "purge_notes", "description": "Permanently remove every note in a notebook.",
         "inputSchema": {"type": "object", "properties": {"notebook": {"type": "string"}}},
         "annotations": {"destructiveHint": True}},
        {"name": "tidy_notes", "description": "Tidy up the notebook layout.",
         "inputSchema": {"type": "object", "properties": {}},
         "annotations": {"destructiveHint": True, "readOnlyHint": False}},
        {"name": "search_web", "description": "Search the web for pages about a topic.",
         "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
         "annotations": {"readOnlyHint": True, "openWorldHint": True}},
        {"name": "count_words", "description": "Count the words in a piece of text.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    ]
}


def write_mcp_registry(path: Path) -> Path:
    path.write_text(json.dumps(MCP_TOOLS), encoding="utf-8")
    return path


class ServerThread:
    """uvicorn serving ``app`` on a loopback port chosen by the OS, in a thread of the test
    process (real sockets, real HTTP)."""

    def __init__(self, app, lifespan: str = "off") -> None:
        from riskrank.serving.listen import bind_socket, uvicorn_server

        self.sock = bind_socket("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn_server(app, self.sock, "warning", lifespan=lifespan)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()


# -- subprocess entry points (run with `python -c`, see cli_argv) ---------------------------------
def run_fake_upstream(page_size: int = 2) -> None:
    """A small MCP server over stdio with annotated tools, listed in pages of ``page_size``
    (so the proxy's pagination is exercised); calling a tool echoes its name and arguments.
    Written against the SDK's low-level server of either major (mcp 1.x or 2.x)."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from riskrank.serving.mcp_compat import sdk_major

    tools = [types.Tool.model_validate(t) for t in MCP_TOOLS["tools"]]

    def page(cursor: str | None) -> types.ListToolsResult:
        start = int(cursor) if cursor else 0
        nxt = start + page_size
        return types.ListToolsResult(tools=tools[start:nxt], nextCursor=str(nxt) if nxt < len(tools) else None)

    def echo(name: str, arguments: dict | None) -> types.CallToolResult:
        text = json.dumps({"called": name, "arguments": arguments or {}})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    if sdk_major() >= 2:
        async def list_tools(ctx, params):
            return page(params.cursor if params is not None else None)

        async def call_tool(ctx, params):
            return echo(params.name, params.arguments)

        server = Server("fake-upstream", on_list_tools=list_tools, on_call_tool=call_tool)
    else:
        server = Server("fake-upstream")

        async def list_tools_v1(req):
            return page(req.params.cursor if req.params is not None else None)

        async def call_tool_v1(name, arguments):
            return echo(name, arguments)

        # The SDK passes the request only to a handler whose resolved type hint names it (this
        # module's annotations are strings, so the hint is set as an object).
        list_tools_v1.__annotations__ = {"req": types.ListToolsRequest, "return": types.ListToolsResult}
        server.list_tools()(list_tools_v1)
        server.call_tool(validate_input=False)(call_tool_v1)

    async def main() -> None:
        async with stdio_server() as (r, w):
            await server.run(r, w, server.create_initialization_options())

    anyio.run(main)


def run_cli_with_hash_encoder(argv: list[str]) -> None:
    """`riskrank ARGV` with the encoder replaced by HashEncoder (no model load), under the
    CLI's error policy (one ``error:`` line and exit 2 for a user mistake)."""
    import sys

    import riskrank.encoder
    from riskrank.cli import run

    def make(encoder=None, device="cpu", threads=None, backend="torch", query_weights="float32"):
        return riskrank.encoder.BatchingEncoder(HashEncoder())

    riskrank.encoder.make_encoder = make
    sys.argv = ["riskrank", *argv]
    sys.exit(run())


def python_c(call: str) -> list[str]:
    """argv running ``call`` (a Python expression using this module) in a fresh interpreter."""
    import sys

    tests = str(Path(__file__).parent)
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {tests!r}); import test_server_support as s; {call}"]


# -- the real npm MCP servers -----------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
NPM_SERVERS = ("mcp-server-filesystem", "mcp-server-memory", "mcp-server-everything")


def npm_bin() -> Path | None:
    """The bin directory of the reference npm MCP servers (.ci/npm): $RISKRANK_TEST_MCP_BIN, else
    the CI cache (``$RISKRANK_CI_CACHE``, default ~/.cache/riskrank-ci), installed there on
    first use when npm is available (a few seconds). None only where node or npm is absent."""
    import os
    import shutil
    import subprocess

    given = os.environ.get("RISKRANK_TEST_MCP_BIN")
    if given:
        return Path(given)
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    cache = Path(os.environ.get("RISKRANK_CI_CACHE") or Path.home() / ".cache" / "riskrank-ci") / "npm"
    out = subprocess.run(["bash", str(ROOT / ".ci" / "npm" / "install.sh"), str(cache)], capture_output=True, text=True,
                         timeout=360)
    if out.returncode != 0:
        raise RuntimeError(f".ci/npm/install.sh failed: {out.stderr.strip()[-500:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def need_npm_bin() -> Path:
    """:func:`npm_bin`, or a skip that says why where node or npm is absent; a failure instead
    where the run requires them (``RISKRANK_REQUIRE_NPM``, which CI sets), so a CI machine
    without node cannot pass the gateway's tests by skipping them."""
    import os

    import pytest

    found = npm_bin()
    if found is not None:
        return found
    why = "node and npm are needed for the reference MCP servers (.ci/npm/install.sh installs them)"
    if os.environ.get("RISKRANK_REQUIRE_NPM"):
        pytest.fail(f"{why}; RISKRANK_REQUIRE_NPM is set, so this run may not skip them")
    pytest.skip(why)


def processes_matching(argv: list[str]) -> set[int]:
    """Pids of live processes whose command line is exactly ``argv`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if [c.decode(errors="replace") for c in cmd] == argv and state != "Z":
            found.add(int(entry.name))
    return found


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z":
                children.setdefault(int(stat[1]), []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out
