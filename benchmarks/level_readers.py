"""Would a reader that looks at each token level tools better than the shipped one?

    python benchmarks/level_readers.py --json benchmarks/results/level_readers.json

The shipped level model reads a tool through MiniLM's mean-pooled embedding, its capabilities,
four text facts and tf-idf words (:mod:`riskrank.levels`). Two readers that see the encoder's
token states are tried against it on the 2,453 tools rated under the rubric's anchors (the MCP
servers, the corpora sample, the attack set: :func:`riskrank.datasets.rubric.load_rubric_sets`),
with the same other inputs (capabilities, text facts, words) and the same ordinal output:

- ``attention``: a learned attention pooling over MiniLM's last-layer token states, beside the
  mean (the encoder stays frozen; what it costs at serving: the token states, which the served
  encoder computes anyway);
- ``last layer``: MiniLM's sixth layer fine-tuned on the levels from the fifth layer's token
  states (cached; at serving one more transformer layer per tool, about a sixth of encoding it).

Judged like the shipped model, on the MCP servers held out: each server's tools (leave one
server out; the last-layer reader, whose fits take several times longer, on six groups of servers
drawn with seed 42) served by a reader fitted without them, the corpora sample and the attack
set always in training, the shipped choice's thresholds and hint floors applied to every
reader (nothing is tuned per reader: a reader that needs other thresholds to win would need
them chosen on held-out servers too). Weighted κ, exact and within-one agreement, and the
default policy's two errors, against the annotators' levels. Fixed before the runs: the
readers' forms, 8 epochs for attention and 4 for the last layer, AdamW (3e-3 for the head,
3e-5 for the layer), batches of 32 length-sorted tools, 128 tokens, torch seed 0.
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Any

import numpy as np

from riskrank.datasets.rubric import load_rubric_sets
from riskrank.encoder import Encoder
from riskrank.fileio import write_json
from riskrank.training.levels import (
    Choice,
    LevelData,
    agreement_row,
    build_data,
    fit_level_model,
    model_features,
    served,
    word_vectors,
)

MAX_TOKENS, BATCH, EPOCHS = 128, 32, {"attention": 8, "last layer": 4}
LR_HEAD, LR_LAYER, WEIGHT_DECAY = 3e-3, 3e-5, 1e-2


def shipped_choice() -> Choice:
    """The shipped level model's choice (its sidecar): every reader is served with it."""
    from riskrank.base import default_level_model_dir
    from riskrank.levels import load_level_model

    c = load_level_model(default_level_model_dir()).meta["choice"]
    return Choice.from_dict(c)


def rated_data(enc: Encoder) -> tuple[LevelData, list[str]]:
    """The rated tools as the level model's data, and each tool's encoder text, in one order."""
    sets = {s.name: s for s in load_rubric_sets(None)}
    parts, texts = [], []
    for name, source in (("mcp", "mcp"), ("corpora", "rubric"), ("attack", "rubric")):
        s = sets[name]
        t = [x.text() for x in s.tools]
        parts.append((source, enc.encode(t), s.tools, s.levels, s.groups, s.hints))
        texts += [x for x, lv in zip(t, s.levels, strict=True) if lv > 0]
    return build_data(parts), texts


def json_and_data(doc: str) -> tuple[str | None, Encoder, LevelData]:
    """A level benchmark's ``--json`` argument (its docstring's first line as the help), the
    encoder, and the rated tools' data (:func:`rated_data`)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    enc = Encoder(progress=False)
    return a.json, enc, rated_data(enc)[0]


def token_states(enc: Encoder, texts: list[str]) -> dict[int, list[np.ndarray]]:
    """Layers 5 and 6 of MiniLM per text ([tokens, 384] float16), from the sentence-transformers model."""
    import torch

    st = enc.model
    tok, bert = st[0].tokenizer, st[0].auto_model
    out: dict[int, list[Any]] = {5: [None] * len(texts), 6: [None] * len(texts)}
    order = np.argsort([len(t) for t in texts])
    with torch.inference_mode():
        for i in range(0, len(texts), 32):
            idx = order[i:i + 32]
            b = tok([texts[j] for j in idx], padding=True, truncation=True, max_length=st.max_seq_length, return_tensors="pt")
            hs = bert(**b, output_hidden_states=True).hidden_states
            for k, j in enumerate(idx):
                m = int(b["attention_mask"][k].sum())
                for layer in (5, 6):
                    out[layer][j] = hs[layer][k, :m].numpy().astype(np.float16)
    return out


def fit_reader(kind: str, states: list[np.ndarray], extra: np.ndarray, words: np.ndarray, y: np.ndarray,
               train: np.ndarray, test: np.ndarray, layer: Any) -> np.ndarray:
    """P(level > k), k = 1..4, for ``test`` from a token reader fitted on ``train``."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    dim = states[0].shape[1]
    feats = torch.tensor(np.hstack([extra, words]), dtype=torch.float32)

    def pad(idx: np.ndarray) -> tuple[Any, Any]:
        n = min(MAX_TOKENS, max(len(states[i]) for i in idx))
        x, mask = torch.zeros(len(idx), n, dim), torch.zeros(len(idx), n)
        for r, i in enumerate(idx):
            h = states[i][:n]
            x[r, :len(h)], mask[r, :len(h)] = torch.from_numpy(h.astype(np.float32)), 1
        return x, mask

    class Reader(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = copy.deepcopy(layer) if kind == "last layer" else None
            self.query = nn.Linear(dim, 1) if kind == "attention" else None
            self.out = nn.Linear(dim * (2 if kind == "attention" else 1) + feats.shape[1], 1)
            self.drop = nn.Dropout(0.1)
            self.t0, self.dt = nn.Parameter(torch.tensor([-1.0])), nn.Parameter(torch.ones(3))

        def forward(self, x: Any, mask: Any, f: Any) -> Any:
            if self.layer is not None:
                o = self.layer(x, attention_mask=(1.0 - mask[:, None, None, :]) * -1e4)
                x = o[0] if isinstance(o, tuple) else o
            parts = [F.normalize((x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True), dim=-1)]
            if self.query is not None:
                a = self.query(x).squeeze(-1).masked_fill(mask == 0, -1e4).softmax(-1)
                parts.append(F.normalize((a[..., None] * x).sum(1), dim=-1))
            z = self.out(self.drop(torch.cat([*parts, f], -1))).squeeze(-1)
            th = torch.cat([self.t0, self.t0 + torch.cumsum(F.softplus(self.dt), 0)])
            return z[:, None] - th[None, :]

    model = Reader()
    groups = [{"params": [p for n, p in model.named_parameters() if not n.startswith("layer.")], "lr": LR_HEAD}]
    if model.layer is not None:
        groups.append({"params": list(model.layer.parameters()), "lr": LR_LAYER})
    opt = torch.optim.AdamW(groups, weight_decay=WEIGHT_DECAY)
    target = torch.tensor(y[:, None] > np.arange(1, 5)[None, :], dtype=torch.float32)
    rng = np.random.default_rng(0)
    for _ in range(EPOCHS[kind]):
        model.train()
        perm, batches = rng.permutation(train), []
        for c in range(0, len(perm), BATCH * 8):  # length-sorted within chunks: little padding
            chunk = sorted(perm[c:c + BATCH * 8], key=lambda i: len(states[i]))
            batches += [np.asarray(chunk[i:i + BATCH]) for i in range(0, len(chunk), BATCH)]
        for j in rng.permutation(len(batches)):
            b = batches[j]
            x, mask = pad(b)
            loss = F.binary_cross_entropy_with_logits(model(x, mask, feats[b]), target[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        return np.vstack([torch.sigmoid(model(*pad(test[i:i + 64]), feats[test[i:i + 64]])).numpy() for i in range(0, len(test), 64)])


def judge(data: LevelData, states: dict[int, list[np.ndarray]], units: list[list[str]], readers: list[str], choice: Choice,
          layer: Any, dim: int) -> dict[str, Any]:
    """Each reader's served levels for the MCP tools, each unit of servers held out in turn."""
    rows = np.flatnonzero(data.source == "mcp")
    cum = {r: np.zeros((len(data.y), 4)) for r in readers}
    seconds = dict.fromkeys(readers, 0.0)
    for unit in units:
        held = np.isin(data.server, unit)
        train, test = np.flatnonzero(~held), np.flatnonzero(held)
        for r in readers:
            t = time.time()
            if r == "shipped":
                m = fit_level_model(data.subset(~held), choice)
                cum[r][test] = m.cumulative(model_features(m, data.subset(held)))
            else:
                wv = word_vectors(data.subset(~held), choice.word_scale)
                words = wv.transform(data.texts) if wv is not None else np.zeros((len(data.y), 0))
                cum[r][test] = fit_reader(r, states[6 if r == "attention" else 5], data.x[:, dim:], words, data.y, train, test, layer)
            seconds[r] += time.time() - t
    te = data.subset(np.isin(np.arange(len(data.y)), rows))
    return {r: {**{k: (round(v, 4) if isinstance(v, float) else v)
                   for k, v in agreement_row(te.y, served(cum[r][rows], te, choice.tau, choice.tau_cautious, choice.hint_floors)).items()},
                "fit_seconds": round(seconds[r], 1)} for r in readers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--groups", type=int, default=6, help="server groups for the last-layer reader")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    t0 = time.time()
    enc = Encoder(progress=False)
    data, texts = rated_data(enc)
    states = token_states(enc, texts)
    layer = enc.model[0].auto_model.encoder.layer[-1]
    dim = states[6][0].shape[1]
    choice = shipped_choice()
    servers = sorted(set(data.server[data.source == "mcp"]))
    drawn = [str(s) for s in np.random.default_rng(42).permutation(servers)]
    grouped = [drawn[i::a.groups] for i in range(a.groups)]
    doc: dict[str, Any] = {"n_tools": {"mcp": int((data.source == "mcp").sum()), "rated": len(data.y)},
                           "choice": choice.to_dict(), "encoder": enc.identity, "epochs": EPOCHS, "max_tokens": MAX_TOKENS,
                           "leave_one_server_out": judge(data, states, [[s] for s in servers], ["shipped", "attention"], choice, layer, dim),
                           "server_groups": {"groups": grouped,
                                             "readers": judge(data, states, grouped, ["shipped", "attention", "last layer"], choice, layer, dim)}}
    doc["seconds"] = round(time.time() - t0, 1)
    for split, res in (("leave one server out", doc["leave_one_server_out"]), (f"{a.groups} server groups", doc["server_groups"]["readers"])):
        for r, row in res.items():
            print(f"{split:22s} {r:10s} κ {row['kappa_quadratic']:.3f}  exact {row['exact']:.3f}  within one {row['within_one']:.3f}  "
                  f"L1-L2 asked {row['low_asked']:.3f}  L4-L5 unasked {row['high_unasked']:.3f}")
    if a.json:
        write_json(a.json, doc)


if __name__ == "__main__":
    main()
