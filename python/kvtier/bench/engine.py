"""Real compute: agent sessions through the real transformer, wall-clock TTFT.

``python3 -m kvtier.bench.engine`` (also ``kvtier bench engine``) replays
agent sessions through kvtier's PyTorch engine under four configurations:

  A  recompute: every prompt computed in full
  B  the engine's own prefix cache (a block pool of --pool-tokens, as a GPU's)
  C  B plus a shared RAM tier: a `kvtier store service` (RAM only)
  D  B plus a RAM tier too small for the sessions over a disk tier on an
     O_DIRECT volume file (the same service with a volume)

and reports wall-clock TTFT p50/p90/p99, throughput, the share of TTFT spent
waiting for kvtier, and the store's load rate against the engine's measured
recompute rate (KV bytes per second of prefill in A) as a ratio. Sessions
are interleaved turn by turn, so other sessions' work passes between a
session's turns (its reuse distance).

Workloads: the built-in agentic sessions (a system prompt shared by every
session, then the session's task; the prompt grows by an answer and a tool
output every turn), or ``--trace agent:DIR``: the
kv-cache-tester sessions, whose 64-token hash-id blocks become
--trace-block-tokens token ids each (4 by default: prompts at 1/16 scale),
drawn from a generator seeded by (session, hash id), so prompts share
prefixes exactly as in the trace (cut at --trace-max-tokens).
"""

import argparse
import glob
import json
import os
import random
import sys
import tempfile
import time

import torch

import kvtier
from kvtier._service import StoreService, find_kvtier_bin
from kvtier.engine import Engine, ModelConfig, Transformer, kv_bytes_per_token

CASES = {"A": "recompute", "B": "engine prefix cache", "C": "shared RAM (store service)",
         "D": "RAM + disk tier (store service)"}
TTFT_BAR = 0.25  # D's TTFT p50 over A's


def log(msg):
    print(f"kvtier bench engine: {msg}", file=sys.stderr, flush=True)


def synthetic_sessions(args, vocab):
    """Every session starts with the same system prompt (--shared-tokens, as
    agents share their instructions and tool definitions), then its own task."""
    shared_rng = random.Random(499)
    shared = [shared_rng.randrange(vocab) for _ in range(min(args.shared_tokens,
                                                             args.first_tokens))]
    sessions = []
    for s in range(args.sessions):
        rng = random.Random(500 + s)
        prompt = shared + [rng.randrange(vocab) for _ in range(args.first_tokens - len(shared))]
        turns = []
        for _ in range(args.turns):
            prompt = prompt + [rng.randrange(vocab) for _ in range(rng.randrange(40, 120))]
            prompt = prompt + [rng.randrange(vocab)
                               for _ in range(rng.randrange(args.tool_min, args.tool_max))]
            turns.append(list(prompt))
        sessions.append(turns)
    return sessions


def trace_sessions(spec, args, vocab):
    """kv-cache-tester sessions: each hash id stands for 64 tokens, generated
    from (session, id), so equal id chains give equal token prefixes."""
    path = spec.split(":", 1)[1]
    files = sorted(glob.glob(os.path.join(path, "*.json"))) if os.path.isdir(path) else [path]
    sessions, skipped = [], 0
    for f in files[: args.trace_sessions]:
        doc = json.load(open(f))
        bs = int(doc["block_size"])
        turns = []
        for r in doc.get("requests", []):
            ids = r.get("hash_ids")
            if r.get("type") not in ("n", "s") or not ids or "in" not in r:
                skipped += 1
                continue
            # Each trace block (of `bs` tokens) becomes --trace-block-tokens
            # tokens: the whole chain at a fixed scale, shared exactly as in
            # the trace, instead of only its first few thousand tokens.
            per = args.trace_block_tokens
            tokens = []
            for h in ids[: max(1, args.trace_max_tokens // per)]:
                rng = random.Random(f"{doc.get('id', f)}:{h}")
                tokens.extend(rng.randrange(vocab) for _ in range(per))
            turns.append(tokens)
            if len(turns) >= args.turns:
                break
        if turns:
            sessions.append(turns)
    log(f"trace {path}: {len(sessions)} sessions, {sum(map(len, sessions))} requests, each "
        f"trace block of {bs} tokens as {args.trace_block_tokens} "
        f"({skipped} records skipped: sub-agent markers or missing fields)")
    return sessions


def percentile(vals, q):
    v = sorted(vals)
    if not v:
        return 0.0
    rank = q * (len(v) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def interleave(sessions):
    """Turn 1 of every session, then turn 2 of every session, ..."""
    order = []
    for t in range(max(map(len, sessions))):
        for s, turns in enumerate(sessions):
            if t < len(turns):
                order.append((s, t))
    return order


def run_case(case, model, sessions, args, store=None):
    cfg = model.cfg
    longest = max(len(t) for s in sessions for t in s)
    pool = max(args.pool_tokens, longest + args.new_tokens + 64) // 16 + 1
    engine = Engine(model, num_blocks=pool, store=store, prefix_cache=case != "A",
                    chunk_tokens=args.chunk_tokens)
    ttft, gens = [], []
    t0 = time.perf_counter()
    order = interleave(sessions)
    for i, (s, t) in enumerate(order):
        g = engine.generate(sessions[s][t], args.new_tokens)
        ttft.append(g.ttft_s)
        gens.append(g)
        if (i + 1) % max(1, len(order) // 4) == 0:
            log(f"{case}: {i + 1}/{len(order)} requests, TTFT so far p50 "
                f"{percentile(ttft, 0.5):.2f} s")
    wall = time.perf_counter() - t0
    prompt = sum(g.prompt_tokens for g in gens)
    r = {"name": CASES[case], "available": True, "requests": len(gens),
         "ttft_samples_s": ttft, "ttft_p50_s": percentile(ttft, 0.5),
         "ttft_p90_s": percentile(ttft, 0.9), "ttft_p99_s": percentile(ttft, 0.99),
         "throughput_rps": len(gens) / wall, "wall_s": wall,
         "prompt_tokens": prompt,
         "computed_tokens": sum(g.computed_tokens for g in gens),
         "local_hit_tokens": sum(g.local_hit_tokens for g in gens),
         "loaded_tokens": sum(g.loaded_tokens for g in gens),
         "load_errors": sum(g.load_errors for g in gens),
         "load_wait_share_of_ttft": sum(g.load_wait_s for g in gens) / sum(ttft)}
    r["reuse_share"] = (r["local_hit_tokens"] + r["loaded_tokens"]) / prompt
    # The same over the turns after each session's first (whose prompts are new).
    warm = [g for (s, t), g in zip(order, gens) if t > 0]
    warm_prompt = sum(g.prompt_tokens for g in warm)
    r["warm_reuse_share"] = (sum(g.local_hit_tokens + g.loaded_tokens for g in warm) /
                             warm_prompt if warm_prompt else 0.0)
    if engine.worker is not None:
        st = engine.worker.stats
        loaded_bytes = st["blocks_loaded"] * kv_bytes_per_token(cfg) * 16
        r["store_load_bytes"] = loaded_bytes
        r["store_load_seconds"] = st["load_seconds"]
        r["store_load_bytes_per_s"] = loaded_bytes / st["load_seconds"] if st["load_seconds"] else 0
        r["store_stats"] = {k: v for k, v in store.stats().items() if k in (
            "hits_ram", "hits_disk", "misses", "demotions")}
    # Prefill time per computed token, for the recompute rate.
    r["prefill_seconds"] = sum(g.ttft_s for g in gens)
    return r, [g.tokens for g in gens]


def write_report(result, folder):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    cases = result["protocols"]["agent"]
    lines = ["# kvtier bench engine", "",
             f"Model: {result['model']['layers']} layers x {result['model']['hidden']}, "
             f"{result['model']['dtype']}; {result['requests']} requests, prompts up to "
             f"{result['longest_prompt_tokens']} tokens; wall-clock TTFT on this CPU.", "",
             "| case | TTFT p50 s | p90 s | p99 s | req/s | vs A | reuse (warm turns) | "
             "load wait / TTFT | load rate / recompute rate |",
             "|---|---|---|---|---|---|---|---|---|"]
    for k, v in sorted(cases.items()):
        lines.append(
            f"| {k} {v['name']} | {v['ttft_p50_s']:.3f} | {v['ttft_p90_s']:.3f} | "
            f"{v['ttft_p99_s']:.3f} | {v['throughput_rps']:.3f} | "
            f"{v['throughput_vs_recompute_ratio']:.2f}x | {v['reuse_share']:.2f} "
            f"({v['warm_reuse_share']:.2f}) | "
            f"{v['load_wait_share_of_ttft']:.3f} | {v.get('load_vs_recompute_rate_ratio', 0):.1f} |")
    lines += ["", f"D's TTFT p50 / A's: {result['d_vs_a_ttft_p50_ratio']:.3f} "
                  f"(bar <= {TTFT_BAR}); outputs identical across cases: "
                  f"{result['outputs_identical']}", ""]
    with open(os.path.join(folder, "report.md"), "w") as f:
        f.write("\n".join(lines))
    try:
        from kvtier.bench import plots
        plots.plot_throughput("agent", cases, folder)
        plots.plot_ttft("agent", cases, folder, "wall clock")
    except ImportError as e:  # matplotlib is optional
        log(f"no plots ({e})")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m kvtier.bench.engine",
        description="Agent sessions through kvtier's real PyTorch engine on this CPU: A "
                    "recompute, B the engine's prefix cache, C shared RAM (store service), D RAM "
                    "+ disk tier. Wall-clock TTFT p50/p90/p99, throughput, share of TTFT spent "
                    "loading, load rate against recompute rate; bar: D's TTFT p50 <= 0.25x A's.")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--report", help="write report.md, results.json and PNG plots here")
    ap.add_argument("--cases", default="A,B,C,D")
    ap.add_argument("--trace", help="agent:DIR (kv-cache-tester sessions) instead of the built-in")
    ap.add_argument("--trace-sessions", type=int, default=3)
    ap.add_argument("--trace-max-tokens", type=int, default=6144,
                    help="prompts are cut to this many (scaled) tokens (default 6144)")
    ap.add_argument("--trace-block-tokens", type=int, default=4,
                    help="tokens per trace block of 64 (default 4: prompts at 1/16 scale)")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--first-tokens", type=int, default=4096)
    ap.add_argument("--shared-tokens", type=int, default=3072,
                    help="system prompt shared by every session (default 3072)")
    ap.add_argument("--tool-min", type=int, default=100)
    ap.add_argument("--tool-max", type=int, default=300)
    ap.add_argument("--new-tokens", type=int, default=2)
    ap.add_argument("--pool-tokens", type=int, default=6144,
                    help="the engine's own KV pool (B's prefix cache), in tokens")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=688)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--chunk-tokens", type=int, default=512)
    ap.add_argument("--kvtier-bin", help="kvtier binary for the store service (C, D)")
    ap.add_argument("--dir", help="folder for D's volume (must take O_DIRECT)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    cases = [c for c in args.cases.split(",") if c]
    if any(c not in CASES for c in cases) or "A" not in cases:
        ap.error(f"cases are among {list(CASES)} and include A")

    cfg = ModelConfig(layers=args.layers, hidden=args.hidden, heads=args.heads,
                      kv_heads=args.kv_heads, head_dim=args.head_dim, ffn=args.ffn,
                      dtype=args.dtype, name="kvtier-bench")
    model = Transformer(cfg)
    sessions = (trace_sessions(args.trace, args, cfg.vocab) if args.trace
                else synthetic_sessions(args, cfg.vocab))
    longest = max(len(t) for s in sessions for t in s)
    obj = kv_bytes_per_token(cfg) * 16
    log(f"model {cfg.layers} layers x {cfg.hidden} ({cfg.dtype}), KV {kv_bytes_per_token(cfg)} "
        f"B/token; {len(sessions)} sessions, {sum(map(len, sessions))} requests, prompts up to "
        f"{longest} tokens")
    result = {"model": json.loads(cfg.to_json()), "clock": "wall clock",
              "requests": sum(map(len, sessions)), "longest_prompt_tokens": longest,
              "protocols": {"agent": {}}}
    outputs = {}
    services = []
    work = tempfile.mkdtemp(prefix="kvtier-bench-engine-", dir=args.dir)
    try:
        for c in cases:
            store = None
            if c in ("C", "D"):
                kb = find_kvtier_bin(args.kvtier_bin)
                if kb is None:
                    ap.error("cases C and D need the kvtier binary (--kvtier-bin or $KVTIER_BIN)")
                if c == "C":
                    svc = StoreService(kb, "2GiB", str(obj), folder=tempfile.mkdtemp(dir=work))
                else:
                    # RAM for a few hundred blocks: most of the sessions live on disk.
                    svc = StoreService(kb, str(256 * obj), str(obj),
                                       folder=tempfile.mkdtemp(dir=work), volume_bytes="1GiB")
                services.append(svc)
                store = kvtier.open(f"kvtier://{svc.address}")
            log(f"case {c}: {CASES[c]}")
            try:
                r, toks = run_case(c, model, sessions, args, store)
            finally:
                if store is not None:
                    store.close()
            result["protocols"]["agent"][c] = r
            outputs[c] = toks
    finally:
        for s in services:
            s.close()
    cs = result["protocols"]["agent"]
    a = cs["A"]
    recompute_rate = kv_bytes_per_token(cfg) * a["computed_tokens"] / a["prefill_seconds"]
    result["recompute_kv_bytes_per_s"] = recompute_rate
    for k, v in cs.items():
        v["throughput_vs_recompute_ratio"] = v["throughput_rps"] / a["throughput_rps"]
        v["ttft_p50_vs_recompute_ratio"] = v["ttft_p50_s"] / a["ttft_p50_s"]
        if v.get("store_load_bytes_per_s"):
            v["load_vs_recompute_rate_ratio"] = v["store_load_bytes_per_s"] / recompute_rate
    result["outputs_identical"] = all(o == outputs["A"] for o in outputs.values())
    if "D" in cs:
        result["d_vs_a_ttft_p50_ratio"] = cs["D"]["ttft_p50_s"] / a["ttft_p50_s"]
        result["bar_met"] = result["d_vs_a_ttft_p50_ratio"] <= TTFT_BAR
    else:
        result["d_vs_a_ttft_p50_ratio"] = float("nan")
    for k, v in sorted(cs.items()):
        log(f"{k} {v['name']:32s} TTFT p50 {v['ttft_p50_s']:.3f} s ({v['ttft_p50_vs_recompute_ratio']:.3f}x A), "
            f"{v['throughput_rps']:.3f} req/s, reuse {v['reuse_share']:.2f}, load wait "
            f"{v['load_wait_share_of_ttft']:.3f} of TTFT")
    if args.report:
        write_report(result, args.report)
        log(f"report in {args.report}")
    if args.json:
        print(json.dumps({k: v for k, v in result.items()}, indent=2, sort_keys=True))
    return 0 if result["outputs_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
