"""Table 8: qualitative inspection after rule filtering. Six queries chosen by a stated rule
(three high-consequence finance tasks, three file/service tasks), each with the gold tools
retained in the filtered top-5, the five risk levels in rank order, and the deferral reasons."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.risk import RISKY_LEVEL
from riskrank.tables import markdown_table

METHOD = "core+graph+rule"
RELEVANCE_ONLY = "rel_only"
FINANCE = ("finance", "bank", "insurance", "account", "payment", "accounting", "tax")
FILE_SERVICE = ("document", "hotel", "file", "cloud", "information technology", "technology", "repair", "cleaning")
RULE = ("first seed; group A = finance queries (UltraTool domain Finance, or a gold tool whose Seal-Tools field names "
        "finance/banking/insurance/accounting/tax), group B = file/service queries (UltraTool domains Document, Hotel, "
        "Repair, Cleaning; Seal-Tools fields cloud/IT/technology); in each group the first three queries in file order "
        "whose relevance-only top-5 holds >= 2 tools with r >= 3")


def _group(meta: dict, gold_fields: list[str], words: tuple[str, ...]) -> bool:
    domain = str(meta.get("domain") or "").lower()
    return any(w in domain for w in words) or any(w in f.lower() for f in gold_fields for w in words)


def select(run: EvalRun, split: str, queries, registry) -> list[tuple[str, int]]:
    seed = run.seeds[0]
    rel_top = run.top[seed][split].get(RELEVANCE_ONLY)
    if rel_top is None or METHOD not in run.top[seed][split]:
        return []
    risk = registry.risk_levels
    picked: list[tuple[str, int]] = []
    for label, words in (("finance", FINANCE), ("file/service", FILE_SERVICE)):
        n = 0
        for i in range(len(queries)):
            fields = [str(registry[int(g)].extra.get("field") or "") for g in queries.gold[i]]
            meta = queries.meta[i] if queries.meta else {}
            if not _group(meta, fields, words) or any(i == j for _, j in picked):
                continue
            if int((risk[rel_top[i, :5]] >= RISKY_LEVEL).sum()) < 2:
                continue
            picked.append((label, i))
            n += 1
            if n == 3:
                break
    return picked


def build(run: EvalRun, split: str, queries, registry) -> str:
    seed = run.seeds[0]
    picked = select(run, split, queries, registry)
    top = run.top[seed][split][METHOD]
    filters = run.filters[seed][split].get(METHOD) or []
    names = registry.names
    rows = []
    for label, i in picked:
        t5 = top[i, :5]
        gold = set(int(g) for g in queries.gold[i])
        kept = sum(int(t) in gold for t in t5)
        profile = "[" + ",".join(str(int(registry.risk_levels[t])) for t in t5) + "]"
        info = filters[i] if i < len(filters) and filters[i] else {"deferred": {}}
        deferred = "; ".join(f"{names[int(t)]} ({', '.join(r)})" for t, r in list(info["deferred"].items())[:3]) or "–"
        top_l4 = any(registry.risk_levels[t] >= 4 for t in t5)
        takeaway = ("keeps a gold L4+" if any(registry.risk_levels[t] >= 4 and int(t) in gold for t in t5)
                    else ("keeps one L4+" if top_l4 else "no L4/L5"))
        text = queries.texts[i].replace("|", "/").replace("\n", " ")
        rows.append([label, text[:90] + ("…" if len(text) > 90 else ""), f"{kept}/{len(gold)}", profile, deferred, takeaway])
    head = f"Selection rule: {RULE}; method `{METHOD}`.\n\n"
    if not rows:
        return head + "_No query met the selection rule._"
    return head + markdown_table(["setting", "query", "gold retained", "risk profile", "deferred (first 3)", "takeaway"], rows)
