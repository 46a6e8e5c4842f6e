"""API-Bank (levels 1 and 2) as a tool-retrieval corpus.

Files: ``api-bank/data/all_apis.csv``, one API per row: the name in ``类名`` (class name), its
type in ``类型`` and scenario in ``应用场景`` (Chinese), and ``api_info``, a Python snippet
with ``description = "..."``, ``input_parameters`` and ``output_parameters``; and the
dialogues ``api-bank/lv1-lv2-samples/<level dir>/*.jsonl``, one turn per line,
``{"role": "User"|"AI", "text"}`` or ``{"role": "API", "api_name", "param_dict", "result"}``.

Pairs: one per dialogue. The query is the User turns joined; the gold tools are the
``api_name`` of every API turn except ``ToolSearcher`` (level 2's search step, not a tool of
the task). A dialogue that makes no other call (three do) has no gold and is skipped.

Tools: the 101 APIs. ``api_info`` is read with :mod:`ast` (parsed, never executed); the
description is its ``description`` string. One upstream ``api_info`` holds no snippet at all
(``ImageCaption``'s is ``"."``): that API's name words stand in, and the notes say so.
``类型`` is the upstream label that works as a coarse risk category; each tool keeps it in
``Tool.extra``: ``type`` and ``scenario`` as written, ``type_en`` and ``scenario_en`` glossed
(``对外影响 - 数据库操作 - 删`` -> ``external effect - database operation - delete``).
No risk levels exist for this corpus.
"""

from __future__ import annotations

import ast
import csv
from pathlib import Path

from riskrank.datasets.base import Benchmark
from riskrank.datasets.corpora import (
    Pairs,
    ToolPool,
    corpus_file,
    corpus_paths,
    pairs_benchmark,
    read_records,
)
from riskrank.errors import DataError

ROOT = "AlibabaResearch/DAMO-ConvAI/api-bank"
APIS = f"{ROOT}/data/all_apis.csv"
SAMPLES = "api-bank/lv1-lv2-samples/"
LEVELS = {"level-1-given-desc": 1, "level-2-toolsearcher": 2}
SEARCHER = "ToolSearcher"
_NAME, _TYPE, _SCENARIO, _INFO = "类名", "类型", "应用场景", "api_info"

#: English for the parts of ``类型`` (type), joined by `` - `` upstream.
TYPE_GLOSS = {
    "获取信息": "get information",
    "对外影响": "external effect",
    "其他AI模型": "other AI model",
    "数据库查询": "database query",
    "外界信息查询": "external information query",
    "工具": "tool",
    "数据库操作": "database operation",
    "实时通信": "real-time communication",
    "增": "add",
    "删": "delete",
    "改": "modify",
    "查": "query",
}
#: English for ``应用场景`` (scenario).
SCENARIO_GLOSS = {
    "信息查询和处理": "information lookup and processing",
    "日程安排和管理": "scheduling",
    "旅游出行": "travel",
    "财务管理": "finance",
    "健康管理": "health",
    "智能家居控制": "smart home control",
    "娱乐消遣": "entertainment",
    "账户管理": "account management",
    "学习科研相关": "study and research",
    "工作相关": "work",
    "钉钉": "DingTalk",
}


def gloss_type(value: str) -> str:
    """``类型`` in English, part by part (a part with no gloss is kept as written)."""
    return " - ".join(TYPE_GLOSS.get(p.strip(), p.strip()) for p in value.split("-") if p.strip())


def api_description(info: str, where: str) -> str | None:
    """The ``description = "..."`` string of an ``api_info`` snippet, read with :func:`ast.parse`
    (nothing is executed); None for a snippet that holds no assignment at all."""
    if "=" not in info:
        return None
    try:
        tree = ast.parse(info)
    except SyntaxError as exc:
        raise DataError(f"{where}: api_info is not a Python snippet ({exc.msg}, its line {exc.lineno})") from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "description" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    raise DataError(f"{where}: api_info has no description = \"...\" string")


def _read_apis(path: Path, pool: ToolPool) -> list[str]:
    """Pool every API of the CSV; returns the names that have no description."""
    undocumented = []
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in (_NAME, _TYPE, _SCENARIO, _INFO) if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: not the API-Bank API list (no column {', '.join(missing)})")
            start = reader.line_num + 1
            for i, row in enumerate(reader, 1):
                where = f"{path}: row {i} (line {start})"
                start = reader.line_num + 1
                name = (row.get(_NAME) or "").strip()
                description = api_description(row.get(_INFO) or "", f"{where} ({name})")
                if description is None:
                    undocumented.append(name)
                kind, scenario = (row.get(_TYPE) or "").strip(), (row.get(_SCENARIO) or "").strip()
                extra = {"type": kind, "type_en": gloss_type(kind), "scenario": scenario,
                         "scenario_en": SCENARIO_GLOSS.get(scenario, scenario)}
                pool.add(name, description, where=where, extra=extra)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise DataError(f"{path}: not a readable CSV file ({exc})") from None
    return undocumented


def _dialogue(path: Path) -> tuple[str, list[str]]:
    """(User turns joined, gold API names) of one dialogue file."""
    users: list[str] = []
    calls: list[str] = []
    for lineno, turn in read_records(path):
        where = f"{path}: line {lineno}"
        role = turn.get("role") if isinstance(turn, dict) else None
        if role == "User" and isinstance(turn.get("text"), str):
            users.append(turn["text"].strip())
        elif role == "API" and isinstance(turn.get("api_name"), str):
            if turn["api_name"].strip() != SEARCHER:
                calls.append(turn["api_name"].strip())
        elif role != "AI":
            raise DataError(f"{where}: not an API-Bank turn (expected role User/AI with 'text', or API with 'api_name')")
    return "\n".join(u for u in users if u), list(dict.fromkeys(calls))


def load_apibank(data_dir: Path) -> Benchmark:
    pool = ToolPool(f"{data_dir}/{APIS}")
    undocumented = _read_apis(corpus_file(data_dir, APIS), pool)
    pairs = Pairs()
    for rel in corpus_paths("apibank", SAMPLES):
        path = corpus_file(data_dir, rel)
        level_dir, _, stem = rel.split(SAMPLES, 1)[1].removesuffix(".jsonl").partition("/")
        text, calls = _dialogue(path)
        pairs.add(f"{level_dir}/{stem}", text, calls if text else [],
                  {"level": LEVELS.get(level_dir), "file": f"{level_dir}/{stem}.jsonl"})
    n_silent = sum(1 for g in pairs.gold if not g)
    notes = [f"{len(pairs.ids):,} dialogues; {n_silent} make no API call other than {SEARCHER} (or have no User turn): skipped"]
    if undocumented:
        notes.append(f"{len(undocumented)} API(s) without a description in api_info ({', '.join(undocumented)}): "
                     "the name's words stand in")
    return pairs_benchmark("apibank", pool, pairs, notes)
