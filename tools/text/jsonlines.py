"""JSON lines: the one reader of the project's .jsonl files (the fixture's logs, the devset's cases)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def json_lines(path: Path, error: type[Exception], what: str) -> Iterator[tuple[str, str, dict]]:
    """(where, the line, its object) for every non-blank line of `path`; `error` names the first
    line that is not a JSON object, or a file that cannot be read, as `what`."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(record, dict):
            raise error(f"{where} is not an object but {type(record).__name__}")
        yield where, line.strip(), record
