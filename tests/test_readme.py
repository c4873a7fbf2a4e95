"""The README's commands exist: each `make` target, each subcommand and each flag it shows, every
setting it names, and every page and script it or the docs point at."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {path: path.read_text(encoding="utf-8") for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def commands(text: str) -> list[str]:
    """The lines of the page's shell blocks, less their comments."""
    lines = [line.split("  #")[0].strip() for kind, block in FENCE.findall(text) if kind in ("", "bash", "sh")
             for line in block.splitlines()]
    return [line for line in lines if line]


@cache
def help_text(*command: str) -> str:
    done = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def test_every_make_target_the_readme_shows_exists():
    shown = set(re.findall(r"\bmake ([a-z][a-z-]*)", README))
    assert shown, "the README shows no make target"
    assert shown <= makefile_targets(), shown - makefile_targets()


def test_make_help_lists_every_target_with_a_line():
    listed = subprocess.run(["make", "-s", "help"], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    documented = set(re.findall(r"^\s+make ([a-z-]+)\s+\S", listed, re.M))
    assert documented == makefile_targets(), makefile_targets() ^ documented


def program_commands() -> list[tuple[str, str, list[str]]]:
    """(the command as written, its subcommand, its flags) for each `python -m program` line."""
    found = []
    for line in commands(README):
        if (match := re.search(r"-m program(?:\s+--db\s+\S+)?\s+([a-z]+)(.*)", line)):
            found.append((line, match.group(1), re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", match.group(2))))
    return found


def test_the_readme_shows_every_subcommand():
    shown = {sub for _, sub, _ in program_commands()}
    listed = set(re.search(r"\{([a-z,]+)\}", help_text("-m", "program")).group(1).split(","))
    assert shown == listed


@pytest.mark.parametrize("line,sub,flags", program_commands(), ids=lambda v: v if isinstance(v, str) and " " not in v else None)
def test_each_subcommand_takes_the_flags_the_readme_shows(line, sub, flags):
    text = help_text("-m", "program", sub)
    assert text.startswith(f"usage: python -m program {sub}"), line
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{line}: {sub} has no {flag}"


def test_the_flags_named_in_the_readmes_prose_exist():
    prose = FENCE.sub("", README)
    named = set(re.findall(r"`(--[a-z][a-z-]*)", prose))
    known = help_text("-m", "program") + "".join(help_text("-m", "program", sub) for sub in
                                                 ("ask", "audit", "sessions", "investigate", "serve"))
    assert named and all(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known) for flag in named), named


def test_optimize_takes_the_flags_the_docs_show():
    text = help_text("optimize.py")
    written = [line for page in PAGES.values() for line in commands(page) + re.findall(r"`([^`\n]+)`", page)
               if "optimize.py " in line]
    shown = {flag for line in written for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line.split("optimize.py", 1)[1])}
    assert shown, "no page shows an optimize.py command"
    assert all(flag in text for flag in shown), {f for f in shown if f not in text}


def test_the_settings_table_is_the_settings_class():
    from contracts.settings import NAMES

    table = [line for line in README.splitlines() if line.startswith("| `DIAGNOSIS_")]
    in_table = {name for line in table for name in re.findall(r"`(DIAGNOSIS_[A-Z_]+)`", line.split(" | ")[0])}
    assert in_table == set(NAMES), (in_table ^ set(NAMES))


def test_the_program_reads_no_setting_the_settings_class_does_not_declare():
    from contracts.settings import NAMES

    code = [path for folder in ("contracts", "program", "tools", "signatures", "devset", "optimization", "scripts")
            for path in (ROOT / folder).rglob("*") if path.suffix in (".py", ".sh")] + [ROOT / "optimize.py"]
    read = {name for path in code for name in re.findall(r"\b(DIAGNOSIS_[A-Z][A-Z_]*[A-Z])\b", path.read_text(encoding="utf-8"))}
    assert read and read <= set(NAMES), read - set(NAMES)


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    linked = {(ROOT / target).resolve() for target in LINK.findall(README) if not target.startswith("http")}
    pages = {path.resolve() for path in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    for path, text in PAGES.items():
        for target in LINK.findall(text):
            if not target.startswith(("http://", "https://")):
                assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to {target}, which is not there"


def test_every_script_a_page_runs_is_in_the_repository():
    for path, text in PAGES.items():
        for script in re.findall(r"\b((?:benchmarks|scripts)/[\w-]+\.(?:py|sh))\b", text):
            assert (ROOT / script).is_file(), f"{path.relative_to(ROOT)} names {script}, which is not there"


def test_the_readme_stays_a_first_page():
    assert len(README.splitlines()) <= 200
