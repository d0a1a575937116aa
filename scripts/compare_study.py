#!/usr/bin/env python3
"""The simulator against the study: every number the study's text states for its
controlled experiments (Part I), beside what `kvtier sim study` gives on the same
protocol and case, and their ratio.

    kvtier sim study --json --load-policy load > sim.json
    scripts/compare_study.py sim.json [--tolerance 0.15] [--min-within N]

The study's numbers are in STATED below, each with the line of the study's text
it comes from (its tables are not in the text: only the prose's numbers are
here). Prints a Markdown table; exits 1 when fewer than --min-within figures
are within the tolerance (a regression check), 2 on bad input.
"""
import argparse
import json
import sys

TIB = 2.0**40
GIB = 2.0**30

# (protocol, case, figure, the study's value, where the study states it)
STATED = [
    ("short-reuse", "B", "throughput / A", 1.36, "L150: +36%"),
    ("short-reuse", "A", "TTFT p50 s", 27.87, "L150"),
    ("short-reuse", "B", "TTFT p50 s", 12.24, "L150"),
    ("short-reuse", "C", "throughput req/s", 1.31, "L152: C, D, E about 1.31"),
    ("short-reuse", "D", "throughput req/s", 1.31, "L152"),
    ("short-reuse", "E", "throughput req/s", 1.31, "L152"),
    ("short-reuse", "D", "device writes TiB", 1.897, "L182"),
    ("short-reuse", "E", "device writes TiB", 1.897, "L182"),
    ("short-reuse", "F", "throughput / E", 1.0, "L154: within 4% of E"),
    ("long-reuse", "B", "throughput / A", 1.036, "L168: +3.6%"),
    ("long-reuse", "C", "throughput / A", 1.098, "L170: +9.8%"),
    ("long-reuse", "C", "TTFT p99 s", 65.0, "L170: near 65"),
    ("long-reuse", "D", "throughput req/s", 0.76, "L172: D, E about 0.76"),
    ("long-reuse", "E", "throughput req/s", 0.76, "L172"),
    ("long-reuse", "D", "TTFT p99 s", 34.0, "L172: about 34"),
    ("long-reuse", "E", "TTFT p99 s", 34.0, "L172"),
    ("long-reuse", "F", "throughput req/s", 0.931, "L174"),
    ("long-reuse", "F", "throughput / A", 1.86, "L174"),
    ("long-reuse", "F", "throughput / E", 1.23, "L174: +23%"),
    ("long-reuse", "F", "TTFT p50 s", 14.99, "L174"),
    ("long-reuse", "F", "TTFT p99 s", 29.01, "L174"),
    ("long-reuse", "C", "RAM eviction TB", 40.97, "L180"),
    ("long-reuse", "D", "RAM eviction TB", 1.7, "L180: D, E about 1.7"),
    ("long-reuse", "E", "RAM eviction TB", 1.7, "L180"),
    ("long-reuse", "D", "device reads TiB", 34.6, "L182: D, E about 34.6"),
    ("long-reuse", "E", "device reads TiB", 34.6, "L182"),
    ("long-reuse", "D", "read rate GiB/s", 3.40, "L182"),
    ("long-reuse", "E", "read rate GiB/s", 3.40, "L182"),
    ("long-reuse", "F", "device reads TiB", 41.53, "L182"),
    ("long-reuse", "F", "read rate GiB/s", 5.01, "L182"),
    ("long-reuse", "A", "TTFT p50 >96K s", 52.62, "L200"),
    ("long-reuse", "F", "TTFT p50 >96K s", 22.10, "L200"),
]


def figure(cases, case, name):
    """The simulator's value of `name` for `case`, or None."""
    r = cases.get(case)
    if not isinstance(r, dict) or not r.get("available", True) or "throughput_rps" not in r:
        return None
    span = r["completed"] / r["throughput_rps"] if r.get("throughput_rps") else 0
    if name == "throughput req/s":
        return r["throughput_rps"]
    if name.startswith("throughput / "):
        base = cases.get(name.split(" / ")[1], {}).get("throughput_rps")
        return r["throughput_rps"] / base if base else None
    if name == "TTFT p50 s":
        return r["ttft_p50_s"]
    if name == "TTFT p99 s":
        return r["ttft_p99_s"]
    if name == "TTFT p50 >96K s":
        return r.get("ttft_by_group", {}).get(">96K", {}).get("p50_s")
    if name == "RAM eviction TB":
        return r["ram_eviction_bytes"] / 1e12
    if name == "device reads TiB":
        return r["device_read_bytes"] / TIB
    if name == "device writes TiB":
        return r["device_write_bytes"] / TIB
    if name == "read rate GiB/s":
        return r["device_read_bytes"] / GIB / span if span else None
    raise ValueError(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sim_json")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--min-within", type=int, default=0)
    a = ap.parse_args()
    try:
        with open(a.sim_json) as f:
            protocols = json.load(f)["protocols"]
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_study: cannot read {a.sim_json}: {e}", file=sys.stderr)
        return 2
    print("| protocol | case | figure | study | simulator | simulator / study | within "
          f"{a.tolerance:.0%} | study's source |")
    print("|---|---|---|---:|---:|---:|---|---|")
    within = compared = 0
    for proto, case, name, stated, source in STATED:
        value = figure(protocols.get(proto, {}), case, name)
        if value is None:
            print(f"| {proto} | {case} | {name} | {stated:g} | not run | - | - | {source} |")
            continue
        ratio = value / stated
        ok = abs(ratio - 1) <= a.tolerance
        within += ok
        compared += 1
        print(f"| {proto} | {case} | {name} | {stated:g} | {value:.3g} | {ratio:.2f} | "
              f"{'yes' if ok else 'no'} | {source} |")
    print(f"\n{within} of {compared} stated figures within {a.tolerance:.0%} "
          f"({len(STATED)} stated)")
    if within < a.min_within:
        print(f"compare_study: {within} within, fewer than --min-within {a.min_within}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
