"""The wheel holds every module the program imports and every data file beside them, and nothing that
is not part of the program. pyproject.toml finds the packages (nobody lists them); setuptools' own
reading of it is what is checked here."""

import warnings
from pathlib import Path

from tests.support.layers import import_graph, project_modules

ROOT = Path(__file__).resolve().parents[1]


def _wheel() -> tuple[set[str], dict[str, list[str]], set[str]]:
    """The packages, the package data and the top-level modules setuptools would build."""
    from setuptools.config.pyprojecttoml import read_configuration

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # `[tool.setuptools]` in pyproject.toml is still called beta
        config = read_configuration(ROOT / "pyproject.toml", expand=True)["tool"]["setuptools"]
    return set(config["packages"]), config.get("package-data", {}), set(config.get("py-modules", []))


def _shipped(module: str, path: Path, packages: set[str], py_modules: set[str]) -> bool:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return module in py_modules or package in packages


def test_every_module_the_program_imports_is_in_the_wheel():
    packages, _, py_modules = _wheel()
    modules = project_modules(ROOT)
    shipped = {m for m, path in modules.items() if _shipped(m, path, packages, py_modules)}
    assert {"program.entry.cli", "program.evidence.gatekeeper", "contracts", "tools.calls",
            "devset.recorded", "optimization.report", "optimize"} <= shipped
    graph = import_graph(ROOT)
    missing = {f"{m} -> {target}" for m in shipped for target in graph[m] if target not in shipped}
    assert sorted(missing) == []


def _shipped_data(package_data: dict[str, list[str]]) -> set[Path]:
    return {path for package, patterns in package_data.items() for pattern in patterns
            for path in (ROOT / package.replace(".", "/")).glob(pattern)}


def test_the_wheel_holds_no_tests_scripts_or_empty_folders():
    packages, package_data, _ = _wheel()
    assert not {p for p in packages if p.split(".")[0] in ("tests", "benchmarks", "scripts", "docs", "results")}
    data_folders = {path.parent for path in _shipped_data(package_data)}
    empty = [p for p in packages if not any((ROOT / p.replace(".", "/")).glob("*.py"))
             and ROOT / p.replace(".", "/") not in data_folders]
    assert empty == []


def test_every_data_file_beside_the_code_is_in_the_wheel():
    packages, package_data, _ = _wheel()
    tops = {p.split(".")[0] for p in packages}
    data = {path for top in tops for path in (ROOT / top).rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts}
    assert any(path.name == "page.css" for path in data) and any(path.suffix == ".jsonl" for path in data)
    assert sorted(str(path.relative_to(ROOT)) for path in data - _shipped_data(package_data)) == []
