"""Late interaction over MiniLM's own token vectors as a first stage, on the six registries:
would MaxSim find what mean pooling blurs (tool names, parameter names, rare words)?

    python benchmarks/late_interaction.py --json benchmarks/results/late_interaction.json

Nothing here is trained: the frozen encoder's last-layer token vectors (L2-normalised, the
``[CLS]`` and ``[SEP]`` tokens left out) score a query against a tool by MaxSim, the mean over
the query's tokens of the best cosine among the tool's tokens (ColBERT's sum, divided by the
query's length). So no registry's queries shaped it and every registry is held out: each is
evaluated on the held-out queries leave one corpus out evaluates (the same seeded sample of at
most 1,000, ``transfer_loco.eval_sample``), against BM25 and the cosine of the mean-pooled
embedding (the ``bm25`` and ``dense`` of ``loco.json``, recomputed here and checked equal).
Fusions, fixed before the first run and the same everywhere: the per-query min-max normalised
scores averaged with equal weights (dense + BM25, dense + MaxSim, all three), and MaxSim
reranking the top 100 of dense + BM25; beside them today's hybrid first stage (its fusion chosen
on validation queries), as ``loco.json`` records it for the same queries.

Memory and cost: the token store (float16, 384 dimensions) of Seal-Tools' 4,076 tools as
measured, and of 100,000 tools (Seal-Tools' token vectors repeated to that size); the
milliseconds per query of a full MaxSim scan over each (chunks of 20,000 tools, on this
machine's threads) and of reranking 100 candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from riskrank.datasets import load_benchmark
from riskrank.encoder import Encoder
from riskrank.fileio import write_json
from riskrank.first_stage import LexicalIndex, pin_named
from riskrank.metrics import ndcg_at_k, recall_at_k
from transfer_loco import REGISTRIES, eval_sample

MAX_EVAL, RERANK, CHUNK, SCALE = 1000, 100, 20_000, 100_000
METHODS = ("bm25", "dense", "hybrid (today's)", "maxsim", "dense+bm25", "dense+maxsim", "dense+bm25+maxsim", "dense+bm25, maxsim rerank")


def token_vectors(enc: Encoder, texts: list[str], batch: int = 64) -> list[np.ndarray]:
    """Each text's last-layer token vectors ([tokens, 384] float16, L2-normalised), without the
    special tokens: what mean pooling averages."""
    import torch

    st = enc.model
    tok, bert = st[0].tokenizer, st[0].auto_model
    out: list[Any] = [None] * len(texts)
    order = np.argsort([len(t) for t in texts])
    with torch.inference_mode():
        for i in range(0, len(texts), batch):
            idx = order[i:i + batch]
            b = tok([texts[j] for j in idx], padding=True, truncation=True, max_length=st.max_seq_length, return_tensors="pt")
            hs = bert(**b).last_hidden_state
            for k, j in enumerate(idx):
                m = int(b["attention_mask"][k].sum())
                v = hs[k, 1:m - 1].numpy() if m > 2 else hs[k, :m].numpy()
                out[j] = (v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-12)).astype(np.float16)
    return out


class TokenStore:
    """Every tool's token vectors in one [total tokens, dim] float16 matrix; tool i's rows are
    ``bounds[i]:bounds[i + 1]``."""

    def __init__(self, matrix: np.ndarray, lengths: np.ndarray | list[int]) -> None:
        self.matrix = matrix
        self.bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.n = len(lengths)

    @classmethod
    def of(cls, vectors: list[np.ndarray]) -> TokenStore:
        return cls(np.concatenate(vectors), [len(v) for v in vectors])

    def maxsim(self, query: np.ndarray, tools: np.ndarray | None = None) -> np.ndarray:
        """MaxSim of one query ([q, dim]) against every tool (or the ``tools`` given), in chunks."""
        q = query.astype(np.float32)
        bounds = self.bounds
        if tools is not None:
            return np.asarray([(q @ self.matrix[bounds[t]:bounds[t + 1]].astype(np.float32).T).max(axis=1).mean() for t in tools])
        out = np.empty(self.n, dtype=np.float32)
        for lo in range(0, self.n, CHUNK):
            hi = min(lo + CHUNK, self.n)
            block = self.matrix[bounds[lo]:bounds[hi]].astype(np.float32)
            sim = q @ block.T  # [q, tokens of the chunk]
            best = np.maximum.reduceat(sim, bounds[lo:hi] - bounds[lo], axis=1)
            out[lo:hi] = best.mean(axis=0)
        return out


def minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    return (x - lo) / np.where(hi > lo, hi - lo, 1.0)


def rank(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")


def registry_result(name: str, split: str, data: str | None, enc: Encoder) -> tuple[dict[str, Any], TokenStore]:
    bench = load_benchmark(name, data)
    qs, reg = bench.splits[split], bench.registry
    keep = eval_sample(len(qs), MAX_EVAL)
    texts, gold = [qs.texts[i] for i in keep], [np.asarray(qs.gold[i]) for i in keep]
    tool_texts = reg.texts()
    cos = enc.encode(texts, desc="queries") @ enc.encode(tool_texts, desc="tools").T
    lexical = LexicalIndex.from_registry(reg).evidence(texts)
    bm25, named = lexical.bm25, lexical.named  # a tool the task names is ranked first by every method, as riskrank ranks
    store = TokenStore.of(token_vectors(enc, tool_texts))
    qtok = token_vectors(enc, texts)
    t0 = time.perf_counter()
    ms = np.stack([store.maxsim(q) for q in qtok])
    full_ms = (time.perf_counter() - t0) / len(texts) * 1000
    scores = {"bm25": bm25, "dense": cos, "maxsim": ms, "dense+bm25": (minmax(cos) + minmax(bm25)) / 2,
              "dense+maxsim": (minmax(cos) + minmax(ms)) / 2, "dense+bm25+maxsim": (minmax(cos) + minmax(bm25) + minmax(ms)) / 3}
    top = rank(scores["dense+bm25"])[:, :RERANK]
    t0 = time.perf_counter()
    rescored = np.stack([store.maxsim(q, top[i]) for i, q in enumerate(qtok)])
    rerank_ms = (time.perf_counter() - t0) / len(texts) * 1000
    reranked = scores["dense+bm25"].copy()  # in [0, 1]: the candidates' MaxSim (in [-1, 1]) lifted above every other tool
    np.put_along_axis(reranked, top, 3.0 + rescored, axis=1)
    scores["dense+bm25, maxsim rerank"] = reranked
    rankings = {m: rank(pin_named(s, named)) for m, s in scores.items()}
    methods = {m: {"ndcg@5": round(float(ndcg_at_k(r, gold, 5).mean()), 4), "recall@100": round(float(recall_at_k(r, gold, 100).mean()), 4)}
               for m, r in rankings.items()}
    return ({"split": split, "n_queries": len(texts), "n_tools": len(tool_texts), "tokens_per_tool": round(len(store.matrix) / store.n, 1),
             "methods": methods, "maxsim_full_scan_ms_per_query": round(full_ms, 2), "maxsim_rerank_ms_per_query": round(rerank_ms, 2)},
            store)


def scale_cost(store: TokenStore, queries: list[np.ndarray]) -> dict[str, Any]:
    """The token store and a full MaxSim scan at :data:`SCALE` tools (``store``'s tools repeated)."""
    reps = -(-SCALE // store.n)
    lengths = np.tile(np.diff(store.bounds), reps)[:SCALE]
    big = TokenStore(np.tile(store.matrix, (reps, 1))[: int(lengths.sum())], lengths)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        big.maxsim(q)
        times.append((time.perf_counter() - t0) * 1000)
    return {"tools": SCALE, "store_mb": round(big.matrix.nbytes / 2**20, 1), "full_scan_ms_per_query": round(statistics.median(times), 1),
            "queries_timed": len(queries)}


def doc_table(result: dict[str, Any]) -> str:
    """docs' table: NDCG@5 per registry and method, with the memory and cost lines."""
    regs = result["registries"]
    lines = ["| method | " + " | ".join(regs) + " | mean |", "|---|" + "---:|" * (len(regs) + 1)]
    for m in METHODS:
        vals = [regs[r]["methods"][m]["ndcg@5"] for r in regs]
        lines.append(f"| {m} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {statistics.mean(vals):.3f} |")
    s, big = regs["sealtools"], result["scale"]
    cost = (f"Seal-Tools' {s['n_tools']:,} tools: {s['tokens_per_tool']} tokens per tool, a token store of "
            f"{result['sealtools_store_mb']} MB (float16), a full MaxSim scan {s['maxsim_full_scan_ms_per_query']} ms per query and "
            f"a rerank of {RERANK} candidates {s['maxsim_rerank_ms_per_query']} ms; at {big['tools']:,} tools a store of "
            f"{big['store_mb']:,} MB and a full scan {big['full_scan_ms_per_query']:,} ms per query ({result['machine']}, {result['date']}).")
    return "\n".join(lines) + "\n\n" + cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--registries", default=",".join(REGISTRIES))
    a = ap.parse_args()
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    enc = Encoder(progress=False)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"),
                              "machine": f"{os.cpu_count()}-core {platform.machine()} machine (load {os.getloadavg()[0]:.2f} at the start)",
                              "encoder": enc.identity, "max_eval": MAX_EVAL, "rerank": RERANK, "registries": {}}
    for name in a.registries.split(","):
        row, store = registry_result(name, REGISTRIES[name], a.data, enc)
        result["registries"][name] = row
        print(name, {m: v["ndcg@5"] for m, v in row["methods"].items()}, flush=True)
        if name == "sealtools":
            result["sealtools_store_mb"] = round(store.matrix.nbytes / 2**20, 1)
            bench = load_benchmark(name, a.data)
            qs = bench.splits[REGISTRIES[name]]
            result["scale"] = scale_cost(store, token_vectors(enc, [qs.texts[i] for i in eval_sample(len(qs), 20)]))
    # today's hybrid first stage (its fusion chosen on validation queries) from leave one corpus
    # out's artefact, on the same queries; bm25 and dense there must be the ones measured here
    loco = json.loads((Path(__file__).resolve().parent / "results" / "loco.json").read_text(encoding="utf-8"))
    for name, row in result["registries"].items():
        theirs = loco["summary"]["held_out"][name]["methods"]
        for m in ("bm25", "dense"):
            if abs(theirs[m]["ndcg@5"][0] - row["methods"][m]["ndcg@5"]) > 1e-4:
                raise SystemExit(f"late_interaction: {name} {m} NDCG@5 {row['methods'][m]['ndcg@5']} is not loco.json's "
                                 f"{theirs[m]['ndcg@5'][0]:.4f}: not the same queries or texts")
        row["methods"]["hybrid (today's)"] = {"ndcg@5": round(theirs["hybrid"]["ndcg@5"][0], 4)}
    if "sealtools" in result["registries"] and len(result["registries"]) == len(REGISTRIES):
        print(doc_table(result))
    if a.json:
        write_json(a.json, result)


if __name__ == "__main__":
    main()
