"""Registries: every accepted format, and a clear error (file, record, field) for every kind
of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from riskrank.errors import RegistryError, UnknownToolError
from riskrank.registry import DEFAULT_TOOL_TEMPLATE, Tool, ToolRegistry, detect_format


def write(tmp_path: Path, name: str, content) -> Path:
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return p


PLAIN = [
    {"name": "read_file", "description": "Read a text file.", "risk_level": 1,
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "delete_file", "description": "Delete a file permanently.", "risk_level": 4, "reason": "irreversible"},
    {"name": "get_weather", "description": "Current weather for a city."},
]


# -- formats ------------------------------------------------------------------------------
def test_plain_json_list(tmp_path):
    reg = ToolRegistry.load(write(tmp_path, "r.json", PLAIN))
    assert reg.names == ["read_file", "delete_file", "get_weather"]
    assert len(reg) == 3 and "delete_file" in reg and reg.index_of("get_weather") == 2
    assert reg["delete_file"].risk_level == 4 and reg["delete_file"].reason == "irreversible"
    assert reg["get_weather"].risk_level is None
    assert reg["read_file"].parameters["properties"]["path"]["type"] == "string"
    assert reg.risk_levels.tolist() == [1, 4, 0]
    assert reg.n_unlabelled == 1 and not reg.has_labels
    assert "file_write" in reg["delete_file"].permissions
    assert reg.permissions.shape == (3, 5) and reg.permissions.dtype == bool
    assert reg.perm_counts.tolist() == [int(reg.permissions[i].sum()) for i in range(3)]


def test_plain_tools_object_and_jsonl_agree(tmp_path):
    a = ToolRegistry.load(write(tmp_path, "a.json", {"tools": PLAIN}))
    b = ToolRegistry.load(write(tmp_path, "b.jsonl", "\n".join(json.dumps(r) for r in PLAIN) + "\n\n"))
    assert a.to_records() == b.to_records()
    assert a.fingerprint() == b.fingerprint()


def test_labels_map(tmp_path):
    data = {
        "file_write": {"risk_level": 3, "description": "Write content to a file.", "reason": "persistent write"},
        "weather_query": {"risk_level": 1, "description": "Query the weather."},
    }
    reg = ToolRegistry.load(write(tmp_path, "labels.json", data))
    assert detect_format(data, "x") == "labels"
    assert reg.names == ["file_write", "weather_query"]
    assert reg.risk_levels.tolist() == [3, 1] and reg.has_labels
    assert reg["file_write"].reason == "persistent write"


@pytest.mark.parametrize("shape", ["tools_api", "legacy"])
def test_openai_function_list(tmp_path, shape):
    fns = [
        {"name": "send_email", "description": "Send an email.", "parameters": {"type": "object", "properties": {}}},
        {"name": "getWeather", "description": "Weather for a city."},
    ]
    data = [{"type": "function", "function": f} for f in fns] if shape == "tools_api" else fns
    reg = ToolRegistry.load(write(tmp_path, "openai.json", data), fmt="openai")
    assert reg.names == ["send_email", "getWeather"]
    assert reg["send_email"].parameters == {"type": "object", "properties": {}}
    if shape == "tools_api":
        assert detect_format(data, "x") == "openai"
        assert ToolRegistry.load(tmp_path / "openai.json").names == reg.names  # auto-detected


MCP_TOOLS = [
    {"name": "list_files", "description": "List files in a folder.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
     "annotations": {"title": "List files", "readOnlyHint": True}},
    {"name": "rm_tree", "description": "", "inputSchema": {"type": "object"},
     "annotations": {"title": "Remove a directory tree", "destructiveHint": True}},
]


@pytest.mark.parametrize("wrapped", [False, True])
def test_mcp_tools_list(tmp_path, wrapped):
    data = {"tools": MCP_TOOLS}
    if wrapped:
        data = {"jsonrpc": "2.0", "id": 7, "result": data}
    reg = ToolRegistry.load(write(tmp_path, "mcp.json", data))
    assert detect_format(data, "x") == "mcp"
    assert reg.names == ["list_files", "rm_tree"]
    assert reg["list_files"].annotations["readOnlyHint"] is True
    assert reg["rm_tree"].annotations["destructiveHint"] is True
    # MCP makes description optional: the title stands in for an empty one.
    assert reg["rm_tree"].description == "Remove a directory tree"
    assert reg["list_files"].parameters["properties"]["path"]["type"] == "string"
    assert reg["list_files"].to_dict()["annotations"]["title"] == "List files"
    # the tool's own title (MCP's top-level one), with no annotations at all: read as the
    # adapters read the same record, not as the name's words
    alone = ToolRegistry.load(write(tmp_path, "titled.json", {"tools": [{"name": "fs_rm", "title": "Delete a file permanently",
                                                                         "inputSchema": {}}]}))
    assert alone["fs_rm"].description == "Delete a file permanently"
    from riskrank.adapters import tool_record

    assert tool_record({"name": "fs_rm", "title": "Delete a file permanently", "inputSchema": {}})["description"] == \
        alone["fs_rm"].description


def test_mcp_bad_annotation_type(tmp_path):
    bad = [dict(MCP_TOOLS[0], annotations={"readOnlyHint": "yes"})]
    with pytest.raises(RegistryError, match=r"record 0.*readOnlyHint"):
        ToolRegistry.load(write(tmp_path, "mcp.json", {"tools": bad}))


def test_sealtools_records(tmp_path):
    recs = [
        {"api_name": "queryFlights", "api_description": "Find flights between two cities.",
         "parameters": {"from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from"], "field": "travel"},
        {"api_name": "deleteAccount", "api_description": "Delete a user account."},
    ]
    p = write(tmp_path, "tool.jsonl", "\n".join(json.dumps(r) for r in recs))
    reg = ToolRegistry.load(p)
    assert reg.names == ["queryFlights", "deleteAccount"]
    schema = reg["queryFlights"].parameters
    assert schema["type"] == "object" and schema["required"] == ["from"] and set(schema["properties"]) == {"from", "to"}
    assert reg["queryFlights"].extra == {"field": "travel"}


def test_whitespace_in_description_is_normalised(tmp_path):
    reg = ToolRegistry.load(write(tmp_path, "r.json", [{"name": " a ", "description": "  two\n  lines  "}]))
    assert reg.names == ["a"] and reg["a"].description == "two lines"


def test_unknown_tool_and_format():
    reg = ToolRegistry.from_data(PLAIN)
    with pytest.raises(UnknownToolError, match="'nope'"):
        reg.index_of("nope")
    with pytest.raises(RegistryError, match="unknown registry format 'xml'"):
        ToolRegistry.from_data(PLAIN, fmt="xml")


def test_with_risk_levels_and_subset():
    reg = ToolRegistry.from_data(PLAIN)
    lab = reg.with_risk_levels({"get_weather": 1})
    assert lab.risk_levels.tolist() == [1, 4, 1] and lab.has_labels
    with pytest.raises(RegistryError, match="no risk level given for tool 'read_file'"):
        reg.with_risk_levels({"get_weather": 1}, strict=True)
    with pytest.raises(RegistryError, match="between 1 and 5"):
        reg.with_risk_levels({"get_weather": 9})
    assert reg.subset(["get_weather", "read_file"]).names == ["get_weather", "read_file"]
    s = lab.summary()
    assert s["n_tools"] == 3 and s["risk_levels"] == {"L1": 2, "L2": 0, "L3": 0, "L4": 1, "L5": 0}


# -- tool text ------------------------------------------------------------------------------
def test_default_tool_text():
    t = Tool(name="deleteFile_now", description="Delete a file.")
    assert t.text() == "delete File now: Delete a file."
    assert t.text(DEFAULT_TOOL_TEMPLATE) == t.text()
    reg = ToolRegistry.from_data([{"name": "get_weather", "description": "Weather."}])
    assert reg.texts() == ["get weather: Weather."]


def test_custom_tool_text():
    reg = ToolRegistry.from_data([{"name": "get_weather", "description": "Weather."}])
    assert reg.texts("{name} -- {description}") == ["get_weather -- Weather."]
    assert reg.texts("{description}") == ["Weather."]


@pytest.mark.parametrize("template", ["{nope}: {description}", "{0}", "{name"])
def test_invalid_template(template):
    reg = ToolRegistry.from_data([{"name": "get_weather", "description": "Weather."}])
    with pytest.raises(RegistryError, match="template"):
        reg.texts(template)


# -- validation errors ----------------------------------------------------------------------
def test_the_format_is_decided_from_every_record(tmp_path):
    # The first record has no inputSchema: the later ones' schemas are still read.
    recs = [{"name": "ping", "description": "Ping the server."},
            {"name": "write_file", "description": "Write a file.", "inputSchema": {"type": "object", "properties": {"path": {}}}}]
    reg = ToolRegistry.load(write(tmp_path, "reg.json", {"tools": recs}))
    assert reg["write_file"].parameters == recs[1]["inputSchema"]


@pytest.mark.parametrize(
    ("records", "pattern"),
    [
        ([{"name": "a", "description": "x"}, {"name": "a", "description": "y"}], r"duplicate tool name 'a' \(records 0 and 1\)"),
        ([{"name": "a", "description": "x"}, {"name": "b", "description": 3}], r"record 1 \('b'\): 'description' must be a string"),
        ([{"name": "a", "description": 3}], r"record 0 \('a'\): 'description' must be a string"),
        ([{"description": "x"}], r"record 0: 'name' must be a non-empty string"),
        ([{"name": 5, "description": "x"}], r"record 0: 'name' must be a non-empty string"),
        ([{"name": "", "description": "x"}], r"record 0: 'name' must be a non-empty string"),
        ([{"name": "a", "description": "x", "risk_level": 0}], r"record 0 \('a'\): risk_level must be between 1 and 5, got 0"),
        ([{"name": "a", "description": "x", "risk_level": 6}], r"risk_level must be between 1 and 5, got 6"),
        ([{"name": "a", "description": "x", "risk_level": -1}], r"risk_level must be between 1 and 5"),
        ([{"name": "a", "description": "x", "risk_level": 2.5}], r"risk_level must be an integer 1-5, got 2.5"),
        ([{"name": "a", "description": "x", "risk_level": "3"}], r"risk_level must be an integer 1-5, got '3'"),
        ([{"name": "a", "description": "x", "risk_level": True}], r"risk_level must be an integer 1-5, got True"),
        ([{"name": "a", "description": "x", "risk_level": [3]}], r"risk_level must be an integer 1-5"),
        ([{"name": "a", "description": "x", "parameters": [1, 2]}], r"record 0 \('a'\): 'parameters' must be a JSON object"),
        ([{"name": "a", "description": "x", "reason": 7}], r"'reason' must be a string"),
        ([{"name": "a", "description": "x"}, "b"], r"record 1: must be a JSON object, got str"),
        ([3], r"record 0 must be a JSON object"),
        ([], r"holds no tools"),
        ({"tools": []}, r"holds no tools"),
        ({"tools": "a"}, r"'tools' must be a list of tool records, got str"),
        # An object where the list of tools belongs is not one tool named "tools".
        ({"tools": {"wipe": {"description": "Wipe the disk", "risk_level": 5}}}, r"'tools' must be a list of tool records, got dict"),
        ({"result": {"wipe": {"description": "Wipe the disk"}}}, r"'result' must be an MCP tools/list result"),
        ([{"name": "a", "description": "x", "inputSchema": {}}, {"api_name": "b", "api_description": "y"}],
         r"the records mix formats: record 0 is mcp, record 1 is sealtools"),
        ([{"name": "a" * 300, "description": "x"}], r"'name' is 300 characters; a tool name has at most 256"),
        ([{"name": "a", "description": "x" * 70_000}], r"'description' is 70,000 characters; at most 65,536"),
        ([{"name": "a", "description": "x", "parameters": {"p": {"default": "y" * 300_000}}}], r"a string of 300,000 characters"),
        (42, r"expected a JSON list or object of tools, got int"),
        ({"a": {"description": "x"}, "b": 3}, r"entry 'b' is int, not a tool record"),
        ({"x": 1}, r"unrecognised registry shape"),
    ],
)
def test_validation_errors_name_file_and_record(tmp_path, records, pattern):
    path = write(tmp_path, "reg.json", records)
    with pytest.raises(RegistryError, match=pattern) as exc:
        ToolRegistry.load(path)
    assert str(path) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_labels_map_errors_name_the_entry(tmp_path):
    path = write(tmp_path, "labels.json", {"ok": {"risk_level": 1, "description": "fine"},
                                            "bad": {"risk_level": 7, "description": "too risky"}})
    with pytest.raises(RegistryError, match=r"labels.json: entry 1 \('bad'\): risk_level must be between 1 and 5, got 7"):
        ToolRegistry.load(path)


def test_integral_float_risk_level_is_accepted():
    reg = ToolRegistry.from_data([{"name": "a", "description": "x", "risk_level": 3.0}])
    assert reg["a"].risk_level == 3 and isinstance(reg["a"].risk_level, int)


def test_openai_function_not_an_object(tmp_path):
    path = write(tmp_path, "o.json", [{"type": "function", "function": "send_email"}])
    with pytest.raises(RegistryError, match=r"o.json: record 0: 'function' must be a JSON object"):
        ToolRegistry.load(path)


def test_malformed_json_reports_line(tmp_path):
    text = '[\n  {"name": "a", "description": "x"},\n  {"name": "b" "description": "y"}\n]\n'
    with pytest.raises(RegistryError, match=r"r.json: invalid JSON at line 3"):
        ToolRegistry.load(write(tmp_path, "r.json", text))


def test_malformed_jsonl_reports_line(tmp_path):
    text = '{"name": "a", "description": "x"}\n\n{"name": "b" "description": "y"}\n'
    with pytest.raises(RegistryError, match=r"r.jsonl: line 3: invalid JSON"):
        ToolRegistry.load(write(tmp_path, "r.jsonl", text))


def test_malformed_json_after_blank_lines_reports_the_true_line(tmp_path):
    text = '\n\n[\n  {"name": "a", "description": "x"},\n  {"name": "b" "description": "y"}\n]\n'
    with pytest.raises(RegistryError, match=r"line 5"):
        ToolRegistry.load(write(tmp_path, "r.json", text))


def test_empty_file(tmp_path):
    with pytest.raises(RegistryError, match=r"empty.json: file is empty"):
        ToolRegistry.load(write(tmp_path, "empty.json", "  \n\n"))


def test_directory(tmp_path):
    with pytest.raises(RegistryError, match="is a directory"):
        ToolRegistry.load(tmp_path)


def test_missing_file(tmp_path):
    with pytest.raises(RegistryError, match=r"nope.json: no such file"):
        ToolRegistry.load(tmp_path / "nope.json")


def test_not_utf8(tmp_path):
    p = tmp_path / "latin.json"
    p.write_bytes(b'[{"name": "caf\xe9", "description": "x"}]')
    with pytest.raises(RegistryError, match="not UTF-8"):
        ToolRegistry.load(p)


def test_registry_arrays_are_aligned_with_file_order():
    recs = [{"name": f"t{i}", "description": f"tool {i}", "risk_level": (i % 5) + 1} for i in range(12)]
    reg = ToolRegistry.from_data(recs)
    assert np.array_equal(reg.risk_levels, [(i % 5) + 1 for i in range(12)])
    assert [reg.index_of(f"t{i}") for i in range(12)] == list(range(12))


@pytest.mark.parametrize("data", [[{"name": "a", "description": "x"}], "abc"])
def test_labels_format_on_a_non_object(data):
    with pytest.raises(RegistryError, match=r"f\.json"):
        ToolRegistry.from_data(data, fmt="labels", source="f.json")


def test_a_tool_built_directly_is_checked_and_gets_its_permissions():
    """Tool(...) and ToolRegistry([...]) used directly, as a library user would: what
    make_tool checks in full fails here with a message, not later in numpy or an encoder."""
    from riskrank.registry import Tool

    assert Tool("delete_file", "Permanently delete a file from the disk.").permissions  # computed, not left empty
    assert Tool("x", "d", risk_level=3.0).risk_level == 3 and Tool("x", "d", permissions=frozenset({"p"})).permissions == {"p"}
    for kwargs, says in (({"name": 5, "description": "x"}, "'name' must be a non-empty string"),
                         ({"name": "x", "description": None}, "'description' must be a string"),
                         ({"name": "x", "description": "d", "risk_level": 9}, "risk_level must be between 1 and 5")):
        with pytest.raises(RegistryError, match=says):
            Tool(**kwargs)
    with pytest.raises(RegistryError, match="record 0 is a dict"):
        ToolRegistry([{"name": "x", "description": "d"}])
