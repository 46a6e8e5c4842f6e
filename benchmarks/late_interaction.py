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

Trained (``--trained``): a linear projection of the token vectors to :data:`PROJ_DIM` dimensions
(ColBERT's), fitted leave one corpus out: for each held-out registry, on the other five
registries' training queries (``base_model.load_sources``), each (query, gold tool) pair with a
hard negative of its own registry's hybrid top 10 (``finetune.mine_triplets``, the encoder
fine-tune's rows), by in-batch softmax over MaxSim scores. Its settings were fixed before the
first run and not tuned (dimension 128, orthogonal start, Adam at 1e-3, batches of 64, two
epochs over at most 4,096 rows drawn by the seed, scale 20, 64 tokens a text while training:
what two CPU cores afford), at seeds 42 and 123; each figure is the
mean over the seeds, with each seed's kept. The rule that would put it in the served first
stage was fixed before the run too: its three-way fusion (dense + BM25 + trained MaxSim) above
today's hybrid on the mean over the six registries, and no registry more than 2 % below it.

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
from dataclasses import dataclass
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
#: The trained projection's settings, fixed before the first run.
PROJ_DIM, EPOCHS, BATCH, LR, TEMPERATURE_SCALE, TRAIN_TOKENS, MAX_ROWS, SEEDS = 128, 2, 64, 1e-3, 20.0, 64, 4096, (42, 123)
TRAINED = ("maxsim, trained", "dense+maxsim, trained", "dense+bm25+maxsim, trained", "dense+bm25, trained maxsim rerank")
#: Shipping rule for the trained scorer, fixed before the run: the three-way fusion's mean
#: NDCG@5 above today's hybrid's, and no registry below 0.98 x today's hybrid.
SHIP_MIN_RATIO = 0.98


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


@dataclass
class Held:
    """What a held-out registry is scored with, kept for the trained scorer."""

    texts: list[str]
    gold: list[np.ndarray]
    qtok: list[np.ndarray]
    cos: np.ndarray
    bm25: np.ndarray
    named: Any
    tool_texts: list[str]
    tool_emb: np.ndarray


def evaluate(scores: dict[str, np.ndarray], named: Any, gold: list[np.ndarray]) -> dict[str, dict[str, float]]:
    """NDCG@5 and recall@100 of each method's scores (a tool the task names pinned first)."""
    rankings = {m: rank(pin_named(s, named)) for m, s in scores.items()}
    return {m: {"ndcg@5": round(float(ndcg_at_k(r, gold, 5).mean()), 4), "recall@100": round(float(recall_at_k(r, gold, 100).mean()), 4)}
            for m, r in rankings.items()}


def reranked(first: np.ndarray, store: TokenStore, qtok: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """``first`` (scores in [0, 1]) with its top :data:`RERANK` reordered by MaxSim, and the
    milliseconds per query the rerank took."""
    top = rank(first)[:, :RERANK]
    t0 = time.perf_counter()
    rescored = np.stack([store.maxsim(q, top[i]) for i, q in enumerate(qtok)])
    ms = (time.perf_counter() - t0) / len(qtok) * 1000
    out = first.copy()  # the candidates' MaxSim (in [-1, 1]) lifted above every other tool
    np.put_along_axis(out, top, 3.0 + rescored, axis=1)
    return out, ms


def registry_result(name: str, split: str, data: str | None, enc: Encoder) -> tuple[dict[str, Any], TokenStore, Held]:
    bench = load_benchmark(name, data)
    qs, reg = bench.splits[split], bench.registry
    keep = eval_sample(len(qs), MAX_EVAL)
    texts, gold = [qs.texts[i] for i in keep], [np.asarray(qs.gold[i]) for i in keep]
    tool_texts = reg.texts()
    tool_emb = enc.encode(tool_texts, desc="tools")
    cos = enc.encode(texts, desc="queries") @ tool_emb.T
    lexical = LexicalIndex.from_registry(reg).evidence(texts)
    bm25, named = lexical.bm25, lexical.named  # a tool the task names is ranked first by every method, as riskrank ranks
    store = TokenStore.of(token_vectors(enc, tool_texts))
    qtok = token_vectors(enc, texts)
    t0 = time.perf_counter()
    ms = np.stack([store.maxsim(q) for q in qtok])
    full_ms = (time.perf_counter() - t0) / len(texts) * 1000
    scores = {"bm25": bm25, "dense": cos, "maxsim": ms, "dense+bm25": (minmax(cos) + minmax(bm25)) / 2,
              "dense+maxsim": (minmax(cos) + minmax(ms)) / 2, "dense+bm25+maxsim": (minmax(cos) + minmax(bm25) + minmax(ms)) / 3}
    scores["dense+bm25, maxsim rerank"], rerank_ms = reranked(scores["dense+bm25"], store, qtok)
    methods = evaluate(scores, named, gold)
    return ({"split": split, "n_queries": len(texts), "n_tools": len(tool_texts), "tokens_per_tool": round(len(store.matrix) / store.n, 1),
             "methods": methods, "maxsim_full_scan_ms_per_query": round(full_ms, 2), "maxsim_rerank_ms_per_query": round(rerank_ms, 2)},
            store, Held(texts, gold, qtok, cos, bm25, named, tool_texts, tool_emb))


def padded(vectors: list[np.ndarray], cap: int) -> tuple[Any, Any]:
    """``vectors`` (each [tokens, dim]) as one zero-padded float32 tensor [n, L, dim], L at
    most ``cap``, and its mask [n, L]."""
    import torch

    n = min(cap, max(len(v) for v in vectors))
    x = np.zeros((len(vectors), n, vectors[0].shape[1]), np.float32)
    m = np.zeros((len(vectors), n), bool)
    for i, v in enumerate(vectors):
        k = min(len(v), n)
        x[i, :k], m[i, :k] = v[:k], True
    return torch.from_numpy(x), torch.from_numpy(m)


def batch_maxsim(q: Any, qm: Any, t: Any, tm: Any) -> Any:
    """MaxSim of every query against every tool of a batch: [queries, tools]."""
    import torch

    sim = torch.einsum("bqd,ntd->bnqt", q, t).masked_fill(~tm[None, :, None, :], -1e4).amax(dim=-1)
    return (sim * qm[:, None, :]).sum(-1) / qm.sum(-1)[:, None]


def train_projection(rows: Any, tokens: dict[str, np.ndarray], seed: int) -> np.ndarray:
    """A [dim, PROJ_DIM] projection of token vectors that ranks each row's gold tool above the
    batch's other tools and its hard negative under MaxSim (the settings above, untuned)."""
    import torch

    from riskrank.training.finetune import batches_without_duplicates

    torch.manual_seed(seed)
    dim = next(iter(tokens.values())).shape[1]
    w = torch.nn.Parameter(torch.nn.init.orthogonal_(torch.empty(dim, PROJ_DIM)))
    opt = torch.optim.Adam([w], lr=LR)
    norm = torch.nn.functional.normalize
    for epoch in range(EPOCHS):
        for batch in batches_without_duplicates(rows, BATCH, seed + epoch):
            q, qm = padded([tokens[rows.tasks[i]] for i in batch], TRAIN_TOKENS)
            t, tm = padded([tokens[rows.positives[i]] for i in batch] + [tokens[rows.negatives[i]] for i in batch], TRAIN_TOKENS)
            s = batch_maxsim(norm(q @ w, dim=-1), qm, norm(t @ w, dim=-1), tm)
            loss = torch.nn.functional.cross_entropy(TEMPERATURE_SCALE * s, torch.arange(len(batch)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return w.detach().numpy()


def projected(vectors: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Token vectors through the projection, L2-normalised, float16."""
    v = vectors.astype(np.float32) @ w
    return (v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-12)).astype(np.float16)


def training_rows(data: str | None, enc: Encoder, held: dict[str, Held], stores: dict[str, TokenStore]
                  ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Each registry's (query, gold tool, hard negative) rows from its training queries, and
    the token vectors of every text they name (a tool's from its registry's store)."""
    from riskrank.training.base_model import load_sources
    from riskrank.training.finetune import mine_triplets

    tokens: dict[str, np.ndarray] = {}
    for name, h in held.items():
        b = stores[name].bounds
        tokens.update((text, stores[name].matrix[b[i]:b[i + 1]]) for i, text in enumerate(h.tool_texts))
    rows = {}
    for i, src in enumerate(load_sources(list(held), data)):
        rows[src.name] = mine_triplets(src.registry, src.texts, src.gold, enc, seed=42 + i, tool_emb=held[src.name].tool_emb)
        new = sorted(set(rows[src.name].tasks) - tokens.keys())
        tokens.update(zip(new, token_vectors(enc, new), strict=True))
    return rows, tokens


def trained_result(name: str, held: dict[str, Held], stores: dict[str, TokenStore], rows: dict[str, Any],
                   tokens: dict[str, np.ndarray]) -> dict[str, Any]:
    """The trained scorer on ``name``, its projection fitted on the other registries' rows, at
    each seed of :data:`SEEDS`; the mean of the seeds and each seed."""
    from riskrank.training.finetune import Triplets

    h = held[name]
    train = Triplets([], [], [])
    for other, r in rows.items():
        if other != name:
            train.tasks += r.tasks
            train.positives += r.positives
            train.negatives += r.negatives
    per_seed: dict[str, Any] = {}
    for seed in SEEDS:
        t0 = time.perf_counter()
        w = train_projection(train.sample(MAX_ROWS, seed), tokens, seed)
        fit_s = time.perf_counter() - t0
        store = TokenStore(projected(stores[name].matrix, w), np.diff(stores[name].bounds))
        qtok = [projected(q, w) for q in h.qtok]
        ms = np.stack([store.maxsim(q) for q in qtok])
        first = (minmax(h.cos) + minmax(h.bm25)) / 2
        scores = {"maxsim, trained": ms, "dense+maxsim, trained": (minmax(h.cos) + minmax(ms)) / 2,
                  "dense+bm25+maxsim, trained": (minmax(h.cos) + minmax(h.bm25) + minmax(ms)) / 3}
        scores["dense+bm25, trained maxsim rerank"], _ = reranked(first, store, qtok)
        per_seed[str(seed)] = {"methods": evaluate(scores, h.named, h.gold), "fit_s": round(fit_s, 1), "train_rows": min(len(train), MAX_ROWS), "rows_available": len(train)}
        print(name, seed, {m: v["ndcg@5"] for m, v in per_seed[str(seed)]["methods"].items()}, f"{fit_s:.0f} s", flush=True)
    mean = {m: {k: round(statistics.mean(s["methods"][m][k] for s in per_seed.values()), 4) for k in ("ndcg@5", "recall@100")}
            for m in TRAINED}
    return {"methods": mean, "seeds": per_seed, "store_mb_projected": round(stores[name].matrix.shape[0] * PROJ_DIM * 2 / 2**20, 1)}


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


def ship_verdict(regs: dict[str, Any]) -> dict[str, Any]:
    """The trained scorer against the rule fixed before the run (:data:`SHIP_MIN_RATIO`)."""
    fused = "dense+bm25+maxsim, trained"
    ratios = {n: round(r["methods"][fused]["ndcg@5"] / r["methods"]["hybrid (today's)"]["ndcg@5"], 4) for n, r in regs.items()}
    mean_fused = statistics.mean(r["methods"][fused]["ndcg@5"] for r in regs.values())
    mean_hybrid = statistics.mean(r["methods"]["hybrid (today's)"]["ndcg@5"] for r in regs.values())
    return {"ratios_to_hybrid": ratios, "mean_fused": round(mean_fused, 4), "mean_hybrid": round(mean_hybrid, 4),
            "ships": bool(mean_fused > mean_hybrid and min(ratios.values()) >= SHIP_MIN_RATIO)}


def doc_table(result: dict[str, Any]) -> str:
    """docs' table: NDCG@5 per registry and method, with the memory and cost lines."""
    regs = result["registries"]
    lines = ["| method | " + " | ".join(regs) + " | mean |", "|---|" + "---:|" * (len(regs) + 1)]
    for m in METHODS + (TRAINED if "trained" in result else ()):
        vals = [regs[r]["methods"][m]["ndcg@5"] for r in regs]
        lines.append(f"| {m} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {statistics.mean(vals):.3f} |")
    s, big = regs["sealtools"], result["scale"]
    cost = (f"Seal-Tools' {s['n_tools']:,} tools: {s['tokens_per_tool']} tokens per tool, a token store of "
            f"{result['sealtools_store_mb']} MB (float16), a full MaxSim scan {s['maxsim_full_scan_ms_per_query']} ms per query and "
            f"a rerank of {RERANK} candidates {s['maxsim_rerank_ms_per_query']} ms; at {big['tools']:,} tools a store of "
            f"{big['store_mb']:,} MB and a full scan {big['full_scan_ms_per_query']:,} ms per query ({result['machine']}, {result['date']}).")
    if "trained" in result:
        t, v = result["trained"], result["trained"]["verdict"]
        seeds = " / ".join(str(x) for x in t["seeds"])
        spread = "; ".join(f"{n} " + " / ".join(f"{regs[n]['trained_seeds'][str(x)]['methods']['dense+bm25+maxsim, trained']['ndcg@5']:.3f}"
                                                for x in t["seeds"]) for n in regs)
        cost += (f"\n\nThe trained rows are the means of seeds {seeds} (dense+bm25+maxsim, trained, per seed: {spread}). "
                 f"Projected to {t['proj_dim']} dimensions, Seal-Tools' token store is {regs['sealtools']['store_mb_projected']} MB. "
                 f"Against today's hybrid, dense+bm25+maxsim, trained: mean {v['mean_fused']:.3f} against {v['mean_hybrid']:.3f}, "
                 f"lowest ratio {min(v['ratios_to_hybrid'].values()):.3f} ({min(v['ratios_to_hybrid'], key=v['ratios_to_hybrid'].get)}): "
                 + ("the rule fixed before the run is met." if v["ships"] else "the rule fixed before the run is not met."))
    return "\n".join(lines) + "\n\n" + cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--registries", default=",".join(REGISTRIES))
    ap.add_argument("--trained", action="store_true", help="also fit the trained projection leave one corpus out (all six registries)")
    a = ap.parse_args()
    if a.trained and set(a.registries.split(",")) != set(REGISTRIES):
        raise SystemExit("late_interaction: --trained fits leave one corpus out and needs all six registries")
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    enc = Encoder(progress=False)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"),
                              "machine": f"{os.cpu_count()}-core {platform.machine()} machine (load {os.getloadavg()[0]:.2f} at the start)",
                              "encoder": enc.identity, "max_eval": MAX_EVAL, "rerank": RERANK, "registries": {}}
    held: dict[str, Held] = {}
    stores: dict[str, TokenStore] = {}
    for name in a.registries.split(","):
        row, store, held[name] = registry_result(name, REGISTRIES[name], a.data, enc)
        stores[name] = store
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
    if a.trained:
        rows, tokens = training_rows(a.data, enc, held, stores)
        result["trained"] = {"proj_dim": PROJ_DIM, "epochs": EPOCHS, "batch": BATCH, "lr": LR, "scale": TEMPERATURE_SCALE,
                             "train_tokens": TRAIN_TOKENS, "max_rows": MAX_ROWS, "seeds": list(SEEDS), "rows_per_registry": {n: len(r) for n, r in rows.items()}}
        for name, row in result["registries"].items():
            t = trained_result(name, held, stores, rows, tokens)
            row["methods"].update(t["methods"])
            row["trained_seeds"], row["store_mb_projected"] = t["seeds"], t["store_mb_projected"]
        result["trained"]["verdict"] = ship_verdict(result["registries"])
    if "sealtools" in result["registries"] and len(result["registries"]) == len(REGISTRIES):
        print(doc_table(result))
    if a.json:
        write_json(a.json, result)


if __name__ == "__main__":
    main()
