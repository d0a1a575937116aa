"""The proof: KV loaded from kvtier gives the tokens recomputation gives.

``python3 -m kvtier.engine.prove --json`` runs multi-turn agent-like sessions
(a prompt that grows by a recorded answer and a tool output every turn)
through the real transformer twice, with the kvtier connector off
(everything recomputed) and on, against each store:

  ram      the in-process RAM tier (mem://)
  disk     a RAM tier too small for the sessions over a disk tier on an
           O_DIRECT volume file (file://): most blocks return from disk
  tcp      a store service over TCP (kvtier://, shared memory off)
  direct   the same-host direct channel (kvtier://)
  cluster  a two-node cluster (cluster://)

and the cases that must end in a miss, recomputation and the same tokens:

  corrupt_on_disk     a byte of a stored block flipped on the volume
  foreign_namespace   the session's keys first put by another model's namespace
  changed_block_size  the same model with 32-token blocks over a store
                      filled with 16-token blocks
  changed_dtype       the model's namespace says bfloat16 over a store filled
                      under float32 (nothing may match)
  store_killed        the store service SIGKILLed in the middle of a session

Per case: tokens_identical, max_abs_logit_diff (over every generated
token's logits), loaded_token_share (prompt tokens loaded instead of
computed). The exit status is 1 when any case's tokens differ or its logits
differ by more than the tolerance (1e-5 for float32; docs/real-engine.md).
"""

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time

import torch

import kvtier
from kvtier._service import StoreService, find_kvtier_bin

from .connector import KV_LAYOUT, model_namespace
from .engine import Engine
from .model import ModelConfig, Transformer, kv_bytes_per_token

# float32: absolute. bfloat16: 4 units in the last place of the largest
# reference logit (bf16 keeps 8 significant bits; rounding of K, V and the
# activations in another chunk of the prefill moves a logit by an ulp or two).
TOLERANCE = {"float32": 1e-5, "bfloat16": 4}


def tolerance(dtype, reference):
    if dtype == "float32":
        return TOLERANCE["float32"]
    peak = max(float(g.logits.abs().max()) for g in reference)
    return TOLERANCE["bfloat16"] * 2.0 ** (math.floor(math.log2(max(peak, 1e-30))) - 7)
POSITIVE = ["ram", "disk", "tcp", "direct", "cluster"]
NEGATIVE = ["corrupt_on_disk", "foreign_namespace", "changed_block_size", "changed_dtype",
            "store_killed"]


def log(msg):
    print(f"kvtier prove: {msg}", file=sys.stderr, flush=True)


def make_sessions(args, vocab):
    """Each session: a list of prompts, each the previous one plus a recorded
    answer and a tool output (as the study replays recorded answers)."""
    sessions = []
    for s in range(args.sessions):
        rng = random.Random(1000 + s)
        prompt = [rng.randrange(vocab) for _ in range(args.first_tokens)]
        turns = []
        for _ in range(args.turns):
            answer = [rng.randrange(vocab) for _ in range(rng.randrange(20, 80))]
            tool = [rng.randrange(vocab) for _ in range(rng.randrange(args.tool_min, args.tool_max))]
            prompt = prompt + answer + tool
            turns.append(list(prompt))
        sessions.append(turns)
    return sessions


def run_sessions(engine, sessions, new_tokens, between_turns=None, reference=None, order=None):
    """Every turn of every session; with `reference` (the recomputed run), decoding is
    teacher-forced with the reference's tokens so logits compare step by step."""
    out = []
    i = 0
    for s, turns in enumerate(sessions):
        for t, prompt in enumerate(turns):
            if between_turns is not None:
                between_turns(s, t)
            forced = None
            if reference is not None:
                forced = reference[order[i] if order else i].tokens
            out.append(engine.generate(prompt, new_tokens, forced))
            i += 1
    return out


def near_tie(logits_row, diff):
    """Whether the reference's top two logits are closer than the numeric
    noise of the comparison: a greedy choice that rounding may flip."""
    top = torch.topk(logits_row, 2).values
    return float(top[0] - top[1]) <= 2 * diff


def compare(reference, generated, dtype):
    diff = max(float((a.logits - b.logits).abs().max()) for a, b in zip(reference, generated))
    tol = tolerance(dtype, reference)
    identical = True
    near_tie_flips = 0
    for a, b in zip(reference, generated):
        for step, (x, y) in enumerate(zip(a.tokens, b.tokens)):
            if x != y:
                if dtype == "bfloat16" and near_tie(a.logits[step], tol):
                    near_tie_flips += 1
                else:
                    identical = False
    prompt = sum(g.prompt_tokens for g in generated)
    loaded = sum(g.loaded_tokens for g in generated)
    return {"tokens_identical": identical, "max_abs_logit_diff": diff,
            "loaded_token_share": loaded / prompt if prompt else 0.0,
            "within_tolerance": identical and diff <= tol,
            "tolerance": tol,
            "near_tie_flips": near_tie_flips,
            "requests": len(generated), "prompt_tokens": prompt, "loaded_tokens": loaded,
            "load_errors": sum(g.load_errors for g in generated)}


class Prover:
    def __init__(self, args):
        self.args = args
        self.cfg = ModelConfig(layers=args.layers, hidden=args.hidden, heads=args.heads,
                               kv_heads=args.kv_heads, head_dim=args.head_dim, ffn=args.ffn,
                               dtype=args.dtype, seed=args.seed)
        self.model = Transformer(self.cfg)
        self.sessions = make_sessions(args, self.cfg.vocab)
        self.obj_bytes = kv_bytes_per_token(self.cfg) * 16
        max_prompt = max(len(t[-1]) for t in [s for s in self.sessions])
        self.num_blocks = (max_prompt + args.new_tokens) // 16 + 8
        self.dir = tempfile.mkdtemp(prefix="kvtier-prove-", dir=args.dir)
        self.services = []
        self.bin = find_kvtier_bin(args.kvtier_bin)
        self._references = {}

    def engine(self, store, block_tokens=16, namespace=None, model=None):
        m = model or self.model
        blocks = (max(len(t[-1]) for t in self.sessions) + self.args.new_tokens) // block_tokens + 8
        return Engine(m, block_tokens=block_tokens, num_blocks=blocks, store=store,
                      namespace=namespace, chunk_tokens=self.args.chunk_tokens)

    def reference(self, block_tokens=16):
        if block_tokens not in self._references:
            t0 = time.perf_counter()
            self._references[block_tokens] = run_sessions(
                self.engine(None, block_tokens), self.sessions, self.args.new_tokens)
            log(f"recomputation ({block_tokens}-token blocks): {time.perf_counter() - t0:.1f} s")
        return self._references[block_tokens]

    def uri_for(self, name):
        # Room for 32-token blocks too (the changed_block_size case).
        mo = f"max_object={2 * self.obj_bytes}"
        if name == "ram":
            return f"mem://?ram=256MiB&{mo}"
        if name in ("disk", "corrupt_on_disk"):
            vol = os.path.join(self.dir, f"{name}.vol")
            ram = "0" if name == "corrupt_on_disk" else str(4 * self.obj_bytes)
            return f"file://{vol}?ram={ram}&disk=256MiB&{mo}"
        if self.bin is None:
            raise RuntimeError("no kvtier binary for the store service (--kvtier-bin or $KVTIER_BIN)")
        svc = StoreService(self.bin, "256MiB", str(2 * self.obj_bytes),
                           folder=tempfile.mkdtemp(dir=self.dir))
        self.services.append(svc)
        if name in ("tcp", "store_killed"):
            return f"kvtier://{svc.address}?shared_memory=0&timeout_ms=500", svc
        if name == "direct":
            return f"kvtier://{svc.address}", svc
        second = StoreService(self.bin, "256MiB", str(2 * self.obj_bytes),
                              folder=tempfile.mkdtemp(dir=self.dir))
        self.services.append(second)
        return f"cluster://{svc.address},{second.address}", svc

    def positive(self, name):
        uri = self.uri_for(name)
        uri = uri[0] if isinstance(uri, tuple) else uri
        with kvtier.open(uri) as store:
            e = self.engine(store)
            gen = run_sessions(e, self.sessions, self.args.new_tokens, reference=self.reference())
            r = compare(self.reference(), gen, self.cfg.dtype)
            if name == "disk":
                st = store.stats()
                r["disk_hits"] = st["hits_disk"]
            r["store_misses"] = store.stats()["misses"]
        return r

    def corrupt_on_disk(self):
        uri = self.uri_for("corrupt_on_disk")
        vol = uri[len("file://"):uri.index("?")]
        turns, half = self.args.turns, self.args.turns // 2
        ref = self.reference()
        # Order of the run: every session's first half, then the second halves.
        order = [s * turns + t for s in range(len(self.sessions)) for t in range(half)]
        order += [s * turns + t for s in range(len(self.sessions)) for t in range(half, turns)]
        ordered_ref = [ref[i] for i in order]
        first = [s[:half] for s in self.sessions]
        rest = [s[half:] for s in self.sessions]
        n_first = sum(len(s) for s in first)
        with kvtier.open(uri) as store:
            gen = run_sessions(self.engine(store), first, self.args.new_tokens,
                               reference=ordered_ref[:n_first])
            # Read one stored block back, to find its bytes on the volume.
            ns = model_namespace(self.model, 16)
            key = ns.block_keys(self.sessions[0][0])[3:4]
            obj = bytearray(self.obj_bytes)
            assert store.batch_get_into(ns, key, [obj])[0].hit
        raw = open(vol, "rb").read()
        at = raw.find(bytes(obj[:4096]))
        if at < 0:
            raise RuntimeError("the stored block was not found on the volume")
        with open(vol, "r+b") as f:
            f.seek(at + 123)
            f.write(bytes([raw[at + 123] ^ 0x5A]))
            os.fsync(f.fileno())
        with kvtier.open(uri) as store:
            gen += run_sessions(self.engine(store), rest, self.args.new_tokens,
                                reference=ordered_ref[n_first:])
            corrupt = store.stats()["misses"].get("corrupt", 0)
        r = compare(ordered_ref, gen, self.cfg.dtype)
        r["corrupt_misses"] = corrupt
        r["expected_miss_seen"] = corrupt >= 1 and r["load_errors"] >= 1
        return r

    def foreign_namespace(self):
        uri = self.uri_for("ram")
        other = Transformer(ModelConfig(**{**self.cfg.__dict__, "seed": self.cfg.seed + 1,
                                           "name": "another-model"}))
        other_ns = model_namespace(other, 16)
        ns = model_namespace(self.model, 16)
        with kvtier.open(uri) as store:
            # Another model's namespace puts garbage under *this* model's keys.
            keys = ns.block_keys(self.sessions[0][-1])
            junk = [bytes([7]) * self.obj_bytes] * len(keys)
            assert all(store.batch_put(other_ns, keys, junk))
            e = self.engine(store)
            gen = run_sessions(e, self.sessions, self.args.new_tokens, reference=self.reference())
            r = compare(self.reference(), gen, self.cfg.dtype)
            r["foreign_misses"] = store.stats()["misses"].get("foreign_namespace", 0)
            r["saves_refused"] = e.worker.stats["blocks_save_refused"]
        # Session 0, whose keys were taken, loads nothing and saves nothing.
        r["expected_miss_seen"] = all(g.loaded_tokens == 0 for g in gen[:self.args.turns]) \
            and r["saves_refused"] > 0
        return r

    def changed_block_size(self):
        with kvtier.open(self.uri_for("ram")) as store:
            run_sessions(self.engine(store, 16), self.sessions, self.args.new_tokens)
            gen = run_sessions(self.engine(store, 32), self.sessions, self.args.new_tokens,
                               reference=self.reference(32))
        first_turns = [g for i, g in enumerate(gen) if i % self.args.turns == 0]
        r = compare(self.reference(32), gen, self.cfg.dtype)
        # The first turn of each session finds nothing: 16-token blocks never match.
        r["expected_miss_seen"] = all(g.loaded_tokens == 0 for g in first_turns)
        return r

    def changed_dtype(self):
        ns16 = model_namespace(self.model, 16)
        other = "float32" if self.cfg.dtype == "bfloat16" else "bfloat16"
        as_bf16 = kvtier.Namespace(ns16.model, ns16.revision, ns16.tokenizer, other,
                                   KV_LAYOUT, block_tokens=16)
        with kvtier.open(self.uri_for("ram")) as store:
            run_sessions(self.engine(store), self.sessions, self.args.new_tokens)
            e = self.engine(store, namespace=as_bf16)
            gen = run_sessions(e, self.sessions, self.args.new_tokens, reference=self.reference())
        first_turns = [g for i, g in enumerate(gen) if i % self.args.turns == 0]
        r = compare(self.reference(), gen, self.cfg.dtype)
        r["expected_miss_seen"] = all(g.loaded_tokens == 0 for g in first_turns)
        return r

    def store_killed(self):
        uri, svc = self.uri_for("store_killed")
        kill_at = self.args.turns // 2

        def maybe_kill(s, t):
            if s == 0 and t == kill_at:
                svc.kill9()

        with kvtier.open(uri) as store:
            e = self.engine(store)
            gen = run_sessions(e, self.sessions, self.args.new_tokens, maybe_kill,
                               reference=self.reference())
            r = compare(self.reference(), gen, self.cfg.dtype)
        after = gen[kill_at:]
        r["expected_miss_seen"] = all(g.loaded_tokens == 0 for g in after)
        return r

    def close(self):
        for s in self.services:
            s.close()


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m kvtier.engine.prove",
        description="Proves with a real PyTorch transformer that KV loaded from kvtier gives the "
                    "same tokens (and logits within tolerance) as recomputation, for every store "
                    "kind and for every way a block can go bad.")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--cases", default=",".join(POSITIVE + NEGATIVE),
                    help="comma-separated cases (default: all)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=344)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--first-tokens", type=int, default=1500,
                    help="tokens of a session's first prompt (default 1500)")
    ap.add_argument("--tool-min", type=int, default=150)
    ap.add_argument("--tool-max", type=int, default=400)
    ap.add_argument("--new-tokens", type=int, default=4, help="greedy tokens per turn")
    ap.add_argument("--chunk-tokens", type=int, default=512, help="prefill chunk")
    ap.add_argument("--kvtier-bin", help="kvtier binary for the store service cases")
    ap.add_argument("--dir", help="folder for volumes (must take O_DIRECT; default: $TMPDIR)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in POSITIVE + NEGATIVE]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {POSITIVE + NEGATIVE}")

    p = Prover(args)
    longest = max(len(s[-1]) for s in p.sessions)
    log(f"model {p.cfg.layers} layers x {p.cfg.hidden}, {p.cfg.dtype}; {args.sessions} sessions "
        f"x {args.turns} turns, prompts up to {longest} tokens; block objects of {p.obj_bytes} B")
    result = {"model": json.loads(p.cfg.to_json()), "sessions": args.sessions,
              "turns": args.turns, "longest_prompt_tokens": longest,
              "cases": {}}
    ok = True
    try:
        p.reference()
        for c in cases:
            t0 = time.perf_counter()
            r = p.positive(c) if c in POSITIVE else getattr(p, c)()
            r["seconds"] = round(time.perf_counter() - t0, 2)
            good = r["within_tolerance"] and r.get("expected_miss_seen", True)
            if c in POSITIVE:
                good = good and r["loaded_token_share"] > 0
            r["ok"] = good
            ok = ok and good
            result["cases"][c] = r
            log(f"{c:20s} tokens identical {r['tokens_identical']}, max |logit diff| "
                f"{r['max_abs_logit_diff']:.3g}, loaded share {r['loaded_token_share']:.3f}"
                f"{'' if good else '  <-- FAILED'}")
    finally:
        p.close()
    result["all_ok"] = ok
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print("all cases identical" if ok else "SOME CASES FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
