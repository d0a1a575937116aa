"""The real engine: a PyTorch transformer whose KV goes through kvtier gives
the tokens recomputation gives, the connector is called in vLLM's order, and
the proof's short form passes for every store and every way a block goes bad."""

import json
import os
import random

import pytest
import torch

import kvtier
from kvtier.engine import Engine, ModelConfig, Transformer, model_namespace
from kvtier.engine import prove
from kvtier.engine.connector import KvtierConnector

TINY = ModelConfig(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512)


def prompts(n_first=200, turns=3, seed=0, vocab=512):
    rng = random.Random(seed)
    p = [rng.randrange(vocab) for _ in range(n_first)]
    out = []
    for _ in range(turns):
        p = p + [rng.randrange(vocab) for _ in range(rng.randrange(30, 90))]
        out.append(list(p))
    return out


def test_cached_prefix_gives_the_logits_of_a_full_prefill():
    model = Transformer(TINY)
    p = prompts()[-1]
    full = Engine(model, num_blocks=64).generate(p, 3)
    with kvtier.open("mem://?ram=16MiB&max_object=64KiB") as store:
        e = Engine(model, num_blocks=64, store=store)
        e.generate(p[:160], 1)  # stores the first 10 blocks
        g = e.generate(p, 3)
    assert g.loaded_tokens == 160
    assert g.tokens == full.tokens
    assert float((g.logits - full.logits).abs().max()) <= 1e-5


def test_namespace_follows_weights_dtype_and_block_size():
    a = model_namespace(Transformer(TINY), 16)
    b = model_namespace(Transformer(ModelConfig(**{**TINY.__dict__, "seed": 1})), 16)
    c = model_namespace(Transformer(ModelConfig(**{**TINY.__dict__, "dtype": "bfloat16"})), 16)
    d = model_namespace(Transformer(TINY), 32)
    digests = {str(x.digest) for x in (a, b, c, d)}
    assert len(digests) == 4
    assert a == model_namespace(Transformer(TINY), 16)  # deterministic weights


class Spy(KvtierConnector):
    """Records every hook in the order the engine calls it."""
    calls = []

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        hooks = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                 "request_finished", "register_kv_caches", "start_load_kv",
                 "wait_for_layer_load", "save_kv_layer", "wait_for_save", "get_finished",
                 "get_block_ids_with_load_errors", "bind_connector_metadata")
        if name in hooks:
            def wrapped(*a, **k):
                arg = a[0] if name in ("wait_for_layer_load", "save_kv_layer") else ""
                Spy.calls.append(f"{name}({arg})" if arg else name)
                return attr(*a, **k)
            return wrapped
        return attr


def test_connector_hooks_are_called_in_vllms_order(monkeypatch):
    import kvtier.engine.engine as eng
    monkeypatch.setattr(eng, "KvtierConnector", Spy)
    model = Transformer(TINY)
    p = prompts()
    with kvtier.open("mem://?ram=16MiB&max_object=64KiB") as store:
        e = Engine(model, num_blocks=64, store=store, chunk_tokens=10_000)
        e.generate(p[0], 2)
        Spy.calls.clear()
        e.generate(p[1], 2)
    c = Spy.calls
    assert c[:4] == ["get_num_new_matched_tokens", "update_state_after_alloc",
                     "build_connector_meta", "bind_connector_metadata"]
    assert c[4] == "start_load_kv"
    # Layer i waits for its load before it computes, and saves after it.
    assert c.index("wait_for_layer_load(model.layers.0)") < c.index(
        "save_kv_layer(model.layers.0)") < c.index("wait_for_layer_load(model.layers.1)") < c.index(
        "save_kv_layer(model.layers.1)") < c.index("wait_for_save")
    assert c.index("wait_for_save") < c.index("get_block_ids_with_load_errors") < c.index(
        "request_finished")
    assert c[-1] == "request_finished"


def test_a_block_that_fails_to_load_is_recomputed():
    model = Transformer(TINY)
    p = prompts()[-1]
    full = Engine(model, num_blocks=64).generate(p, 3)
    with kvtier.open("mem://?ram=16MiB&max_object=64KiB") as store:
        e = Engine(model, num_blocks=64, store=store)
        e.generate(p, 1)
        # Block 4 vanishes between match and load: the engine learns it from
        # get_block_ids_with_load_errors and recomputes from there.
        real_match = store.match_prefix
        keys = e.ns.block_keys(p)

        class Racy:
            def __getattr__(self, n):
                return getattr(store, n)

            def match_prefix(self, ns, k):
                m = real_match(ns, k)
                store.remove(ns, keys[4])
                return m

        e.sched.store = Racy()
        g = e.generate(p, 3)
    assert g.load_errors >= 1 and g.loaded_tokens == 4 * 16
    assert g.tokens == full.tokens
    assert float((g.logits - full.logits).abs().max()) <= 1e-5


def short_prove_args(cases, dtype="float32"):
    return ["--json", "--cases", cases, "--dtype", dtype, "--first-tokens", "200",
            "--tool-min", "40", "--tool-max", "90", "--turns", "8", "--sessions", "2",
            "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
            "--head-dim", "16", "--ffn", "128", "--dir", os.environ.get("KVTIER_TEST_TMP", "/tmp")]


def run_prove(capsys, args):
    os.makedirs(os.environ.get("KVTIER_TEST_TMP", "/tmp"), exist_ok=True)
    rc = prove.main(args)
    out = json.loads(capsys.readouterr().out)
    return rc, out


def test_prove_short_form_every_case(capsys):
    rc, out = run_prove(capsys, short_prove_args(",".join(prove.POSITIVE + prove.NEGATIVE)))
    assert rc == 0, json.dumps(out, indent=1)
    assert out["all_ok"]
    for name, case in out["cases"].items():
        assert case["tokens_identical"] is True, name
        assert case["max_abs_logit_diff"] <= 1e-5, name
        if name in prove.POSITIVE:
            assert case["loaded_token_share"] > 0.5, name
    assert out["cases"]["disk"]["disk_hits"] > 0
    assert out["cases"]["corrupt_on_disk"]["corrupt_misses"] >= 1
    assert out["cases"]["foreign_namespace"]["saves_refused"] > 0
    assert out["cases"]["store_killed"]["loaded_token_share"] < out["cases"]["tcp"][
        "loaded_token_share"]


def test_prove_bfloat16_within_its_tolerance(capsys):
    rc, out = run_prove(capsys, short_prove_args("ram,corrupt_on_disk", "bfloat16"))
    assert rc == 0 and out["all_ok"], json.dumps(out, indent=1)
    for case in out["cases"].values():
        assert case["max_abs_logit_diff"] <= case["tolerance"]
