"""The project's layers, and its import graph read from the source with `ast` (nothing is imported):
which project module imports which, at module level or inside a function alike, since a lazy import
is still an arrow between two modules. tests/test_layers.py holds the rules to these."""

from __future__ import annotations

import ast
from pathlib import Path

# Folders that hold no project code.
SKIPPED = {"results", "docs", "compiled", "build", "dist", "__pycache__"}
# Where each module sits, by the longest prefix of its name; a higher rank may import a lower one.
LAYERS = {
    "contracts": "contracts",  # the Pydantic contracts and the settings: import nothing of the project
    "signatures": "lm",  # the DSPy signatures and demos are the LM stages' prompts
    "tools.text": "text",  # folding, the search analyzer, JSON lines: what the sources read text with
    "tools.sources": "sources",  # where the tools read from
    "tools": "tools",  # the tool declarations, the catalog and the recorder, over the sources
    "program.evidence": "evidence",
    "program.store": "store",  # the audit store: what the LM stages and the entry points write to
    "program.lm": "lm",  # the model runtime: engines, models, the adapter, transcripts
    "program.stages": "stages",  # the DSPy modules and the run they make: plan, gather, cite, judge, compose
    "program": "entry",
    "devset": "devset",
    "optimization": "optimization",
    # Scripts and tests may import anything; nothing may import them.
    "optimize": "anywhere",
    "benchmarks": "anywhere",
    "scripts": "anywhere",
    "tests": "anywhere",
}
RANK = {"contracts": 0, "text": 1, "sources": 2, "tools": 3, "evidence": 4, "store": 5, "lm": 6, "stages": 7,
        "entry": 8, "devset": 9, "optimization": 10}


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the tree by dotted name: `program.stages.pipeline`, `optimize`, `signatures` (its __init__)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if any(part.startswith(".") or part in SKIPPED for part in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name an import statement of the file may refer to: `from a.b import c` gives
    a.b and a.b.c (c may be a module or a name in a.b); relative imports are resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports (the longest project module each name falls in)."""
    modules = project_modules(root)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            parts = name.split(".")
            found = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules),
                         None)
            if found is not None and found != module:
                targets.add(found)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return next((LAYERS[".".join(parts[:n])] for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in LAYERS), None)


def back_arrows(graph: dict[str, set[str]], allowed: set[tuple[str, str]] = frozenset()) -> list[str]:
    """Every import that points up the layers, at a script or test, or from or to a module with no
    layer, as `a (layer) -> b (layer)`."""
    wrong = []
    for module, targets in sorted(graph.items()):
        here = layer(module)
        for target in sorted(targets):
            there = layer(target)
            if here == "anywhere" or (module, target) in allowed:
                continue
            if there not in RANK or here not in RANK or RANK[there] > RANK[here]:
                wrong.append(f"{module} ({here}) -> {target} ({there})")
    return wrong
