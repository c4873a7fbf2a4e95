"""How much a source may hand the program, in one place.

Source data is written by whoever writes logs, runbooks and alert annotations, and the checks after
it take time with its length: the gatekeeper on one 5 MB log line took 29 s. So a source cuts a
long text where a reader can see it, refuses a name it would have to cut (a cut name is another
name), and reads at most so many bytes per file, per directory and per answer. Every cut and every
file left unread is named in the message of the call it affected.
"""

from __future__ import annotations

# One log message, annotation, label value or runbook section: as long as an evidence excerpt
# (contracts.MAX_EXCERPT_CHARS), so one excerpt can quote a whole item.
MAX_ITEM_CHARS = 4000
# One ref's text, which may join several items (an alert's annotations). The gatekeeper checks
# sixteen bindings on a ref this long in milliseconds (benchmarks/capped_ref.py).
MAX_REF_CHARS = 8000
# A service, an alert name, a level or a timestamp: the program matches names whole.
MAX_NAME_CHARS = 200
# Bytes read from one runbook and from a runbook directory per read.
MAX_FILE_BYTES = 8 * 2**20
MAX_DIRECTORY_BYTES = 64 * 2**20
# Bytes of one Prometheus answer.
MAX_BODY_BYTES = 8 * 2**20
# How many places a message names when it says what was cut or skipped.
NAMED_PLACES = 5


def clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    """The text, or its first `limit` characters and a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} …[cut: {len(text) - limit} more characters]"


def shortened(text: str, limit: int) -> str:
    """A display line's text: the text, or its first `limit` - 1 characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def size_text(size: int) -> str:
    return f"{size / 2**20:.3g} MiB" if size >= 2**20 else f"{size} bytes"


def places(where: list[str] | tuple[str, ...]) -> str:
    """The first few places of a list, for a message: `app.log:3, app.log:9 and 4 more`."""
    shown = ", ".join(where[:NAMED_PLACES])
    return shown + (f" and {len(where) - NAMED_PLACES} more" if len(where) > NAMED_PLACES else "")
