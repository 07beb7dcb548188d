"""The CPU flags printed with every benchmark figure (speed depends on AVX-512/VNNI vs AVX2)."""

from __future__ import annotations

import re
from pathlib import Path


def cpu_flags() -> str:
    try:
        flags = set(re.findall(r"\b(avx\w*|fma|amx\w*)\b", Path("/proc/cpuinfo").read_text()))
    except OSError:
        return "?"
    return " ".join(sorted(flags))
