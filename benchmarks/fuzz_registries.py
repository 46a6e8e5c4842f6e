"""Hostile registries through the real ``riskrank retrieve``: does every one end cleanly?

    python benchmarks/fuzz_registries.py [--seed 17] [--scale 1.0] [--families a,b]
        [--json out.json] [--subprocess-sample 2] [--serve-sample 0] [--timeout 30]

Generates, from a seed (deterministic: the same seed gives the same files, byte for byte),
about 2,000 registries in families of one kind of fault each (non-finite and huge
``risk_level``, deep nesting, Seal-Tools ``required`` of the wrong type, control characters,
lone surrogates, duplicate keys, BOM / UTF-16 files, NaN inside ``parameters``, empty
descriptions, ``null`` and non-boolean MCP annotations, huge values that an error would echo,
truncated files, wrong top-level types, mixed JSONL, ...). Each file goes through

    riskrank retrieve --registry FILE --mode dense+rule "delete all the files in my project folder"

in a worker process that runs the installed console script's entry point in-process (one
encoder load for the whole run; stdout/stderr behave like a real pipe; see _cli_worker.py),
and, when it is accepted and the family defines a check, once more with ``--json`` to check
what was served. ``--subprocess-sample N`` also runs N files per family through the real
console script in a subprocess and reports whether the two agree; ``--serve-sample N`` sends
N files per family to a live ``riskrank serve`` through ``POST /v1/admin/reload`` (and, when
accepted, ``GET /v1/tools/{name}`` for each tool).

Outcome of one case (what "correct" is depends on the family: ``expect``):

- ``clean``: the expected outcome. ``reject``: exit 2 and one ``error:`` line of at most 300
  characters that names the file (and the record and field where the family says so);
  ``accept``: exit 0 and the family's check holds; ``either``: one of the two.
- ``crash``: a traceback, an exit status other than 0 and 2 (1, 130, a signal), or the worker
  died.
- ``silent-wrong``: exit 0 where a rejection was expected, or the check failed (e.g. the
  duplicate key taken silently, a control character accepted, a null hint read as a value).
- ``bad-error``: exit 2, but the message breaks the contract (several lines, over 300
  characters, does not name the file/record/field, raw control characters).
- ``wrong-reject``: a valid file (BOM, UTF-16, null annotations) rejected.
- ``hang``: no answer within ``--timeout`` seconds (the worker is killed and restarted).
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _cli_worker import CliWorker  # noqa: E402  (the in-process runner, next to this file)

TASK = "delete all the files in my project folder"
MODE = "dense+rule"
MAX_ERROR_CHARS = 300
OUTCOMES = ("clean", "crash", "silent-wrong", "bad-error", "wrong-reject", "hang")
_C0C1 = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# -- a JSON writer that can say what json.dumps cannot (duplicate keys, NaN, raw tokens) --------------
class Raw(str):
    """Emitted verbatim (NaN, Infinity, 1e400, a 50,000-digit integer, "\\ud800" escapes)."""


class Pairs(list):
    """A JSON object as a list of (key, value) pairs: keys may repeat."""


def dump(obj: Any, indent: int | None = 1, _lvl: int = 0) -> str:
    nl = "" if indent is None else "\n" + " " * (indent * (_lvl + 1))
    end = "" if indent is None else "\n" + " " * (indent * _lvl)
    if isinstance(obj, Raw):
        return str(obj)
    if isinstance(obj, (Pairs, dict)):
        items = list(obj) if isinstance(obj, Pairs) else list(obj.items())
        if not items:
            return "{}"
        return "{" + ",".join(nl + dump(k, indent) + ": " + dump(v, indent, _lvl + 1) for k, v in items) + end + "}"
    if isinstance(obj, list | tuple):
        if not obj:
            return "[]"
        return "[" + ",".join(nl + dump(v, indent, _lvl + 1) for v in obj) + end + "]"
    return json.dumps(obj, ensure_ascii=False, allow_nan=True)


# -- cases ----------------------------------------------------------------------------------------
@dataclass
class Case:
    family: str
    id: str
    data: bytes
    expect: str  # reject | accept | either
    note: str = ""
    suffix: str = ".json"
    where: tuple[str, ...] = ()  # regexes the error line must match besides the file name
    check: dict[str, Any] = field(default_factory=dict)


VERBS = ["read", "list", "get", "search", "fetch", "show", "count", "find", "delete", "purge", "send", "create", "update", "move"]
NOUNS = ["file", "files", "folder", "record", "email", "invoice", "calendar_event", "log", "user", "bucket", "note", "photo"]


def rand_name(rng: random.Random) -> str:
    return f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}_{rng.randrange(10**6):06d}"


def rand_desc(rng: random.Random, name: str) -> str:
    v, n = name.split("_")[0], " ".join(name.split("_")[1:-1])
    return f"{v.capitalize()} the {n.replace('_', ' ')} the user names; returns a short summary ({rng.randrange(1000)})."


def rand_params(rng: random.Random) -> dict:
    props = {f"p{i}": {"type": rng.choice(["string", "integer", "boolean"]), "description": f"parameter {i}"} for i in range(rng.randrange(1, 4))}
    return {"type": "object", "properties": props, "required": sorted(props)[:1]}


def base_tools(rng: random.Random, n: int = 3, labelled: bool = True) -> list[dict]:
    tools = []
    for _ in range(n):
        name = rand_name(rng)
        t = {"name": name, "description": rand_desc(rng, name), "parameters": rand_params(rng)}
        if labelled:
            t["risk_level"] = rng.randint(1, 5)
        tools.append(t)
    return tools


# Registry formats: each turns a list of tool dicts (values may be Raw/Pairs) into file text.
def _rec_plain(t: dict) -> Pairs:
    return Pairs([(k, t[k]) for k in ("name", "description", "risk_level", "parameters", "annotations") if k in t] + t.get("_extra", []))


def _rec_openai(t: dict) -> Pairs:
    fn = Pairs([(k, t[k]) for k in ("name", "description", "parameters") if k in t] + t.get("_extra", []))
    rec = Pairs([("type", "function"), ("function", fn)])
    if "risk_level" in t:
        rec.append(("risk_level", t["risk_level"]))
    return rec


def _rec_mcp(t: dict) -> Pairs:
    rec = Pairs([(k, t[k]) for k in ("name", "description") if k in t])
    rec.append(("inputSchema", t.get("parameters", {"type": "object", "properties": {}})))
    rec.append(("annotations", t.get("annotations", {"title": t.get("name") if isinstance(t.get("name"), str) else "tool"})))
    if "risk_level" in t:
        rec.append(("risk_level", t["risk_level"]))
    return Pairs(rec + t.get("_extra", []))


def _rec_seal(t: dict) -> Pairs:
    params = t.get("parameters")
    props = params.get("properties", {}) if isinstance(params, dict) else params
    rec = Pairs([("api_name", t.get("name")), ("api_description", t.get("description")), ("parameters", props)])
    rec.append(("required", t.get("required", list(props)[:1] if isinstance(props, dict) else [])))
    if "risk_level" in t:
        rec.append(("risk_level", t["risk_level"]))
    return Pairs(rec + t.get("_extra", []))


def fmt_plain_list(tools: list[dict]) -> str:
    return dump([_rec_plain(t) for t in tools])


def fmt_plain_obj(tools: list[dict]) -> str:
    return dump(Pairs([("tools", [_rec_plain(t) for t in tools])]))


def fmt_plain_jsonl(tools: list[dict]) -> str:
    return "\n".join(dump(_rec_plain(t), None) for t in tools) + "\n"


def fmt_labels(tools: list[dict]) -> str:
    return dump(Pairs([(t.get("name"), Pairs([(k, t[k]) for k in ("risk_level", "description", "parameters", "annotations") if k in t] + t.get("_extra", []))) for t in tools]))


def fmt_openai(tools: list[dict]) -> str:
    return dump([_rec_openai(t) for t in tools])


def fmt_mcp(tools: list[dict]) -> str:
    return dump(Pairs([("tools", [_rec_mcp(t) for t in tools])]))


def fmt_mcp_rpc(tools: list[dict]) -> str:
    return dump(Pairs([("jsonrpc", "2.0"), ("id", 1), ("result", Pairs([("tools", [_rec_mcp(t) for t in tools])]))]))


def fmt_seal_jsonl(tools: list[dict]) -> str:
    return "\n".join(dump(_rec_seal(t), None) for t in tools) + "\n"


FORMATS: dict[str, Callable[[list[dict]], str]] = {
    "plain": fmt_plain_list, "plain_obj": fmt_plain_obj, "plain_jsonl": fmt_plain_jsonl, "labels": fmt_labels,
    "openai": fmt_openai, "mcp": fmt_mcp, "mcp_rpc": fmt_mcp_rpc, "sealtools": fmt_seal_jsonl,
}
RISK_FORMATS = ("plain", "plain_obj", "plain_jsonl", "labels", "openai", "mcp", "sealtools")
#: what the loader calls one record in each format ("record 3", "entry 3", "line 3")
REC = r"\b(?:record|entry|line) \d+"


def suffix_of(fmt: str) -> str:
    return ".jsonl" if fmt.endswith("jsonl") or fmt == "sealtools" else ".json"


class Gen:
    """Family generators; each yields Cases. ``scale`` multiplies the random repetitions."""

    def __init__(self, seed: int, scale: float = 1.0) -> None:
        self.seed, self.scale = seed, scale

    def rng(self, family: str) -> random.Random:
        return random.Random(f"{self.seed}:{family}")

    def reps(self, n: int) -> int:
        return max(1, round(n * self.scale))

    def families(self) -> dict[str, Callable[[], Iterator[Case]]]:
        return {name[4:]: getattr(self, name) for name in dir(self) if name.startswith("fam_")}

    # a registry with one hostile tool among good ones, in a given format
    def _one_bad(self, rng: random.Random, fmt: str, bad: dict, n_good: int = 2) -> tuple[str, int]:
        tools = base_tools(rng, n_good)
        pos = rng.randrange(len(tools) + 1)
        tools.insert(pos, bad)
        return FORMATS[fmt](tools), pos

    # ---------------------------------------------------------------------------------------------
    def fam_valid_control(self) -> Iterator[Case]:
        """Well-formed registries in every format: the harness's positive control."""
        rng = self.rng("valid")
        for i in range(self.reps(12)):
            for fmt in FORMATS:
                tools = base_tools(rng, rng.randint(1, 5), labelled=fmt not in ("mcp", "mcp_rpc") or rng.random() < 0.5)
                yield Case("valid_control", f"{fmt}-{i}", FORMATS[fmt](tools).encode(), "accept", fmt, suffix_of(fmt),
                           check={"names": [t["name"] for t in tools]})

    def fam_risk_nonfinite(self) -> Iterator[Case]:
        rng = self.rng("nonfinite")
        tokens = ["Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1E999", "123456789e9999"]
        for i in range(self.reps(2)):
            for tok in tokens:
                for fmt in RISK_FORMATS:
                    name = rand_name(rng)
                    text, _pos = self._one_bad(rng, fmt, {"name": name, "description": rand_desc(rng, name), "risk_level": Raw(tok)})
                    yield Case("risk_nonfinite", f"{fmt}-{tok}-{i}", text.encode(), "reject", f"risk_level {tok} ({fmt})",
                               suffix_of(fmt), where=("risk_level",))

    def fam_risk_hugeint(self) -> Iterator[Case]:
        rng = self.rng("hugeint")
        for digits in (4301, 4400, 5000, 10_000, 50_000, 200_000):
            for sign in ("", "-"):
                for fmt in ("plain", "labels", "mcp", "sealtools", "openai"):
                    big = sign + str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(digits - 1))
                    name = rand_name(rng)
                    text, _ = self._one_bad(rng, fmt, {"name": name, "description": rand_desc(rng, name), "risk_level": Raw(big)})
                    yield Case("risk_hugeint", f"{fmt}-{sign or '+'}{digits}", text.encode(), "reject",
                               f"{digits}-digit risk_level ({fmt})", suffix_of(fmt))
        # huge integers elsewhere (parameters default, an extra field)
        for digits in (4301, 20_000):
            for fmt in ("plain", "mcp"):
                name = rand_name(rng)
                big = Raw("9" * digits)
                params = {"type": "object", "properties": {"n": {"type": "integer", "default": big}}}
                text, _ = self._one_bad(rng, fmt, {"name": name, "description": rand_desc(rng, name), "parameters": params})
                yield Case("risk_hugeint", f"param-{fmt}-{digits}", text.encode(), "reject", f"{digits}-digit default in parameters ({fmt})", suffix_of(fmt))

    def fam_risk_badtype(self) -> Iterator[Case]:
        """Wrong risk_level types and ranges: the existing validation (control)."""
        rng = self.rng("badtype")
        values = [Raw('"3"'), Raw("true"), Raw("false"), Raw("[3]"), Raw('{"level": 3}'), Raw("0"), Raw("6"), Raw("-1"),
                  Raw("2.5"), Raw("1e-300"), Raw('"L3"'), Raw("99999999999999999999")]
        for i in range(self.reps(2)):
            for v in values:
                for fmt in ("plain", "labels", "mcp", "sealtools", "openai"):
                    name = rand_name(rng)
                    text, _ = self._one_bad(rng, fmt, {"name": name, "description": rand_desc(rng, name), "risk_level": v})
                    yield Case("risk_badtype", f"{fmt}-{v}-{i}", text.encode(), "reject", f"risk_level {v} ({fmt})",
                               suffix_of(fmt), where=("risk_level", REC))
        for fmt in ("plain", "labels"):  # an integral float is an integer
            name = rand_name(rng)
            text, _ = self._one_bad(rng, fmt, {"name": name, "description": rand_desc(rng, name), "risk_level": Raw("3.0")})
            yield Case("risk_badtype", f"{fmt}-3.0", text.encode(), "either", "risk_level 3.0", suffix_of(fmt))

    def fam_deep_nesting(self) -> Iterator[Case]:
        rng = self.rng("deep")
        for depth in (999, 1000, 1500, 3000, 5000, 100_000):
            for where in ("parameters", "toplevel", "annotations", "extra", "description", "name"):
                for kind in ("list", "dict"):
                    deep = Raw(("[" * depth + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth))
                    name = rand_name(rng)
                    if where == "toplevel":
                        inner = fmt_plain_list(base_tools(rng, 2))
                        text = ("[" * depth + inner + "]" * depth) if kind == "list" else ('{"x":' * depth + inner + "}" * depth)
                        fmt = "plain"
                    else:
                        bad: dict[str, Any] = {"name": name, "description": rand_desc(rng, name)}
                        if where == "parameters":
                            bad["parameters"] = {"type": "object", "properties": {"p": deep}}
                        elif where == "annotations":
                            bad["annotations"] = Pairs([("title", "x"), ("x-deep", deep)])
                        elif where == "extra":
                            bad["_extra"] = [("x-meta", deep)]
                        else:
                            bad[where] = deep
                        fmt = "mcp" if where == "annotations" else rng.choice(["plain", "labels", "plain_jsonl"])
                        text, _ = self._one_bad(rng, fmt, bad)
                    # Below ~1,000 levels the file is legitimate; at 1,000+ a RecursionError is the bug.
                    expect = "either" if depth < 1000 else "reject"
                    yield Case("deep_nesting", f"{where}-{kind}-{depth}", text.encode(), expect, f"{kind} nested {depth} deep in {where}",
                               suffix_of(fmt))

    def fam_sealtools_required(self) -> Iterator[Case]:
        rng = self.rng("required")
        values = [("null", Raw("null"), "either"), ("5", Raw("5"), "reject"), ("xyz", Raw('"xyz"'), "reject"),
                  ("true", Raw("true"), "reject"), ("obj", Raw('{"p0": true}'), "reject"), ("nums", Raw("[1, 2]"), "reject"),
                  ("nested", Raw('[["p0"]]'), "reject"), ("unknown", Raw('["no_such_param"]'), "either"),
                  ("nan", Raw("NaN"), "reject"), ("float", Raw("1.5"), "reject")]
        for i in range(self.reps(10)):
            for label, v, expect in values:
                name = rand_name(rng)
                bad = {"name": name, "description": rand_desc(rng, name), "parameters": rand_params(rng), "required": v, "risk_level": 2}
                text, _ = self._one_bad(rng, "sealtools", bad)
                yield Case("sealtools_required", f"{label}-{i}", text.encode(), expect, f"required: {v}", ".jsonl",
                           where=("required", REC) if expect == "reject" else ())
        for i in range(self.reps(2)):  # parameters not an object: silently dropped today
            for label, v in (("list", Raw('["a", "b"]')), ("string", Raw('"a"')), ("number", Raw("3"))):
                name = rand_name(rng)
                rec = Pairs([("api_name", name), ("api_description", rand_desc(rng, name)), ("parameters", v), ("required", [])])
                lines = [dump(_rec_seal(t), None) for t in base_tools(rng, 2)] + [dump(rec, None)]
                yield Case("sealtools_required", f"params-{label}-{i}", ("\n".join(lines) + "\n").encode(), "reject",
                           f"Seal-Tools parameters: {v}", ".jsonl", where=("parameters", REC))

    def _names_with(self, family: str, chars: list[str], expect: str, escaped: bool = True) -> Iterator[Case]:
        rng = self.rng(family)
        for ch in chars:
            for pos in ("start", "mid", "end"):
                fmt = rng.choice(("plain", "labels", "mcp", "openai", "sealtools", "plain_jsonl"))
                base = rand_name(rng)
                name = ch + base if pos == "start" else (base + ch if pos == "end" else base[:4] + ch + base[4:])
                esc = json.dumps(name)  # \u001b etc.
                text, _ = self._one_bad(rng, fmt, {"name": Raw(esc if escaped else '"' + name + '"'), "description": rand_desc(rng, base), "risk_level": 2})
                yield Case(family, f"U+{ord(ch):04X}-{pos}-{fmt}", text.encode(), expect, f"name with U+{ord(ch):04X} at {pos} ({fmt})",
                           suffix_of(fmt), where=("name", REC) if expect == "reject" else (),
                           check={"no_control": True})

    def fam_name_control(self) -> Iterator[Case]:
        """C0 controls (NUL, ESC, BEL, newline, ...), DEL and C1 controls in names, as JSON
        escapes. Leading/trailing whitespace controls (\\t \\n \\r) are stripped today, so only
        their inner position is a fault."""
        chars = [chr(c) for c in range(0x00, 0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
        for case in self._names_with("name_control", chars, "reject"):
            if case.id.split("-")[0] in ("U+0009", "U+000A", "U+000B", "U+000C", "U+000D", "U+001C", "U+001D", "U+001E", "U+001F", "U+0085") \
                    and case.id.split("-")[1] != "mid":
                case.expect = "either"  # str.strip() removes these at the ends: harmless
                case.where = ()
            yield case

    def fam_x_name_invisible(self) -> Iterator[Case]:
        """Format characters that make two names look alike or reorder text (bidi overrides,
        zero-width spaces, BOM inside a name). Not in the issue's list: a recommendation."""
        chars = ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                 "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff", "\u00ad",
                 # printable but blank: Hangul fillers, the braille blank, the grapheme joiner,
                 # variation selectors, Khmer inherent vowels (an independent fuzz found these)
                 "\u3164", "\uffa0", "\u115f", "\u1160", "\u2800", "\u034f", "\ufe0f", "\U000e0100", "\u17b4", "\u17b5"]
        yield from self._names_with("x_name_invisible", chars, "reject")

    def fam_name_surrogate(self) -> Iterator[Case]:
        rng = self.rng("surrogate")
        for sur in ("\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\udc80", "\\ud83d"):
            for where in ("name", "description", "param_key", "param_enum", "reason", "annotation_title"):
                for fmt in ("plain", "mcp", "labels"):
                    base = rand_name(rng)
                    bad: dict[str, Any] = {"name": base, "description": rand_desc(rng, base)}
                    if where == "name":
                        bad["name"] = Raw(f'"{base[:5]}{sur}{base[5:]}"')
                    elif where == "description":
                        bad["description"] = Raw(f'"Delete {sur} files"')
                    elif where == "param_key":
                        bad["parameters"] = Pairs([("type", "object"), ("properties", Pairs([(Raw(f'"p{sur}"'), {"type": "string"})]))])
                    elif where == "param_enum":
                        bad["parameters"] = {"type": "object", "properties": {"p": {"type": "string", "enum": [Raw(f'"a{sur}"')]}}}
                    elif where == "reason":
                        bad["_extra"] = [("reason", Raw(f'"because {sur}"'))]
                    else:
                        bad["annotations"] = Pairs([("title", Raw(f'"T{sur}"'))])
                    if fmt == "labels" and where == "name":
                        continue  # a label file's names are keys: covered by param_key
                    text, _ = self._one_bad(rng, fmt, bad)
                    yield Case("name_surrogate", f"{where}-{sur[2:]}-{fmt}", text.encode(), "reject", f"lone surrogate {sur} in {where} ({fmt})",
                               suffix_of(fmt))
        for where in ("name", "description"):  # the surrogate as raw bytes (CESU-8): not UTF-8
            name = rand_name(rng)
            desc = rand_desc(rng, name)
            text, _ = self._one_bad(rng, "plain", {"name": name, "description": desc})
            target = name if where == "name" else desc.split()[0]  # (the description's first word, so it is found)
            data = text.encode().replace(target.encode(), target[:3].encode() + b"\xed\xa0\x80" + target[3:].encode(), 1)
            yield Case("name_surrogate", f"raw-{where}", data, "reject", f"CESU-8 surrogate bytes in {where}")

    def fam_dup_keys(self) -> Iterator[Case]:
        rng = self.rng("dup")
        for i in range(self.reps(10)):
            for fmt in ("plain", "plain_jsonl", "mcp", "openai", "sealtools"):
                name = rand_name(rng)
                desc = rand_desc(rng, name)
                # risk 5 then 1: served as L1 today
                bad = {"name": name, "description": desc, "_extra": []}
                rec_fn = {"plain": _rec_plain, "plain_jsonl": _rec_plain, "mcp": _rec_mcp, "openai": _rec_openai, "sealtools": _rec_seal}[fmt]
                rec = rec_fn(bad)
                if fmt == "openai":
                    rec.append(("risk_level", 5))
                    rec.append(("risk_level", 1))
                else:
                    rec.extend([("risk_level", 5), ("risk_level", 1)])
                others = base_tools(rng, 2)
                recs = [rec_fn(t) for t in others] + [rec]
                rng.shuffle(recs)
                if fmt in ("plain_jsonl", "sealtools"):
                    text = "\n".join(dump(r, None) for r in recs) + "\n"
                elif fmt == "mcp":
                    text = dump(Pairs([("tools", recs)]))
                else:
                    text = dump(recs)
                yield Case("dup_keys", f"risk51-{fmt}-{i}", text.encode(), "reject", f"risk_level 5 then 1 ({fmt})", suffix_of(fmt),
                           where=("risk_level|duplicate",), check={"levels": {name: 5}})
            # the same tool name twice as keys of a label file: one tool silently vanishes
            a = rand_name(rng)
            text = dump(Pairs([(a, {"risk_level": 5, "description": "Deletes every file in the project, recursively."}),
                               (rand_name(rng), {"risk_level": 1, "description": "Lists files."}),
                               (a, {"risk_level": 1, "description": "Reads one file."})]))
            yield Case("dup_keys", f"labels-name-{i}", text.encode(), "reject", "label file: the same tool name twice", where=("duplicate",))
            # name given twice inside one record
            n1, n2 = rand_name(rng), rand_name(rng)
            rec = Pairs([("name", n1), ("description", "Deletes a file."), ("risk_level", 4), ("name", n2)])
            text = dump([rec] + [_rec_plain(t) for t in base_tools(rng, 2)])
            yield Case("dup_keys", f"name-twice-{i}", text.encode(), "reject", "record with two 'name' keys", where=("name|duplicate",))
            # description twice: the first says destructive, the last benign
            n = rand_name(rng)
            rec = Pairs([("name", n), ("description", "Permanently deletes all records."), ("description", "Reads a record."), ("risk_level", 2)])
            text = dump([rec] + [_rec_plain(t) for t in base_tools(rng, 2)])
            yield Case("dup_keys", f"desc-twice-{i}", text.encode(), "reject", "record with two 'description' keys", where=("description|duplicate",))
            # "tools" twice at the top level
            t1, t2 = base_tools(rng, 2), base_tools(rng, 2)
            text = dump(Pairs([("tools", [_rec_plain(t) for t in t1]), ("tools", [_rec_plain(t) for t in t2])]))
            yield Case("dup_keys", f"tools-twice-{i}", text.encode(), "reject", "top-level 'tools' twice", where=("tools|duplicate",))
            # a duplicate annotation key: destructiveHint true then false
            n = rand_name(rng)
            rec = Pairs([("name", n), ("description", "Removes the user's data."), ("inputSchema", {"type": "object"}),
                         ("annotations", Pairs([("destructiveHint", True), ("destructiveHint", False)]))])
            text = dump(Pairs([("tools", [rec] + [_rec_mcp(t) for t in base_tools(rng, 2, labelled=False)])]))
            yield Case("dup_keys", f"hint-twice-{i}", text.encode(), "reject", "destructiveHint true then false", where=("destructiveHint|duplicate",))

    def _valid_variants(self, rng: random.Random, i: int) -> Iterator[tuple[str, str, list[dict]]]:
        for fmt in FORMATS:
            tools = base_tools(rng, rng.randint(1, 4), labelled=fmt not in ("mcp", "mcp_rpc"))
            if rng.random() < 0.5:  # non-ASCII text, so an encoding mistake shows
                tools[0]["description"] = "Liste les fichiers du dossier — 列出文件夹中的文件 ✓ " + tools[0]["description"]
            yield fmt, FORMATS[fmt](tools), tools

    def fam_bom_utf8(self) -> Iterator[Case]:
        rng = self.rng("bom8")
        for i in range(self.reps(8)):
            for fmt, text, tools in self._valid_variants(rng, i):
                yield Case("bom_utf8", f"{fmt}-{i}", codecs.BOM_UTF8 + text.encode(), "accept", f"UTF-8 BOM ({fmt})", suffix_of(fmt),
                           check={"names": [t["name"] for t in tools]})

    def fam_utf16(self) -> Iterator[Case]:
        rng = self.rng("utf16")
        for i in range(self.reps(7)):
            for fmt, text, tools in self._valid_variants(rng, i):
                enc = rng.choice(["utf-16-le", "utf-16-be"])
                bom = codecs.BOM_UTF16_LE if enc.endswith("le") else codecs.BOM_UTF16_BE
                yield Case("utf16", f"{fmt}-{enc}-{i}", bom + text.encode(enc), "accept", f"{enc} with BOM ({fmt})", suffix_of(fmt),
                           check={"names": [t["name"] for t in tools]})
        for fmt, text, tools in self._valid_variants(rng, 99):  # no BOM: JSON's own detection could read it
            yield Case("utf16", f"{fmt}-nobom", text.encode("utf-16-le"), "either", f"UTF-16-LE without BOM ({fmt})", suffix_of(fmt),
                       check={"names": [t["name"] for t in tools]})

    def fam_nan_params(self) -> Iterator[Case]:
        rng = self.rng("nanparams")
        tokens = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]
        spots = ["default", "minimum", "enum", "nested", "example", "annotation", "extra", "seal_param"]
        for i in range(self.reps(3)):
            for tok in tokens:
                for spot in spots:
                    name = rand_name(rng)
                    bad: dict[str, Any] = {"name": name, "description": rand_desc(rng, name)}
                    v = Raw(tok)
                    fmt = rng.choice(("plain", "labels", "mcp", "openai"))
                    if spot == "default":
                        bad["parameters"] = {"type": "object", "properties": {"x": {"type": "number", "default": v}}}
                    elif spot == "minimum":
                        bad["parameters"] = {"type": "object", "properties": {"x": {"type": "number", "minimum": v}}}
                    elif spot == "enum":
                        bad["parameters"] = {"type": "object", "properties": {"x": {"type": "number", "enum": [1, v]}}}
                    elif spot == "nested":
                        bad["parameters"] = {"type": "object", "properties": {"o": {"type": "object", "properties": {"y": {"const": v}}}}}
                    elif spot == "example":
                        bad["parameters"] = {"type": "object", "examples": [{"x": v}]}
                    elif spot == "annotation":
                        fmt = "mcp"
                        bad["annotations"] = Pairs([("title", "t"), ("x-cost", v)])
                    elif spot == "extra":
                        fmt = rng.choice(("plain", "labels"))
                        bad["_extra"] = [("cost", v)]
                    else:
                        fmt = "sealtools"
                        bad["parameters"] = {"type": "object", "properties": {"x": {"type": "float", "default": v}}}
                    text, _ = self._one_bad(rng, fmt, bad)
                    yield Case("nan_params", f"{spot}-{tok}-{i}", text.encode(), "reject", f"{tok} as {spot} ({fmt})", suffix_of(fmt))

    def fam_empty_desc(self) -> Iterator[Case]:
        rng = self.rng("emptydesc")
        # An empty or blank description is ranked on the name's words (a registry of names
        # works); one of invisible characters only, or not a string, is refused.
        values = [("empty", Raw('""'), "either"), ("space", Raw('"   "'), "either"), ("ws", Raw('"\\t\\n\\r"'), "either"),
                  ("ideo", Raw('"\\u3000"'), "either"), ("nbsp", Raw('"\\u00a0\\u2003"'), "either"),
                  ("zwsp", Raw('"\\u200b"'), "reject"), ("null", Raw("null"), "either"), ("number", Raw("5"), "reject"),
                  ("list", Raw('["a"]'), "reject")]
        for i in range(self.reps(3)):
            for label, v, expect in values:
                for fmt in ("plain", "labels", "openai", "sealtools"):
                    name = rand_name(rng)
                    text, _ = self._one_bad(rng, fmt, {"name": name, "description": v, "risk_level": 3})
                    yield Case("empty_desc", f"{label}-{fmt}-{i}", text.encode(), expect, f"description {v} ({fmt})", suffix_of(fmt),
                               where=("description", REC) if expect == "reject" else ())

    def fam_names_only(self) -> Iterator[Case]:
        """Registries of names without descriptions (issue 14 wants them to work; a clean
        rejection is acceptable until then)."""
        rng = self.rng("namesonly")
        for i in range(self.reps(6)):
            names = [rand_name(rng) for _ in range(rng.randint(1, 5))]
            variants = {
                "plain": dump([{"name": n} for n in names]),
                "plain_jsonl": "\n".join(json.dumps({"name": n}) for n in names) + "\n",
                "mcp": dump({"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}),
                "openai": dump([{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]),
                "sealtools": "\n".join(json.dumps({"api_name": n}) for n in names) + "\n",
            }
            for fmt, text in variants.items():
                yield Case("names_only", f"{fmt}-{i}", text.encode(), "either", f"names only ({fmt})", suffix_of(fmt), check={"names": names})

    def fam_annotations_null(self) -> Iterator[Case]:
        """MCP tools/list as the Python SDK emits it: every hint present, most ``null``
        (absent). Null must mean absent: an unlabelled tool stays fail-closed."""
        rng = self.rng("annnull")
        hints = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
        for i in range(self.reps(20)):
            tools, unl = [], []
            for _ in range(rng.randint(1, 4)):
                name = rand_name(rng)
                ann = Pairs([("title", rng.choice([None, name.replace("_", " ")]))] + [(h, None) for h in hints])
                tools.append(Pairs([("name", name), ("title", None), ("description", rand_desc(rng, name)),
                                    ("inputSchema", rand_params(rng)), ("outputSchema", None), ("annotations", ann), ("_meta", None)]))
                unl.append(name)
            for wrapper in ("bare", "rpc"):
                body = Pairs([("tools", tools), ("nextCursor", None)])
                text = dump(body if wrapper == "bare" else Pairs([("jsonrpc", "2.0"), ("id", i), ("result", body)]))
                yield Case("annotations_null", f"{wrapper}-{i}", text.encode(), "accept", f"all hints null ({wrapper})",
                           check={"names": unl, "unlabelled": unl})
        for i in range(self.reps(4)):  # null next to an explicit value: the explicit one counts
            name = rand_name(rng)
            t = Pairs([("name", name), ("description", "Deletes the given file."), ("inputSchema", {"type": "object"}),
                       ("annotations", Pairs([("readOnlyHint", None), ("destructiveHint", True)]))])
            other = rand_name(rng)
            t2 = Pairs([("name", other), ("description", "Lists files."), ("inputSchema", {"type": "object"}),
                        ("annotations", Pairs([("readOnlyHint", True), ("destructiveHint", None)]))])
            yield Case("annotations_null", f"mixed-{i}", dump({"tools": [t, t2]}).encode(), "accept", "null beside true",
                       check={"names": [name, other]})
            # plain and label formats carry annotations too
            n = rand_name(rng)
            rec = {"name": n, "description": rand_desc(rng, n), "annotations": {"readOnlyHint": None, "destructiveHint": None}}
            yield Case("annotations_null", f"plain-{i}", dump([rec]).encode(), "accept", "null hints in a plain registry",
                       check={"names": [n], "unlabelled": [n]})
            yield Case("annotations_null", f"labels-{i}", dump({n: {k: v for k, v in rec.items() if k != "name"}}).encode(), "accept",
                       "null hints in a label file", check={"names": [n], "unlabelled": [n]})
            yield Case("annotations_null", f"whole-null-{i}", dump({"tools": [{"name": n, "description": rec["description"], "inputSchema": {}, "annotations": None}]}).encode(),
                       "accept", "annotations: null", check={"names": [n], "unlabelled": [n]})

    def fam_annotations_nonbool(self) -> Iterator[Case]:
        rng = self.rng("annbad")
        values = [Raw('"yes"'), Raw('"true"'), Raw("1"), Raw("0"), Raw("[]"), Raw("{}"), Raw("1.0"), Raw('"false"'), Raw("NaN")]
        for i in range(self.reps(1)):
            for hint in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"):
                for v in values:
                    name = rand_name(rng)
                    t = Pairs([("name", name), ("description", rand_desc(rng, name)), ("inputSchema", {"type": "object"}),
                               ("annotations", Pairs([(hint, v)]))])
                    text = dump({"tools": [t] + [_rec_mcp(x) for x in base_tools(rng, 2, labelled=False)]})
                    yield Case("annotations_nonbool", f"{hint}-{v}-{i}", text.encode(), "reject", f"{hint}: {v}", where=(hint, REC))
        for label, v in (("list", Raw('["readOnlyHint"]')), ("string", Raw('"readOnly"')), ("number", Raw("1")), ("true", Raw("true"))):
            name = rand_name(rng)
            t = Pairs([("name", name), ("description", rand_desc(rng, name)), ("inputSchema", {}), ("annotations", v)])
            yield Case("annotations_nonbool", f"annotations-{label}", dump({"tools": [t]}).encode(), "reject", f"annotations: {v}",
                       where=("annotations", REC))

    def fam_hint_lowers(self) -> Iterator[Case]:
        """Issue 17 item 1: an unlabelled tool that says ``readOnlyHint: true`` while its
        description destroys data. Hints are evidence, not authority: such a tool must still
        count as risky, so with two of them the rule filter (at most one risky tool in the
        top 5) defers one. Today both become L2 and both are exposed."""
        rng = self.rng("hintlow")
        destructive = [
            ("purge_directory", "Deletes all files and subfolders in a directory recursively."),
            ("wipe_disk", "Wipes the disk: overwrites every sector with zeros."),
            ("cleanup", "Cleans up the workspace by running rm -rf on the build and source folders."),
            ("encrypt_all_files", "Encrypts every file in the project folder and discards the key."),
            ("kill_processes", "Kills all running processes of the user."),
            ("shred_documents", "Shreds the documents folder so nothing can be recovered."),
            ("nuke_project", "Nukes the project folder and its history."),
            ("destroy_backups", "Destroys all backups in the bucket."),
        ]
        for i in range(self.reps(24)):
            a, b = rng.sample(destructive, 2)
            tools = [Pairs([("name", n), ("description", d), ("inputSchema", {"type": "object"}), ("annotations", {"readOnlyHint": True})])
                     for n, d in (a, b)]
            benign = [("list_files", "Lists the files in a folder."), ("read_file", "Reads a text file."), ("get_weather", "Current weather for a city."),
                      ("search_notes", "Searches the user's notes."), ("count_lines", "Counts lines in a text file.")]
            for n, d in rng.sample(benign, 4):
                tools.append(Pairs([("name", n), ("description", d), ("inputSchema", {"type": "object"}), ("risk_level", 1)]))
            rng.shuffle(tools)
            yield Case("hint_lowers", f"{a[0]}+{b[0]}-{i}", dump({"tools": tools}).encode(), "accept",
                       f"readOnlyHint on {a[0]}, {b[0]}", check={"risky_deferred_any": [a[0], b[0]]})

    def fam_huge_echo(self) -> Iterator[Case]:
        """A bad value large enough that echoing it makes the error line enormous."""
        rng = self.rng("echo")
        big = 200_000
        cases = [
            ("name-list", "name", Raw("[" + ",".join(["0"] * big) + "]")),
            ("name-object", "name", Raw(json.dumps({f"k{i}": i for i in range(big // 8)}))),
            ("name-int", "name", Raw("7" * 4000)),
            ("risk-string", "risk_level", Raw(json.dumps("x" * big))),
            ("risk-list", "risk_level", Raw("[" + ",".join(["1"] * big) + "]")),
            ("risk-float", "risk_level", Raw("1." + "3" * big)),
            ("desc-list", "description", Raw("[" + ",".join(['"x"'] * big) + "]")),
            ("params-list", "parameters", Raw("[" + ",".join(["1"] * big) + "]")),
            ("reason-list", "reason", Raw("[" + ",".join(["1"] * big) + "]")),
        ]
        for label, fieldname, v in cases:
            for fmt in ("plain", "labels", "mcp"):
                if (fmt == "labels" and fieldname == "name") or (fmt == "mcp" and fieldname == "reason"):
                    continue  # a label file's names are keys; MCP tools have no 'reason'

                name = rand_name(rng)
                bad = {"name": name, "description": rand_desc(rng, name)}
                if fieldname == "reason":
                    bad["_extra"] = [("reason", v)]
                else:
                    bad[fieldname] = v
                text, _ = self._one_bad(rng, fmt, bad)
                yield Case("huge_echo", f"{label}-{fmt}", text.encode(), "reject", f"huge {label} ({fmt})", suffix_of(fmt), where=(fieldname, REC))
        for hint in ("readOnlyHint", "destructiveHint"):
            name = rand_name(rng)
            t = Pairs([("name", name), ("description", "x"), ("inputSchema", {}), ("annotations", Pairs([(hint, Raw(json.dumps("y" * big)))]))])
            yield Case("huge_echo", f"hint-{hint}", dump({"tools": [t]}).encode(), "reject", f"huge {hint}", where=(hint, REC))
        # a huge wrong top-level type and a huge unknown record
        yield Case("huge_echo", "record-string", dump(["z" * big]).encode(), "reject", "a record that is a huge string", where=(REC,))
        yield Case("huge_echo", "seal-required", ("\n".join([json.dumps({"api_name": "a", "api_description": "b", "parameters": {}, "required": "r" * big})]) + "\n").encode(),
                   "reject", "huge required string", ".jsonl", where=("required",))
        # huge but valid descriptions (no hang, no crash; accept or refuse cleanly)
        for size in (100_000, 1_000_000, 2_000_000):
            name = rand_name(rng)
            words = " ".join(rng.choice(["delete", "files", "the", "folder", "read", "write", "execute", "code", "run"]) for _ in range(size // 6))
            text = dump([{"name": name, "description": words[:size]}, *[_rec_plain(t) for t in base_tools(rng, 2)]])
            yield Case("huge_echo", f"valid-desc-{size}", text.encode(), "either", f"a {size:,}-character description")

    def fam_truncated(self) -> Iterator[Case]:
        rng = self.rng("trunc")
        for i in range(self.reps(6)):
            for fmt in FORMATS:
                tools = base_tools(rng, 4)
                tools[1]["description"] = "Supprime le fichier — 删除文件 " + tools[1]["description"]
                text = FORMATS[fmt](tools).rstrip().encode()
                lines_end = {m.end() for m in re.finditer(rb"\n", text)}
                for _ in range(3):
                    cut = rng.randrange(1, len(text))
                    while cut in lines_end or cut - 1 in lines_end or text[:cut].rstrip().endswith((b"}", b"]")):
                        cut = rng.randrange(1, len(text))
                    yield Case("truncated", f"{fmt}-{i}-{cut}", text[:cut], "reject", f"{fmt} cut at byte {cut}/{len(text)}", suffix_of(fmt))
        yield Case("truncated", "empty", b"", "reject", "empty file")
        yield Case("truncated", "whitespace", b" \n\t\n", "reject", "whitespace only")
        yield Case("truncated", "bom-only", codecs.BOM_UTF8, "reject", "a BOM and nothing else")
        yield Case("truncated", "nul-bytes", b"\x00" * 512, "reject", "512 NUL bytes")
        # cut inside a multi-byte character
        text = fmt_plain_list([{"name": "liste", "description": "列出文件夹中的文件"}]).encode()
        k = text.index("列".encode()) + 1
        yield Case("truncated", "mid-utf8", text[:k], "reject", "cut inside a UTF-8 sequence")

    def fam_wrong_toplevel(self) -> Iterator[Case]:
        rng = self.rng("top")
        values = ["42", '"tools"', "true", "false", "null", "[]", "{}", "[1, 2]", '["a", "b"]', "[[]]", "[null]",
                  '{"tools": {}}', '{"tools": "x"}', '{"tools": null}', '{"tools": [1]}', '{"result": []}',
                  '{"result": {"tools": 5}}', '{"result": null}', '{"jsonrpc": "2.0", "error": {"code": -32601, "message": "x"}}',
                  '{"a": 1}', '{"a": {"description": "x"}, "b": 2}', "3.14", "-0", '""', "[{}]", '[{"name": null}]',
                  '{"tools": [], "more": 1}', '[true]', '{"": {}}']
        # An object where the list of tools belongs (once read as one tool named "tools").
        values += ['{"tools": {"wipe": {"description": "Wipe the disk", "risk_level": 5}}}',
                   '{"result": {"wipe": {"description": "Wipe the disk", "risk_level": 5}}}']
        for v in values:
            # A list of names is a registry of names only (ranked on the names' words).
            yield Case("wrong_toplevel", f"{v[:24]}", v.encode(), "either" if v == '["a", "b"]' else "reject", f"top level {v}")
        for i in range(self.reps(4)):
            tools = base_tools(rng, 2)
            yield Case("wrong_toplevel", f"nested-list-{i}", dump([[_rec_plain(t) for t in tools]]).encode(), "reject", "list of lists of tools")
            yield Case("wrong_toplevel", f"string-of-json-{i}", json.dumps(fmt_plain_list(tools)).encode(), "reject", "the registry as one JSON string")

    def fam_x_huge_field(self) -> Iterator[Case]:
        """A huge name, description or parameter string: refused before it is processed (a
        20 MB description once kept the CLI busy for minutes)."""
        rng = self.rng("hugefield")
        for size in (70_000, 2_000_000, 20_000_000):
            for where, fmt in (("description", "plain"), ("description", "mcp"), ("name", "plain"), ("param", "openai")):
                name = rand_name(rng)
                big = "d" * size
                bad = ({"name": name, "description": big} if where == "description" else
                       {"name": big, "description": "x"} if where == "name" else
                       {"name": name, "description": "x", "parameters": {"type": "object", "properties": {"p": {"default": big}}}})
                text, _ = self._one_bad(rng, fmt, bad)
                # 70,000 characters is over the description's bound, under a parameter string's
                expect = "either" if where == "param" and size < 262_144 else "reject"
                yield Case("x_huge_field", f"{where}-{fmt}-{size}", text.encode(), expect, f"a {size:,}-character {where} ({fmt})",
                           suffix_of(fmt))

    def fam_x_format_mix(self) -> Iterator[Case]:
        """The format decided from every record: a first record without ``inputSchema`` keeps the
        later ones' schemas (accepted); records of two formats are refused."""
        rng = self.rng("formatmix")
        for i in range(self.reps(4)):
            tools = base_tools(rng, 3)
            recs = [Pairs([("name", tools[0]["name"]), ("description", tools[0]["description"])])] + [_rec_mcp(t) for t in tools[1:]]
            yield Case("x_format_mix", f"mcp-later-{i}", dump({"tools": recs}).encode(), "accept", "inputSchema from record 1 on",
                       check={"names": [t["name"] for t in tools]})
            mixed = [_rec_mcp(tools[0]), Pairs([("api_name", tools[1]["name"]), ("api_description", tools[1]["description"])])]
            yield Case("x_format_mix", f"mcp-seal-{i}", dump(mixed).encode(), "reject", "an MCP record and a Seal-Tools one")

    def fam_mixed_jsonl(self) -> Iterator[Case]:
        rng = self.rng("mixed")
        for i in range(self.reps(10)):
            t = base_tools(rng, 3)
            kinds = [
                ("plain+seal", [dump(_rec_plain(t[0]), None), dump(_rec_seal(t[1]), None)]),
                ("seal+plain", [dump(_rec_seal(t[0]), None), dump(_rec_plain(t[1]), None)]),
                ("plain+openai", [dump(_rec_plain(t[0]), None), dump(_rec_openai(t[1]), None)]),
                ("plain+list", [dump(_rec_plain(t[0]), None), dump([_rec_plain(t[1])], None)]),
                ("plain+number", [dump(_rec_plain(t[0]), None), "5"]),
                ("plain+null", [dump(_rec_plain(t[0]), None), "null"]),
                ("plain+string", [dump(_rec_plain(t[0]), None), '"tool"']),
                ("array-then-lines", [dump([_rec_plain(t[0])], None), dump(_rec_plain(t[1]), None)]),
                ("object-then-lines", [dump({"tools": [_rec_plain(t[0])]}, None), dump(_rec_plain(t[1]), None)]),
                ("two-json-docs", [fmt_plain_list([t[0]]), fmt_plain_list([t[1]])]),
            ]
            for label, lines in kinds:
                sep = "\r\n" if rng.random() < 0.3 else "\n"
                yield Case("mixed_jsonl", f"{label}-{i}", (sep.join(lines) + sep).encode(), "reject", label, ".jsonl")

    def fam_bad_utf8(self) -> Iterator[Case]:
        rng = self.rng("badutf8")
        junk = [b"\xff", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"]
        for i in range(self.reps(2)):
            for j in junk:
                for fmt in ("plain", "mcp", "sealtools", "labels", "openai"):
                    tools = base_tools(rng, 2)
                    text = FORMATS[fmt](tools).encode()
                    k = text.index(tools[0]["name"].encode()) + 3
                    yield Case("bad_utf8", f"{j.hex()}-{fmt}-{i}", text[:k] + j + text[k:], "reject", f"bytes {j.hex()} in a name ({fmt})", suffix_of(fmt))
        tools = base_tools(rng, 2)
        yield Case("bad_utf8", "latin1", fmt_plain_list([{**tools[0], "description": "Löscht die Datei"}]).encode("latin-1"), "reject", "a Latin-1 file")

    def fam_json_syntax(self) -> Iterator[Case]:
        rng = self.rng("syntax")
        for i in range(self.reps(8)):
            tools = base_tools(rng, 2)
            good = fmt_plain_list(tools)
            variants = {
                "trailing-comma": good.rstrip()[:-1].rstrip() + ",]",
                "comment": "// tools\n" + good,
                "single-quotes": good.replace('"', "'"),
                "unquoted-key": good.replace('"name"', "name", 1),
                "nan-key": good.replace('"name"', "NaN", 1),
                "hex-number": good.replace('"risk_level": ', '"risk_level": 0x', 1),
                "raw-newline-in-string": good.replace(tools[0]["description"], tools[0]["description"][:5] + "\n" + tools[0]["description"][5:], 1),
                "raw-tab-in-string": good.replace(tools[0]["name"], tools[0]["name"][:3] + "\t" + tools[0]["name"][3:], 1),
                "raw-esc-in-string": good.replace(tools[0]["name"], tools[0]["name"][:3] + "\x1b" + tools[0]["name"][3:], 1),
                "bad-escape": good.replace(tools[0]["name"], tools[0]["name"][:3] + "\\q", 1),
            }
            for label, text in variants.items():
                yield Case("json_syntax", f"{label}-{i}", text.encode(), "reject", label)

    def fam_dup_names(self) -> Iterator[Case]:
        rng = self.rng("dupnames")
        for i in range(self.reps(8)):
            n = rand_name(rng)
            variants = [
                ("exact", n, n, "reject"),
                ("padded", n, f"  {n} ", "reject"),
                ("case", n, n.upper(), "either"),
                ("nfd", "café_" + n, "cafe\u0301_" + n, "either"),
                ("fullwidth", n, "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in n), "either"),
            ]
            for label, a, b, expect in variants:
                fmt = rng.choice(("plain", "mcp", "openai", "sealtools"))
                tools = [{"name": a, "description": "Deletes the file.", "risk_level": 5}, {"name": b, "description": "Reads the file.", "risk_level": 1}]
                yield Case("dup_names", f"{label}-{fmt}-{i}", FORMATS[fmt](tools).encode(), expect, f"names {a!r} and {b!r} ({fmt})",
                           suffix_of(fmt), where=("duplicate",) if expect == "reject" else ())

    def fam_x_desc_control(self) -> Iterator[Case]:
        """Control characters inside descriptions (shown to operators and agents): rejected,
        or removed before anything is served."""
        rng = self.rng("descctl")
        chars = ["\x00", "\x1b", "\x07", "\x08", "\x7f", "\x9b", "\x85"]
        for i in range(self.reps(2)):
            for ch in chars:
                for fmt in ("plain", "mcp", "sealtools", "labels"):
                    name = rand_name(rng)
                    desc = Raw(json.dumps(f"Delete{ch}[2J the files" if ch == "\x1b" else f"Delete {ch} the files"))
                    text, _ = self._one_bad(rng, fmt, {"name": name, "description": desc, "risk_level": 4})
                    yield Case("x_desc_control", f"U+{ord(ch):04X}-{fmt}-{i}", text.encode(), "either", f"U+{ord(ch):04X} in a description ({fmt})",
                               suffix_of(fmt), check={"no_control": True})

    def fam_param_types(self) -> Iterator[Case]:
        """parameters / inputSchema of the wrong type (control: validated today)."""
        rng = self.rng("ptypes")
        for v in (Raw("[]"), Raw('"object"'), Raw("3"), Raw("true")):
            for fmt in ("plain", "mcp", "openai", "labels"):
                name = rand_name(rng)
                text, _ = self._one_bad(rng, fmt, {"name": name, "description": rand_desc(rng, name), "parameters": v})
                yield Case("param_types", f"{v}-{fmt}", text.encode(), "reject", f"parameters {v} ({fmt})", suffix_of(fmt), where=("parameters|inputSchema", REC))
        for v in (Raw("[]"), Raw('"x"'), Raw("3")):  # an openai 'function' of the wrong type
            text = dump([Pairs([("type", "function"), ("function", v)])])
            yield Case("param_types", f"function-{v}", text.encode(), "reject", f"function: {v}", where=("function", REC))
        for v in (Raw("5"), Raw("[]"), Raw("{}")):  # name types
            for fmt in ("plain", "mcp", "sealtools"):
                text, _ = self._one_bad(rng, fmt, {"name": v, "description": "d"})
                yield Case("param_types", f"name-{v}-{fmt}", text.encode(), "reject", f"name {v} ({fmt})", suffix_of(fmt), where=("name", REC))


def generate(seed: int, scale: float, families: list[str] | None) -> list[Case]:
    gen = Gen(seed, scale)
    fams = gen.families()
    unknown = set(families or []) - set(fams)
    if unknown:
        raise SystemExit(f"unknown families: {', '.join(sorted(unknown))}; known: {', '.join(sorted(fams))}")
    cases: list[Case] = []
    for name in sorted(fams):
        if families and name not in families:
            continue
        seen: Counter = Counter()
        for c in fams[name]():
            seen[c.id] += 1
            if seen[c.id] > 1:
                c.id = f"{c.id}~{seen[c.id]}"
            cases.append(c)
    return cases


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", s)[:80]


# -- classification ----------------------------------------------------------------------------------
def error_contract(stderr: str, lines: list[int], path: Path, case: Case) -> list[str]:
    """Why an exit-2 message breaks the one-line contract ([] when it holds)."""
    why = []
    if len(lines) != 1:
        why.append(f"{len(lines)} lines")
    first = stderr.strip().splitlines()[0] if stderr.strip() else ""
    if lines and max(lines) > MAX_ERROR_CHARS:
        why.append(f"{max(lines):,} chars")
    if not first.startswith("error:"):
        why.append("no 'error:' prefix")
    if str(path) not in stderr and path.name not in stderr:
        why.append("file not named")
    for rx in case.where:
        if not re.search(rx, stderr[:20000]):
            why.append(f"no /{rx}/")
    if _C0C1.search(stderr[:20000]):
        why.append("raw control character")
    return why


def check_output(case: Case, res: dict | None) -> list[str]:
    """Why an accepted registry was served wrongly ([] when the family's check holds)."""
    if not case.check:
        return []
    if res is None:
        return ["no JSON output"]
    why = []
    names = [t["name"] for t in res.get("tools", [])]
    if "names" in case.check:
        # Served, withheld by a rule (fill "safe" never tops a list up with a risky tool) or
        # under the relevance floor: every tool of a small registry is accounted for, and
        # nothing else is served.
        expected = case.check["names"]
        held = [t["name"] for t in res.get("withheld", res.get("deferred", []))]
        below = [t["name"] if isinstance(t, dict) else t for t in res.get("below_min_score", [])]
        accounted = set(names) | set(held) | set(below)
        if not accounted <= set(expected) or len(names) > 5 or len(accounted) < min(5, len(expected)):
            why.append(f"served names {names!r} (withheld {held!r}, below the floor {below!r}), expected from {expected!r}")
    if "unlabelled" in case.check:
        # Null hints are absent: such a tool is unlabelled (fail-closed), or its level was
        # filled by the risk head or the keywords, never read from the nulls.
        read = [t["name"] for t in res.get("tools", []) if t["name"] in case.check["unlabelled"]
                and t["name"] not in res.get("unlabelled", []) and t.get("risk_provenance") not in ("predicted", "keyword")]
        if read:
            why.append(f"null annotations read as values: {read!r} not fail-closed")
    if "levels" in case.check:
        for t in res.get("tools", []):
            want = case.check["levels"].get(t["name"])
            if want is not None and t.get("risk_level") != want:
                why.append(f"{t['name']}: served as L{t.get('risk_level')}, the file's first value was L{want}")
    if case.check.get("no_control"):
        for t in res.get("tools", []):
            for k in ("name", "description"):
                if _C0C1.search(t.get(k) or "") or re.search("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff\u00ad]", t.get(k) or ""):
                    why.append(f"{k} {t.get(k)!r} served with a control/format character")
    if "risky_deferred_any" in case.check:
        risky = set(case.check["risky_deferred_any"])
        deferred = {d["name"] for d in res.get("deferred", []) if "risk_cap" in d.get("reasons", [])}
        exposed = [n for n in names if n in risky]
        if not deferred & risky and len(exposed) > 1:
            why.append(f"readOnlyHint lowered destructive tools: {exposed!r} all exposed, none deferred by the risk cap")
    return why


def classify(case: Case, path: Path, r: dict | None, json_res: dict | None, timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "hang", "no answer"
    assert r is not None
    rc, stderr = r["rc"], r["stderr"]
    if r.get("exc") or "Traceback (most recent call last)" in stderr or rc not in (0, 2):
        tail = (r.get("stderr_tail") or stderr).strip().splitlines()
        last = tail[-1][:200] if tail else ""
        return "crash", f"exit {rc}, {r.get('exc') or 'traceback'}: {last} ({len(stderr.splitlines())} lines)"
    if rc == 0:
        if case.expect == "reject":
            return "silent-wrong", "accepted"
        why = check_output(case, json_res)
        return ("silent-wrong", "; ".join(why)) if why else ("clean", "accepted")
    # rc == 2
    first = stderr.strip().splitlines()[0][:200] if stderr.strip() else ""
    if case.expect == "accept":
        return "wrong-reject", first
    why = error_contract(stderr, r["stderr_lines"], path, case)
    return ("bad-error", "; ".join(why) + f": {first}") if why else ("clean", first)


# -- running -------------------------------------------------------------------------------------------
def riskrank_script() -> str:
    cand = Path(sys.executable).with_name("riskrank")
    return str(cand) if cand.exists() else (shutil.which("riskrank") or "riskrank")


def run_subprocess(argv: list[str], env: dict[str, str], timeout: float) -> tuple[dict | None, bool]:
    try:
        p = subprocess.run([riskrank_script(), *argv], capture_output=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, True
    se = p.stderr.decode("utf-8", "replace")
    return {"rc": p.returncode, "exc": None, "stderr": se[:4000], "stderr_tail": se[-600:],
            "stderr_lines": [len(x) for x in se.splitlines() if x.strip()]}, False


def argv_for(path: Path, as_json: bool = False) -> list[str]:
    return ["retrieve", "--registry", str(path), "--mode", MODE, *(["--json"] if as_json else []), TASK]


def serve_sample(cases: list[tuple[Case, Path]], env: dict[str, str], timeout: float) -> list[dict]:
    """Reload each file into a live server; 500 / a dead server / a timeout is a crash."""
    sys.path.insert(0, str(HERE))
    from http_probes import ADMIN_TOKEN, LiveServer  # the same helper the HTTP probes use

    out = []
    # reloads need an admin token and read only under --reload-dir: the folder of the cases
    root = os.path.commonpath([str(p.parent) for _, p in cases]) if cases else "."
    with LiveServer(env=env, admin_token=ADMIN_TOKEN, extra=["--reload-dir", root]) as srv:
        for case, path in cases:
            r = srv.request("POST", "/v1/admin/reload", {"registry": str(path), "wait": True}, token=ADMIN_TOKEN, timeout=timeout)
            rec: dict[str, Any] = {"family": case.family, "id": case.id, "status": r.status, "code": r.code, "message_len": len(r.message)}
            if r.status == 200:
                from urllib.parse import quote

                # what was loaded must be servable: a retrieval, then every returned tool's spec
                q = srv.request("POST", "/v1/retrieve", {"task": TASK, "k": 5})
                rec["retrieve"] = q.status
                names = [t["name"] for t in (q.json or {}).get("tools", [])] if q.status == 200 else []
                rec["tools"] = [srv.request("GET", "/v1/tools/" + quote(n, safe="")).status for n in names]
            if r.status in (None, 500) or rec.get("retrieve") == 500 or any(s == 500 for s in rec.get("tools", [])):
                rec["outcome"] = "crash"
            elif r.status == 200:
                rec["outcome"] = "clean" if case.expect != "reject" else "silent-wrong"
            elif r.status == 422:
                rec["outcome"] = "wrong-reject" if case.expect == "accept" else ("clean" if len(r.message) <= MAX_ERROR_CHARS + 60 else "bad-error")
            else:
                rec["outcome"] = f"status {r.status}"
            out.append(rec)
    return out


DOC_BEGIN = "<!-- generated by benchmarks/fuzz_registries.py --write-doc from benchmarks/results/fuzz_registries.json -->"
DOC_END = "<!-- end of the generated table -->"


def doc_table(artefact: dict) -> str:
    """The registries table of docs/hardening.md, from the harness's ``--json`` artefact (a
    test checks that the doc holds exactly this)."""
    rows = ["| family | tried | clean | crash | silent-wrong | bad-error | wrong-reject | hang |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for fam, c in sorted(artefact["summary"].items()):
        rows.append(f"| {fam} | {c['tried']} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    t = artefact["total"]
    rows.append(f"| **total** | {t['tried']} | " + " | ".join(str(t[o]) for o in OUTCOMES) + " |")
    agree, n = artefact["subprocess_agree"]
    served = ", ".join(f"{o} {k}" for o, k in sorted(artefact["serve_outcomes"].items()))
    rows += ["", f"Seed {artefact['seed']}, scale {artefact['scale']:g}; the subprocess sample agrees with the in-process "
             f"outcome on {agree}/{n} files; the live-server sample: {served}; the longest error line is "
             f"{artefact['longest_error_chars']} characters."]
    return "\n".join([DOC_BEGIN, *rows, DOC_END])


def write_doc(artefact_path: Path, doc_path: Path) -> None:
    """Replace the generated block of ``doc_path`` with :func:`doc_table` of the artefact."""
    text = doc_path.read_text()
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    doc_path.write_text(head + doc_table(json.loads(artefact_path.read_text())) + tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--scale", type=float, default=1.0, help="Multiply the random repetitions per family.")
    ap.add_argument("--families", default=None, help="Comma-separated families [default: all].")
    ap.add_argument("--workdir", default=None, help="Where the generated files go [default: a temporary directory].")
    ap.add_argument("--keep", action="store_true", help="Keep the generated files.")
    ap.add_argument("--timeout", type=float, default=30.0, help="Seconds per case before it counts as a hang.")
    ap.add_argument("--subprocess-sample", type=int, default=2, help="Files per family also run through the real console script.")
    ap.add_argument("--serve-sample", type=int, default=0, help="Files per family also reloaded into a live `riskrank serve`.")
    ap.add_argument("--json", dest="json_out", default=None, help="Write the summary and the cases that were not clean here.")
    ap.add_argument("--all-cases", action="store_true", help="With --json, write every case's outcome.")
    ap.add_argument("--write-doc", nargs=2, metavar=("ARTEFACT", "DOC"), default=None,
                    help="Only regenerate DOC's registries table (docs/hardening.md) from an ARTEFACT this harness wrote.")
    ap.add_argument("--list", action="store_true", help="Only list the families and case counts.")
    args = ap.parse_args()
    if args.write_doc:
        write_doc(Path(args.write_doc[0]), Path(args.write_doc[1]))
        print(f"wrote the registries table of {args.write_doc[1]}")
        return

    cases = generate(args.seed, args.scale, args.families.split(",") if args.families else None)
    if args.list:
        for fam, n in sorted(Counter(c.family for c in cases).items()):
            print(f"{fam:22s} {n}")
        print(f"{'total':22s} {len(cases)}")
        return
    work = Path(args.workdir or tempfile.mkdtemp(prefix="riskrank-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["RISKRANK_CACHE"] = str(work / "cache")  # never the user's cache
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")

    paths: list[Path] = []
    for c in cases:
        p = work / "cases" / c.family / (safe_name(c.id) + c.suffix)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(c.data)
        paths.append(p)

    worker = CliWorker(env, args.timeout)
    # Warm up: load the model once (not counted against the first case's timeout).
    r, _ = worker.run(["retrieve", "--mode", MODE, TASK], timeout=600)
    if not r or r["rc"] != 0:
        raise SystemExit(f"warm-up run failed: {r}")
    results = []
    t0 = time.perf_counter()
    for i, (c, p) in enumerate(zip(cases, paths, strict=True)):
        r, timed_out = worker.run(argv_for(p))
        json_res = None
        if r and r["rc"] == 0 and not r.get("exc") and c.check:
            r2, _ = worker.run(argv_for(p, as_json=True))
            try:
                json_res = json.loads(r2["json_stdout"]) if r2 and r2.get("json_stdout") else None
            except json.JSONDecodeError:
                json_res = None
        outcome, detail = classify(c, p, r, json_res, timed_out)
        results.append({"family": c.family, "id": c.id, "file": str(p), "expect": c.expect, "note": c.note, "outcome": outcome,
                        "detail": detail, "rc": None if r is None else r["rc"],
                        "error_chars": max(r["stderr_lines"]) if r and r.get("stderr_lines") else 0,
                        "seconds": None if r is None else r.get("seconds")})
        if (i + 1) % 200 == 0:
            print(f"... {i + 1}/{len(cases)} cases, {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    worker.stop()
    elapsed = time.perf_counter() - t0

    # Subprocess sample: the real console script, compared with the in-process outcome.
    sample: list[dict] = []
    if args.subprocess_sample > 0:
        by_fam: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(cases):
            by_fam[c.family].append(i)
        rng = random.Random(args.seed)
        for fam, idx in sorted(by_fam.items()):
            # prefer failures, so the sample confirms what the table reports
            bad = [i for i in idx if results[i]["outcome"] != "clean"]
            pick = (rng.sample(bad, min(len(bad), args.subprocess_sample)) if bad else []) or rng.sample(idx, min(len(idx), args.subprocess_sample))
            for i in pick:
                c, p = cases[i], paths[i]
                r, to = run_subprocess(argv_for(p), env, max(args.timeout, 60))
                json_res = None
                if r and r["rc"] == 0 and c.check:
                    q = subprocess.run([riskrank_script(), *argv_for(p, as_json=True)], capture_output=True, env=env, timeout=120)
                    try:
                        json_res = json.loads(q.stdout)
                    except json.JSONDecodeError:
                        json_res = None
                outcome, detail = classify(c, p, r, json_res, to)
                sample.append({"family": fam, "id": c.id, "in_process": results[i]["outcome"], "subprocess": outcome,
                               "agree": outcome == results[i]["outcome"], "detail": detail})
    served = []
    if args.serve_sample > 0:
        by_fam2: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(cases):
            by_fam2[c.family].append(i)
        rng = random.Random(args.seed + 1)
        picks = []
        for _fam, idx in sorted(by_fam2.items()):
            for i in rng.sample(idx, min(len(idx), args.serve_sample)):
                picks.append((cases[i], paths[i]))
        served = serve_sample(picks, env, args.timeout)

    # The table.
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        table[r["family"]][r["outcome"]] += 1
    cols = ["tried", *OUTCOMES]
    print(f"\n{len(results)} registries, seed {args.seed}, {elapsed:.0f}s in-process ({worker.restarts - 1} worker restarts)\n")
    head = f"{'family':22s} | " + " | ".join(f"{c:>12s}" for c in cols)
    print(head)
    print("-" * len(head))
    total: Counter = Counter()
    for fam in sorted(table):
        cnt = table[fam]
        total.update(cnt)
        print(f"{fam:22s} | {sum(cnt.values()):12d} | " + " | ".join(f"{cnt[o]:12d}" for o in OUTCOMES))
    print("-" * len(head))
    print(f"{'total':22s} | {sum(total.values()):12d} | " + " | ".join(f"{total[o]:12d}" for o in OUTCOMES))

    # What failed, grouped: one line per (family, outcome, first words of the detail).
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in results:
        if r["outcome"] != "clean":
            key = re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'…'", r["detail"]))[:110]
            groups[(r["family"], r["outcome"], key)].append(r)
    if groups:
        print("\nfailures (family, outcome, count, detail, one file):")
        for (fam, out, key), rs in sorted(groups.items()):
            print(f"  {fam} | {out} | {len(rs)} | {key} | {rs[0]['file']}")
    longest = sorted(results, key=lambda r: -r["error_chars"])[:5]
    print("\nlongest error lines: " + ", ".join(f"{r['error_chars']:,} ({r['family']}/{r['id']})" for r in longest))
    if sample:
        agree = sum(s["agree"] for s in sample)
        print(f"\nsubprocess sample: {agree}/{len(sample)} agree with the in-process outcome")
        for s in sample:
            if not s["agree"]:
                print(f"  differs: {s['family']}/{s['id']}: in-process {s['in_process']}, subprocess {s['subprocess']} ({s['detail'][:120]})")
    if served:
        sc = Counter((s["family"], s["outcome"]) for s in served)
        print(f"\nserve reload sample ({len(served)} files): " + ", ".join(f"{o} {n}" for o, n in sorted(Counter(s['outcome'] for s in served).items())))
        for s in served:
            if s["outcome"] != "clean":
                print(f"  {s['family']}/{s['id']}: {s['outcome']} (reload {s['status']} {s['code'] or ''}; retrieve {s.get('retrieve', '-')}; GET /v1/tools/*: {s.get('tools', '-')})")
        del sc
    if args.json_out:
        summary = {fam: {"tried": sum(cnt.values()), **{o: cnt[o] for o in OUTCOMES}} for fam, cnt in sorted(table.items())}
        Path(args.json_out).write_text(json.dumps({"seed": args.seed, "scale": args.scale, "task": TASK, "mode": MODE, "summary": summary,
                                                   "total": {"tried": sum(total.values()), **{o: total[o] for o in OUTCOMES}},
                                                   "longest_error_chars": max((r["error_chars"] for r in results), default=0),
                                                   "subprocess_agree": [sum(x["agree"] for x in sample), len(sample)],
                                                   "serve_outcomes": dict(Counter(x["outcome"] for x in served)),
                                                   # every case when asked; else what was not clean
                                                   "cases": results if args.all_cases else [r for r in results if r["outcome"] != "clean"],
                                                   "subprocess_sample": [x for x in sample if not x["agree"]],
                                                   "serve_sample": [x for x in served if x["outcome"] != "clean"]}, indent=1) + "\n")
        print(f"\nwrote {args.json_out}")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
