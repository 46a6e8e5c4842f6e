"""BFCL v4 (the Berkeley Function Calling Leaderboard) as a tool-retrieval corpus.

Files: ``BFCL_v4_<category>.json`` (JSONL despite the extension) for the single-turn
categories of :data:`CATEGORIES`, each line ``{"id", "question": [[{"role", "content"}]],
"function": [{"name", "description", "parameters"}]}``, and ``possible_answer/`` beside them
with ``{"id", "ground_truth": [{"<function name>": {...}}, ...]}`` for every category but
relevance and irrelevance.

Pairs: the query is the entry's user turns joined (system and assistant turns are dropped);
the gold tools are the function names that key its ground truth, each one the variant that
entry offered. ``live_relevance`` has no answer file: any relevant call counts, so its gold
is every function the entry offers. The ``live_irrelevance`` entries, where none of the
offered functions fits, are not pairs: they are the benchmark's ``negatives``.

Tools: every entry's ``function`` list, pooled (irrelevance entries included). Live entries
reuse names with other descriptions; those stay distinct tools (``NAME (variant K)``, see
:mod:`riskrank.datasets.corpora`). Each query keeps its category and the registry names of
the functions its entry offered (a natural set of hard negatives). Parameter schemas are not
kept: retrieval reads names and descriptions only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from riskrank.datasets.base import Benchmark, Negatives
from riskrank.datasets.corpora import (
    Pairs,
    ToolPool,
    corpus_file,
    pairs_benchmark,
    read_records,
    text_field,
)
from riskrank.errors import DataError

ROOT = "ShishirPatil/gorilla/berkeley-function-call-leaderboard/bfcl_eval/data"
CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_relevance",
              "live_irrelevance")
#: Categories without an answer file: relevance (gold = every offered function), irrelevance (negatives).
RELEVANCE, IRRELEVANCE = "live_relevance", "live_irrelevance"


def question_file(category: str) -> str:
    return f"{ROOT}/BFCL_v4_{category}.json"


def answer_file(category: str) -> str:
    return f"{ROOT}/possible_answer/BFCL_v4_{category}.json"


def _user_text(rec: Any, where: str) -> str:
    """The user turns of every conversation of the entry, joined by newlines."""
    convs = rec.get("question")
    if not isinstance(convs, list) or not all(isinstance(c, list) for c in convs):
        raise DataError(f"{where}: 'question' must be a list of conversations (lists of turns)")
    turns = [t for c in convs for t in c]
    if not all(isinstance(t, dict) for t in turns):
        raise DataError(f"{where}: every turn must be an object with 'role' and 'content'")
    text = "\n".join(text_field(t, "content", where).strip() for t in turns if t.get("role") == "user")
    if not text.strip():
        raise DataError(f"{where}: the entry has no user turn")
    return text


def _answers(path: Path) -> dict[str, list[str]]:
    """id -> the function names keying the ground truth, in first-seen order."""
    out: dict[str, list[str]] = {}
    for lineno, rec in read_records(path):
        where = f"{path}: line {lineno}"
        truth = rec.get("ground_truth") if isinstance(rec, dict) else None
        if not isinstance(truth, list) or not all(isinstance(c, dict) for c in truth):
            raise DataError(f"{where}: not a BFCL answer record (expected 'ground_truth': a list of {{function: args}})")
        out[text_field(rec, "id", where)] = list(dict.fromkeys(k for call in truth for k in call))
    return out


def load_bfcl(data_dir: Path) -> Benchmark:
    pool = ToolPool(f"{data_dir}/{ROOT}")
    pairs = Pairs()
    neg_ids: list[str] = []
    neg_texts: list[str] = []
    neg_meta: list[dict] = []
    n_unanswered = 0
    for category in CATEGORIES:
        path = corpus_file(data_dir, question_file(category))
        answers = None if category in (RELEVANCE, IRRELEVANCE) else _answers(corpus_file(data_dir, answer_file(category)))
        for lineno, rec in read_records(path):
            where = f"{path}: line {lineno}"
            if not isinstance(rec, dict) or not isinstance(rec.get("function"), list):
                raise DataError(f"{where}: not a BFCL entry (expected 'id', 'question' and a 'function' list)")
            entry_id = text_field(rec, "id", where)
            text = _user_text(rec, where)
            offered: dict[str, str] = {}  # upstream name -> registry name of the variant offered here
            for j, fn in enumerate(rec["function"]):
                if not isinstance(fn, dict):
                    raise DataError(f"{where}: function {j} must be an object with 'name' and 'description'")
                reg_name = pool.add(fn.get("name"), fn.get("description"), where=f"{where}: function {j}")
                offered[fn["name"].strip()] = reg_name  # a str: pool.add checked it
            info = {"category": category, "candidates": list(offered.values())}
            if category == IRRELEVANCE:
                neg_ids.append(entry_id)
                neg_texts.append(text)
                neg_meta.append(info)
                continue
            if answers is None:  # relevance: every offered function is fine
                truth = names = list(offered.values())
            else:
                truth = answers.get(entry_id, [])
                names = [offered[n] for n in truth if n in offered]
                n_unanswered += entry_id not in answers
            pairs.add(entry_id, text, names, info, unresolved=len(truth) - len(names))
    notes = [f"{n_unanswered:,} entries have no answer line: skipped"] if n_unanswered else []
    negatives = Negatives(IRRELEVANCE, neg_ids, neg_texts, neg_meta)
    return pairs_benchmark("bfcl", pool, pairs, notes, negatives=negatives)
