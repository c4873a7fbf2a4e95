"""The deterministic layers need no DSPy: `python -m program.evidence.gatekeeper` runs, and every module
of the contracts, tools and evidence layers imports, in a process where dspy cannot be imported."""

import json
import subprocess
import sys
from pathlib import Path

from program.evidence import gatekeeper
from contracts import ExecutorOutput, ToolInvocation
from tests.support.layers import layer, project_modules
from tools.functions import TOOLBOX

ROOT = Path(__file__).resolve().parents[3]
DOC = json.loads((Path(__file__).parent / "data" / "gatekeeper_cases.json").read_text(encoding="utf-8"))
# Run first in the child: any import of dspy fails, and each attempt is printed on exit.
BLOCK_DSPY = """
import atexit, sys

class NoDspy:
    tried = []

    def find_spec(self, name, path=None, target=None):
        if name == "dspy" or name.startswith("dspy."):
            self.tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, NoDspy())
atexit.register(lambda: print("dspy imports tried:", NoDspy.tried, file=sys.stderr))
"""


def _without_dspy(code: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_DSPY + code, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_the_block_makes_dspy_unimportable():
    done = _without_dspy("import dspy")
    assert done.returncode == 1 and "blocked by the test" in done.stderr
    assert "dspy imports tried: ['dspy']" in done.stderr


def _case_output(group: str) -> ExecutorOutput:
    case = next(c for c in DOC["cases"] if c["group"] == group)
    return ExecutorOutput.model_validate({"claims": [{"claim_id": "claim-1", "claim_type": case["claim_type"],
                                                      "claim_text": case["name"], "evidence_bindings": case["bindings"]}]})


def test_the_gatekeeper_command_runs_with_dspy_unimportable(tmp_path):
    invocations = tmp_path / "invocations.json"
    invocations.write_text(json.dumps(DOC["invocations"], ensure_ascii=False), encoding="utf-8")
    expected = {0: "must_pass", 1: "must_reject"}
    for code, group in expected.items():
        output = tmp_path / f"{group}.json"
        output.write_text(_case_output(group).model_dump_json(), encoding="utf-8")
        done = _without_dspy("import runpy; runpy.run_module('program.evidence.gatekeeper', run_name='__main__')",
                             "--session-id", DOC["session_id"], "--invocations", str(invocations),
                             "--executor-output", str(output))
        assert done.returncode == code, done.stderr
        assert "dspy imports tried: []" in done.stderr
        in_process = gatekeeper.check(_case_output(group), [ToolInvocation.model_validate(i) for i in DOC["invocations"]],
                                      DOC["session_id"], toolbox=TOOLBOX)
        assert json.loads(done.stdout) == in_process.model_dump(mode="json")


def test_every_module_below_the_lm_layer_imports_with_dspy_unimportable():
    modules = sorted(m for m in project_modules(ROOT) if layer(m) in ("contracts", "tools", "evidence"))
    assert {"contracts", "tools.calls", "tools.recorder", "program.evidence.verdict"} <= set(modules)
    done = _without_dspy("import importlib\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n", *modules)
    assert done.returncode == 0, done.stderr
    assert "dspy imports tried: []" in done.stderr
