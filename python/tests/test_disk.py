"""The disk tier through the Python package: blocks that left RAM come back
from a real O_DIRECT volume file, and a block corrupted on disk is a miss."""

import os

import numpy as np
import pytest

import kvtier
from conftest import make_namespace

BLOCK = 256 * 1024


def payload(i):
    return np.random.default_rng(100 + i).integers(0, 256, BLOCK, dtype=np.uint8)


def file_uri(path, ram="1MiB"):
    return f"file://{path}?ram={ram}&disk=64MiB&max_object=256KiB"


def test_missing_volume_without_size_is_not_found(scratch):
    with pytest.raises(kvtier.NotFoundError, match="disk=SIZE"):
        kvtier.open(f"file://{scratch}/absent.vol")
    with pytest.raises(kvtier.InvalidArgumentError, match="absolute path"):
        kvtier.open("file://localhost")
    with pytest.raises(kvtier.InvalidArgumentError, match="not host"):
        kvtier.open("file://relative.vol")


def test_blocks_return_from_disk_after_ram_eviction(scratch):
    ns = make_namespace()
    keys = ns.block_keys(range(16 * 24))
    data = [payload(i) for i in range(24)]
    path = os.path.join(scratch, "store.vol")
    with kvtier.open(file_uri(path)) as store:  # RAM holds 4 blocks; 24 go in
        assert all(store.batch_put(ns, keys, data))
        m = store.match_prefix(ns, keys)
        assert m.blocks == 24 and m.disk >= 20
        out = [np.zeros(BLOCK, np.uint8) for _ in keys]
        got = store.batch_get_into(ns, keys, out)
        assert all(got) and sum(g.tier == "disk" for g in got) >= 20
        assert all(np.array_equal(a, b) for a, b in zip(out, data))
    # Reopened (checkpoint): the same blocks, from disk.
    with kvtier.open(file_uri(path)) as store:
        assert store.stats()["has_disk"]
        out = [np.zeros(BLOCK, np.uint8) for _ in keys]
        got = store.batch_get_into(ns, keys, out)
        assert all(g.hit and g.tier == "disk" for g in got)
        assert all(np.array_equal(a, b) for a, b in zip(out, data))


def test_block_corrupted_on_disk_is_a_miss(scratch):
    ns = make_namespace()
    keys = ns.block_keys(range(16 * 3))
    data = [payload(i) for i in range(3)]
    path = os.path.join(scratch, "corrupt.vol")
    # ram=0: every block goes straight to the volume.
    with kvtier.open(file_uri(path, ram="0")) as store:
        assert all(p.tier == "disk" for p in store.batch_put(ns, keys, data))
    # Flip one byte in the middle of block 1's payload, found by its bytes.
    raw = bytearray(open(path, "rb").read())
    at = raw.find(data[1][:4096].tobytes())
    assert at >= 0
    raw[at + 1000] ^= 0xFF
    with open(path, "r+b") as f:
        f.seek(at + 1000)
        f.write(bytes([raw[at + 1000]]))
    with kvtier.open(file_uri(path, ram="0")) as store:
        out = [np.zeros(BLOCK, np.uint8) for _ in range(3)]
        got = store.batch_get_into(ns, keys, out)
        assert got[0].hit and got[2].hit
        assert not got[1].hit and got[1].reason == "corrupt"
        assert np.array_equal(out[0], data[0]) and np.array_equal(out[2], data[2])
        # No wrong bytes reach the caller: block 1's buffer holds none of the
        # corrupted block's bytes.
        assert not np.array_equal(out[1], data[1])
        assert store.stats()["misses"]["corrupt"] == 1
        # The bad entry is dropped: now simply not found.
        assert store.batch_get_into(ns, keys[1:2], out[1:2])[0].reason == "not_found"
