"""Measured load (docs/protocol.md step 7, docs/assignment.md "Measured load"):
a time-weighted exponential average per unit."""

from __future__ import annotations

import math
from collections.abc import Iterable

MAX_LOAD = 1e9


class LoadBook:
    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.units: dict[str, list[float]] = {}  # unit -> [decayed sum, decayed weight, at]
        self.reported = False

    def sample(self, unit: str, load: float, at: float) -> bool:
        if isinstance(load, bool) or not isinstance(load, (int, float)):
            return False
        if not (math.isfinite(load) and 0 <= load <= MAX_LOAD):
            return False
        self.reported = True
        s = self.units.setdefault(unit, [0.0, 0.0, at])
        decay = 0.0 if self.half_life <= 0 else 2 ** (-max(0.0, at - s[2]) / self.half_life)
        s[0] = s[0] * decay + float(load)
        s[1] = s[1] * decay + 1.0
        s[2] = max(s[2], at)
        return True

    def load(self, unit: str) -> float | None:
        s = self.units.get(unit)
        return None if s is None else s[0] / s[1]

    def retain(self, keep: set[str]) -> None:
        for u in [u for u in self.units if u not in keep]:
            del self.units[u]

    def encode(self, owned: Iterable[str], unix_ms: int) -> str:
        pairs = sorted((u, self.units[u][0] / self.units[u][1]) for u in owned if u in self.units)
        body = ",".join(f"{u}={v:.3f}" for u, v in pairs)
        return f"{unix_ms} {body}" if body else str(unix_ms)
