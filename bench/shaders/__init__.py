"""Probe shaders of the benchmarks (never shipped): Device.pipeline takes them by path."""

from pathlib import Path

DIR = Path(__file__).resolve().parent


def path(name: str) -> str:
    return str(DIR / f"{name}.comp")
