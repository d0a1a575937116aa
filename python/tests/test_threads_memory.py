"""The GIL is released during store calls, and many calls leave RSS flat."""

import threading
import time

import numpy as np

import kvtier
from conftest import make_namespace

BLOCK = 1536 * 1024


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_second_thread_runs_during_a_long_batch_get_into():
    # 96 blocks of 1.5 MiB: one batch_get_into copies 144 MiB, long enough
    # for another thread to run Python code in the middle of it, but only
    # if the call released the GIL. Decided by events, not by timing bounds:
    # the other thread's ticks are counted while the call is in C++.
    ns = make_namespace()
    n = 96
    keys = ns.block_keys(range(16 * n))
    block = np.arange(BLOCK, dtype=np.uint8)
    out = [np.empty(BLOCK, np.uint8) for _ in range(n)]
    with kvtier.open("mem://?ram=160MiB") as store:
        assert all(store.batch_put(ns, keys, [block] * n))
        in_call = threading.Event()
        stop = threading.Event()
        ticks_during_call = [0]

        def ticker():
            while not stop.is_set():
                if in_call.is_set():
                    ticks_during_call[0] += 1
                time.sleep(0)  # yields the GIL between ticks

        t = threading.Thread(target=ticker)
        t.start()
        try:
            for _ in range(50):
                in_call.set()
                got = store.batch_get_into(ns, keys, out)
                in_call.clear()
                assert all(got)
                if ticks_during_call[0] > 0:
                    break
        finally:
            stop.set()
            t.join()
        assert ticks_during_call[0] > 0, "no Python thread ran during 50 long calls: GIL held"
        assert np.array_equal(out[5], block)


def test_100k_calls_leave_rss_flat():
    ns = make_namespace()
    keys = ns.block_keys(range(16 * 8))
    bufs = [np.full(4096, i, np.uint8) for i in range(8)]
    outs = [np.empty(4096, np.uint8) for _ in range(8)]
    with kvtier.open("mem://?ram=8MiB&max_object=4KiB") as store:
        store.batch_put(ns, keys, bufs)

        def round_of_calls(count):
            for i in range(count):
                k = i % 4
                if k == 0:
                    store.batch_get_into(ns, keys, outs)
                elif k == 1:
                    store.match_prefix(ns, keys)
                elif k == 2:
                    store.batch_put(ns, keys[:2], bufs[:2])  # deduplicated
                else:
                    ns.block_keys(range(64))

        round_of_calls(20_000)  # warm-up: allocator pools, caches
        before = rss_bytes()
        round_of_calls(100_000)
        grown = rss_bytes() - before
        # A leak of even 64 bytes per call would grow RSS by 6 MiB.
        assert grown < 4 << 20, f"RSS grew by {grown} bytes over 100,000 calls"
        assert store.stats()["hits_ram"] >= 8 * 25_000
