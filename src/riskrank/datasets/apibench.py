"""APIBench (Gorilla) as a tool-retrieval corpus.

Files: the API docs ``data/api/{huggingface,tensorflowhub,torchhub}_api.jsonl`` (one doc per
line: ``domain``, ``framework``, ``functionality``, ``api_name``, ``api_call``,
``description``, ...) and the query files of :data:`SPLITS` (JSONL), each line with the
prompt in ``code``, the gold call in ``api_call`` and that call's doc in ``api_data``.

Pairs: the query is the instruction in ``code`` (after ``###Instruction:``, up to
``###Output``, so the ``###Input:`` example some instructions carry stays part of it; the
Torch Hub train lines write ``{'Instruction': ..., 'Output': ...}``); the gold is the single
tool ``(api_data.framework, api_data.api_call)``.

Tools: one per distinct ``(framework, api_call)``, so the many Torch/TF Hub doc lines that
repeat one call with other wording collapse into the first. The tool's registry name is its
``api_call`` (the identity the gold is defined by, and it carries the model id; ``api_name``
is not unique and is sometimes a placeholder such as ``model_id``); a call shared by two
frameworks is named by the variant rule of :mod:`riskrank.datasets.corpora`. Its description
is ``DOMAIN: FUNCTIONALITY. DESCRIPTION`` from the first doc seen: the query lines' embedded
``api_data`` first (some gold calls have no line in ``data/api``), then the doc files for the
calls no query names. ``Tool.extra`` keeps ``framework``, ``api_name`` and ``domain``.
Every tool loads an ML model: the corpus trains relevance, not risk.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from riskrank.datasets.base import Benchmark
from riskrank.datasets.corpora import (
    Pairs,
    ToolPool,
    corpus_file,
    pairs_benchmark,
    read_records,
    text_field,
)
from riskrank.errors import DataError

ROOT = "ShishirPatil/gorilla/data"
DOCS = tuple(f"{ROOT}/api/{n}_api.jsonl" for n in ("huggingface", "tensorflowhub", "torchhub"))
SPLITS = ("huggingface_eval", "tensorflow_eval", "torchhub_eval", "torchhub_train")

_INSTRUCTION = re.compile(
    r"^\s*(?:###\s*Instruction\s*:(?P<hash>.*?)(?:###\s*Output|$)"
    r"|\{\s*['\"]Instruction['\"]\s*:(?P<dict>.*?)(?:,\s*['\"]Output['\"]\s*:|$))",
    re.DOTALL,
)


def split_file(split: str) -> str:
    return f"{ROOT}/apibench/{split}.json"


def instruction(code: str) -> str | None:
    """The instruction of a line's ``code`` prompt (either layout), or None if it has none."""
    m = _INSTRUCTION.match(code)
    if m is None:
        return None
    text = (m.group("hash") if m.group("hash") is not None else m.group("dict") or "").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()  # the dict layout sometimes quotes it
    return text or None


def _add_doc(pool: ToolPool, doc: Any, where: str) -> str:
    """Pool one doc record; returns the registry name of its (framework, api_call)."""
    if not isinstance(doc, dict):
        raise DataError(f"{where}: an API doc must be an object with 'framework' and 'api_call'")
    framework = text_field(doc, "framework", where).strip()
    call = text_field(doc, "api_call", where).strip()
    functionality = doc.get("functionality")
    if isinstance(functionality, list):
        functionality = ", ".join(str(f) for f in functionality)
    head = ": ".join(str(p).strip() for p in (doc.get("domain"), functionality) if isinstance(p, str) and p.strip())
    body = str(doc.get("description") or "").strip()
    description = ". ".join(p for p in (head, body) if p)
    extra = {"framework": framework, "api_name": str(doc.get("api_name") or ""), "domain": str(doc.get("domain") or "")}
    return pool.add(call, description, where=where, key=(framework, call), extra=extra)


def load_apibench(data_dir: Path) -> Benchmark:
    pool = ToolPool(f"{data_dir}/{ROOT}")
    pairs = Pairs()
    for split in SPLITS:
        path = corpus_file(data_dir, split_file(split))
        for lineno, rec in read_records(path):
            where = f"{path}: line {lineno}"
            if not isinstance(rec, dict):
                raise DataError(f"{where}: not an APIBench record (expected 'code' and 'api_data')")
            text = instruction(text_field(rec, "code", where))
            if text is None:
                raise DataError(f"{where}: 'code' holds no instruction (expected '###Instruction: ...')")
            name = _add_doc(pool, rec.get("api_data"), f"{where}: api_data")
            # the framework was checked by _add_doc
            pairs.add(f"{split}-{lineno - 1}", text, [name], {"split": split, "framework": rec["api_data"]["framework"].strip()})
    n_from_queries = len(pool)
    for rel in DOCS:
        path = corpus_file(data_dir, rel)
        for lineno, rec in read_records(path):
            _add_doc(pool, rec, f"{path}: line {lineno}")
    notes = [f"{n_from_queries:,} tools come from the query lines' embedded docs, {len(pool) - n_from_queries:,} more "
             "from the API doc files (calls no query names)"]
    return pairs_benchmark("apibench", pool, pairs, notes)
