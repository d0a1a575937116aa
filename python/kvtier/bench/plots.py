#!/usr/bin/env python3
"""Plots of `kvtier bench study --report DIR` and `kvtier bench engine --report DIR`
(matplotlib). Imported by the engine benchmark; run as a script by the study
runner through scripts/plot_study.py.

Usage: plot_study.py RESULTS_JSON OUT_DIR

Writes, for every protocol in the results:
  throughput_<protocol>.png  throughput relative to recomputation (case A)
  ttft_<protocol>.png        user TTFT distribution (CDF) with p50/p90/p99 markers
and, when long reuse ran:
  long_reuse_io.png          store-load events vs physical device reads vs RAM eviction churn
"""
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def available_cases(cases):
    return [(k, v) for k, v in sorted(cases.items()) if v.get("available")]


def plot_throughput(proto, cases, out):
    items = available_cases(cases)
    # Case names are long ("RAM + remote NVMe (NVMe/TCP)"): wrapped, so that
    # neighbouring labels never print over each other.
    labels = [k + "\n" + "\n".join(textwrap.wrap(v["name"], 14)) for k, v in items]
    ratios = [v.get("throughput_vs_recompute_ratio", 0) for _, v in items]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar(range(len(items)), ratios, color="#4C72B0")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    for b, r, (_, v) in zip(bars, ratios, items):
        ax.text(b.get_x() + b.get_width() / 2, r, f"{r:.2f}x\n{v['throughput_rps']:.3f} req/s",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("throughput / recompute (A)")
    ax.set_title(f"{proto}: throughput relative to full recomputation")
    ax.set_ylim(0, max(ratios + [1.0]) * 1.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"throughput_{proto}.png"), dpi=120)
    plt.close(fig)


def percentile(sorted_vals, p):
    if not sorted_vals:
        return 0.0
    rank = p / 100 * (len(sorted_vals) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (rank - lo)


def plot_ttft(proto, cases, out, clock="virtual"):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    markers = {50: "o", 90: "s", 99: "^"}
    for k, v in available_cases(cases):
        vals = sorted(v.get("ttft_samples_s", []))
        if not vals:
            continue
        n = len(vals)
        ys = [(i + 1) / n for i in range(n)]
        (line,) = ax.plot(vals, ys, label=f"{k} {v['name']}", linewidth=1.2)
        for p, m in markers.items():
            x = percentile(vals, p)
            ax.plot([x], [p / 100], marker=m, color=line.get_color(), markersize=6)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel(f"user TTFT (s, {clock})")
    ax.set_ylabel("share of requests")
    ax.set_title(f"{proto}: user TTFT distribution (markers: p50 o, p90 s, p99 ^)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"ttft_{proto}.png"), dpi=120)
    plt.close(fig)


def plot_long_reuse_io(cases, out):
    items = [(k, v) for k, v in available_cases(cases) if k != "A" and k != "B"]
    if not items:
        return
    metrics = [
        ("store_load_events", "store-load events", 1),
        ("device_reads", "physical device reads", 1),
        ("ram_eviction_cycles", "RAM eviction cycles", 1),
        ("ram_eviction_bytes", "RAM eviction volume (TiB)", 1 / 2**40),
        ("device_read_bytes", "device read volume (TiB)", 1 / 2**40),
    ]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.6))
    for ax, (key, title, mul) in zip(axes, metrics):
        vals = [v.get(key, 0) * mul for _, v in items]
        ax.bar([k for k, _ in items], vals, color="#55A868")
        ax.set_title(title, fontsize=9)
        for i, val in enumerate(vals):
            ax.text(i, val, f"{val:.3g}", ha="center", va="bottom", fontsize=7)
    fig.suptitle("long reuse: store loads vs device reads vs eviction churn (deployment bytes)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "long_reuse_io.png"), dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        results = json.load(f)
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for proto, cases in results.get("protocols", {}).items():
        plot_throughput(proto, cases, out)
        plot_ttft(proto, cases, out, results.get("clock", "virtual"))
    if "long-reuse" in results.get("protocols", {}):
        plot_long_reuse_io(results["protocols"]["long-reuse"], out)
    print(f"plots written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
