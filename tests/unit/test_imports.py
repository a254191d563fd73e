"""The project's modules import each other without a cycle (issues #16, #38): the import graph of orchestrator/,
analysis/ and the node (node_image/gossipnode), built from the source with ast (module-level and function-level
imports alike: a lazy import that closes a cycle is still a cycle in the design; only `if TYPE_CHECKING:` blocks,
which never run, are left out), is acyclic — within each package and across them (the analysis may import the
node's wire and the orchestrator's pure modules; the node imports neither)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"orchestrator": ROOT, "analysis": ROOT, "gossipnode": ROOT / "node_image"}   # package -> its parent


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, parent in PACKAGES.items():
        for f in sorted((parent / pkg).rglob("*.py")):
            parts = list(f.relative_to(parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The orchestrator module `name` refers to (a name inside a module resolves to the module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, f in modules.items():
        pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(f.read_text(), str(f))
        skip = {id(n) for t in ast.walk(tree) if isinstance(t, ast.If) and ast.unparse(t.test).endswith("TYPE_CHECKING")
                for b in t.body for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = pkg.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] or [base]
            for t in targets:
                if t.split(".")[0] not in PACKAGES:
                    continue
                r = _resolve(t, modules)
                if r is not None and r != mod and not mod.startswith(r + "."):   # a package's own __init__
                    graph[mod].add(r)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {m: WHITE for m in graph}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = GREY
        stack.append(m)
        for n in sorted(graph[m]):
            if colour[n] == GREY:
                return stack[stack.index(n):] + [n]
            if colour[n] == WHITE:
                c = visit(n)
                if c:
                    return c
        stack.pop()
        colour[m] = BLACK
        return None

    for m in sorted(graph):
        if colour[m] == WHITE:
            c = visit(m)
            if c:
                return c
    return None


def test_the_walker_sees_imports():
    g = import_graph()
    assert "orchestrator.plan" in g["orchestrator.lab"]           # the walk is not vacuous
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_the_projects_modules():
    g = import_graph()
    assert any(m.startswith("analysis.") for m in g) and any(m.startswith("gossipnode.") for m in g)
    cycle = find_cycle(g)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_node_imports_neither_the_orchestrator_nor_the_analysis():
    g = import_graph()
    bad = {m: sorted(d for d in deps if not d.startswith("gossipnode")) for m, deps in g.items()
           if m.startswith("gossipnode")}
    assert not {m: d for m, d in bad.items() if d}
