"""Parsing of the experiment file's quantities ("30kbit", "5ms", "0.1%") into SI numbers. Pure."""
from __future__ import annotations

import math
import re

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)\s*$", re.IGNORECASE)
_RATE_MULT = {"bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s)\s*$")
_TIME_MULT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_rate(text: str | int) -> int:
    """'30kbit' -> 30000 (bit/s). Bits only: tc's 'bps' means bytes per second, a classic trap."""
    if isinstance(text, bool):
        raise ValueError("rate must be a string like '30kbit'")
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"rate must be positive, got {text}")
        return text
    m = _RATE.match(str(text))
    if not m:
        raise ValueError(f"rate {text!r} is not a positive number with a unit bit|kbit|mbit|gbit (e.g. '30kbit')")
    value = float(m.group(1)) * _RATE_MULT[m.group(2).lower()]
    if not math.isfinite(value):
        raise ValueError(f"rate {text!r} is too large")
    if value < 1:
        raise ValueError(f"rate {text!r} must be at least 1 bit/s")
    return int(round(value))


def parse_time(text: str | int | float) -> float:
    """'5ms' -> 0.005 (s). A bare number is seconds."""
    if isinstance(text, bool):
        raise ValueError("time must be a string like '5ms'")
    if isinstance(text, (int, float)):
        if not math.isfinite(text):
            raise ValueError(f"time must be a finite number, got {text}")
        if text < 0:
            raise ValueError(f"time must not be negative, got {text}")
        return float(text)
    m = _TIME.match(str(text))
    if not m:
        raise ValueError(f"time {text!r} is not a non-negative number with a unit us|ms|s (e.g. '5ms')")
    value = float(m.group(1)) * _TIME_MULT[m.group(2)]
    if not math.isfinite(value):
        raise ValueError(f"time {text!r} is too large")
    return value


def parse_probability(text: str | int | float) -> float:
    """'0.1%' -> 0.001; a bare number is a probability in [0, 1]."""
    if isinstance(text, bool):
        raise ValueError("probability must be like '1%' or 0.01")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _PERCENT.match(str(text))
        if not m:
            raise ValueError(f"{text!r} is not a percentage like '0.1%' or a number in [0, 1]")
        value = float(m.group(1)) / 100
    if not 0 <= value <= 1:
        raise ValueError(f"{text!r} is outside 0..100 %")
    return value


def format_rate(bps: int | None) -> str:
    if not bps:
        return "unlimited"
    for unit, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= mult and bps % mult == 0:
            return f"{bps // int(mult)}{unit}"
    return f"{bps}bit"


def format_time(seconds: float) -> str:
    if seconds == 0:
        return "0ms"
    if seconds < 1e-3:
        return f"{seconds * 1e6:g}us"
    return f"{seconds * 1e3:g}ms"
