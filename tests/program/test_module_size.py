"""No module of the product code (contracts/, tools/, program/, devset/, optimization/, optimize.py)
is over 400 lines and no class over 150: read with `ast`, nested classes included. A module or class
past them does more than one job; split it where its jobs part, named by what each part holds."""

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("contracts", "tools", "program", "devset", "optimization")
MODULE_LIMIT, CLASS_LIMIT = 400, 150


def product_files(root: Path = ROOT) -> list[Path]:
    files = [path for package in PRODUCT for path in sorted((root / package).rglob("*.py"))]
    return files + [root / "optimize.py"] if (root / "optimize.py").is_file() else files


def oversized(files: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(root).as_posix()
        lines = len(text.splitlines())
        if lines > MODULE_LIMIT:
            found.append(f"{name} ({lines} lines)")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LIMIT:
                found.append(f"{name}:{node.lineno} class {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    return found


def test_no_product_module_is_over_400_lines_and_no_class_over_150():
    files = product_files()
    assert len(files) > 100
    assert oversized(files) == []


def test_a_long_module_and_a_long_nested_class_are_named(tmp_path):
    body = "".join(f"        x{i} = {i}\n" for i in range(150))
    (tmp_path / "big.py").write_text("class Outer:\n    class Inner:\n" + body + "# padding\n" * 249, encoding="utf-8")
    # At the limits exactly: 150 lines of class, 400 of module.
    edge = "class Edge:\n" + "".join(f"    y{i} = {i}\n" for i in range(149))
    (tmp_path / "edge.py").write_text(edge + "# padding\n" * 250, encoding="utf-8")
    assert oversized([tmp_path / "big.py", tmp_path / "edge.py"], tmp_path) == [
        "big.py (401 lines)", "big.py:1 class Outer (152 lines)", "big.py:2 class Inner (151 lines)"]
