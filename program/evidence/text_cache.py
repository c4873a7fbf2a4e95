"""A memo for functions of one string, bounded by the total length of the strings it keeps.

An entry-count bound (``lru_cache``) lets a few huge strings hold hundreds of megabytes; this
cache evicts least-recently-used entries once the kept keys pass `max_chars` characters, and never
keeps a key longer than a tenth of that.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import wraps


# Characters of keys each cache of the evidence layer keeps.
CACHE_CHARS = 2_000_000


def text_cache(max_chars: int = CACHE_CHARS) -> Callable:
    def decorate(function: Callable[[str], object]):
        entries: OrderedDict[str, object] = OrderedDict()
        lock = threading.Lock()
        kept = [0]

        @wraps(function)
        def cached(text: str):
            with lock:
                if text in entries:
                    entries.move_to_end(text)
                    return entries[text]
            value = function(text)
            if len(text) * 10 <= max_chars:
                with lock:
                    if text not in entries:
                        entries[text] = value
                        kept[0] += len(text)
                    while kept[0] > max_chars:
                        old, _ = entries.popitem(last=False)
                        kept[0] -= len(old)
            return value

        def cache_clear() -> None:
            with lock:
                entries.clear()
                kept[0] = 0

        def cache_chars() -> int:
            return kept[0]

        cached.cache_clear = cache_clear
        cached.cache_chars = cache_chars
        return cached

    return decorate
