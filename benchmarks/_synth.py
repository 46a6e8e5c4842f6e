"""Synthetic registries for the scale benchmark.

Tool embeddings are drawn around *anchors*: the real tool embeddings of UltraTool and
Seal-Tools (6,108 MiniLM vectors) when the data and the embedding cache are at hand, else
random unit vectors. Each synthetic tool is ``normalise(anchor + sigma * g / sqrt(d))`` with
``g`` standard normal and ``sigma`` in [0.6, 1.0], so siblings of one anchor have cosine
~0.5-0.75 and the similarity structure (clusters, a long tail) resembles a real registry.
Purely random unit vectors in 384-d are all nearly orthogonal (cosine ~ N(0, 1/384)): they
give no semantic edges and make approximate search meaningless, so they are only the
fallback (``anchors="random"``).

Risk levels follow UltraTool's label distribution (958/799/155/115/5), permission categories
are independent coin flips at roughly the real registries' rates, and training queries pick
2-4 tools from small groups of siblings, so pairs co-occur more than once and the
co-occurrence and risk edges of the ToolGraph exist at every size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RISK_COUNTS = np.array([958, 799, 155, 115, 5], dtype=np.float64)  # UltraTool, L1..L5
PERM_RATES = np.array([0.005, 0.02, 0.01, 0.03, 0.005])  # shell, file write, network, credentials, code
GROUP = 8  # training queries draw their gold tools from groups of this many siblings


@dataclass
class Registry:
    """What the benchmark needs of a registry: arrays only."""

    name: str
    emb: np.ndarray  # [N, d] float32, unit rows
    risk: np.ndarray  # [N] int8 levels 1..5 (0 = unknown)
    perms: np.ndarray  # [N, 5] bool
    train_gold: list[np.ndarray]
    anchor: np.ndarray | None = None  # [N] the anchor each synthetic tool was drawn around

    @property
    def n(self) -> int:
        return int(self.emb.shape[0])

    @property
    def perm_counts(self) -> np.ndarray:
        return self.perms.sum(axis=1).astype(np.int8)


def unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def random_anchors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return unit(rng.standard_normal((n, dim), dtype=np.float32))


def synthetic_registry(n: int, anchors: np.ndarray, seed: int = 0, chunk: int = 1 << 16) -> Registry:
    """A registry of ``n`` tools around ``anchors`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    d = anchors.shape[1]
    # Tools sorted by anchor, so a group of GROUP consecutive tools are siblings.
    which = np.sort(rng.integers(0, anchors.shape[0], n))
    emb = np.empty((n, d), dtype=np.float32)
    for a in range(0, n, chunk):  # chunked: a million tools never need a second float64 copy
        b = min(n, a + chunk)
        sigma = rng.uniform(0.6, 1.0, (b - a, 1)).astype(np.float32)
        block = rng.standard_normal((b - a, d), dtype=np.float32)
        block *= sigma / np.float32(np.sqrt(d))
        block += anchors[which[a:b]]
        emb[a:b] = unit(block)
    risk = rng.choice(np.arange(1, 6, dtype=np.int8), size=n, p=RISK_COUNTS / RISK_COUNTS.sum())
    perms = rng.random((n, PERM_RATES.size)) < PERM_RATES
    n_train = max(200, n // 5)
    groups = rng.integers(0, max(1, n // GROUP), n_train)
    sizes = rng.integers(2, 5, n_train)
    gold = []
    for g, s in zip(groups.tolist(), sizes.tolist(), strict=True):
        lo = g * GROUP
        hi = min(n, lo + GROUP)
        gold.append(lo + rng.choice(hi - lo, size=min(s, hi - lo), replace=False))
    return Registry(f"synthetic-{n}", emb, risk, perms, gold, which)


def synthetic_texts(reg: Registry, names, descriptions, parameters) -> tuple[list[str], list[str], list[list[str]]]:
    """Tool texts for a synthetic registry: each tool is its anchor's name (made unique with
    the tool's number, so the name index holds N distinct names), description and parameter
    names, so words are shared across tools as in the real registries, many times over."""
    assert reg.anchor is not None
    a = reg.anchor.tolist()
    return ([f"{names[j]}_{i}" for i, j in enumerate(a)], [descriptions[j] for j in a], [parameters[j] for j in a])


def synthetic_queries(n: int, anchors: np.ndarray, seed: int = 1) -> np.ndarray:
    """Stand-in queries when real ones are unavailable: anchors plus noise."""
    rng = np.random.default_rng(seed)
    d = anchors.shape[1]
    q = anchors[rng.integers(0, anchors.shape[0], n)] + rng.standard_normal((n, d), dtype=np.float32) / np.float32(np.sqrt(d))
    return unit(q.astype(np.float32))
