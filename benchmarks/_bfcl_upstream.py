"""An MCP server (stdio) for benchmarks/session_replay.py: the tools of BFCL's multi-turn
environments (file system, math, messages, posts, tickets, trading, travel, vehicle), listed
from BFCL's own definitions and answered by BFCL's own simulators, on the MCP SDK's low-level
server through riskrank's compat layer.

- ``$BFCL_ROOT``: the ``berkeley-function-call-leaderboard`` folder of the data directory
  (its ``bfcl_eval`` package holds the definitions and the simulators);
- ``$BFCL_CONTROL``: a JSON file the replay writes before each run: ``{"run", "initial_config",
  "inject"}``. A new ``run`` starts every environment afresh from ``initial_config`` (BFCL's
  ``_load_scenario``); ``inject`` (``{"tool", "arguments", "text"}``) appends ``text`` to the
  answer of the first call of that tool with exactly those arguments (the attacker's planted
  instruction);
- ``$BFCL_RAN``: every call that runs is appended there first (``run``, tool, arguments): what
  really ran, whatever a gateway in front says.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from riskrank.serving import mcp_compat

#: BFCL's class of each environment -> its simulator module and its definitions file.
ENVIRONMENTS = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system"),
    "MathAPI": ("math_api", "math_api"),
    "MessageAPI": ("message_api", "message_api"),
    "TwitterAPI": ("posting_api", "posting_api"),
    "TicketAPI": ("ticket_api", "ticket_api"),
    "TradingBot": ("trading_bot", "trading_bot"),
    "TravelAPI": ("travel_booking", "travel_booking"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control"),
}
#: BFCL's parameter types -> JSON Schema's (``any``: no type).
TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
SIMULATORS = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."


def json_schema(spec: Any) -> Any:
    """A BFCL parameter spec as JSON Schema (its type names mapped, the rest kept)."""
    if isinstance(spec, list):
        return [json_schema(x) for x in spec]
    if not isinstance(spec, dict):
        return spec
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "type" and isinstance(value, str):
            if TYPES.get(value, value) is not None:
                out[key] = TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema(v) for name, v in value.items()}
        else:
            out[key] = json_schema(value)
    return out


def definitions(root: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every environment's tools as ``tools/list`` records, and each tool's class."""
    records, owner = [], {}
    for cls, (_, doc) in ENVIRONMENTS.items():
        for line in (root / "bfcl_eval/data/multi_turn_func_doc" / f"{doc}.json").read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                records.append({"name": d["name"], "description": d["description"], "inputSchema": json_schema(d["parameters"])})
                owner[d["name"]] = cls
    return records, owner


def simulator(cls: str) -> Any:
    return getattr(importlib.import_module(SIMULATORS + ENVIRONMENTS[cls][0]), cls)


class World:
    """The environments of the current run, made on first use from the control file's config."""

    def __init__(self, control: Path, ran: Path, owner: dict[str, str]) -> None:
        self.control, self.ran, self.owner = control, ran, owner
        self.key: str | None = None
        self.run = ""
        self.config: dict[str, Any] = {}
        self.inject: dict[str, Any] | None = None
        self.instances: dict[str, Any] = {}

    def refresh(self) -> None:
        text = self.control.read_text(encoding="utf-8") if self.control.exists() else "{}"
        if text == self.key:
            return
        data = json.loads(text)
        self.key, self.run = text, str(data.get("run", ""))
        self.config, self.inject, self.instances = data.get("initial_config") or {}, data.get("inject"), {}

    def instance(self, cls: str) -> Any:
        if cls not in self.instances:
            inst = simulator(cls)()
            if hasattr(inst, "_load_scenario"):  # an environment the task does not involve starts at its defaults
                inst._load_scenario(copy.deepcopy(self.config.get(cls, {})))
            self.instances[cls] = inst
        return self.instances[cls]

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        self.refresh()
        with self.ran.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"run": self.run, "tool": name, "arguments": arguments}) + "\n")
        try:
            out = getattr(self.instance(self.owner[name]), name)(**copy.deepcopy(arguments))
            text, error = json.dumps(out, default=str), False
        except Exception as exc:  # the simulator's own failure is the tool's error answer
            text, error = f"{type(exc).__name__}: {exc}", True
        inject = self.inject
        if inject and inject.get("tool") == name and inject.get("arguments") == arguments and not inject.get("done"):
            inject["done"] = True
            text += inject["text"]
        return text, error


def main() -> None:
    root = Path(os.environ["BFCL_ROOT"])
    sys.path.insert(0, str(root))
    records, owner = definitions(root)
    world = World(Path(os.environ["BFCL_CONTROL"]), Path(os.environ["BFCL_RAN"]), owner)

    async def list_tools() -> list[dict[str, Any]]:
        return records

    async def call_tool(name: str, arguments: dict[str, Any], call: mcp_compat.CallCtx) -> Any:
        if name not in owner:
            return mcp_compat.tool_result(f"no tool {name!r}", is_error=True)
        text, error = world.call(name, arguments)
        return mcp_compat.tool_result(text, is_error=error)

    server = mcp_compat.build_server("bfcl", "1.0", None, mcp_compat.Handlers(list_tools, call_tool))
    anyio.run(mcp_compat.serve_stdio, server)


if __name__ == "__main__":
    main()
