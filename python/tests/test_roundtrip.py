"""Round trips through an in-process store with every kind of buffer, keys and
namespaces, and the errors for bad input (which change nothing)."""

import numpy as np
import pytest

import kvtier
from conftest import make_namespace

BLOCK = 64 * 1024


def payload(i, n=BLOCK):
    return np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)


def test_golden_keys_match_docs():
    # N1 of docs/block-keys.md.
    ns = kvtier.Namespace("llama-3-8b", "r1", "llama3-tok", "bf16", "NHD", block_tokens=4)
    assert str(ns.digest) == "5ca6fbe112807d0a8e68402437311ff4"
    keys = ns.block_keys(list(range(1, 11)))
    assert len(keys) == 2
    assert str(keys[0]) == "128f96c6c3911c8ea33dfc521e4f25a6"
    assert keys[1].hex() == "8bac8613b843147e65099fe50cbf6d5d"
    assert bytes(keys[0]) == bytes.fromhex("128f96c6c3911c8ea33dfc521e4f25a6")
    # N3: SHA-256, tenant salt, tensor-parallel rank 1 of 2.
    n3 = kvtier.Namespace("llama-3-8b", "r1", "llama3-tok", "bf16", "NHD", block_tokens=4,
                          tp_size=2, tp_rank=1, tenant="tenant-a", scheme="sha256")
    assert str(n3.block_keys(list(range(1, 11)))[1]) == "572481b067fa347fc8360d41cc4e2dd7"


def test_keys_from_numpy_list_and_slices_agree():
    ns = make_namespace()
    tokens = np.arange(1000, 1000 + 16 * 10 + 5, dtype=np.int64)
    a = ns.block_keys(tokens)
    b = ns.block_keys(tokens.tolist())
    c = ns.block_keys(tokens.astype(np.uint32))
    assert len(a) == 10 and a == b == c
    assert a[2:5] == kvtier.Keys([a[2], a[3], bytes(a[4])])
    assert len(a[::2]) == 5 and a[::2][1] == a[2]
    assert a[-1] == a[9]
    assert [str(k) for k in a[:3]] == [str(a[0]), str(a[1]), str(a[2])]
    assert kvtier.Key(str(a[0])) == a[0] and hash(kvtier.Key(bytes(a[0]))) == hash(a[0])
    with pytest.raises(IndexError):
        a[10]
    # A prefix of the tokens gives a prefix of the keys.
    assert ns.block_keys(tokens[:48]) == a[:3]


@pytest.mark.parametrize("bad", [[-1], [2**32], [1.5], np.array([[1, 2]]), np.array([0.5]), "abc"])
def test_bad_tokens_are_errors(bad):
    with pytest.raises(kvtier.InvalidArgumentError):
        make_namespace().block_keys(bad)


def test_bad_namespace_is_an_error():
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.Namespace("m", "r", "t", "bf16", "NHD", block_tokens=0)
    with pytest.raises(ValueError):  # InvalidArgumentError is also a ValueError
        kvtier.Namespace("m", "r", "t", "bf16", "NHD", block_tokens=16, tp_size=2, tp_rank=2)
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.Namespace("m", "r", "t", "bf16", "NHD", block_tokens=16, scheme="md5")


def test_numpy_bytearray_memoryview_round_trips():
    ns = make_namespace()
    keys = ns.block_keys(range(16 * 6))
    data = [payload(i) for i in range(6)]
    with kvtier.open("mem://?ram=16MiB") as store:
        puts = store.batch_put(ns, keys, [data[0], bytearray(data[1].tobytes()),
                                          memoryview(data[2].tobytes()), data[3].tobytes(),
                                          data[4].view(np.uint32), data[5].reshape(16, -1)])
        assert all(p.stored and p.outcome == "stored" and p.tier == "ram" for p in puts)
        assert store.match_prefix(ns, keys).blocks == 6

        out_np = np.zeros(BLOCK, np.uint8)
        out_ba = bytearray(BLOCK)
        out_mv = memoryview(bytearray(BLOCK))
        out_u32 = np.zeros(BLOCK // 4, np.uint32)
        out_2d = np.zeros((4, BLOCK // 4), np.uint8)
        out_big = np.zeros(BLOCK + 100, np.uint8)  # larger than the block: fine
        got = store.batch_get_into(ns, keys, [out_np, out_ba, out_mv, out_u32, out_2d, out_big])
        assert all(g.hit and g.tier == "ram" and g.length == BLOCK for g in got)
        assert np.array_equal(out_np, data[0])
        assert bytes(out_ba) == data[1].tobytes()
        assert out_mv.tobytes() == data[2].tobytes()
        assert out_u32.tobytes() == data[3].tobytes()
        assert out_2d.tobytes() == data[4].tobytes()
        assert np.array_equal(out_big[:BLOCK], data[5]) and not out_big[BLOCK:].any()
        # Written in place: the very objects passed in hold the bytes.
        st = store.stats()
        assert st["hits_ram"] == 6 and st["puts"] == 6


def test_torch_tensor_through_numpy():
    torch = pytest.importorskip("torch")
    ns = make_namespace()
    keys = ns.block_keys(range(32))
    src = [torch.randn(BLOCK // 4) for _ in range(2)]
    with kvtier.open("mem://?ram=8MiB") as store:
        assert all(store.batch_put(ns, keys, [t.numpy() for t in src]))
        dst = [torch.empty(BLOCK // 4) for _ in range(2)]
        got = store.batch_get_into(ns, keys, [t.numpy() for t in dst])
        assert all(got)
        assert all(torch.equal(a, b) for a, b in zip(src, dst))


def test_wrong_size_buffer_is_an_error_and_changes_nothing():
    ns = make_namespace()
    keys = ns.block_keys(range(48))
    with kvtier.open("mem://?ram=16MiB") as store:
        store.batch_put(ns, keys, [payload(i) for i in range(3)])
        before = store.stats()
        small = np.full(BLOCK - 1, 7, np.uint8)
        ok1, ok2 = np.full(BLOCK, 7, np.uint8), np.full(BLOCK, 7, np.uint8)
        with pytest.raises(kvtier.InvalidArgumentError, match="too small"):
            store.batch_get_into(ns, keys, [ok1, small, ok2])
        # No buffer was touched, no counter moved.
        assert (ok1 == 7).all() and (small == 7).all() and (ok2 == 7).all()
        assert store.stats() == before
        with pytest.raises(kvtier.InvalidArgumentError, match="3 keys but 2 buffers"):
            store.batch_get_into(ns, keys, [ok1, ok2])
        with pytest.raises(kvtier.InvalidArgumentError, match="3 keys but 1 buffers"):
            store.batch_put(ns, keys, [ok1])
        with pytest.raises(kvtier.InvalidArgumentError, match="writable"):
            store.batch_get_into(ns, keys[:1], [bytes(BLOCK)])
        with pytest.raises(kvtier.InvalidArgumentError, match="contiguous"):
            store.batch_get_into(ns, keys[:1], [np.zeros(2 * BLOCK, np.uint8)[::2]])
        with pytest.raises(kvtier.InvalidArgumentError, match="buffer protocol"):
            store.batch_get_into(ns, keys[:1], [[0] * BLOCK])
        with pytest.raises(kvtier.InvalidArgumentError, match="overlap"):
            whole = np.zeros(2 * BLOCK, np.uint8)
            store.batch_get_into(ns, keys[:2], [whole[:BLOCK + 8], whole[BLOCK:]])
        assert store.stats() == before


def test_misses_carry_reasons_and_namespaces_never_share():
    a, b = make_namespace("model-a"), make_namespace("model-b")
    tokens = list(range(64))
    ka, kb = a.block_keys(tokens), b.block_keys(tokens)
    assert all(x != y for x, y in zip(ka, kb))  # same tokens, other namespace: other keys
    with kvtier.open("mem://?ram=16MiB") as store:
        store.batch_put(a, ka, [payload(i) for i in range(4)])
        assert store.match_prefix(b, kb).blocks == 0
        assert store.match_prefix(b, ka).blocks == 0  # a's keys asked under b
        out = [np.zeros(BLOCK, np.uint8) for _ in range(4)]
        got = store.batch_get_into(b, ka, out)
        assert [g.reason for g in got] == ["foreign_namespace"] * 4
        assert not any(o.any() for o in out)
        got = store.batch_get_into(b, kb, out)
        assert [g.hit for g in got] == [False] * 4 and got[0].reason == "not_found"
        assert not got[0] and got[0].length == 0 and got[0].tier is None
        assert store.remove(a, ka[3]) is True and store.remove(a, ka[3]) is False
        m = store.match_prefix(a, ka)
        assert (m.blocks, m.ram, m.disk) == (3, 3, 0)
        st = store.stats()
        assert st["misses"]["foreign_namespace"] == 4 and st["misses"]["not_found"] == 4


def test_pin_unpin_and_dedup():
    ns = make_namespace()
    keys = ns.block_keys(range(32))
    with kvtier.open("mem://?ram=8MiB") as store:
        store.batch_put(ns, keys, [payload(0), payload(1)])
        again = store.batch_put(ns, keys, [payload(0), payload(1)])
        assert [p.outcome for p in again] == ["deduplicated"] * 2
        assert store.pin(ns, keys, ttl_s=60) == 2
        assert store.unpin(ns, keys) == 2
        with pytest.raises(kvtier.InvalidArgumentError):
            store.pin(ns, keys, ttl_s=0)


def test_open_errors_and_close():
    with pytest.raises(kvtier.InvalidArgumentError, match="unknown store URI scheme"):
        kvtier.open("redis://localhost")
    with pytest.raises(kvtier.InvalidArgumentError, match="unknown option 'rma'"):
        kvtier.open("mem://?rma=1MiB")
    with pytest.raises(kvtier.InvalidArgumentError, match="ram"):
        kvtier.open("mem://?ram=lots")
    store = kvtier.open("mem://?ram=4MiB")
    assert "mem://" in repr(store) and not store.closed
    store.close()
    store.close()  # idempotent
    assert store.closed
    with pytest.raises(kvtier.Error, match="closed"):
        store.stats()


def test_docstrings_and_version():
    assert kvtier.__version__.count(".") == 2
    for obj in (kvtier.open, kvtier.Store.batch_get_into, kvtier.Store.batch_put,
                kvtier.Store.match_prefix, kvtier.Namespace.block_keys, kvtier.Store.stats,
                kvtier.Error, kvtier.Keys, kvtier.Key):
        assert obj.__doc__ and len(obj.__doc__) > 20, obj
