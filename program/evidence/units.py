"""Units as written after a number: what each measures, and its scale. One table for reading
claims (statements.py) and for matching quotes (matching.py), so that both read "10 kb" alike."""

from __future__ import annotations

import re

# Units as written after a number, each with what it measures and its scale; a unit is matched
# with its case (`M` is not `m`, `Gb` is not `GB`). Chinese measure words (次, 个, 条) are counts,
# not units, and stay with the words.
_UNIT_SPELLINGS = (
    ("time", 1e-9, "ns"), ("time", 1e-6, "µs|μs|us"), ("time", 1e-3, "ms|msec|millisecond|milliseconds|毫秒"),
    ("time", 1.0, "s|sec|secs|second|seconds|秒|秒钟"), ("time", 60.0, "m|min|mins|minute|minutes|分钟"),
    ("time", 3600.0, "h|hr|hrs|hour|hours|小时"), ("time", 86400.0, "d|day|days|天"),
    ("bytes", 1.0, "B|byte|bytes"), ("bytes", 1e3, "KB|kB|kilobyte|kilobytes"), ("bytes", 1e6, "MB|megabyte|megabytes"),
    ("bytes", 1e9, "GB|gigabyte|gigabytes"), ("bytes", 1e12, "TB|terabyte|terabytes"), ("bytes", 1024.0, "KiB"),
    ("bytes", 1024.0 ** 2, "MiB"), ("bytes", 1024.0 ** 3, "GiB"), ("bytes", 1024.0 ** 4, "TiB"),
    ("bits", 1.0, "b"), ("bits", 1e3, "Kb"), ("bits", 1e6, "Mb"), ("bits", 1e9, "Gb"), ("bits", 1e12, "Tb"),
    ("percent", 1.0, "%|percent|per cent|pct"), ("percent", 0.1, "‰"), ("ratio", 1.0, "x"),
    ("million", 1.0, "M"), ("thousand", 1.0, "k|K"),
    # Lower-case spellings that could be bytes or bits: each equal only to itself.
    ("kb", 1.0, "kb"), ("mb", 1.0, "mb"), ("gb", 1.0, "gb"), ("tb", 1.0, "tb"),
)
UNITS = {unit: (kind, scale) for kind, scale, spellings in _UNIT_SPELLINGS for unit in spellings.split("|")}
# A unit, as a regular expression: the longest spelling first.
UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
