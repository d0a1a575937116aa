"""A store service (`kvtier store serve`) through the Python package: over
TCP and over the same-host direct channel, and a service killed mid-run:
misses (never errors) while it is down, then the client reconnects."""

import numpy as np
import pytest

import kvtier
from conftest import make_namespace, wait_for

BLOCK = 128 * 1024


def payload(i):
    return np.random.default_rng(200 + i).integers(0, 256, BLOCK, dtype=np.uint8)


@pytest.mark.parametrize("options", [{"shared_memory": 0}, {}], ids=["tcp", "direct"])
def test_round_trip_over_the_service(server, options):
    ns = make_namespace()
    keys = ns.block_keys(range(16 * 8))
    data = [payload(i) for i in range(8)]
    with kvtier.open(server.uri(**options)) as store:
        assert all(store.batch_put(ns, keys, data))
        assert store.match_prefix(ns, keys).blocks == 8
        out = [np.zeros(BLOCK, np.uint8) for _ in keys]
        got = store.batch_get_into(ns, keys, out)
        assert all(g.hit and g.tier == "ram" and g.length == BLOCK for g in got)
        assert all(np.array_equal(a, b) for a, b in zip(out, data))
        assert store.stats()["hits_ram"] >= 8


def test_unreachable_service_is_an_error_at_open_unless_told_to_wait(server):
    port = server.port
    server.stop()
    with pytest.raises(kvtier.UnavailableError, match="wait_ms=0"):
        kvtier.open(f"kvtier://127.0.0.1:{port}?wait_ms=300")
    # wait_ms=0: opens at once; calls are misses until the service is up.
    with kvtier.open(f"kvtier://127.0.0.1:{port}?wait_ms=0&timeout_ms=200") as store:
        ns = make_namespace()
        keys = ns.block_keys(range(16))
        assert store.match_prefix(ns, keys).blocks == 0
        got = store.batch_get_into(ns, keys, [np.zeros(BLOCK, np.uint8)])
        assert not got[0].hit and got[0].reason in ("io_error", "timeout")


def test_service_killed_mid_run_gives_misses_then_reconnects(server):
    ns = make_namespace()
    keys = ns.block_keys(range(16 * 4))
    data = [payload(i) for i in range(4)]
    out = [np.zeros(BLOCK, np.uint8) for _ in keys]
    with kvtier.open(server.uri(timeout_ms=500)) as store:
        assert all(store.batch_put(ns, keys, data))
        assert all(store.batch_get_into(ns, keys, out))
        server.kill9()
        # Down: misses and refusals with reasons, never exceptions.
        got = store.batch_get_into(ns, keys, out)
        assert [g.hit for g in got] == [False] * 4
        assert all(g.reason in ("io_error", "timeout") for g in got)
        puts = store.batch_put(ns, keys, data)
        assert all(not p.stored and p.reason == "disk_error" for p in puts)
        assert store.match_prefix(ns, keys).blocks == 0
        # Back on the same port (RAM only: the blocks died with the process).
        server.start()
        assert wait_for(lambda: all(store.batch_put(ns, keys, data)), timeout_s=30)
        out = [np.zeros(BLOCK, np.uint8) for _ in keys]
        got = store.batch_get_into(ns, keys, out)
        assert all(got) and all(np.array_equal(a, b) for a, b in zip(out, data))
