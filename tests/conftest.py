"""Shared fixtures: where the benchmark data lives, one encoder per session (the model loads
once; its embeddings land in the on-disk cache, so later runs and CLI calls never load it),
the demo benchmark and a retriever trained on it, and small synthetic embeddings."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Under pytest-xdist (`make test` runs `-n 2`) the workers share the cores: each gets its share
# of them for torch and BLAS instead of a pool as wide as the machine. Two workers with two
# spin-waiting threads each on two busy cores made a 9 s training test take 190 s.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, _share)
    from threadpoolctl import threadpool_limits

    threadpool_limits(int(os.environ["OMP_NUM_THREADS"]))  # a BLAS a plugin loaded before this file

# The model is bundled in site-packages: never reach for the hub. The embedding cache lives in
# the checkout (git-ignored), as `make test` arranges, unless the caller chose another place.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RISKRANK_CACHE", str(ROOT / ".cache"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Keys riskrank keeps outside a state directory (the pins' MAC key) go under XDG_CONFIG_HOME:
# a session's own, never the user's ~/.config. Gateways the tests start inherit it.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="riskrank-test-config-")
atexit.register(shutil.rmtree, os.environ["XDG_CONFIG_HOME"], True)

UT_TEST = "JoeYing1019/UltraTool/data/English-dataset/test.json"
UT_LABELS = "qli447/risk-aware-tool-retrieval-release/data/ultratool/ultratool_risk_labels_resolved.json"
ST_TOOLS = "fairyshine/Seal-Tools/Seal-Tools_Dataset/tool.jsonl"


def _find_data_dir() -> Path | None:
    """$RISKRANK_DATA, else the checkout's data/ (make data), else $RISKRANK_MIRROR."""
    candidates = [os.environ.get("RISKRANK_DATA"), ROOT / "data", os.environ.get("RISKRANK_MIRROR")]
    for c in candidates:
        if c and all((Path(c) / f).is_file() for f in (UT_TEST, UT_LABELS, ST_TOOLS)):
            return Path(c)
    return None


DATA_DIR = _find_data_dir()
needs_data = pytest.mark.skipif(DATA_DIR is None, reason="benchmark data not found (run `make data`)")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if DATA_DIR is None:
        pytest.skip("benchmark data not found (run `make data` or set RISKRANK_DATA)")
    return DATA_DIR


@pytest.fixture(scope="session")
def encoder():
    """The bundled all-MiniLM-L6-v2 with the shared cache; the model loads on first miss."""
    from riskrank.encoder import Encoder

    return Encoder(progress=False)


@pytest.fixture(scope="session")
def demo():
    from riskrank.datasets.demo import load_demo

    return load_demo()


@pytest.fixture(scope="session")
def demo_tool_emb(encoder, demo) -> np.ndarray:
    return encoder.encode(demo.registry.texts())


@pytest.fixture(scope="session")
def demo_fitted(encoder, demo):
    """A retriever trained on the demo tasks (seconds; shared by the pipeline tests)."""
    import torch

    from riskrank.training import TrainConfig, fit_retriever

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # see torch_single_thread
    try:
        return fit_retriever(
            demo.registry, demo.train.texts, demo.train.gold, encoder=encoder,
            train_config=TrainConfig(seed=42), progress=False,
        )
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ultratool(data_dir):
    from riskrank.datasets import load_benchmark

    return load_benchmark("ultratool", data_dir)


def synthetic(seed: int = 0, n_tools: int = 80, n_queries: int = 60, dim: int = 16):
    """Clustered unit vectors for tools; each query is a noisy copy of one or two gold tools,
    so relevance is learnable. Risk levels 1..5 everywhere."""
    rng = np.random.default_rng(seed)
    tools = rng.normal(size=(n_tools, dim))
    tools /= np.linalg.norm(tools, axis=1, keepdims=True)
    gold, queries = [], []
    for _ in range(n_queries):
        g = np.sort(rng.choice(n_tools, size=int(rng.integers(1, 3)), replace=False))
        q = tools[g].sum(axis=0) + rng.normal(scale=0.4, size=dim)
        queries.append(q / np.linalg.norm(q))
        gold.append(g.astype(np.int64))
    risk = rng.integers(1, 6, size=n_tools)
    return tools.astype(np.float32), np.asarray(queries, dtype=np.float32), gold, risk


@pytest.fixture
def make_synthetic():
    """The :func:`synthetic` factory (seed, n_tools, n_queries, dim)."""
    return synthetic


@pytest.fixture
def torch_single_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the
    thread hand-offs cost more than the arithmetic (a 3 s training run takes 17 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server's URL: $RISKRANK_TEST_POSTGRES, else a throwaway cluster started
    for this session and stopped at its end (tests/postgres_support.py). Skips without
    PostgreSQL or psycopg, and fails instead under CI=true."""
    import postgres_support

    postgres_support.need_psycopg()
    if os.environ.get(postgres_support.ENV_URL):
        yield os.environ[postgres_support.ENV_URL]
        return
    cluster = postgres_support.start_cluster()
    try:
        yield cluster.url
    finally:
        cluster.remove()


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request, tmp_path):
    """A fresh state store's URL, once per backend: a directory for SQLite, or a schema of the
    test PostgreSQL (dropped afterwards)."""
    if request.param == "sqlite":
        yield str(tmp_path / "state")
        return
    import postgres_support

    base = request.getfixturevalue("postgres_url")
    name, url = postgres_support.fresh_schema(base)
    yield url
    postgres_support.drop_schema(base, name)
