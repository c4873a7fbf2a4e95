"""No function in program/ is over 60 lines: read with `ast`, nested functions and methods included."""

import ast
import textwrap
from pathlib import Path

PROGRAM = Path(__file__).resolve().parents[2] / "program"
LIMIT = 60


def long_functions(root: Path, limit: int = LIMIT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_program_is_over_60_lines():
    assert len(list(PROGRAM.rglob("*.py"))) > 40
    assert long_functions(PROGRAM) == []


def test_a_long_function_is_named_even_as_a_method(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        class C:
            def short(self):
                return 1

            def long(self):
        """) + body + "\n", encoding="utf-8")
    assert long_functions(tmp_path) == ["m.py:5 long (61 lines)"]
