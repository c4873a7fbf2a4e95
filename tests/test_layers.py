"""Imports run downward only: contracts <- tools.text <- tools.sources <- tools <- program.evidence
<- program.store <- program.lm (the model runtime) <- program.stages <- program.entry, with devset and
optimization above them (tests/support/layers.py places every
module), and no module imports itself round a loop. Read from the source, for every module of every
package, lazy imports included."""

import textwrap
from pathlib import Path

from tests.support.layers import (
    back_arrows,
    cycles,
    import_graph,
    imported_names,
    layer,
    project_modules,
)

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_has_a_layer():
    modules = project_modules(ROOT)
    assert {"contracts", "tools.text.search", "tools.sources.fixture", "tools.recorder", "program.evidence.gatekeeper",
            "program.store.audit", "program.lm.engine", "program.stages.pipeline", "program.entry.cli",
            "devset.recorded", "optimization.report", "optimize"} <= modules.keys()
    assert [m for m in modules if layer(m) is None] == []


def test_imports_run_downward_only():
    assert back_arrows(import_graph(ROOT)) == []


def test_no_module_imports_itself_round_a_loop():
    assert cycles(import_graph(ROOT)) == []


def test_the_contracts_import_no_dspy():
    modules = project_modules(ROOT)
    contracts = [m for m in modules if layer(m) == "contracts"]
    assert "contracts" in contracts
    assert {m: sorted(n for n in imported_names(modules[m], m) if n.split(".")[0] == "dspy") for m in contracts} == {
        m: [] for m in contracts}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return tmp_path


def test_a_back_arrow_is_named_even_inside_a_function(tmp_path):
    root = _tree(tmp_path, {
        "tools/__init__.py": "",
        "tools/recorder.py": "def render():\n    from program.lm.pipeline import Diagnosis\n",
        "program/__init__.py": "",
        "program/lm/__init__.py": "",
        "program/lm/pipeline.py": "from tools import recorder\nfrom program.entry.audit import AuditStore\n",
        "program/entry/__init__.py": "",
        "program/entry/audit.py": "from ..lm import pipeline\n",
        "devset/__init__.py": "from tests.support import scripted\n",
        "tests/__init__.py": "", "tests/support/__init__.py": "", "tests/support/scripted.py": "",
    })
    graph = import_graph(root)
    assert back_arrows(graph) == [
        "devset (devset) -> tests.support (anywhere)",
        "devset (devset) -> tests.support.scripted (anywhere)",
        "program.lm.pipeline (lm) -> program.entry.audit (entry)",
        "tools.recorder (tools) -> program.lm.pipeline (lm)",
    ]
    assert back_arrows(graph, {("program.lm.pipeline", "program.entry.audit")}) == [
        "devset (devset) -> tests.support (anywhere)",
        "devset (devset) -> tests.support.scripted (anywhere)",
        "tools.recorder (tools) -> program.lm.pipeline (lm)",
    ]
    assert cycles(graph) == [["program.entry.audit", "program.lm.pipeline", "tools.recorder"]]


def test_nothing_outside_tools_imports_the_fixture_world():
    modules = project_modules(ROOT)
    outside = {m: p for m, p in modules.items()
               if m.split(".")[0] in ("program", "contracts", "signatures", "devset", "optimization", "benchmarks", "optimize")}
    assert len(outside) > 30
    leaks = {m: sorted(n for n in imported_names(p, m) if n.startswith("tools.sources.fixture"))
             for m, p in outside.items()}
    assert {m: names for m, names in leaks.items() if names} == {}
