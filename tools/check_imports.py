"""Fail on an import cycle inside the package, or on an import the layering forbids.

Every ``import`` and ``from ... import`` counts, at module level or inside a function (a lazy
import is still a dependency), except those under ``if TYPE_CHECKING:``. A cycle is a
strongly connected component of the module graph with more than one module.

The layering rules (see docs/architecture.md):

- the HTTP API, the MCP server and the agent adapters stand on the catalogue, never on each
  other;
- the gateway's parts (``serving.gateway``: config, policy, upstreams, confirmation, audit log,
  the view, the session record, the guards) sit below the MCP server: they import neither it,
  nor the HTTP API, nor the engine, and only ``serving.mcp_compat`` touches the MCP SDK's
  modules; the guards, the view and the session record do not import the gateway's core (it runs them),
  nor do the metrics, the spans and the policy replay (which re-decides with the policy's own code);
- the console (``serving.console``) is a surface the HTTP API and the MCP server mount: it may
  be imported by them, but imports neither of them, nor the MCP layer, the agent adapters or
  the engine; what it shows comes through its seam (``serving.console.host``), the catalogue
  and the gateway's parts (the operator broker, the audit log); the gateway's parts do not
  import it;
- training (``riskrank.training``) stands on the engine: the engine's modules (the pipeline,
  the checkpoint, the catalogue, the stages, the serving surfaces, the adapters) never import it;
- no module outside ``riskrank.cli`` imports click or the CLI (``riskrank.__main__``, the
  command's ``python -m`` entry point, imports the CLI and nothing else).

Usage: ``python tools/check_imports.py src/riskrank`` (exit 1 with the offending imports).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

#: (importer prefix, imported prefix): modules under the first may not import the second.
FORBIDDEN = [
    ("riskrank.serving.http", "riskrank.serving.mcp"),
    ("riskrank.serving.mcp", "riskrank.serving.http"),
    ("riskrank.adapters", "riskrank.serving"),
    ("riskrank.serving", "riskrank.adapters"),
    ("riskrank.serving.http", "riskrank.serving.gateway"),
    ("riskrank.serving.http", "riskrank.serving.mcp_compat"),
    ("riskrank.serving.gateway", "riskrank.serving.mcp"),
    ("riskrank.serving.gateway", "riskrank.serving.http"),
    ("riskrank.serving.gateway", "riskrank.pipeline"),
    ("riskrank.serving.mcp_compat", "riskrank.serving.gateway"),
    ("riskrank.serving.mcp_compat", "riskrank.catalogue"),
    ("riskrank.serving.console", "riskrank.serving.http"),
    ("riskrank.serving.console", "riskrank.serving.mcp"),
    ("riskrank.serving.console", "riskrank.serving.mcp_compat"),
    ("riskrank.serving.console", "riskrank.pipeline"),
    ("riskrank.serving.console", "riskrank.training"),
    ("riskrank.serving.console", "riskrank.encoder"),
    ("riskrank.serving.console", "riskrank.experiments"),
    ("riskrank.serving.console", "riskrank.evaluation"),
    # evaluation runs the methods; the paper's tables and figures (experiments) are built on it
    ("riskrank.evaluation", "riskrank.experiments"),
    ("riskrank.serving.gateway", "riskrank.serving.console"),
    # the chain's guards are run by the core and read the view: they never reach back into it
    ("riskrank.serving.gateway.guards", "riskrank.serving.gateway.core"),
    ("riskrank.serving.gateway.view", "riskrank.serving.gateway.core"),
    ("riskrank.serving.gateway.session", "riskrank.serving.gateway.core"),
    ("riskrank.serving.gateway.values", "riskrank.serving.gateway.core"),
    *(("riskrank.serving.gateway." + m, "riskrank.serving.gateway.core") for m in ("metrics", "tracing", "replay")),
    # wrap edits client files: it reads the gateway's file formats, and runs nothing of a server
    *(("riskrank.serving.wrap", s) for s in ("riskrank.serving.mcp", "riskrank.serving.http", "riskrank.serving.console",
                                             "riskrank.serving.mcp_compat", "riskrank.pipeline")),
    ("riskrank.serving.mcp_compat", "riskrank.serving.console"),
    # the base model is built by training (training.base_model) and named by the surfaces and
    # the engine (base: its __init__ imports nothing of riskrank, so checkpoint="riskrank-base"
    # works in the library); the checkpoint format stays below both
    ("riskrank.checkpoint", "riskrank.base"),
    # training stands on the engine, never the reverse: a retriever, a checkpoint, a catalogue,
    # a server or an adapter loads no training code (riskrank.training.fit_retriever trains)
    *((engine, "riskrank.training") for engine in (
        "riskrank.pipeline", "riskrank.checkpoint", "riskrank.catalogue", "riskrank.modes", "riskrank.risk",
        "riskrank.rules", "riskrank.graph", "riskrank.heads", "riskrank.first_stage", "riskrank.context",
        "riskrank.encoder", "riskrank.registry", "riskrank.serving", "riskrank.adapters", "riskrank.ann",
        "riskrank.scan", "riskrank.poison")),
]
#: External packages only one module may import: (package, the module that may).
OWNED = [("mcp", "riskrank.serving.mcp_compat")]
CLI = "riskrank.cli"
#: ``python -m riskrank``: the command's second entry point, the one module outside it that may import it.
MAIN = "riskrank.__main__"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import outside ``if TYPE_CHECKING:`` blocks."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, *([base] if base else [])])
            out.append((base, node.lineno))
            out.extend((f"{base}.{a.name}", node.lineno) for a in node.names)  # kept if a submodule
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def graph(root: Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], int], dict[str, list[tuple[str, int]]]]:
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    edges: dict[str, set[str]] = {m: set() for m in files}
    where: dict[tuple[str, str], int] = {}
    external: dict[str, list[tuple[str, int]]] = {m: [] for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, line in imports(tree, mod, path.name == "__init__.py"):
            if name in files:
                if name != mod:
                    edges[mod].add(name)
                    where.setdefault((mod, name), line)
            elif not name.startswith(root.name + ".") and name != root.name:
                external[mod].append((name, line))
    return edges, where, external


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strong(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "src/riskrank").resolve()
    edges, where, external = graph(root)
    problems: list[str] = []
    for comp in cycles(edges):
        ties = [f"{a} -> {b} (line {where[a, b]})" for a in comp for b in sorted(edges[a]) if b in comp]
        problems.append("import cycle: " + ", ".join(comp) + "\n    " + "\n    ".join(ties))
    for a, targets in edges.items():
        for b in sorted(targets):
            for src, dst in FORBIDDEN:
                if (a == src or a.startswith(src + ".")) and (b == dst or b.startswith(dst + ".")):
                    problems.append(f"forbidden import: {a} -> {b} (line {where[a, b]})")
            if b.startswith(CLI) and not (a in (CLI, MAIN) or a.startswith(CLI + ".")):
                problems.append(f"forbidden import: {a} -> {b} (line {where[a, b]}): no library module imports the CLI")
    for a, names in external.items():
        for pkg, owner in OWNED:
            problems += [f"forbidden import: {a} -> {name} (line {line}): only {owner} imports {pkg}"
                         for name, line in names if (name == pkg or name.startswith(pkg + ".")) and a != owner]
        if not (a == CLI or a.startswith(CLI + ".")):
            problems += [f"forbidden import: {a} -> click (line {line}): only riskrank.cli uses click"
                         for name, line in names if name == "click" or name.startswith("click.")]
    n_edges = sum(len(t) for t in edges.values())
    if problems:
        print("\n".join(problems))
        print(f"{len(problems)} problem(s) among {len(edges)} modules ({n_edges} imports)")
        return 1
    print(f"no import cycles, no forbidden imports: {len(edges)} modules, {n_edges} imports within {root.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
