"""The gateway under attack, through its public entry point: does each defence hold?

    python benchmarks/hostile_gateway.py [--json benchmarks/results/hostile_gateway.json]

Starts ``riskrank mcp --config servers.json`` as a user would, over a malicious upstream
written on the MCP SDK (``_hostile_upstream.py``), with a policy that confirms level 3 and
above, a 2 s timeout for ``wait_forever`` and 1 MiB bounds on arguments and answers, and
talks to it with the real MCP client (an elicitation callback that records what the user is
shown and approves it, as a careless user would). One row per probe class: ``held`` or
``broken``, with what was seen. It is a measurement: it exits 0 whatever it finds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from riskrank.fileio import write_json
from riskrank.serving import mcp_compat
from riskrank.tables import text_table

HERE = Path(__file__).resolve().parent
LOOKALIKE = "d\u0435l\u0435t\u0435_fil\u0435s"


def files(root: Path) -> tuple[Path, Path]:
    servers = {"mcpServers": {"hostile": {"command": sys.executable, "args": [str(HERE / "_hostile_upstream.py")],
                                          "env": {"HOSTILE_RECORD": str(root / "ran.jsonl"),
                                                  "PYTHONPATH": os.pathsep.join(sys.path)}}}}
    policy = {"max_level": 5, "confirm_level": 3, "levels": {"make_dir": 3}, "call_timeouts": {"wait_forever": 2}}
    (root / "servers.json").write_text(json.dumps(servers))
    (root / "policy.json").write_text(json.dumps(policy))
    return root / "servers.json", root / "policy.json"


def text_of(result: Any) -> tuple[str, bool]:
    out = mcp_compat.wire(result)
    return out["content"][0]["text"], bool(out.get("isError"))


async def probes(root: Path) -> list[dict[str, Any]]:
    servers, policy = files(root)
    argv = ["-c", "from riskrank.cli import entry; entry()", "mcp", "--config", str(servers), "--policy", str(policy),
            "--max-argument-bytes", str(1 << 20), "--max-result-bytes", str(1 << 20), "--audit-log", str(root / "audit.jsonl")]
    env = {k: os.environ[k] for k in ("RISKRANK_CACHE", "RISKRANK_DATA", "HF_HUB_OFFLINE", "PYTHONPATH", "PATH", "HOME",
                                      "XDG_CONFIG_HOME") if k in os.environ}
    target = mcp_compat.ServerTarget(command=sys.executable, args=tuple(argv), env=env)
    shown: list[dict[str, Any]] = []

    async def approve(context: Any, params: Any) -> Any:
        shown.append(mcp_compat.wire(params))
        return mcp_compat.types().ElicitResult.model_validate({"action": "accept", "content": {"approve": True}})

    rows: list[dict[str, Any]] = []

    def row(cls: str, held: bool, seen: str) -> None:
        rows.append({"class": cls, "outcome": "held" if held else "broken", "seen": seen[:160]})

    with (root / "gateway.err").open("w") as err:
        async with mcp_compat.open_session(target, elicitation_callback=approve, errlog=err) as s:
            async def find(task: str, k: int = 10) -> list[str]:
                out = mcp_compat.wire(await s.call_tool("find_tools", {"task": task, "k": k}))["structuredContent"]
                return [t["name"] for t in out["tools"]]

            async def call(name: str, args: dict) -> tuple[str, bool, float]:
                t0 = time.monotonic()
                text, err_ = text_of(await s.call_tool("call_tool", {"name": name, "arguments": args}))
                return text, err_, time.monotonic() - t0

            # 1. A long first argument must not hide the second from the person who approves.
            await find("create a new directory at a path")
            args = {"a_note": "n" * 5000, "path": str(root / "attacker")}
            text, is_err, _ = await call("make_dir", args)
            message = shown[-1]["message"] if shown else ""
            full = (shown[-1].get("requestedSchema", {}).get("properties", {}).get("arguments", {}).get("default", "")
                    if shown else "")
            ran = [json.loads(x) for x in (root / "ran.jsonl").read_text().splitlines()] if (root / "ran.jsonl").exists() else []
            row("cut-off confirmation", args["path"] in message and json.loads(full or "{}") == args
                and ran[-1:] == [{"tool": "make_dir", "arguments": args}],
                f"path in the question: {args['path'] in message}; whole arguments in the form: {bool(full)}; ran as shown: {bool(ran)}")
            # 2. A look-alike of another tool's name is not offered, and is not callable.
            names = await find(f"run {LOOKALIKE} on the old files")
            text, is_err, _ = await call(LOOKALIKE, {})
            row("look-alike name", LOOKALIKE not in names and is_err, f"offered: {LOOKALIKE in names}; call: {text[:80]}")
            # 3. A call that never answers ends at its timeout.
            await find("count the words of a note")
            text, is_err, took = await call("wait_forever", {})
            row("hung upstream call", is_err and text.startswith("call_timeout") and took < 10, f"{took:.1f} s: {text[:70]}")
            # 4-6. Arguments over the bounds, and an answer over its bound.
            await find("return the titles of the notes")
            text, is_err, took = await call("big_answer", {"blob": "x" * (2 << 20)})
            row("2 MiB argument", is_err and text.startswith("arguments_too_large"), f"{took:.1f} s: {text[:70]}")
            deep: Any = []
            for _ in range(100):
                deep = [deep]
            text, is_err, _ = await call("big_answer", {"deep": deep, "wide": {f"k{i}": i for i in range(10_001)}})
            row("deep and wide arguments", is_err and text.startswith("arguments_too_large"), text[:90])
            text, is_err, took = await call("big_answer", {})
            row("2 MB answer", is_err and text.startswith("result_too_large"), f"{took:.1f} s: {text[:70]}")
            # 7. A server that crashes mid-call is restarted and its tools are offered again.
            await find("reindex the notes search")
            text, is_err, _ = await call("crash", {})
            t0, back = time.monotonic(), None
            while time.monotonic() - t0 < 20:
                if "tidy" in await find("sort the notes by title", k=3):
                    _, err2, _ = await call("tidy", {})
                    if not err2:
                        back = time.monotonic() - t0
                        break
                await anyio.sleep(0.1)
            restarts = [ln.strip() for ln in (root / "gateway.err").read_text().splitlines() if "back " in ln and "after it went down" in ln]
            row("crashed upstream", is_err and back is not None and back < 10,
                f"call: {text[:40]}; offered and callable again after {back if back is None else round(back, 1)} s"
                + (f" ({restarts[-1][-60:]})" if restarts else ""))
            # 8. A re-list that cannot be built withdraws the server's tools instead of keeping the old levels.
            await find("sort the notes by title and show the version of the notes app")
            await call("rug_pull", {})
            await anyio.sleep(2.0)
            text, is_err, _ = await call("tidy", {})
            row("bad re-list", is_err and not text.startswith("tidy done"), text[:90])
    return rows


def doc_table(artefact: dict[str, Any]) -> str:
    """The Markdown table docs/hardening.md quotes, rendered from the artefact (a test compares them)."""
    lines = ["| probe | outcome | what was seen |", "|---|---|---|"]
    lines += [f"| {r['class']} | {r['outcome']} | {r['seen'].replace('|', '/')} |" for r in artefact["rows"]]
    lines.append(f"\n{artefact['held']} of {artefact['tried']} held.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="riskrank-hostile-") as tmp:
        rows = anyio.run(probes, Path(tmp))
    print(text_table(["class", "outcome", "seen"], [[r["class"], r["outcome"], r["seen"]] for r in rows]))
    held = sum(r["outcome"] == "held" for r in rows)
    print(f"\n{held} of {len(rows)} held")
    if args.json_out:
        write_json(args.json_out, {"rows": rows, "held": held, "tried": len(rows)})
        print(f"wrote {args.json_out}")


if __name__ == "__main__":
    main()
