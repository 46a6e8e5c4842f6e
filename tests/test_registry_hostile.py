"""Hostile registries: every kind of bad file is one RegistryError (one line, at most 300
characters, naming the file and, where there is one, the record and the field), every valid
encoding is read, and nothing that loads can later break a response (no duplicate key taken
silently, no NaN, no lone surrogate, no control or invisible character in a name).

``test_fuzz_*`` is a seeded hypothesis run of a few hundred generated registries in the
default suite; the slow marker runs thousands, and benchmarks/fuzz_registries.py the full
2,000-file harness through the real CLI."""

from __future__ import annotations

import codecs
import json
import math
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riskrank.errors import RegistryError
from riskrank.registry import ToolRegistry

GOOD = {"name": "read_file", "description": "Read a text file.", "risk_level": 1}


def load_text(tmp_path: Path, text: str | bytes, name: str = "r.json") -> ToolRegistry:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return ToolRegistry.load(p)


def refused(tmp_path: Path, text: str | bytes, *patterns: str, name: str = "r.json") -> str:
    with pytest.raises(RegistryError) as exc:
        load_text(tmp_path, text, name)
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) <= 300 and name in msg, msg
    for p in patterns:
        assert p in msg, msg
    return msg


# -- parse level ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("doc", [
    '[{"name": "wipe_disk", "description": "Wipes the disk.", "risk_level": 5, "risk_level": 1}]',
    '{"tools": [], "tools": [{"name": "a", "description": "b"}]}',
    '{"a": {"risk_level": 5, "description": "Deletes."}, "a": {"risk_level": 1, "description": "Reads."}}',
])
def test_duplicate_keys_are_refused(tmp_path, doc):
    refused(tmp_path, doc, "duplicate key")


def test_duplicate_keys_in_jsonl_name_the_line(tmp_path):
    text = json.dumps(GOOD) + "\n" + '{"name": "x", "description": "y", "name": "z"}\n'
    refused(tmp_path, text, "line 2", "duplicate key 'name'", name="r.jsonl")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400", "-1E999"])
@pytest.mark.parametrize("where", ["risk", "default", "annotation", "extra"])
def test_non_finite_numbers_anywhere_are_refused(tmp_path, token, where):
    rec = {"risk": '"risk_level": TOKEN', "default": '"parameters": {"type": "object", "properties": {"x": {"default": TOKEN}}}',
           "annotation": '"annotations": {"x-cost": TOKEN}', "extra": '"cost": TOKEN'}[where].replace("TOKEN", token)
    refused(tmp_path, f'[{{"name": "a", "description": "b", {rec}}}]')


@pytest.mark.parametrize("digits", [101, 4301, 50_000])
def test_runaway_numbers_are_refused(tmp_path, digits):
    msg = refused(tmp_path, f'[{{"name": "a", "description": "b", "risk_level": {"7" * digits}}}]', "record 0", "risk_level",
                  f"a number of {digits:,} characters")
    assert "7777777777" not in msg


@pytest.mark.parametrize("depth", [100, 1000, 100_000])
def test_deep_nesting_is_refused(tmp_path, depth):
    refused(tmp_path, '[{"name": "a", "description": "b", "parameters": {"p": ' + "[" * depth + "]" * depth + "}}]", "nested")


@pytest.mark.parametrize("where", ["name", "description", "key", "enum", "title"])
def test_lone_surrogates_are_refused(tmp_path, where):
    rec = {"name": '"name": "a\\ud800b", "description": "b"', "description": '"name": "a", "description": "Delete \\udfff files"',
           "key": '"name": "a", "description": "b", "parameters": {"p\\ud83d": {}}',
           "enum": '"name": "a", "description": "b", "parameters": {"enum": ["x\\udc00"]}',
           "title": '"name": "a", "description": "b", "annotations": {"title": "T\\udbff"}'}[where]
    msg = refused(tmp_path, "[{" + rec + "}]", "lone surrogate")
    msg.encode("utf-8")  # the message itself is writable


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_bom_and_utf16_are_read(tmp_path, encoding):
    doc = json.dumps([{**GOOD, "description": "Liste les fichiers — 列出文件 ✓"}], ensure_ascii=False)
    data = doc.encode(encoding)
    if encoding in ("utf-16-le", "utf-16-be"):
        data = (codecs.BOM_UTF16_LE if encoding.endswith("le") else codecs.BOM_UTF16_BE) + data
    reg = load_text(tmp_path, data)
    assert reg["read_file"].description == "Liste les fichiers — 列出文件 ✓"
    jsonl = load_text(tmp_path, codecs.BOM_UTF8 + (json.dumps(GOOD) + "\n").encode(), name="r.jsonl")
    assert jsonl.names == ["read_file"]


def test_not_text_is_refused(tmp_path):
    refused(tmp_path, b'[{"name": "r\xff", "description": "b"}]', "not UTF-8")
    refused(tmp_path, b"\xed\xa0\x80", "not UTF-8")  # a surrogate written as bytes (CESU-8)


def test_a_one_record_jsonl_file_is_a_registry(tmp_path):
    assert load_text(tmp_path, json.dumps(GOOD) + "\n", name="one.jsonl").names == ["read_file"]
    seal = {"api_name": "get_stock", "api_description": "Get a stock price.", "parameters": {}, "required": []}
    assert load_text(tmp_path, json.dumps(seal) + "\n", name="tool.jsonl").names == ["get_stock"]


# -- record level -------------------------------------------------------------------------------------
@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x07", "\n", "\t", "\x7f", "\x85", "\x9b", "\u200b", "\u202e", "\ufeff", "\u00ad",
                                  "\u2028", "\u00a0"])
def test_names_must_be_printable(tmp_path, char):
    msg = refused(tmp_path, json.dumps([GOOD, {"name": f"dele{char}te", "description": "Deletes."}]), "record 1", "'name'",
                  f"U+{ord(char):04X}")
    assert char not in msg


def test_descriptions_lose_control_and_format_characters(tmp_path):
    reg = load_text(tmp_path, json.dumps([{"name": "a", "description": "Delete\x1b[2J the\u202e files\x00 now\u200b."}]))
    assert reg["a"].description == "Delete[2J the files now."
    refused(tmp_path, json.dumps([{"name": "a", "description": "\u200b\u200d"}]), "'description' is empty")


def test_null_annotations_mean_absent(tmp_path):
    doc = {"tools": [{"name": "a", "description": "Reads a file.", "title": None, "inputSchema": {"type": "object"},
                      "annotations": {"title": None, "readOnlyHint": None, "destructiveHint": None, "idempotentHint": None,
                                      "openWorldHint": None}},
                     {"name": "b", "description": "Deletes a file.", "inputSchema": {}, "annotations": {"readOnlyHint": None,
                                                                                                     "destructiveHint": True}}]}
    reg = load_text(tmp_path, json.dumps(doc))
    assert reg["a"].annotations is None and reg["b"].annotations == {"destructiveHint": True}


@pytest.mark.parametrize("value", ['"yes"', "1", "[]", "{}", '"true"'])
def test_non_boolean_hints_are_an_error(tmp_path, value):
    doc = '{"tools": [{"name": "a", "description": "b", "inputSchema": {}, "annotations": {"readOnlyHint": VALUE}}]}'
    refused(tmp_path, doc.replace("VALUE", value), "record 0", "readOnlyHint", "true, false or null")


@pytest.mark.parametrize(("required", "ok"), [("null", True), ('["p0"]', True), ('["no_such"]', True), ("5", False), ('"xyz"', False),
                                              ("true", False), ('{"p0": true}', False), ("[1, 2]", False), ('[["p0"]]', False)])
def test_sealtools_required(tmp_path, required, ok):
    line = '{"api_name": "a", "api_description": "b", "parameters": {"p0": {"type": "string"}}, "required": REQ}'.replace("REQ", required)
    if ok:
        reg = load_text(tmp_path, line + "\n", name="t.jsonl")
        assert isinstance(reg["a"].parameters["required"], list)
    else:
        refused(tmp_path, line + "\n", "record 0", "'required'", name="t.jsonl")


@pytest.mark.parametrize("params", ['["a"]', '"a"', "3"])
def test_sealtools_parameters_must_be_an_object(tmp_path, params):
    line = '{"api_name": "a", "api_description": "b", "parameters": P, "required": []}'.replace("P", params)
    first = json.dumps({"api_name": "x", "api_description": "Reads.", "parameters": {}, "required": []})
    refused(tmp_path, first + "\n" + line + "\n", "record 1", "'parameters'", name="t.jsonl")


@pytest.mark.parametrize(("field", "value"), [("risk_level", "x" * 200_000), ("risk_level", [1] * 200_000), ("name", [0] * 200_000),
                                              ("name", 7 * 10 ** 90), ("name", {f"k{i}": i for i in range(10_000)})])
def test_huge_values_are_not_echoed(tmp_path, field, value):
    refused(tmp_path, json.dumps([{"name": "a", "description": "b", field: value}]), "record 0", field)


def test_redacted_messages_name_record_and_field_only(tmp_path):
    secret = "hunter2-SECRET-PASSWORD"
    for doc in ([{"name": secret, "description": 5}], [{"name": "db", "description": "x", "risk_level": secret}],
                {"tools": [{"name": "db", "description": "x", "annotations": {"readOnlyHint": secret}}]},
                [{"name": secret + "\x1b", "description": "x"}], [{"name": secret, "description": "x"}] * 2,
                [{"name": "a", "description": "x", "parameters": {secret: 1e400}}]):
        p = tmp_path / "s.json"
        p.write_text(json.dumps(doc).replace("Infinity", "1e400"))
        with pytest.raises(RegistryError) as exc:
            ToolRegistry.load(p, redact=True)
        assert secret not in str(exc.value) and ("record" in str(exc.value) or "number" in str(exc.value)), str(exc.value)


# -- generated registries -------------------------------------------------------------------------------
# Values that have broken a registry loader somewhere: out-of-range and odd numbers, odd
# strings (controls, invisible and bidi characters, surrogates, huge ones), wrong types.
_ODD_TEXT = st.sampled_from(["", " ", "\x00", "\x1b[2K", "\n", "\u200b", "\u202e", "\ufeff", "\ud800", "\udfff", "é", "列",
                             "x" * 5000, "rm -rf /", "null"])
_TEXT = st.one_of(st.text(max_size=40), _ODD_TEXT, st.lists(_ODD_TEXT, max_size=4).map("".join))
_NUMBER = st.one_of(st.integers(-10, 10), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([3.0, 1e-300, 2 ** 70]))
_SCALAR = st.one_of(st.none(), st.booleans(), _NUMBER, _TEXT)
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
                      max_leaves=12)
_FIELDS = ("name", "description", "risk_level", "parameters", "annotations", "reason", "inputSchema", "required",
           "api_name", "api_description", "function", "type")


@st.composite
def registries(draw) -> str:
    """A registry document as text: a few plausible records with some fields replaced by odd
    values, in one of the accepted shapes, sometimes with a duplicate key or a raw token."""
    records = []
    for i in range(draw(st.integers(1, 4))):
        rec = {"name": f"tool_{i}", "description": "Reads a file.", "risk_level": draw(st.integers(1, 5))}
        for key in draw(st.lists(st.sampled_from(_FIELDS), max_size=3)):
            rec[key] = draw(_VALUE)
        if draw(st.booleans()):
            rec["annotations"] = {h: draw(st.one_of(st.none(), st.booleans(), _SCALAR)) for h in
                                  draw(st.lists(st.sampled_from(["readOnlyHint", "destructiveHint", "openWorldHint", "title"]), max_size=3))}
        records.append(rec)
    shape = draw(st.sampled_from(["list", "tools", "labels", "mcp_rpc", "jsonl"]))
    dumps = lambda v: json.dumps(v, ensure_ascii=draw(st.booleans()), allow_nan=True)  # noqa: E731
    if shape == "jsonl":
        text = "\n".join(dumps(r) for r in records) + "\n"
    elif shape == "labels":
        text = dumps({str(r.get("name")): {k: v for k, v in r.items() if k != "name"} for r in records})
    else:
        doc = {"list": records, "tools": {"tools": records}, "mcp_rpc": {"jsonrpc": "2.0", "id": 1, "result": {"tools": records}}}[shape]
        text = dumps(doc)
    trick = draw(st.sampled_from(["none", "dup", "nan", "deep", "bom", "huge"]))
    if trick == "dup":
        text = text.replace('"risk_level": ', '"risk_level": 5, "risk_level": ', 1)
    elif trick == "nan":
        text = text.replace('"risk_level": ', '"risk_level": NaN, "x": ', 1)
    elif trick == "deep":
        text = text.replace('"description": ', '"deep": ' + "[" * 1500 + "]" * 1500 + ', "description": ', 1)
    elif trick == "bom":
        text = "\ufeff" + text
    elif trick == "huge":
        text = text.replace('"risk_level": ', '"risk_level": ' + "9" * 5000 + ', "y": ', 1)
    return text


def _check_one(tmp_path: Path, text: str) -> None:
    p = tmp_path / "fuzz.jsonl"
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        reg = ToolRegistry.load(p)
    except RegistryError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) <= 300 and str(p) in msg, msg
        msg.encode("utf-8")
        return
    for t in reg:  # what loads is servable: printable names, descriptions without control or format characters
        assert t.name.isprintable() and t.description
        assert not any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in t.description), ascii(t.description)
        json.dumps(t.to_dict(), allow_nan=False).encode("utf-8")
        assert t.risk_level is None or 1 <= t.risk_level <= 5
    assert all(isinstance(x, float) is False or math.isfinite(x) for x in reg.risk_levels.tolist())


@settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                                       HealthCheck.too_slow])
@given(registries())
def test_fuzz_generated_registries_load_or_fail_in_one_line(tmp_path, text):
    _check_one(tmp_path, text)


@pytest.mark.slow
@settings(max_examples=5000, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                                        HealthCheck.too_slow])
@given(registries())
def test_fuzz_generated_registries_slow(tmp_path, text):
    _check_one(tmp_path, text)
