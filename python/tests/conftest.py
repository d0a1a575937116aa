"""Fixtures of the Python tests: a scratch folder on a filesystem that takes
O_DIRECT (the build tree), and a `kvtier store serve` process."""

import os
import tempfile
import time

import pytest

import kvtier
from kvtier._service import StoreService


def _scratch_root():
    root = os.environ.get("KVTIER_TEST_TMP")
    if root:
        os.makedirs(root, exist_ok=True)
    return root


@pytest.fixture
def scratch():
    with tempfile.TemporaryDirectory(dir=_scratch_root(), prefix="pytest-") as d:
        yield d


def make_namespace(model="test-model", block_tokens=16, **kw):
    return kvtier.Namespace(model, "r1", "tok", "bf16", "NHD", block_tokens=block_tokens, **kw)


@pytest.fixture
def server(scratch):
    """A `kvtier store serve` on loopback (RAM only), restartable on its port."""
    s = StoreService(os.environ["KVTIER_BIN"], "64MiB", folder=scratch)
    yield s
    s.stop()


def wait_for(predicate, timeout_s=30.0, interval_s=0.01):
    """Polls a condition; never a fixed sleep standing in for one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
