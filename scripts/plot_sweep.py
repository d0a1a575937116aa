#!/usr/bin/env python3
"""Plots of `kvtier sim sweep --report DIR`: for each session count, the share
of prefill saved against the RAM tier's size, one line per disk tier size
(the first prefill-replica count, store-node count and link of the sweep),
and the same for throughput relative to recomputation.

Usage: plot_sweep.py RESULTS_JSON OUT_DIR
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def first_slice(points):
    """Points of the first replica count, node count and link."""
    if not points:
        return []
    r0 = points[0]["prefill_replicas"]
    n0 = points[0]["store_nodes"]
    links = [p["link_gbps"] for p in points if p["disk_tib"] > 0]
    l0 = links[0] if links else 0
    return [p for p in points if p["prefill_replicas"] == r0 and p["store_nodes"] == n0
            and (p["disk_tib"] == 0 or p["link_gbps"] == l0)]


def plot(points, key, ylabel, scale, out):
    sessions = sorted({p["sessions"] for p in points})
    fig, axes = plt.subplots(1, len(sessions), figsize=(4.5 * len(sessions), 3.6), squeeze=False)
    for ax, s in zip(axes[0], sessions):
        for disk in sorted({p["disk_tib"] for p in points}):
            row = sorted((p for p in points if p["sessions"] == s and p["disk_tib"] == disk),
                         key=lambda p: p["ram_gib"])
            ax.plot([p["ram_gib"] for p in row], [scale * p[key] for p in row], marker="o",
                    label="no disk tier" if disk == 0 else f"disk {disk:g} TiB")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("RAM tier, GiB")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{s} sessions")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        results = json.load(f)
    points = first_slice(results.get("points", []))
    out_dir = sys.argv[2]
    plot(points, "prefill_saved_ratio", "prefill saved, %", 100,
         os.path.join(out_dir, "sizing_prefill_saved.png"))
    plot(points, "throughput_vs_recompute_ratio", "throughput x recompute", 1,
         os.path.join(out_dir, "sizing_throughput.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
