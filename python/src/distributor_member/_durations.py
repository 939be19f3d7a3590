"""Go-style durations, as the daemon reads them (`500ms`, `2s`, `1m30s`, `1.5h`, `0`)."""

from __future__ import annotations

import math

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in `text`; raises ValueError with the reason (the text is not secret)."""
    s = text.strip()
    if s == "0":
        return 0.0
    if not s:
        raise ValueError("empty duration")
    total = 0.0
    rest = s
    while rest:
        n = 0
        while n < len(rest) and (rest[n].isascii() and rest[n].isdigit() or rest[n] == "."):
            n += 1
        if n == 0:
            raise ValueError(f"expected a number at {rest!r} (example: 500ms, 2s, 1m30s)")
        try:
            number = float(rest[:n])
        except ValueError:
            raise ValueError(f"bad number {rest[:n]!r}") from None
        rest = rest[n:]
        u = 0
        while u < len(rest) and not (rest[u].isascii() and rest[u].isdigit() or rest[u] == "."):
            u += 1
        unit = rest[:u]
        if unit == "":
            raise ValueError("missing unit (ns, us, ms, s, m, h)")
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} (ns, us, ms, s, m, h)")
        rest = rest[u:]
        total += number * _UNITS[unit]
    if not math.isfinite(total) or total > 2**64 * 1e-9:
        raise ValueError("duration too large")
    return total


def format_duration(seconds: float) -> str:
    """`seconds` as the shortest of `1500ms`, `10s`, `2m`."""
    ms = round(seconds * 1000)
    if ms % 60000 == 0 and ms:
        return f"{ms // 60000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"
