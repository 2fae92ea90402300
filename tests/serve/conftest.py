"""Shared helpers for the serving tests: a hand-checkable stub pricer and a loop that checks KV bookkeeping."""

import pytest


class StubPricer:
    """Iteration time = a + b x tokens; records every call (prefill chunks, decode count, decode KV)."""

    def __init__(self, a: float = 0.01, b: float = 0.001):
        self.a, self.b = a, b
        self.calls = []

    def __call__(self, prefill, decode, decode_kv):
        self.calls.append((list(prefill), decode, decode_kv))
        return self.a + self.b * (decode + sum(n for n, _ in prefill))


@pytest.fixture
def stub():
    return StubPricer()
