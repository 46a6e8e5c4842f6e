"""One result, one shape: the same task over the same registry answered by the library, the
HTTP API and the MCP server's find_tools gives the same tools with the same field names and
values (the surfaces add fields; none renames or recomputes one)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from riskrank.catalogue import ArtefactSpec, LiveCatalogue
from riskrank.encoder import make_encoder
from riskrank.registry import ToolRegistry
from riskrank.serving.gateway.core import Gateway, build_view
from riskrank.serving.gateway.policy import Policy
from riskrank.serving.http import create_app
from test_server_support import TOKEN, ServerThread

TASK = "read the settings file and list what is in the folder"
REGISTRY = Path(__file__).resolve().parent.parent / "examples/registries/mcp_filesystem_tools_list.json"
SHARED = ("rank", "name", "score", "f_rel", "f_risk", "risk_level", "risk_provenance", "effective_level", "reasons")


def test_the_library_http_and_mcp_answer_alike(encoder, capsys):
    """Over the filesystem server's real tools/list, the default mode on the base model."""
    path = str(REGISTRY)
    enc = make_encoder(encoder)
    spec = ArtefactSpec(path)
    live = LiveCatalogue.from_spec(spec, enc)
    library = live.active.retriever.retrieve(TASK, k=5).to_dict()
    with ServerThread(create_app(live, token=TOKEN)) as srv:
        http = httpx.post(srv.url + "/v1/retrieve", json={"task": TASK, "k": 5},
                          headers={"Authorization": f"Bearer {TOKEN}"}).json()
    view = build_view(ToolRegistry.load(path), spec, enc, Policy(max_level=5, confirm_level=5), 1)
    mcp = Gateway(view, policy=Policy(max_level=5, confirm_level=5), forward=False).find({"task": TASK, "k": 5})
    rows = {name: [{k: t[k] for k in SHARED} for t in doc["tools"]] for name, doc in
            (("library", library), ("http", http), ("mcp", mcp))}
    assert rows["library"] and rows["library"] == rows["http"] == rows["mcp"], json.dumps(rows, indent=1)
    for key in ("withheld", "mode"):
        assert key in library and key in http and key in mcp, key
    with capsys.disabled():
        print(f"\nfind_tools({TASK!r}, k=5), mode {library['mode']}:")
        for name, doc in (("library", library), ("http", http), ("mcp", mcp)):
            print(f"{name:<8} " + " | ".join(f"{t['name']} L{t['risk_level']} {t['score']:.3f}" for t in doc["tools"]))
