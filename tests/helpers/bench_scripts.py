"""The scripts under bench/ as modules, for tests of their pure parts (they import their siblings
by name, so bench/ is on sys.path while the module is in use)."""

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


@contextmanager
def bench_script(name: str) -> Iterator[ModuleType]:
    """bench/NAME.py imported, with bench/ on sys.path until the block ends."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
