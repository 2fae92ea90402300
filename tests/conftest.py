"""Suite-wide pytest settings: a run that collects too few tests fails instead of passing quietly."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")

MIN_TESTS = int(os.environ.get("C3KIT_MIN_TESTS", "1"))
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load_benchmark(name: str):
    """Import benchmarks/<name>.py as a module (benchmarks/ is on sys.path meanwhile, for its sibling imports)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="session")
def load_benchmark():
    """The one loader of benchmark scripts for tests: load_benchmark("validate_ops") -> module."""
    return _load_benchmark


def pytest_collection_finish(session: pytest.Session) -> None:
    """A full run must collect tests; pytest's exit 5 ('no tests') becomes a failure here."""
    if not session.items and not session.config.option.collectonly:
        raise pytest.UsageError("no tests were collected: the suite must never pass empty")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Turn 'no tests ran' (exit 5) into a failure (exit 1)."""
    if exitstatus == 5:
        session.exitstatus = 1
