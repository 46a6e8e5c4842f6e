"""Fit the level model (:mod:`riskrank.levels`) and judge it by leaving data out.

Training data: the rubric levels three annotators gave 1,298 real MCP tools, 895 tools of the
corpora and 260 attack and look-alike definitions (:mod:`riskrank.datasets.rubric`), and,
weighted by a choice, the paper's audited levels of the benchmarks (UltraTool, Seal-Tools). The model is a cumulative-logit
(all-threshold) regression with an L2 penalty, fitted by L-BFGS: one score for every level
boundary (:func:`fit_ordinal`), or a weight vector the boundaries share plus one per boundary
penalised ``shrink`` times as much (:func:`fit_partial`; :func:`fit_boundaries`, a vector per
boundary alone, is measured beside them). Its choices (the penalty, the benchmarks' weight, the
decision thresholds ``tau``, the hint floors and the form with its shrink, from
:data:`PARTIAL_SHRINKS`) are made by an inner leave-servers-out split of the training servers only.

The judge is the level served, with the declared hints stripped from the model's input and
applied as the gateway applies them:

* leave one MCP server out (:func:`leave_groups_out`): each server's tools scored by a model
  fitted (and tuned) without it; weighted κ, exact and within-one agreement against the
  annotators' level, and what the default policy would do (tools rated L1-L2 that would be
  asked about, tools rated L4-L5 that would run without a question), per server and pooled;
  the same with each corpus of the rated sample, and the attack set, held out in turn;
* leave one benchmark out (:func:`paper_agreement`): κ against the paper's own labels of a
  benchmark whose tools the model never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from riskrank.capabilities import CAPABILITY_KEYS
from riskrank.levels import (
    TEXT_FEATURES,
    LevelModel,
    ToolEvidence,
    WordVectors,
    features,
    levels_from_cumulative,
    neighbour_shares,
    word_text,
)

#: What the inner split chooses from.
PENALTIES = (1.0,)
CORPUS_WEIGHTS = (0.0, 0.3)
#: The word vector's weight beside the embedding (0: no words), and its vocabulary's bounds.
WORD_SCALES = (0.0, 1.0)
WORD_MIN_DF, WORD_MAX_FEATURES = 3, 5000
TAU_GRID = (0.3, 0.4, 0.5, 0.6)
#: A lower threshold the two inner boundaries (L2/L3: asked or not; L3/L4) may also take, tried
#: after the candidates before it (a choice it does not beat stays as it was); None: not offered.
#: Measured with 0.2 (``benchmarks/risk_levels.py --tau-low 0.2``): the inner split took it for
#: L2/L3 in most folds and, pooled, asked about more harmless tools held out: off (docs/base-model.md).
TAU_LOW: float | None = None
#: The hint floors compared: (destructiveHint, readOnlyHint false, openWorldHint).
HINT_FLOORS = ((4, 3, 2), (4, 2, 2), (3, 2, 1), (1, 1, 1))
#: The default policy asks from this level.
CONFIRM_LEVEL = 3


def _weighted_rows(x: Any, y: np.ndarray, weight: np.ndarray | None) -> tuple[Any, np.ndarray, np.ndarray]:
    """The rows a fit reads, as float64 (a sparse matrix stays sparse), with their levels and
    weights (1 each without ``weight``); rows that weigh nothing are dropped: they cost nothing."""
    import scipy.sparse as sp

    x = sp.csr_matrix(x, dtype=np.float64) if sp.issparse(x) else np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    w8 = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    keep = np.flatnonzero(w8 > 0)
    return x[keep], y[keep], w8[keep]


def fit_ordinal(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, *, penalty: float = 1.0,
                max_iter: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """(w [F], thresholds [4]) of the all-threshold cumulative-logit model minimising
    ``sum_i weight_i sum_k BCE(sigmoid(w x_i - theta_k), [y_i > k]) / sum(weight) + penalty/2 |w|^2 / n``.

    Thresholds are kept increasing by fitting the first and the log-gaps."""
    from scipy.optimize import minimize

    x, y, w8 = _weighted_rows(x, y, weight)
    n, f = x.shape
    w8 = w8 / w8.sum()
    target = (y[:, None] > np.arange(1, 5)[None, :]).astype(np.float64)  # [n, 4]
    lam = penalty / n

    def unpack(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return p[:f], np.cumsum(np.r_[p[f], np.exp(p[f + 1:])])

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        w, th = unpack(p)
        logit = (x @ w)[:, None] - th[None, :]
        sp = np.logaddexp(0.0, logit)
        val = float((w8[:, None] * (sp - target * logit)).sum() + 0.5 * lam * w @ w)
        g = w8[:, None] * (1.0 / (1.0 + np.exp(-logit)) - target)  # dL/dlogit
        gw = np.asarray(x.T @ g.sum(axis=1)).ravel() + lam * w
        gth = -g.sum(axis=0)  # dL/dtheta_k
        # theta_k = a + sum_{j<=k} exp(b_j): d/da = sum_k, d/db_j = exp(b_j) * sum_{k>=j}
        ga = gth.sum()
        gb = np.exp(p[f + 1:]) * np.cumsum(gth[::-1])[::-1][1:]
        return val, np.r_[gw, ga, gb]

    p0 = np.zeros(f + 4)
    p0[f] = -1.0
    res = minimize(loss, p0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    w, th = unpack(res.x)
    return w.astype(np.float32), th.astype(np.float32)


def fit_boundaries(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, *, penalty: float = 1.0,
                   max_iter: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """(W [4, F], thresholds [4]) of one logistic regression per level boundary,
    ``P(level > k) = sigmoid(W_k x - theta_k)``, each minimising the same weighted loss and
    penalty as :func:`fit_ordinal` for its own boundary. What tells L1 from L2 (metadata or
    content) is not what tells L3 from L4 (does it undo): one score for all four boundaries
    (:func:`fit_ordinal`) has to trade them against each other. The model's reading keeps
    ``P(level > k)`` non-increasing in k (:meth:`riskrank.levels.LevelModel.cumulative`). A
    boundary the training rows all fall on one side of gets a constant."""
    from sklearn.linear_model import LogisticRegression

    x, y, w8 = _weighted_rows(x, y, weight)
    # sklearn minimises |w|^2 / 2 + C sum_i s_i BCE_i; with s = n w8 / sum(w8) and C = 1 / penalty
    # that is n / penalty times fit_ordinal's objective for one boundary
    s = w8 * len(y) / w8.sum()
    weights = np.zeros((4, x.shape[1]))
    thresholds = np.zeros(4)
    for k in range(4):
        above = (y > k + 1).astype(np.int64)
        if 0 < above.sum() < len(above):
            m = LogisticRegression(C=1.0 / penalty, max_iter=max_iter).fit(x, above, sample_weight=s)
            weights[k], thresholds[k] = m.coef_[0], -m.intercept_[0]
        else:
            p = float(np.clip(np.average(above, weights=s), 1e-4, 1 - 1e-4))
            thresholds[k] = -np.log(p / (1 - p))
    return weights.astype(np.float32), thresholds.astype(np.float32)


def fit_partial(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, *, penalty: float = 1.0, shrink: float = 10.0,
                max_iter: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(W [4, F], thresholds [4]) of a cumulative-logit model whose boundaries share one weight
    vector and each add their own, ``P(level > k) = sigmoid((w + d_k) x - theta_k)``, the
    ``d_k`` penalised ``shrink`` times as much as ``w``: between :func:`fit_ordinal` (shrink to
    infinity) and :func:`fit_boundaries` (no shared part). The same weighted loss and penalty on
    ``w`` as :func:`fit_ordinal`."""
    import scipy.sparse as sp
    from scipy.optimize import minimize

    x, y, w8 = _weighted_rows(x, y, weight)
    n, f = x.shape
    w8 = w8 / w8.sum()
    target = (y[:, None] > np.arange(1, 5)[None, :]).astype(np.float64)
    lam = penalty / n
    xt = x.T.tocsr() if sp.issparse(x) else x.T

    def unpack(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return p[:f], p[f:5 * f].reshape(4, f), np.cumsum(np.r_[p[5 * f], np.exp(p[5 * f + 1:])])

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        w, d, th = unpack(p)
        # four products with one vector each: scipy's sparse times a vector is its fast path
        logit = np.stack([x @ (w + d[k]) for k in range(4)], axis=1) - th[None, :]
        val = float((w8[:, None] * (np.logaddexp(0.0, logit) - target * logit)).sum() + 0.5 * lam * (w @ w + shrink * (d * d).sum()))
        g = w8[:, None] * (1.0 / (1.0 + np.exp(-logit)) - target)
        gd = np.stack([xt @ g[:, k] for k in range(4)]) + lam * shrink * d
        gw = gd.sum(axis=0) - lam * shrink * d.sum(axis=0) + lam * w
        gth = -g.sum(axis=0)
        gb = np.exp(p[5 * f + 1:]) * np.cumsum(gth[::-1])[::-1][1:]
        return val, np.r_[gw, gd.ravel(), gth.sum(), gb]

    # started from the shared model (fit_ordinal's optimum, no boundary's own part): the partial
    # model's optimum is near it, and each of its steps costs four of the shared model's
    w0, th0 = fit_ordinal(x, y, w8, penalty=penalty)
    gaps = np.maximum(np.diff(th0.astype(np.float64)), 1e-6)
    p0 = np.r_[w0.astype(np.float64), np.zeros(4 * f), th0[0], np.log(gaps)]
    res = minimize(loss, p0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    w, d, th = unpack(res.x)
    return (w[None, :] + d).astype(np.float32), th.astype(np.float32)


#: :func:`fit_arrays`' default form: "proportional" (one score and four thresholds,
#: :func:`fit_ordinal`), "boundaries" (a weight vector per boundary alone, :func:`fit_boundaries`)
#: or "partial" (a weight vector the boundaries share, and one per boundary penalised ``shrink``
#: times as much: :func:`fit_partial`). benchmarks/level_forms.py compares them with one fixed
#: choice; the shipped model's form is its inner split's choice (:attr:`Choice.shrink`).
FORM = "proportional"
SHRINK = 3.0
#: The partial form's shrinks the inner split may choose beside the one-score form (which is
#: shrink without bound); empty: the one-score form only (:func:`choose`). The values are
#: three of the four benchmarks/level_forms.py had tried on held-out servers with a fixed
#: choice (30, the nearest to the one-score form the split always has, left out; docs/base-model.md
#: says so); the inner split picks among them on training servers only.
PARTIAL_SHRINKS: tuple[float, ...] = (1.0, 3.0, 10.0)
#: The nearest rated tools a tool's neighbour columns read (:func:`riskrank.levels.neighbour_shares`),
#: and the columns' weights the inner split may choose beside none (:func:`choose`); empty: the
#: model reads no neighbours. benchmarks/level_neighbours.py screened k and the weight on
#: held-out servers with a fixed choice; k 10 and the weights 1 and 3 were fixed from that screen
#: before the whole procedure was run with them (docs/base-model.md), which chose weight 3.
NEIGHBOUR_K = 10
NEIGHBOUR_SCALES: tuple[float, ...] = (1.0, 3.0)


def fit_form(x: Any, y: np.ndarray, weight: np.ndarray | None = None, *, penalty: float = 1.0,
             shrink: float | None = None) -> dict[str, np.ndarray]:
    """The level model's arrays: the partial form at ``shrink``, or one score for every boundary (None)."""
    if shrink is None:
        return fit_arrays(x, y, weight, penalty=penalty, form="proportional")
    return fit_arrays(x, y, weight, penalty=penalty, form="partial", shrink=shrink)


def fit_arrays(x: Any, y: np.ndarray, weight: np.ndarray | None = None, *, penalty: float = 1.0,
               form: str = FORM, shrink: float = SHRINK) -> dict[str, np.ndarray]:
    """The level model's arrays fitted in ``form`` (:data:`FORM`; ``shrink`` for the partial form)."""
    if form == "partial":
        w, th = fit_partial(x, y, weight, penalty=penalty, shrink=shrink)
    else:
        w, th = {"boundaries": fit_boundaries, "proportional": fit_ordinal}[form](x, y, weight, penalty=penalty)
    return {"ordinal.weight": w, "ordinal.thresholds": th}


@dataclass(frozen=True)
class LevelData:
    """Everything the level model trains and is judged on, as arrays (built once)."""

    x: np.ndarray  # [N, F] features (hints stripped)
    y: np.ndarray  # [N] levels 1..5
    source: np.ndarray  # [N] "mcp", "rubric" (other tools rated under the anchors) or "paper" (the benchmarks' labels)
    server: np.ndarray  # [N] the group held out together: the MCP server, the corpus, attack/look-alike ("" for paper labels)
    cautious: np.ndarray  # [N] bool
    floors: np.ndarray  # [N] capability floors
    hints: list[dict[str, bool]]  # declared hints (empty for benchmark tools)
    names: list[str]
    texts: list[str]  # what the word vector reads (levels.word_text)

    def subset(self, mask: np.ndarray) -> LevelData:
        idx = np.flatnonzero(mask)
        return LevelData(self.x[idx], self.y[idx], self.source[idx], self.server[idx], self.cautious[idx], self.floors[idx],
                         [self.hints[i] for i in idx], [self.names[i] for i in idx], [self.texts[i] for i in idx])


def build_data(parts: Sequence[tuple[str, np.ndarray, Sequence[Any], np.ndarray, Sequence[str], Sequence[dict[str, bool]]]]) -> LevelData:
    """``parts``: (source, tool embeddings, tools, levels, groups, hints) per source; tools
    with level 0 (unaudited) are skipped."""
    xs, ys, src, srv, cau, flo, hints, names, texts = [], [], [], [], [], [], [], [], []
    for source, emb, tools, levels, servers, hs in parts:
        ev = ToolEvidence.of(tools)
        keep = np.asarray(levels) > 0
        xs.append(features(emb, ev)[keep])
        ys.append(np.asarray(levels)[keep])
        src += [source] * int(keep.sum())
        srv += [s for s, k in zip(servers, keep, strict=True) if k]
        cau.append(ev.cautious[keep])
        flo.append(ev.floors[keep])
        hints += [h for h, k in zip(hs, keep, strict=True) if k]
        names += [t.name for t, k in zip(tools, keep, strict=True) if k]
        texts += [word_text(t.name, t.description) for t, k in zip(tools, keep, strict=True) if k]
    return LevelData(np.vstack(xs), np.concatenate(ys).astype(np.int64), np.asarray(src), np.asarray(srv), np.concatenate(cau),
                     np.concatenate(flo).astype(np.int64), hints, names, texts)


def word_vectors(data: LevelData, scale: float) -> WordVectors | None:
    """The word vector's vocabulary and idf, from the texts of the tools rated under the
    anchors in ``data`` (terms in at least WORD_MIN_DF of them, the WORD_MAX_FEATURES most
    frequent); None at scale 0."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if scale <= 0:
        return None
    ours = [t for t, src in zip(data.texts, data.source, strict=True) if src != "paper"]
    vec = TfidfVectorizer(min_df=WORD_MIN_DF, ngram_range=(1, 2), sublinear_tf=True, max_features=WORD_MAX_FEATURES).fit(ours)
    terms = vec.get_feature_names_out()
    return WordVectors(tuple(str(t) for t in terms), vec.idf_.astype(np.float64), scale)


def with_words(data: LevelData, words: WordVectors | None) -> Any:
    """``data``'s features with the word vector appended (as the model reads them; sparse when
    there are words: thousands of columns, a few dozen set per tool)."""
    import scipy.sparse as sp

    if words is None:
        return data.x
    return sp.hstack([sp.csr_matrix(data.x), sp.csr_matrix(words.transform(data.texts))], format="csr")


def embeddings(data: LevelData) -> np.ndarray:
    """The tools' embeddings: the first columns of ``data.x`` (:func:`riskrank.levels.features`)."""
    return data.x[:, : data.x.shape[1] - len(CAPABILITY_KEYS) - len(TEXT_FEATURES)]


def neighbour_columns(data: LevelData, ref: LevelData, *, own_group_votes: bool, k: int = NEIGHBOUR_K) -> np.ndarray:
    """[N, 4] the shares of ``data``'s tools' ``k`` nearest rated tools of ``ref``
    above each boundary (:func:`riskrank.levels.neighbour_shares`; the benchmarks' paper labels
    never vote). A training tool's own group (``own_group_votes`` False) never votes for it,
    so that the fit reads the columns as they will be read for a server it has never seen."""
    rated = ref.source != "paper"
    groups = {} if own_group_votes else {"query_groups": data.server, "ref_groups": ref.server[rated]}
    return neighbour_shares(embeddings(data), embeddings(ref)[rated], ref.y[rated], k, **groups)


def _with_columns(x: Any, cols: np.ndarray | None) -> Any:
    """``x`` with ``cols`` appended (sparse stays sparse)."""
    import scipy.sparse as sp

    if cols is None:
        return x
    return sp.hstack([sp.csr_matrix(x), sp.csr_matrix(cols)], format="csr") if sp.issparse(x) else np.hstack([x, cols])


def apply_hints(levels: np.ndarray, hints: Sequence[dict[str, bool]], floors: tuple[int, int, int]) -> np.ndarray:
    """Declared hints as the gateway applies them: each only raises, to its floor."""
    out = np.asarray(levels, dtype=np.int64).copy()
    d, w, o = floors
    for i, h in enumerate(hints):
        if h.get("destructiveHint") is True:
            out[i] = max(out[i], d)
        elif h.get("readOnlyHint") is False:
            out[i] = max(out[i], w)
        if h.get("openWorldHint") is True:
            out[i] = max(out[i], o)
    return out


def sample_weights(data: LevelData, corpus_weight: float) -> np.ndarray:
    """Each tool rated under the anchors weighs 1; the benchmarks' paper labels together weigh
    ``corpus_weight`` times those (they follow the paper's prompt, not the anchors: the two
    agree at κ 0.65 on the 400 benchmark tools rated both ways)."""
    paper = data.source == "paper"
    w = np.where(paper, 0.0, 1.0)
    n_ours, n_paper = (~paper).sum(), paper.sum()
    if corpus_weight > 0 and n_paper:
        w[paper] = corpus_weight * n_ours / n_paper
    return w


def served(cum: np.ndarray, data: LevelData, tau: Sequence[float], tau_cautious: Sequence[float],
           hint_floors: tuple[int, int, int] | None) -> np.ndarray:
    """The served level: the model's level (cautious where the text says little), the
    capability floors, then the hints."""
    lv = np.where(data.cautious, levels_from_cumulative(cum, tau_cautious), levels_from_cumulative(cum, tau)).astype(np.int64)
    lv = np.maximum(lv, data.floors)
    return apply_hints(lv, data.hints, hint_floors) if hint_floors is not None else lv


def agreement_row(gold: np.ndarray, pred: np.ndarray, confirm_level: int = CONFIRM_LEVEL) -> dict[str, Any]:
    """Weighted κ, exact and within-one agreement, and the default policy's errors: the share
    of tools rated L1-L2 that would be asked about, and of tools rated L4-L5 that would run
    without a question (below ``confirm_level``)."""
    from riskrank.agreement import confusion as counts
    from riskrank.agreement import quadratic_kappa

    gold, pred = np.asarray(gold), np.asarray(pred)
    low, high = gold <= 2, gold >= 4
    kappa = float(quadratic_kappa(counts(gold, pred))) if len(gold) else float("nan")
    return {"n": len(gold), "kappa_quadratic": kappa, "exact": float((gold == pred).mean()) if len(gold) else float("nan"),
            "within_one": float((abs(gold - pred) <= 1).mean()) if len(gold) else float("nan"),
            "n_low": int(low.sum()), "low_asked": float((pred[low] >= confirm_level).mean()) if low.any() else None,
            "n_high": int(high.sum()), "high_unasked": float((pred[high] < confirm_level).mean()) if high.any() else None}


def confusion(gold: np.ndarray, pred: np.ndarray) -> list[list[int]]:
    """5 x 5 counts, rows the annotators' level, columns the served one."""
    from riskrank.agreement import confusion as counts

    return counts(gold, pred).tolist()


#: The policy's two errors the inner split charges for beyond a bound: (bound, charge per unit).
POLICY_CHARGES = {"high_unasked": (0.01, 5.0), "low_asked": (0.10, 1.0)}


def _objective(gold: np.ndarray, pred: np.ndarray) -> float:
    """What the inner split maximises: κ, less a charge for each of the policy's two errors
    beyond its bound (:data:`POLICY_CHARGES`: L4-L5 run unasked, L1-L2 asked)."""
    r = agreement_row(gold, pred)
    k = 0.0 if not np.isfinite(r["kappa_quadratic"]) else r["kappa_quadratic"]
    return k - sum(charge * max(0.0, (r[key] or 0.0) - bound) for key, (bound, charge) in POLICY_CHARGES.items())


@dataclass(frozen=True)
class Choice:
    penalty: float
    corpus_weight: float
    word_scale: float
    tau: tuple[float, float, float, float]
    tau_cautious: tuple[float, float, float, float]
    hint_floors: tuple[int, int, int]
    score: float
    #: The partial form's shrink (:func:`fit_partial`); None: the one-score form (:func:`fit_ordinal`).
    shrink: float | None = None
    #: The weight of the neighbour columns (:func:`neighbour_columns`); 0: the model reads no neighbours.
    neighbour_scale: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The choice as a model's sidecar and the artefacts record it (a shrink only for the
        partial form, a neighbour scale only where the model reads neighbours)."""
        return {"penalty": self.penalty, "corpus_weight": self.corpus_weight, "word_scale": self.word_scale, "tau": list(self.tau),
                "tau_cautious": list(self.tau_cautious), "hint_floors": list(self.hint_floors), "inner_objective": round(self.score, 4),
                **({"shrink": self.shrink} if self.shrink is not None else {}),
                **({"neighbour_scale": self.neighbour_scale} if self.neighbour_scale > 0 else {})}

    @classmethod
    def from_dict(cls, c: dict[str, Any]) -> Choice:
        """A choice as :meth:`to_dict` wrote it (a sidecar's or an artefact's ``choice``)."""
        return cls(c["penalty"], c["corpus_weight"], c["word_scale"], tuple(c["tau"]), tuple(c["tau_cautious"]),
                   tuple(c["hint_floors"]), c["inner_objective"], c.get("shrink"), float(c.get("neighbour_scale", 0.0)))

    def arrays(self, x: Any, y: np.ndarray, weight: np.ndarray) -> dict[str, np.ndarray]:
        """The level model's arrays fitted in this choice's form."""
        return fit_form(x, y, weight, penalty=self.penalty, shrink=self.shrink)


def _groups(servers: np.ndarray, n_groups: int, seed: int) -> dict[str, int]:
    """Servers dealt into ``n_groups`` groups of about equal tool counts (largest first)."""
    names, counts = np.unique(servers, return_counts=True)
    rng = np.random.default_rng(seed)
    order = sorted(range(len(names)), key=lambda i: (-counts[i], rng.random()))
    load = np.zeros(n_groups)
    out = {}
    for i in order:
        g = int(np.argmin(load))
        out[str(names[i])] = g
        load[g] += counts[i]
    return out


def choose(data: LevelData, *, n_groups: int = 4, seed: int = 42, shrinks: Sequence[float] | None = None,
           neighbours: Sequence[float] | None = None) -> Choice:
    """The penalty, the benchmarks' weight, the word vector's weight, tau, tau_cautious and the
    hint floors that maximise :func:`_objective` on the tools rated under the anchors of
    held-out groups (MCP servers, corpora of the rated sample, the attack and look-alike sets,
    dealt into ``n_groups``), fitting on the rest; the benchmarks' paper labels always train,
    weighted by the choice. Then, with that penalty and those weights, the partial form at each
    of ``shrinks`` (:data:`PARTIAL_SHRINKS`), its tau and hint floors chosen again: it is
    chosen only where it scores above the one-score form (each of its fits costs some four of
    the one-score form's, so it is not crossed with every weight). Last, with all of that, the
    neighbour columns at each weight of ``neighbours`` (:data:`NEIGHBOUR_SCALES`), chosen the same
    way: only where they score above the choice without them."""
    shrinks = PARTIAL_SHRINKS if shrinks is None else tuple(shrinks)
    scales = NEIGHBOUR_SCALES if neighbours is None else tuple(float(v) for v in neighbours if v > 0)
    mcp = data.source != "paper"  # every tool rated under the anchors
    group_of = _groups(data.server[mcp], n_groups, seed)
    grp = np.asarray([group_of.get(s, -1) if m else -1 for s, m in zip(data.server, mcp, strict=True)])
    splits = []
    for g in range(n_groups):
        tr, te = grp != g, grp == g
        train = data.subset(tr)
        words = word_vectors(train, 1.0) if max(WORD_SCALES) > 0 else None
        test = data.subset(te)
        near = (neighbour_columns(train, train, own_group_votes=False), neighbour_columns(test, train, own_group_votes=True)
                ) if scales else (None, None)
        splits.append((tr, te, train, with_words(train, words), with_words(test, words), near))
    f = data.x.shape[1]

    def held_cumulative(pen: float, cw: float, ws: float, shrink: float | None, ns: float = 0.0) -> np.ndarray:
        """Out-of-group P(level > k) of the rated tools, every group fitted without it."""
        cum = np.zeros((len(data.y), 4))
        for tr, te, train, x_tr, x_te, (n_tr, n_te) in splits:
            a, b = (train.x, data.x[te]) if ws == 0 else (_scaled(x_tr, f, ws), _scaled(x_te, f, ws))
            if ns > 0:
                a, b = _with_columns(a, ns * n_tr), _with_columns(b, ns * n_te)
            cum[te] = LevelModel(fit_form(a, data.y[tr], sample_weights(train, cw), penalty=pen, shrink=shrink)).cumulative(b)
        return cum[mcp]

    held = data.subset(mcp)

    def best_of(cums: dict[tuple[float, float, float, float | None, float], np.ndarray], best: Choice | None) -> Choice | None:
        for (pen, cw, ws, shrink, ns), cum in cums.items():
            for tau in _tau_candidates():
                for hf in HINT_FLOORS:
                    caut = tuple(min(t, 0.3) for t in tau)
                    s = _objective(held.y, served(cum, held, tau, caut, hf))
                    if best is None or s > best.score + 1e-9:
                        best = Choice(pen, cw, ws, tau, caut, hf, s, shrink, ns)
        return best

    best = best_of({(pen, cw, ws, None, 0.0): held_cumulative(pen, cw, ws, None)
                    for pen in PENALTIES for cw in CORPUS_WEIGHTS for ws in WORD_SCALES}, None)
    assert best is not None
    if shrinks:
        best = best_of({(best.penalty, best.corpus_weight, best.word_scale, sh, 0.0):
                        held_cumulative(best.penalty, best.corpus_weight, best.word_scale, sh) for sh in shrinks}, best)
    assert best is not None
    if scales:
        b = best
        best = best_of({(b.penalty, b.corpus_weight, b.word_scale, b.shrink, ns):
                        held_cumulative(b.penalty, b.corpus_weight, b.word_scale, b.shrink, ns) for ns in scales}, best)
    assert best is not None
    return best


def _scaled(x: Any, f: int, scale: float) -> Any:
    """Features whose word columns (after the first ``f``) are multiplied by ``scale``."""
    import scipy.sparse as sp

    d = np.ones(x.shape[1])
    d[f:] = scale
    return x @ sp.diags(d) if sp.issparse(x) else x * d


def _tau_candidates() -> list[tuple[float, float, float, float]]:
    """tau per boundary: the L2/L3 boundary (asked or not) and the L3/L4 one vary over
    :data:`TAU_GRID` (and :data:`TAU_LOW`); the outer boundaries share one value of the grid (a
    low L4/L5 threshold would refuse, under the default ``max_level``, tools that are likely
    L4). The candidates with :data:`TAU_LOW` (when set) come last: on a tie the earlier one stands."""
    grid = [(a, b, c, a) for a in TAU_GRID for b in TAU_GRID for c in TAU_GRID]
    if TAU_LOW is None:
        return grid
    inner = (TAU_LOW, *TAU_GRID)
    return grid + [(a, b, c, a) for a in TAU_GRID for b in inner for c in inner if TAU_LOW in (b, c)]


def fit_level_model(data: LevelData, choice: Choice, *, meta: dict[str, Any] | None = None) -> LevelModel:
    """The level model fitted on all of ``data`` with ``choice`` (its vocabulary too)."""
    words = word_vectors(data, choice.word_scale)
    near = choice.neighbour_scale * neighbour_columns(data, data, own_group_votes=False) if choice.neighbour_scale > 0 else None
    arrays = choice.arrays(_with_columns(with_words(data, words), near), data.y, sample_weights(data, choice.corpus_weight))
    hf = dict(zip(("destructiveHint", "readOnlyHint=false", "openWorldHint"), choice.hint_floors, strict=True))
    info = {"tau": list(choice.tau), "tau_cautious": list(choice.tau_cautious), "hint_floors": hf, "choice": choice.to_dict(),
            "form": "proportional" if choice.shrink is None else "partial", **({"shrink": choice.shrink} if choice.shrink is not None else {}),
            "n_tools": {str(s): int((data.source == s).sum()) for s in np.unique(data.source)}}
    if words is not None:
        arrays["text.idf"] = words.idf.astype(np.float32)
        info.update(vocabulary=list(words.vocabulary), word_scale=words.scale)
    if near is not None:  # what serving reads the neighbours from: every tool rated under the anchors
        rated = data.source != "paper"
        arrays["neighbours.embedding"] = embeddings(data)[rated].astype(np.float32)
        arrays["neighbours.levels"] = data.y[rated].astype(np.float32)
        info["neighbours"] = {"k": NEIGHBOUR_K, "scale": choice.neighbour_scale}
    return LevelModel(arrays, {**info, **(meta or {})})


def model_features(model: LevelModel, data: LevelData) -> np.ndarray:
    """``data``'s features as ``model`` reads them (with its word vector and its neighbour
    columns, if it has them; ``data``'s tools are read as tools of servers it has never seen)."""
    return _with_columns(with_words(data, model.words), model.neighbour_columns(embeddings(data)))


#: What a worker process of :func:`_map_units` reads (set before the pool forks: the data is
#: shared by the fork, not pickled for each unit).
_SHARED: dict[str, Any] = {}


def _held_out_unit(groups: Sequence[str], seed: int, shrinks: Sequence[float] | None, neighbours: Sequence[float] | None = None
                   ) -> tuple[Choice, np.ndarray, np.ndarray, np.ndarray]:
    """One unit held out of ``_SHARED["data"]``: the inner choice, and the held-out tools' P(level > k),
    served level and level before hints."""
    data: LevelData = _SHARED["data"]
    held = np.isin(data.server, list(groups))
    train = data.subset(~held)
    ch = choose(train, seed=seed, shrinks=shrinks, neighbours=neighbours)
    model = fit_level_model(train, ch)
    te = data.subset(held)
    cum = model.cumulative(model_features(model, te))
    return ch, cum, served(cum, te, ch.tau, ch.tau_cautious, ch.hint_floors), served(cum, te, ch.tau, ch.tau_cautious, None)


def _map_units(data: LevelData, units: Sequence[Sequence[str]], *, seed: int, shrinks: Sequence[float] | None,
               workers: int, progress: bool, neighbours: Sequence[float] | None = None
               ) -> list[tuple[Choice, np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`_held_out_unit` for every unit, in order, in ``workers`` forked processes (each
    unit's fits and choices are its own, so the results are those of one process). The children
    run NumPy and SciPy only: a parent whose torch thread pools were started before the fork is
    safe so long as they never touch torch. One call at a time per process (the data goes
    through a module global, shared by the fork instead of pickled per unit). A unit that fails
    cancels the units not yet started."""
    from tqdm import tqdm

    _SHARED["data"] = data
    try:
        if workers <= 1:
            return [_held_out_unit(g, seed, shrinks, neighbours) for g in tqdm(units, desc="leave one out", disable=not progress)]
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        try:
            futures = [pool.submit(_held_out_unit, g, seed, shrinks, neighbours) for g in units]
            return [f.result() for f in tqdm(futures, desc="leave one out", disable=not progress)]
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
    finally:
        _SHARED.clear()


def leave_groups_out(data: LevelData, units: dict[str, Sequence[str]], *, seed: int = 42, progress: bool = False,
                     baselines: dict[str, np.ndarray] | None = None, shrinks: Sequence[float] | None = None,
                     workers: int = 1, neighbours: Sequence[float] | None = None) -> dict[str, Any]:
    """Every tool of each unit (name -> the groups it holds: one MCP server, one corpus, the
    attack set) served by a model fitted and tuned without that unit (in ``workers`` processes);
    the agreement and policy rows pooled over the units and per unit, the confusion matrix, and
    each baseline (name -> served levels over the same rows, in order) on the same rows."""
    rows = np.flatnonzero(np.isin(data.server, [g for gs in units.values() for g in gs]))
    pos_of = {int(r): k for k, r in enumerate(rows)}
    pred = np.zeros(len(rows), dtype=np.int64)
    model_level = np.zeros(len(rows), dtype=np.int64)
    cumulative = np.zeros((len(rows), 4))
    unit_of = np.empty(len(rows), dtype=object)
    choices = {}
    results = _map_units(data, list(units.values()), seed=seed, shrinks=shrinks, workers=workers, progress=progress,
                         neighbours=neighbours)
    for (unit, groups), (ch, cum, lv, before_hints) in zip(units.items(), results, strict=True):
        held = np.isin(data.server, list(groups))
        pos = np.asarray([pos_of[int(r)] for r in np.flatnonzero(held)])
        pred[pos] = lv
        model_level[pos] = before_hints
        cumulative[pos] = cum
        unit_of[pos] = unit
        choices[unit] = ch.to_dict()
    gold = data.y[rows]
    table = {"served level": pred, "before hints": model_level, **(baselines or {})}
    out: dict[str, Any] = {"pooled": {k: agreement_row(gold, v) for k, v in table.items()},
                           "per_unit": {u: {k: agreement_row(gold[unit_of == u], v[unit_of == u]) for k, v in table.items()}
                                        for u in units},
                           "confusion": {k: confusion(gold, v) for k, v in table.items()}, "choices": choices}
    out["predictions"] = {"rows": rows.tolist(), "served": pred.tolist(), "cumulative": np.round(cumulative, 4).tolist()}
    return out


def paper_agreement(data: LevelData, benchmarks: Sequence[tuple[str, np.ndarray]], *, seed: int = 42,
                    shrinks: Sequence[float] | None = None, workers: int = 1, neighbours: Sequence[float] | None = None
                    ) -> dict[str, Any]:
    """For each benchmark (name, a mask over ``data`` of its paper-labelled tools): a model fitted
    (with the inner choice) on everything but that benchmark's tools, κ and the policy row of
    its served level (benchmark tools declare no hints) against the paper's labels."""
    # each benchmark's tools as a group of their own (its name marks them; other rows keep theirs)
    marked = data.server.astype(object).copy()
    taken = np.zeros(len(data.y), dtype=bool)
    for name, mask in benchmarks:
        if (taken & mask).any():
            raise ValueError(f"benchmark {name!r} shares tools with another benchmark held out")
        taken |= mask
        marked[mask] = f"held out: {name}"
    keyed = LevelData(data.x, data.y, data.source, marked.astype(str), data.cautious, data.floors, data.hints, data.names, data.texts)
    results = _map_units(keyed, [[f"held out: {name}"] for name, _ in benchmarks], seed=seed, shrinks=shrinks, workers=workers,
                         progress=False, neighbours=neighbours)
    out = {}
    # the level before hints: a benchmark's tools declare none, and the paper rated what they say
    for (name, mask), (ch, _, _, pred) in zip(benchmarks, results, strict=True):
        y = data.y[mask]
        out[name] = {**agreement_row(y, pred), "confusion": confusion(y, pred), "choice": ch.to_dict()}
    return out
