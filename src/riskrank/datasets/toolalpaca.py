"""ToolAlpaca's evaluation sets as a tool-retrieval corpus.

Files: ``data/eval_real.json`` (real public APIs) and ``data/eval_simulated.json`` (simulated
ones), each a JSON list with one entry per API: ``Name``, ``Description``, ``Category``,
``Function_Description`` (function name -> its documentation), ``Instructions`` and
``Golden_Answers`` (one list of ``{"Action", "Action_Input"}`` steps per instruction). Those
three may be written as Python-literal strings; they are read with :func:`ast.literal_eval`
(a literal parser: nothing is executed).

Pairs: one per instruction; the gold tools are the ``Action`` names of its golden answer,
written ``<API Name>.<Action>`` (the registry names). A step marked ``[Optional]`` still names
its action. Actions the API does not document (``getDetails``, ToolAlpaca's "ask the user"
step, and a few calls missing from their API's functions) are not tools: they are dropped
from the gold and counted; an instruction left with none is skipped.

Tools: the documented functions, ``<API Name>.<function>``; the description is the first
part of the function's documentation (what it does, before ``Parameters:``). The
``components`` key of ``Function_Description`` is not a function (it holds the output types
the functions refer to) and is left out. ``Tool.extra`` keeps the API name and category.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

from riskrank.datasets.base import Benchmark
from riskrank.datasets.corpora import (
    Pairs,
    ToolPool,
    corpus_file,
    pairs_benchmark,
    read_json,
    text_field,
)
from riskrank.errors import DataError

ROOT = "tangqiaoyu/ToolAlpaca/data"
FILES = {"real": f"{ROOT}/eval_real.json", "simulated": f"{ROOT}/eval_simulated.json"}
NOT_A_FUNCTION = "components"
OPTIONAL = "[Optional]"


def literal(value: Any, expected: type, where: str) -> Any:
    """A field that is either already JSON or a Python-literal string of ``expected`` type."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise DataError(f"{where}: not a Python literal ({type(exc).__name__})") from None
    if not isinstance(value, expected):
        raise DataError(f"{where}: expected a {expected.__name__}, got {type(value).__name__}")
    return value


def summary(doc: str) -> str:
    """What a function does: its documentation before ``Parameters:``."""
    return doc.split("\nParameters:", 1)[0].strip()


def load_toolalpaca(data_dir: Path) -> Benchmark:
    pool = ToolPool(f"{data_dir}/{ROOT}")
    pairs = Pairs()
    n_optional = 0
    undocumented: Counter[str] = Counter()
    for which, rel in FILES.items():
        path = corpus_file(data_dir, rel)
        entries = read_json(path)
        if not isinstance(entries, list):
            raise DataError(f"{path}: expected a JSON list of API entries, got {type(entries).__name__}")
        for e, entry in enumerate(entries):
            where = f"{path}: entry {e}"
            if not isinstance(entry, dict):
                raise DataError(f"{where}: an API entry must be an object")
            api = text_field(entry, "Name", where).strip()
            where = f"{where} ({api})"
            functions = literal(entry.get("Function_Description"), dict, f"{where}: Function_Description")
            instructions = literal(entry.get("Instructions"), list, f"{where}: Instructions")
            answers = literal(entry.get("Golden_Answers"), list, f"{where}: Golden_Answers")
            if len(instructions) != len(answers):
                raise DataError(f"{where}: {len(instructions)} Instructions but {len(answers)} Golden_Answers")
            extra = {"api": api, "category": str(entry.get("Category") or "")}
            known: dict[str, str] = {}
            for fn, doc in functions.items():
                if fn == NOT_A_FUNCTION:
                    continue
                if not isinstance(doc, str):
                    raise DataError(f"{where}: Function_Description[{fn!r}] must be a string")
                known[fn] = pool.add(f"{api}.{fn}", summary(doc), where=f"{where}: function {fn!r}", extra=extra)
            for i, (text, steps) in enumerate(zip(instructions, answers, strict=True)):
                at = f"{where}: instruction {i}"
                if not isinstance(text, str) or not text.strip():
                    raise DataError(f"{at}: an instruction must be a non-empty string")
                if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
                    raise DataError(f"{at}: a golden answer must be a list of {{'Action', 'Action_Input'}} steps")
                actions = [text_field(s, "Action", at).strip() for s in steps]
                n_optional += sum(a.startswith(OPTIONAL) for a in actions)
                actions = list(dict.fromkeys(a.removeprefix(OPTIONAL).strip() for a in actions))
                names = [known[a] for a in actions if a in known]
                undocumented.update(f"{api}.{a}" for a in actions if a not in known)
                pairs.add(f"{which}-{e}-{i}", text.strip(), names, {"set": which, "api": api}, unresolved=len(actions) - len(names))
    notes = [f"{n_optional} golden steps marked [Optional] count as gold"] if n_optional else []
    if undocumented:
        notes.append("golden actions that are not documented functions of their API: "
                     + ", ".join(f"{a} ({n})" for a, n in sorted(undocumented.items())))
    return pairs_benchmark("toolalpaca", pool, pairs, notes)
