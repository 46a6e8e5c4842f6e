"""Speed and scale of riskrank's reranking stages, from 2,032 to 1,000,000 tools.

    python benchmarks/bench_scale.py --sizes 2032,4076,100000,1000000 --queries 200 \
        --data data --checkpoint-sealtools CK --json scale.json

For every registry, after query encoding (reported separately):

- riskrank: lexical (the task's BM25 and name features from the registry's inverted index,
  the validated fusion and the head's per-query normalisations: ``LexicalIndex.evidence`` and
  ``relevance_inputs``), heads (the factorised hybrid head over the full pool, minus lambda
  times the penalty), graph (ToolGraph one-hop smoothing, sparse + factored), rules (named
  tools first, then the top-K rule filter straight from the scores: partial selection, scan
  stops at K). Per-query latency is one query at a time (p50/p95 over ``--queries``);
  throughput (qps) runs batches of ``--batch``. ``--no-lexical`` times the dense head instead.
- naive, the reference implementation's way, in the same process and on the same queries
  (fewer of them: ``--naive-queries``, ``--naive-budget-s``): the pair MLP over every
  [e_q; e_t], a dense N x N normalised adjacency, a full sort and a per-position rule loop
  over the whole list. Each naive stage runs where it fits in memory (dense graph up to 23k
  tools, pair MLP up to 200k); ``speedup`` = naive total / riskrank total where all three ran.
  The top-K of both is compared query by query (``naive_topk_agreement``).
- build: HeadScorer precomputation, ToolGraph build (co-occurrence, semantic, permission,
  risk edges; from ``--ann-min`` tools on, semantic edges come from the IVF index with
  ``sem_knn``), peak resident memory (each registry runs in its own process).
- ANN first stage (from ``--ann-min`` tools): recall@100 against exact search, single-query
  and batch latency of both, the speed-up, an nprobe sweep, and the top-100 pipeline
  (ANN candidates joined by BM25's best quarter -> lexical evidence on the candidates ->
  heads -> candidate-subgraph smoothing -> rules).
- BM25 at each size: index build, postings read per query, full-pool scoring, candidate
  scoring and the impact-ordered top-25 (``bm25``).

Registries: synthetic ones of each ``--sizes`` (benchmarks/_synth.py: tools drawn around the
real MiniLM tool embeddings, each with its anchor's name (made unique), description and
parameter names, UltraTool's risk-label distribution, random permission categories,
co-occurring training queries) and the real UltraTool (2,032) and Seal-Tools (4,076)
registries (``--registries``), with the heads of a trained checkpoint when given
(``--checkpoint-ultratool``, ``--checkpoint-sealtools``), else random heads of the same shape
(the hybrid head with the prior fusion): speed does not depend on the weights. Queries are the
real test queries (texts and embeddings) of both benchmarks.

The JSON holds ``sizes.<N>`` (synthetic) and ``registries.<name>`` with the same fields:
``stage_ms_p50, total_ms_p50, total_ms_p95, naive_total_ms_p50, speedup, qps,
graph_build_s, peak_rss_mb`` and more; ``ann.<N>``; ``query_encoding``; and the machine's
load average at the start and end of each run (other work on a shared 2-core machine inflates
wall-clock times; ``cpu_ms_p50`` is the process CPU time per query, which it inflates less).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # naive.py: the references the tests use

import _synth
import naive
from riskrank.fileio import write_json

REAL = ("ultratool", "sealtools")
REAL_SPLIT = {"ultratool": "test", "sealtools": "test_in"}
# The paper's alpha per dataset (Section 5); synthetic registries use UltraTool's.
ALPHA = {"ultratool": 0.2, "sealtools": 0.02}
TOP_LENGTH = 100  # filtered positions returned per query (the pipeline's MAX_K)
#: Largest registry whose dense float32 adjacency the naive graph may hold (2 GiB).
DENSE_GRAPH_MAX_N = 23_000
#: Largest registry for the naive heads ([N, 2d] float32 pairs per query: 300 MB at 100k).
PAIR_MLP_MAX_N = 200_000


# ---------------------------------------------------------------------------- utilities


def set_threads(workers: int, intra_op: int) -> None:
    """``workers`` threads split the full-pool heads (HeadScorer.workers) and FAISS batch
    searches; BLAS and torch run ``intra_op`` threads inside each operation."""
    import torch
    from threadpoolctl import threadpool_limits

    from riskrank.heads import HeadScorer

    HeadScorer.workers = workers
    torch.set_num_threads(intra_op)
    threadpool_limits(intra_op)
    try:
        import faiss

        faiss.omp_set_num_threads(workers)
    except ImportError:
        pass


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def rnd(x: Any, nd: int = 3) -> Any:
    if isinstance(x, float):
        return round(x, nd)
    if isinstance(x, dict):
        return {k: rnd(v, nd) for k, v in x.items()}
    if isinstance(x, list):
        return [rnd(v, nd) for v in x]
    return x


class Timer:
    """Wall and process-CPU milliseconds of named stages, per query."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def add(self, name: str, wall_s: float, cpu_s: float) -> None:
        self.wall.setdefault(name, []).append(wall_s * 1e3)
        self.cpu.setdefault(name, []).append(cpu_s * 1e3)

    def run(self, name: str, fn, *args, **kwargs):
        w, c = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        self.add(name, time.perf_counter() - w, time.process_time() - c)
        return out

    def summary(self, stages: list[str]) -> dict[str, Any]:
        total = [sum(v) for v in zip(*(self.wall[s] for s in stages), strict=True)]
        total_cpu = [sum(v) for v in zip(*(self.cpu[s] for s in stages), strict=True)]
        return {
            "stage_ms_p50": {s: pct(self.wall[s], 50) for s in stages},
            "total_ms_p50": pct(total, 50),
            "total_ms_p95": pct(total, 95),
            "cpu_ms_p50": pct(total_cpu, 50),
            "n_queries": len(total),
        }


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


# ---------------------------------------------------------------------------- inputs


def encoder_embeddings(data: Path | None) -> tuple[np.ndarray | None, np.ndarray | None, dict[str, Any] | None]:
    """Real tool and test-query embeddings of both registries (from the embedding cache), and
    their texts: tool names, descriptions, parameter names, query texts (same order)."""
    if data is None:
        return None, None, None
    try:
        from riskrank.datasets import load_benchmark
        from riskrank.encoder import Encoder
        from riskrank.first_stage import parameter_names

        enc = Encoder(progress=False)
        tools, queries = [], []
        texts: dict[str, Any] = {"names": [], "descriptions": [], "parameters": [], "queries": []}
        for name in REAL:
            b = load_benchmark(name, data)
            tools.append(enc.encode(b.registry.texts()))
            qs = b.splits[REAL_SPLIT[name]]
            queries.append(enc.encode(qs.texts))
            texts["names"] += [t.name for t in b.registry]
            texts["descriptions"] += [t.description for t in b.registry]
            texts["parameters"] += [parameter_names(t.parameters) for t in b.registry]
            texts["queries"] += list(qs.texts)
        return np.concatenate(tools), np.concatenate(queries), texts
    except Exception as exc:  # the benchmark still runs on random anchors
        print(f"  (real embeddings unavailable: {exc}; using random anchors)", file=sys.stderr)
        return None, None, None


def load_real(name: str, data: Path) -> tuple[_synth.Registry, np.ndarray, dict[str, Any]]:
    from riskrank.datasets import load_benchmark
    from riskrank.encoder import Encoder
    from riskrank.first_stage import parameter_names

    b = load_benchmark(name, data)
    enc = Encoder(progress=False)
    emb = enc.encode(b.registry.texts())
    qs = b.splits[REAL_SPLIT[name]]
    queries = enc.encode(qs.texts)
    train = b.train if b.train is not None else qs  # as `riskrank train`
    reg = _synth.Registry(name, emb, b.registry.risk_levels.astype(np.int8), b.registry.permissions.astype(bool), list(train.gold))
    texts = {"names": [t.name for t in b.registry], "descriptions": [t.description for t in b.registry],
             "parameters": [parameter_names(t.parameters) for t in b.registry], "queries": list(qs.texts)}
    return reg, queries, texts


def heads_model(checkpoint: str | None, dim: int, lexical: bool):
    """(DualHead, lambda, where from, fusion): a trained checkpoint's heads, or random ones of
    the default shape (the hybrid head with the prior fusion when ``lexical``)."""
    import torch

    from riskrank.first_stage import LEXICAL_FEATURES, PRIOR_FUSION, Fusion
    from riskrank.training.modules import DualHead

    if checkpoint:
        from riskrank.checkpoint import load_checkpoint

        ck = load_checkpoint(checkpoint)
        fusion = Fusion.from_dict(ck.inference["fusion"]) if ck.inference.get("fusion") else None
        return ck.model.eval(), ck.lam, f"checkpoint {checkpoint}", fusion
    torch.manual_seed(0)
    model = DualHead(dim, lexical=LEXICAL_FEATURES if lexical else (), penalty="p_risky")
    with torch.no_grad():  # non-zero residual parts, so the MLP, bilinear and lexical terms do work
        for name, p in model.named_parameters():
            if not name.endswith("log_scale") and name != "relevance_head.bias":
                p.copy_(torch.randn_like(p) * 0.05)
    kind = "hybrid" if lexical else "dense"
    return model.eval(), 2.0, f"random DualHead(dim={dim}, {kind}, p_risky)", PRIOR_FUSION if lexical else None


# ---------------------------------------------------------------------------- one registry


class _Recorder:
    """Wraps an ANN index for ToolGraph.build and keeps the neighbour pairs of sampled rows
    (for the semantic-edge recall)."""

    def __init__(self, index, sample: np.ndarray) -> None:
        self.index, self.sample, self.n_tools = index, sample, index.n_tools
        self.pairs: tuple[np.ndarray, np.ndarray] | None = None

    def neighbours(self, k, **kw):
        r, c, v = self.index.neighbours(k, **kw)
        keep = np.isin(r, self.sample)
        self.pairs = (r[keep], c[keep])
        return r, c, v


def semantic_recall(emb: np.ndarray, sample: np.ndarray, pairs, k: int | None, threshold: float) -> float:
    """Fraction of the sampled tools' exact semantic neighbours (the k most similar above the
    threshold) that the ANN build found."""
    want = 0
    hit = 0
    found: dict[int, set[int]] = {}
    for r, c in zip(*pairs, strict=True):
        found.setdefault(int(r), set()).add(int(c))
    for i in sample.tolist():  # one row at a time: 300 x 10^6 cosines would be 1.2 GB
        row = emb @ emb[i]
        row[i] = -np.inf
        if k is None:
            cols = np.flatnonzero(row > threshold)
        else:
            top = np.argpartition(-row, k - 1)[:k]
            cols = top[row[top] > threshold]
        want += cols.size
        hit += len(found.get(i, set()) & set(cols.tolist()))
    return hit / want if want else 1.0


def run_registry(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """Everything measured for one registry (run in its own process)."""
    from riskrank.ann import ANNRetriever
    from riskrank.first_stage import LexicalIndex, pin_named, relevance_inputs
    from riskrank.graph import GraphConfig, ToolGraph
    from riskrank.heads import HeadScorer
    from riskrank.rules import RuleConfig, RuleFilter

    set_threads(args.threads, args.intra_op_threads)
    out: dict[str, Any] = {"load_avg_start": os.getloadavg()}
    data = Path(args.data) if args.data else None
    t0 = time.perf_counter()
    texts = None
    if spec in REAL:
        reg, queries, texts = load_real(spec, data)
        checkpoint = getattr(args, f"checkpoint_{spec}")
        alpha = ALPHA[spec]
        tool_lists = (texts["names"], texts["descriptions"], texts["parameters"])
    else:
        anchors, real_q, texts = encoder_embeddings(data) if args.anchors == "real" else (None, None, None)
        if anchors is None:
            anchors = _synth.random_anchors(6108, 384)
        reg = _synth.synthetic_registry(int(spec), anchors, seed=args.seed)
        queries = real_q if real_q is not None else _synth.synthetic_queries(1000, anchors)
        checkpoint, alpha = None, ALPHA["ultratool"]
        tool_lists = _synth.synthetic_texts(reg, texts["names"], texts["descriptions"], texts["parameters"]) if texts else None
    lexical = tool_lists is not None and not args.no_lexical
    rng = np.random.default_rng(args.seed)
    keep = rng.permutation(len(queries))[: args.queries]
    queries = queries[keep]
    query_texts = [texts["queries"][i] for i in keep.tolist()] if lexical else None
    n = reg.n
    out["setup_s"] = time.perf_counter() - t0
    model, lam, heads_from, fusion = heads_model(checkpoint, reg.emb.shape[1], lexical)
    lexical = lexical and bool(model.lexical)
    out.update(n_tools=n, heads=heads_from, design=model.design, lam=lam, alpha=alpha, threads=args.threads,
               intra_op_threads=args.intra_op_threads, lexical=lexical, fusion=fusion.to_dict() if fusion else None)
    print(f"[{spec}] {n} tools, {len(queries)} queries; heads: {heads_from}", file=sys.stderr, flush=True)

    # -- build ----------------------------------------------------------------------------
    use_ann = n >= args.ann_min
    ann = None
    if use_ann:
        ann, out["ann_build_s"] = timed(ANNRetriever, reg.emb, kind="ivf")
        out["ann_nlist"] = ann.nlist
    index = None
    if lexical:
        index, out["lexical_build_s"] = timed(LexicalIndex, *tool_lists)
        out["rss_after_lexical_mb"] = peak_rss_mb()
    scorer, out["heads_build_s"] = timed(HeadScorer, model, reg.emb)
    gcfg = GraphConfig(sem_knn=args.sem_knn) if use_ann else GraphConfig()
    sample = rng.choice(n, size=min(n, 300), replace=False)
    recorder = _Recorder(ann, sample) if use_ann else None
    graph, graph_s = timed(ToolGraph.build, reg.emb, reg.train_gold, reg.risk, reg.perms, gcfg, semantic_index=recorder)
    # The index is built for the graph's semantic edges, so its build counts here too.
    out["graph_build_s"] = graph_s + (out["ann_build_s"] if use_ann else 0.0)
    out["graph_edges_build_s"] = graph_s
    out["graph_config"] = {"sem_threshold": gcfg.sem_threshold, "sem_knn": gcfg.sem_knn, "semantic_edges": "ivf" if use_ann else "exact"}
    out["graph_edges"] = graph.stats()["edges"]
    if use_ann:
        out["semantic_edge_recall"] = semantic_recall(reg.emb, sample, recorder.pairs, gcfg.sem_knn, gcfg.sem_threshold)
    rcfg = RuleConfig()
    rf = RuleFilter(rcfg, reg.risk, reg.perm_counts, reg.emb)
    out["rss_after_build_mb"] = peak_rss_mb()
    print(f"[{spec}] built: graph {out['graph_build_s']:.1f}s, peak RSS {out['rss_after_build_mb']:.0f} MB", file=sys.stderr, flush=True)

    # -- riskrank, one query at a time ----------------------------------------------------
    f_risk = np.float32(lam) * scorer.f_risk

    def lexical_stage(q, tx):
        """(head inputs, named mask): the task's lexical evidence and the fused first stage."""
        ev = index.evidence(tx)
        return relevance_inputs(q @ reg.emb.T, ev, fusion), ev.named

    def heads_stage(q, inputs=None):
        s = scorer.relevance_score(q, inputs=inputs)  # the dense head computes the cosine inside, block by block
        s -= f_risk
        return s

    def rerank(q, tx, timer=None):
        run = timer.run if timer else (lambda _n, fn, *a, **k: fn(*a, **k))
        inputs, named = run("lexical", lexical_stage, q, tx) if lexical else (None, None)
        s = run("heads", heads_stage, q, inputs)
        s = run("graph", graph.smooth, s, alpha)
        orders, _ = run("rules", lambda x: rf.filter_scores(pin_named(x, named), length=TOP_LENGTH), s)
        return orders, inputs

    stages = ["lexical", "heads", "graph", "rules"] if lexical else ["heads", "graph", "rules"]

    def tx_of(a, b):
        return query_texts[a:b] if lexical else None

    for i in range(min(20, len(queries))):  # warm-up: allocator, caches, first-call costs
        rerank(queries[i : i + 1], tx_of(i, i + 1))
    timer = Timer()
    fast_top, fast_inputs = [], []
    for i in range(len(queries)):
        orders, inputs = rerank(queries[i : i + 1], tx_of(i, i + 1), timer)
        fast_top.append(orders[0, : rcfg.k])
        fast_inputs.append(inputs if i < args.naive_queries else None)
    out.update(timer.summary(stages))
    if lexical:
        out["bm25"] = bm25_stats(index, query_texts, n)

    # -- the heads with one worker vs --threads workers, interleaved query by query (the
    #    machine's load drifts; interleaving compares like with like) ---------------------------
    if args.threads > 1 and n >= HeadScorer.parallel_min_tools:
        ab = Timer()
        for i in range(len(queries)):
            inputs = lexical_stage(queries[i : i + 1], tx_of(i, i + 1))[0] if lexical else None
            for w in (1, args.threads):
                HeadScorer.workers = w
                ab.run(f"heads_{w}", heads_stage, queries[i : i + 1], inputs)
        HeadScorer.workers = args.threads
        out["heads_ms_p50_by_workers"] = {w: pct(ab.wall[f"heads_{w}"], 50) for w in (1, args.threads)}

    # -- riskrank, batches ------------------------------------------------------------------
    batch = max(1, min(args.batch, (1 << 27) // n // (8 if lexical else 1)))
    w = time.perf_counter()
    for a in range(0, len(queries), batch):
        rerank(queries[a : a + batch], tx_of(a, a + batch))
    out["qps"] = len(queries) / (time.perf_counter() - w)
    out["batch"] = batch
    out["batch_ms_per_query"] = 1e3 / out["qps"]
    print(f"[{spec}] riskrank p50 {out['total_ms_p50']:.2f} ms/query, {out['qps']:.1f} qps", file=sys.stderr, flush=True)

    # -- the pipeline object as it stands (real registries with a checkpoint) ------------------
    if spec in REAL and checkpoint:
        out.update(run_pipeline(spec, args, checkpoint, reg, graph, alpha, queries, query_texts))

    # -- naive ------------------------------------------------------------------------------
    out.update(run_naive(reg, model, lam, alpha, graph, rcfg, queries, fast_top, fast_inputs, heads_stage, args,
                         tool_lists if lexical else None, query_texts, fusion))
    if out.get("naive_total_ms_p50") and out["total_ms_p50"]:
        out["speedup"] = out["naive_total_ms_p50"] / out["total_ms_p50"]
    else:
        out["speedup"] = None
    out["stage_speedup"] = {
        s: (out["naive_stage_ms_p50"][s] / out["stage_ms_p50"][s]) if out["naive_stage_ms_p50"].get(s) else None for s in stages
    }

    # -- ANN first stage and the top-100 pipeline ---------------------------------------------
    if use_ann:
        out["ann"] = run_ann(ann, reg, queries, scorer, f_risk, graph, rf, alpha, args, index if lexical else None, fusion,
                             query_texts)
    out["peak_rss_mb"] = peak_rss_mb()
    out["load_avg_end"] = os.getloadavg()
    return out


def bm25_stats(index, texts: list[str], n: int) -> dict[str, Any]:
    """How BM25 scales: postings read per query, full-pool scoring, scoring 125 candidates,
    and the impact-ordered top-25 the approximate first stage joins."""
    bm = index.bm25
    t = Timer()
    postings = []
    rng = np.random.default_rng(0)
    for text in texts:
        ids = bm.token_ids(text)
        postings.append(int((bm._indptr[ids + 1] - bm._indptr[ids]).sum()) if ids.size and bm.model is not None else 0)
        t.run("full", bm.score, [text])
        cand = rng.choice(n, size=(1, min(n, 125)), replace=False)
        t.run("candidates", bm.score_candidates, [text], cand)
        t.run("top25", bm.top, text, 25)
    return {"vocabulary": len(bm.vocab), "postings_per_query_p50": pct(postings, 50), "postings_per_query_p95": pct(postings, 95),
            "full_pool_ms_p50": pct(t.wall["full"], 50), "candidates125_ms_p50": pct(t.wall["candidates"], 50),
            "top25_ms_p50": pct(t.wall["top25"], 50), "top25_ms_p95": pct(t.wall["top25"], 95)}


def run_pipeline(spec, args, checkpoint, reg, graph, alpha, queries, texts) -> dict[str, Any]:
    """RiskAwareRetriever.rank_batch (mode core+graph+rule, full pool, the task texts given),
    one query at a time: what a caller of the pipeline gets today (it ranks and filters the
    whole list)."""
    from riskrank.datasets import load_benchmark
    from riskrank.encoder import Encoder
    from riskrank.pipeline import RiskAwareRetriever

    registry = load_benchmark(spec, args.data).registry
    r = RiskAwareRetriever(registry, encoder=Encoder(progress=False), checkpoint=checkpoint, graph=graph,
                           tool_emb=reg.emb, alpha=alpha, mode="core+graph+rule", progress=False)
    tx = (lambda i: texts[i : i + 1]) if texts else (lambda i: None)
    r.rank_batch(queries[:2], candidates=None, texts=texts[:2] if texts else None)
    t = Timer()
    for i in range(len(queries)):
        t.run("rank_batch", r.rank_batch, queries[i : i + 1], candidates=None, texts=tx(i))
    return {"pipeline_rank_batch_ms_p50": pct(t.wall["rank_batch"], 50), "pipeline_rank_batch_ms_p95": pct(t.wall["rank_batch"], 95)}


def naive_rules(scores: np.ndarray, rcfg, risk, perm, emb) -> list[int]:
    """The reference's rule stage: a full stable sort, then every position visited."""
    return naive.rule_filter(np.argsort(-scores, kind="stable"), rcfg, risk, perm, emb, scan_all=True)[0]


def run_naive(reg, model, lam, alpha, graph, rcfg, queries, fast_top, fast_inputs, fast_scores, args, tool_lists, texts,
              fusion) -> dict[str, Any]:
    from riskrank.first_stage import LexicalEvidence, pin_named, relevance_inputs

    n = reg.n
    res: dict[str, Any] = {"naive_stages_run": []}
    run_heads = n <= PAIR_MLP_MAX_N
    run_graph = n <= DENSE_GRAPH_MAX_N
    run_lex = tool_lists is not None and n <= DENSE_GRAPH_MAX_N
    adjacency = None
    if run_graph:
        adjacency, res["naive_graph_build_s"] = timed(naive.dense_adjacency, graph, graph.config.normalisation)
    timer = Timer()
    agree = []
    budget = time.perf_counter() + args.naive_budget_s
    perm = reg.perm_counts

    def naive_lexical(q, text):
        ev = naive.lexical_evidence([text], *tool_lists)
        ident = np.asarray([naive_identifier(nm) for nm in tool_lists[0]])[None, :]
        evidence = LexicalEvidence(ev["bm25"], ev["ex"], ev["fr"], ev["fri"], ev["frp"], (ev["ex"] > 0) & ident)
        return relevance_inputs(q @ reg.emb.T, evidence, fusion), evidence.named

    for i in range(min(args.naive_queries, len(queries))):
        q = queries[i : i + 1]
        inputs, named = fast_inputs[i], None
        if run_lex:
            inputs, named = timer.run("lexical", naive_lexical, q, texts[i])
        if run_heads:
            s = timer.run("heads", naive.head_scores, model, q, reg.emb, lam, inputs)
        else:  # too big for the pair MLP: the fast scores stand in for the later stages
            s = fast_scores(q, inputs)
        if run_graph:
            s = timer.run("graph", naive.smooth, s, adjacency, alpha)
        else:
            s = graph.smooth(s, alpha)
        order = timer.run("rules", naive_rules, pin_named(s, named)[0], rcfg, reg.risk, perm, reg.emb)
        agree.append(order[: rcfg.k] == fast_top[i].tolist())
        if time.perf_counter() > budget and i >= 2:
            break
    stages = ("lexical", "heads", "graph", "rules") if tool_lists is not None else ("heads", "graph", "rules")
    ran = [s for s in stages if s in timer.wall]
    res["naive_stages_run"] = ran
    res["naive_stage_ms_p50"] = {s: pct(timer.wall[s], 50) for s in ran}
    res["naive_queries"] = len(agree)
    if len(ran) == len(stages):
        sm = timer.summary(ran)
        res["naive_total_ms_p50"] = sm["total_ms_p50"]
        res["naive_total_ms_p95"] = sm["total_ms_p95"]
        res["naive_cpu_ms_p50"] = sm["cpu_ms_p50"]
        # Same inputs, same stages: the final top-K must match (float rounding may swap a tie).
        res["naive_topk_agreement"] = float(np.mean(agree)) if agree else None
    else:
        res["naive_total_ms_p50"] = None
    return res


def naive_identifier(name: str) -> bool:
    from riskrank.risk import split_name

    return split_name(name) != name


def run_ann(ann, reg, queries, scorer, f_risk, graph, rf, alpha, args, index=None, fusion=None, texts=None) -> dict[str, Any]:
    from riskrank.ann import recall_at_k
    from riskrank.first_stage import DenseRetriever, pin_named, relevance_inputs, union_candidates

    m = 100
    dense = DenseRetriever(reg.emb)
    step = max(1, min(args.batch, (1 << 27) // reg.n))  # [batch, N] cosines at a time

    def exact_batches():
        return np.concatenate([dense.search(queries[a : a + step], m)[0] for a in range(0, len(queries), step)])

    exact_idx, exact_batch_s = timed(exact_batches)
    exact_t = Timer()
    for i in range(min(len(queries), args.exact_queries)):
        exact_t.run("search", dense.search, queries[i : i + 1], m)
    out: dict[str, Any] = {
        "kind": ann.kind, "nlist": ann.nlist, "m": m,
        "exact_single_ms_p50": pct(exact_t.wall["search"], 50),
        "exact_batch_ms_per_query": exact_batch_s * 1e3 / len(queries),
        "sweep": [],
    }
    chosen = None
    for nprobe in args.nprobes:
        ann.search(queries[:2], m, nprobe=nprobe)
        t = Timer()
        for i in range(len(queries)):
            t.run("search", ann.search, queries[i : i + 1], m, nprobe=nprobe)
        (idx, _), batch_s = timed(ann.search, queries, m, nprobe=nprobe)
        row = {
            "nprobe": nprobe,
            "recall@100": recall_at_k(exact_idx, idx, m),
            "single_ms_p50": pct(t.wall["search"], 50),
            "batch_ms_per_query": batch_s * 1e3 / len(queries),
        }
        row["speedup_single"] = out["exact_single_ms_p50"] / row["single_ms_p50"]
        row["speedup_batch"] = out["exact_batch_ms_per_query"] / row["batch_ms_per_query"]
        out["sweep"].append(row)
        if chosen is None and row["recall@100"] >= 0.95:
            chosen = row
    chosen = chosen or out["sweep"][-1]
    out.update({k: chosen[k] for k in ("nprobe", "recall@100", "single_ms_p50", "batch_ms_per_query", "speedup_single", "speedup_batch")})

    # top-100 pipeline: ANN candidates (joined by BM25's best quarter and the named tools) ->
    # the lexical evidence of the candidates -> heads on them -> subgraph smoothing -> rules
    def first_stage(q, text):
        cand, _ = ann.search(q, m, nprobe=chosen["nprobe"])
        if index is None:
            return cand
        named = np.asarray([t for t in index.exact(text) if index.identifier_like[t]], np.int64)
        best = index.bm25.top(text, m // 4)
        return union_candidates(cand, [np.concatenate([named, best[~np.isin(best, named)]])], m)

    def top100(q, text, timer):
        cand = timer.run("first_stage", first_stage, q, text)
        inputs = named = None
        if index is not None:
            def lexical():
                ev = index.evidence([text], cand)
                cos = np.einsum("qmd,qd->qm", reg.emb[cand], q)
                return relevance_inputs(cos, ev, fusion), ev.named
            inputs, named = timer.run("lexical", lexical)
        s = timer.run("heads", lambda: scorer.relevance_score(q, cand, inputs=inputs) - f_risk[cand])
        s = timer.run("graph", graph.smooth, s, alpha, cand)
        return timer.run("rules", lambda: rf.filter_scores(pin_named(s, named), cand, length=rf.config.k))

    t = Timer()
    txt = (lambda i: texts[i]) if texts is not None else (lambda i: None)
    top100(queries[:1], txt(0), Timer())
    for i in range(len(queries)):
        top100(queries[i : i + 1], txt(i), t)
    stages = ["first_stage", "lexical", "heads", "graph", "rules"] if index is not None else ["first_stage", "heads", "graph", "rules"]
    out["top100_pipeline"] = t.summary(stages)
    out["top100_pipeline"]["lexical"] = index is not None
    return out


def query_encoding(args: argparse.Namespace) -> dict[str, Any]:
    """Latency of encoding one query with the default encoder (no cache), and a batch."""
    from riskrank.encoder import Encoder

    texts = None
    if args.data:
        try:
            from riskrank.datasets import load_benchmark

            texts = load_benchmark("ultratool", args.data).splits["test"].texts
        except Exception:
            texts = None
    texts = texts or [f"find a tool that can do task number {i}" for i in range(100)]
    import torch

    enc = Encoder(use_cache=False, progress=False)
    (_, load_s) = timed(lambda: enc.model)
    enc.encode(texts[:2])
    # torch intra-op threads 1 and --threads, interleaved query by query: one transformer
    # forward is a few hundred small kernels, and on a shared 2-core machine the second
    # thread's barriers can cost more than it computes.
    counts = sorted({args.intra_op_threads, args.threads})
    t = Timer()
    for text in texts[: args.encode_queries]:
        for c in counts:
            torch.set_num_threads(c)
            t.run(f"encode_{c}", enc.encode, [text])
    torch.set_num_threads(args.intra_op_threads)
    _, batch_s = timed(enc.encode, texts[:32])
    best = min(counts, key=lambda c: pct(t.wall[f"encode_{c}"], 50))
    return {
        "encoder": enc.display_name, "model_load_s": load_s, "torch_threads": best,
        "single_ms_p50": pct(t.wall[f"encode_{best}"], 50), "single_ms_p95": pct(t.wall[f"encode_{best}"], 95),
        "single_ms_p50_by_threads": {c: pct(t.wall[f"encode_{c}"], 50) for c in counts},
        "batch32_ms_per_query": batch_s * 1e3 / 32, "n_queries": args.encode_queries,
    }


# ---------------------------------------------------------------------------- driver


def worker(spec: str, args: argparse.Namespace, path: str) -> None:
    result = query_encoding(args) if spec == "encoding" else run_registry(spec, args)
    Path(path).write_text(json.dumps(rnd(result, 4)))


def table(report: dict[str, Any]) -> str:
    rows = [
        "| registry | tools | lexical ms | heads ms | graph ms | rules ms | riskrank p50 / p95 ms | naive p50 ms | speed-up | qps | graph build s | lexical build s | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    entries = [(f"synthetic-{k}", v) for k, v in report.get("sizes", {}).items()] + list(report.get("registries", {}).items())
    for name, r in entries:
        if "error" in r:
            rows.append(f"| {name} | | error: {r['error'][:60]} |")
            continue
        st = r["stage_ms_p50"]
        naive_ms = r.get("naive_total_ms_p50")
        stage_naive = r.get("naive_stage_ms_p50", {})
        naive_txt = f"{naive_ms:.1f}" if naive_ms else ("stages: " + ", ".join(f"{k} {v:.0f}" for k, v in stage_naive.items()) if stage_naive else "-")
        sp = f"{r['speedup']:.0f}x" if r.get("speedup") else "-"
        lex = f"{st['lexical']:.2f}" if "lexical" in st else "-"
        lex_b = f"{r['lexical_build_s']:.1f}" if r.get("lexical_build_s") is not None else "-"
        rows.append(
            f"| {name} | {r['n_tools']:,} | {lex} | {st['heads']:.2f} | {st['graph']:.2f} | {st['rules']:.2f} | "
            f"{r['total_ms_p50']:.2f} / {r['total_ms_p95']:.2f} | {naive_txt} | {sp} | {r['qps']:.1f} | "
            f"{r['graph_build_s']:.1f} | {lex_b} | {r['peak_rss_mb']:.0f} |"
        )
    ann_rows = ["", "| tools | nprobe | recall@100 | exact ms (1 query) | ANN ms (1 query) | speed-up | exact / ANN ms per query, batch | top-100 pipeline p50 / p95 ms | its stages p50 ms |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for k, r in report.get("sizes", {}).items():
        a = r.get("ann")
        if a:
            tp = a["top100_pipeline"]
            st = ", ".join(f"{s} {v:.2f}" for s, v in tp["stage_ms_p50"].items())
            ann_rows.append(
                f"| {int(k):,} | {a['nprobe']} | {a['recall@100']:.3f} | {a['exact_single_ms_p50']:.1f} | {a['single_ms_p50']:.2f} | "
                f"{a['speedup_single']:.0f}x | {a['exact_batch_ms_per_query']:.2f} / {a['batch_ms_per_query']:.2f} | "
                f"{tp['total_ms_p50']:.2f} / {tp['total_ms_p95']:.2f} | {st} |"
            )
    bm_rows = ["", "| registry | vocabulary | postings per query p50 / p95 | BM25 full pool ms | 125 candidates ms | top-25 p50 / p95 ms |",
               "|---|---:|---:|---:|---:|---:|"]
    for name, r in entries:
        b = r.get("bm25")
        if b:
            bm_rows.append(f"| {name} | {b['vocabulary']:,} | {b['postings_per_query_p50']:,.0f} / {b['postings_per_query_p95']:,.0f} | "
                           f"{b['full_pool_ms_p50']:.2f} | {b['candidates125_ms_p50']:.3f} | {b['top25_ms_p50']:.2f} / {b['top25_ms_p95']:.2f} |")
    return "\n".join(rows + (ann_rows if len(ann_rows) > 3 else []) + (bm_rows if len(bm_rows) > 3 else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="2032,4076,100000,1000000", help="synthetic registry sizes (comma-separated; '' for none)")
    p.add_argument("--registries", default="ultratool,sealtools", help="real registries ('' for none)")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--naive-queries", type=int, default=50)
    p.add_argument("--naive-budget-s", type=float, default=120.0, help="stop the naive loop after this long (3 queries at least)")
    p.add_argument("--exact-queries", type=int, default=50, help="single-query exact searches timed for the ANN speed-up")
    p.add_argument("--encode-queries", type=int, default=50)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2, help="worker threads: HeadScorer.workers, FAISS")
    p.add_argument("--intra-op-threads", type=int, default=1, help="BLAS / torch threads inside one operation")
    p.add_argument("--ann-min", type=int, default=50_000, help="registries from this size use the IVF index")
    p.add_argument("--sem-knn", type=int, default=16, help="GraphConfig.sem_knn for ANN-built graphs")
    p.add_argument("--nprobes", default="8,16,32,64")
    p.add_argument("--anchors", choices=("real", "random"), default="real")
    p.add_argument("--data", default=os.environ.get("RISKRANK_DATA"))
    p.add_argument("--checkpoint-ultratool")
    p.add_argument("--checkpoint-sealtools")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-encoding", action="store_true", help="skip the query-encoding latency")
    p.add_argument("--no-lexical", action="store_true", help="time the dense head without the lexical evidence")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.nprobes = [int(x) for x in args.nprobes.split(",") if x]
    if args.worker:
        worker(args.worker, args, args.worker_out)
        return 0

    specs = [s for s in args.sizes.split(",") if s] + [s for s in args.registries.split(",") if s]
    if not args.no_encoding:
        specs.append("encoding")
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "sizes": {}, "registries": {},
    }
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    for spec in specs:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
            path = fh.name
        # One process per registry: peak RSS is that registry's own, and a million-tool run
        # never shares memory with the others.
        cmd = [sys.executable, __file__, *passthrough, "--worker", spec, "--worker-out", path]
        t = time.perf_counter()
        proc = subprocess.run(cmd)
        try:
            result = json.loads(Path(path).read_text()) if proc.returncode == 0 else {"error": f"exit code {proc.returncode}"}
        except (OSError, ValueError) as exc:
            result = {"error": str(exc)}
        finally:
            Path(path).unlink(missing_ok=True)
        result["wall_s"] = round(time.perf_counter() - t, 1)
        if spec == "encoding":
            report["query_encoding"] = result
        elif spec in REAL:
            report["registries"][spec] = result
        else:
            report["sizes"][spec] = result
        if args.json:  # keep what has finished, in case a later size fails
            write_json(args.json, report)
    print(table(report))
    if "query_encoding" in report and "single_ms_p50" in report["query_encoding"]:
        qe = report["query_encoding"]
        print(f"\nquery encoding ({qe['encoder']}): p50 {qe['single_ms_p50']:.1f} ms, p95 {qe['single_ms_p95']:.1f} ms per query; "
              f"{qe['batch32_ms_per_query']:.1f} ms per query in batches of 32")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
