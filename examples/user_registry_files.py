"""Write UltraTool as a user would bring it to `riskrank evaluate --registry`: the 2,032 tools
as an MCP ``tools/list`` result without risk levels, the audited levels as a separate labels
file, and the 1,000 test queries as JSONL ``{"task", "gold"}``, cut by a seeded shuffle into
700 training and 300 evaluation queries. The base model was built on these test queries, so
`evaluate` will not score its heads on them (``--checkpoint none``: the first stages alone; the
second command trains heads on the 700 and scores them on the 300).

    python examples/user_registry_files.py --data "$RISKRANK_DATA" --out runs/user
    riskrank evaluate --registry runs/user/tools.json --queries runs/user/queries.jsonl --checkpoint none
    riskrank evaluate --registry runs/user/tools.json --queries runs/user/queries.jsonl \\
        --labels runs/user/labels.json --train-queries runs/user/train.jsonl --seeds 42
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

LABELS = "qli447/risk-aware-tool-retrieval-release/data/ultratool/ultratool_risk_labels_resolved.json"
TEST = "JoeYing1019/UltraTool/data/English-dataset/test.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="riskrank's data directory (riskrank data fetch)")
    ap.add_argument("--out", required=True, help="directory to write tools.json, labels.json, queries.jsonl, train.jsonl")
    ap.add_argument("--n-train", type=int, default=700)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data, out = Path(args.data), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = json.loads((data / LABELS).read_text(encoding="utf-8"))
    tools = [{"name": name, "description": rec["description"], "inputSchema": {"type": "object", "properties": {}}}
             for name, rec in labels.items()]
    (out / "tools.json").write_text(json.dumps({"tools": tools}, indent=1), encoding="utf-8")
    (out / "labels.json").write_text(json.dumps({name: {"risk_level": rec["risk_level"]} for name, rec in labels.items()},
                                                indent=1), encoding="utf-8")
    queries = []
    with (data / TEST).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                queries.append({"task": rec["question"].strip(), "gold": sorted({t["name"] for t in rec["tools"]})})
    random.Random(args.seed).shuffle(queries)
    for name, part in (("train.jsonl", queries[: args.n_train]), ("queries.jsonl", queries[args.n_train:])):
        (out / name).write_text("".join(json.dumps(q) + "\n" for q in part), encoding="utf-8")
    print(f"wrote {len(tools)} tools, {args.n_train} training and {len(queries) - args.n_train} evaluation queries to {out}")


if __name__ == "__main__":
    main()
