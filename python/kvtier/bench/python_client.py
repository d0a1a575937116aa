"""The Python binding against the C++ client, in one run.

For each store (in-process RAM, a store service over TCP, the same service
through the same-host direct channel) it measures:

- batch_get_into of --blocks objects of --object-bytes into numpy buffers,
  looped from Python, against the same batch_get looped in C++ with no Python
  in between (Store._cpp_batch_get_rate): the ratio is the binding's cost;
- match_prefix of --match-keys keys, p99 per call from Python against the p99
  of the same call looped in C++.

Rounds alternate between the two sides and the best round of each counts, so
a burst of other work on the machine does not land on one side only. Every
ratio is printed under a key ending in ``_ratio``.
"""

import argparse
import json
import sys
import time

import numpy as np

import kvtier
from kvtier._service import StoreService, find_kvtier_bin

GET_BAR = 0.9
MATCH_BAR = 1.2


def log(msg):
    print(f"kvtier bench python: {msg}", file=sys.stderr, flush=True)


def python_get_rate(store, ns, keys, bufs, seconds):
    t0 = time.perf_counter()
    until = t0 + seconds
    total = 0
    while True:
        for g in store.batch_get_into(ns, keys, bufs):
            total += g.length
        t = time.perf_counter()
        if t >= until:
            return total / (t - t0)


def p99(values):
    v = sorted(values)
    return v[min(len(v) - 1, int(0.99 * (len(v) - 1) + 0.5))]


def bench_namespace():
    return kvtier.Namespace("bench-python", "r1", "tok", "bf16", "NHD", block_tokens=16)


def measure_get(name, uri, args):
    ns = bench_namespace()
    out = {}
    with kvtier.open(uri) as store:
        keys = ns.block_keys(np.arange(16 * args.blocks, dtype=np.uint32))
        src = [np.random.default_rng(i).integers(0, 256, args.object_bytes, dtype=np.uint8)
               for i in range(args.blocks)]
        puts = store.batch_put(ns, keys, src)
        if not all(p.stored for p in puts):
            raise RuntimeError(f"{name}: puts refused: {[p.reason for p in puts if not p]}")
        bufs = [np.empty(args.object_bytes, np.uint8) for _ in range(args.blocks)]
        got = store.batch_get_into(ns, keys, bufs)
        if not all(got) or not all(np.array_equal(a, b) for a, b in zip(bufs, src)):
            raise RuntimeError(f"{name}: a warm-up get missed or returned wrong bytes")
        py_rates, cpp_rates = [], []
        per_round = args.seconds / args.rounds
        for _ in range(args.rounds):
            cpp_rates.append(store._cpp_batch_get_rate(ns, keys, bufs, per_round))
            py_rates.append(python_get_rate(store, ns, keys, bufs, per_round))
        out[f"{name}_get_python_bytes_per_s"] = max(py_rates)
        out[f"{name}_get_cpp_bytes_per_s"] = max(cpp_rates)
        out[f"{name}_get_ratio"] = max(py_rates) / max(cpp_rates)
        log(f"{name}: batch_get_into {max(py_rates) / 1e9:.2f} GB/s from Python, "
            f"{max(cpp_rates) / 1e9:.2f} GB/s from C++: {out[f'{name}_get_ratio']:.3f}x")
    return out


def measure_match(name, uri, args):
    """match_prefix of a chain whose every key is present (small objects, so
    that --match-keys of them fit), walked to the end on every call."""
    ns = bench_namespace()
    out = {}
    with kvtier.open(uri) as store:
        keys = ns.block_keys(np.arange(16 * args.match_keys, dtype=np.uint32) + 7)
        small = [np.zeros(64, np.uint8)] * args.match_keys
        puts = store.batch_put(ns, keys, small)
        if not all(p.stored for p in puts):
            raise RuntimeError(f"{name}: match keys refused: {puts[0].reason}")
        py_p99, cpp_p99 = [], []
        n = max(1, args.match_iterations // args.rounds)
        for _ in range(args.rounds):
            cpp_p99.append(p99(store._cpp_match_latencies(ns, keys, n)))
            lat = []
            for _ in range(n):
                t0 = time.perf_counter()
                m = store.match_prefix(ns, keys)
                lat.append(time.perf_counter() - t0)
            if m.blocks != args.match_keys:
                raise RuntimeError(f"{name}: match found {m.blocks} of {args.match_keys}")
            py_p99.append(p99(lat))
        out[f"{name}_match_python_p99_ms"] = min(py_p99) * 1e3
        out[f"{name}_match_cpp_p99_ms"] = min(cpp_p99) * 1e3
        out[f"{name}_match_p99_ratio"] = min(py_p99) / min(cpp_p99)
        log(f"{name}: match_prefix of {args.match_keys} keys p99 {min(py_p99) * 1e3:.3f} ms "
            f"from Python, {min(cpp_p99) * 1e3:.3f} ms from C++: "
            f"{out[f'{name}_match_p99_ratio']:.3f}x")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m kvtier.bench",
        description="The kvtier Python package against the C++ client, measured in the same "
                    "run: batch_get_into of 1.5 MiB blocks into numpy buffers (in-process, TCP, "
                    "direct channel; bar >= 0.9x) and match_prefix of 8,192 keys (p99, bar <= "
                    "1.2x).")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="time per side per store for the get measurement (default 6)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--blocks", type=int, default=32, help="blocks per batch (default 32)")
    ap.add_argument("--object-bytes", type=int, default=1536 * 1024,
                    help="bytes per block (default 1.5 MiB)")
    ap.add_argument("--match-keys", type=int, default=8192, help="keys per match (default 8192)")
    ap.add_argument("--match-iterations", type=int, default=1500,
                    help="match calls per side (default 1500)")
    ap.add_argument("--kvtier-bin", help="the kvtier binary that serves the store "
                                         "(default: $KVTIER_BIN, then PATH)")
    ap.add_argument("--no-service", action="store_true",
                    help="in-process only (no store service started)")
    args = ap.parse_args(argv)
    ram = args.blocks * args.object_bytes + (64 << 20)
    small_ram = args.match_keys * 4096 + (16 << 20)

    result = {"python": sys.executable, "object_bytes": args.object_bytes, "blocks": args.blocks,
              "get_bar_ratio": GET_BAR, "match_bar_ratio": MATCH_BAR}
    log(f"in-process store, {args.blocks} x {args.object_bytes} B per batch")
    result.update(measure_get("inprocess", f"mem://?ram={ram}", args))
    result.update(measure_match("inprocess", f"mem://?ram={small_ram}&max_object=4KiB", args))
    if not args.no_service:
        kvtier_bin = find_kvtier_bin(args.kvtier_bin)
        if kvtier_bin is None:
            ap.error("no kvtier binary to serve the store (give --kvtier-bin, or --no-service)")
        services = []
        try:
            services.append(StoreService(kvtier_bin, ram))
            uri = f"kvtier://127.0.0.1:{services[0].port}"
            log(f"store service on 127.0.0.1:{services[0].port}")
            result.update(measure_get("tcp", uri + "?shared_memory=0", args))
            result.update(measure_get("direct", uri, args))
            # Objects of 4 KiB, so that a chain of --match-keys fits in RAM.
            services.append(StoreService(kvtier_bin, small_ram, "4KiB"))
            uri = f"kvtier://127.0.0.1:{services[1].port}"
            result.update(measure_match("direct", uri, args))
            result.update(measure_match("tcp", uri + "?shared_memory=0", args))
        finally:
            for s in services:
                s.close()
    met = all(v >= GET_BAR for k, v in result.items() if k.endswith("_get_ratio")) and all(
        v <= MATCH_BAR for k, v in result.items() if k.endswith("_match_p99_ratio"))
    result["bars_met"] = met
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for k in sorted(result):
            print(f"{k:40s} {result[k]}")
    return 0
