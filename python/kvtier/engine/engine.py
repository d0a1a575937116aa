"""A small serving engine over the real transformer: one request at a time,
chunked prefill over a paged KV cache, greedy decode, an optional local prefix
cache (the engine's own "HBM" cache), and the kvtier connector called in the
order vLLM's scheduler and model runner call it.

Per request (``Engine.generate``):

1. scheduler: local prefix-cache hits give ``num_computed_tokens``;
   ``get_num_new_matched_tokens`` asks kvtier for more; the request's blocks
   are allocated; ``update_state_after_alloc``; the saves are planned;
   ``build_connector_meta``.
2. worker: ``bind_connector_metadata``, ``start_load_kv``; the forward pass
   over the uncached suffix calls ``wait_for_layer_load(layer)`` before each
   layer of the first chunk reads the cache and ``save_kv_layer(layer)`` after
   each layer of the last chunk wrote it; ``wait_for_save``.
3. ``get_block_ids_with_load_errors``: if any, the request is computed again
   from its first failed block (its logits are those of that pass).
4. greedy decode; ``request_finished``.
"""

import collections
import dataclasses
import time

import torch

from .connector import KvtierConnector, Role, model_namespace
from .model import PagedKVCache


@dataclasses.dataclass
class Request:
    request_id: str
    prompt_token_ids: list


@dataclasses.dataclass
class Generation:
    tokens: list
    logits: torch.Tensor  # [new tokens, vocab]: the logits each token was chosen from
    ttft_s: float
    prompt_tokens: int
    local_hit_tokens: int  # served by the engine's own prefix cache
    loaded_tokens: int  # loaded from kvtier
    computed_tokens: int  # prompt tokens computed (recomputed ones included)
    load_errors: int  # blocks that failed to load and were recomputed
    load_wait_s: float  # of the TTFT, time spent waiting for kvtier


class Engine:
    def __init__(self, model, block_tokens=16, num_blocks=1024, store=None, namespace=None,
                 prefix_cache=False, chunk_tokens=1024, save=True, load=True):
        self.model = model
        self.cfg = model.cfg
        self.bt = block_tokens
        self.cache = PagedKVCache(model.cfg, num_blocks, block_tokens)
        self.chunk = chunk_tokens
        self.ns = namespace or model_namespace(model, block_tokens)
        self.prefix_cache = prefix_cache
        self._local = collections.OrderedDict()  # key bytes -> block id (LRU order)
        self._seq = 0
        self.sched = self.worker = None
        if store is not None:
            self.sched = KvtierConnector(Role.SCHEDULER, store, self.ns, model.cfg, block_tokens,
                                         save=save, load=load)
            self.worker = KvtierConnector(Role.WORKER, store, self.ns, model.cfg, block_tokens)
            self.worker.register_kv_caches(
                {f"model.layers.{i}": (self.cache.k[i], self.cache.v[i])
                 for i in range(model.cfg.layers)})

    # ---- blocks -------------------------------------------------------------------

    def _allocate(self, n, keep):
        while self.cache.free_blocks < n and self._local:
            for key, block in self._local.items():
                if block not in keep:
                    del self._local[key]
                    self.cache.free([block])
                    break
            else:
                break
        return self.cache.allocate(n)

    # ---- one request --------------------------------------------------------------

    def generate(self, prompt_ids, max_new_tokens=4, forced_tokens=None):
        """Prefill `prompt_ids` and decode greedily. With `forced_tokens`
        (teacher forcing), decode step i is fed forced_tokens[i] instead of
        its own choice, so that two runs' logits compare step by step even
        after a near-tie went the other way; the returned tokens are still
        each step's own argmax."""
        t_start = time.perf_counter()
        prompt = list(prompt_ids)
        n = len(prompt)
        bt = self.bt
        self._seq += 1
        req = Request(f"req-{self._seq}", prompt)
        keys = self.ns.block_keys(prompt)
        full = n // bt
        cap = (n - 1) // bt  # the last token is always computed

        # Scheduler: local prefix cache, then kvtier.
        local_blocks = []
        if self.prefix_cache:
            for k in keys[:cap]:
                b = self._local.get(bytes(k))
                if b is None:
                    break
                self._local.move_to_end(bytes(k))
                local_blocks.append(b)
        num_computed = len(local_blocks) * bt
        ext = 0
        if self.sched is not None:
            ext, _ = self.sched.get_num_new_matched_tokens(req, num_computed)
        total_blocks = (n + max_new_tokens + bt - 1) // bt
        keep = set(local_blocks)
        block_ids = local_blocks + self._allocate(total_blocks - len(local_blocks), keep)
        load_errors = 0
        load_wait = 0.0
        if self.sched is not None:
            self.sched.update_state_after_alloc(req, block_ids, ext)
            self.sched.schedule_save(req, block_ids)
            meta = self.sched.build_connector_meta()
            wait0 = self.worker.stats["load_wait_seconds"]
            logits = self._prefill_step(meta, prompt, num_computed + ext, block_ids)
            failed = self.worker.get_block_ids_with_load_errors()
            loaded = self.worker.loaded_blocks(req.request_id)
            if failed:
                first_failed = min(block_ids.index(b) for b in failed)
                load_errors = len(failed)
                self.sched.reschedule_after_load_error(req, block_ids, first_failed)
                meta = self.sched.build_connector_meta()
                logits = self._prefill_step(meta, prompt, first_failed * bt, block_ids)
                loaded = first_failed - num_computed // bt
            load_wait = self.worker.stats["load_wait_seconds"] - wait0
            loaded_tokens = max(0, loaded) * bt
        else:
            logits = self._forward_chunks(prompt, num_computed, block_ids)
            loaded_tokens = 0
        computed = n - num_computed - loaded_tokens
        out_tokens, out_logits = [], []
        nxt = int(torch.argmax(logits[-1]))
        out_tokens.append(nxt)
        out_logits.append(logits[-1])
        ttft = time.perf_counter() - t_start
        pos = n
        for step in range(max_new_tokens - 1):
            feed = nxt if forced_tokens is None else forced_tokens[step]
            lg = self.model.forward(torch.tensor([feed]), pos, block_ids, self.cache)
            pos += 1
            nxt = int(torch.argmax(lg[-1]))
            out_tokens.append(nxt)
            out_logits.append(lg[-1])

        if self.sched is not None:
            self.sched.request_finished(req, block_ids)
        # The prompt's full blocks stay in the local prefix cache; the rest is freed.
        if self.prefix_cache:
            kept = set()
            for i in range(full):
                kb = bytes(keys[i])
                if kb not in self._local:
                    self._local[kb] = block_ids[i]
                if self._local[kb] == block_ids[i]:
                    kept.add(block_ids[i])
            self.cache.free([b for b in block_ids if b not in kept and b not in keep])
        else:
            self.cache.free(block_ids)
        return Generation(out_tokens, torch.stack(out_logits), ttft, n, num_computed,
                          loaded_tokens, computed, load_errors, load_wait)

    def _prefill_step(self, meta, prompt, start, block_ids):
        w = self.worker
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        try:
            logits = self._forward_chunks(
                prompt, start, block_ids,
                layer_hook=lambda i: w.wait_for_layer_load(f"model.layers.{i}"),
                save_hook=lambda i: w.save_kv_layer(f"model.layers.{i}", None, None))
            # Loads of a request with nothing to compute still finish.
            w.wait_for_layer_load(f"model.layers.{self.cfg.layers - 1}")
            w.wait_for_save()
        finally:
            w.clear_connector_metadata()
        return logits

    def _forward_chunks(self, prompt, start, block_ids, layer_hook=None, save_hook=None):
        """Chunked prefill of prompt[start:]: loads are waited for in the first
        chunk, saves start in the last (when each layer is complete)."""
        n = len(prompt)
        logits = None
        pos = start
        first = True
        while pos < n:
            end = min(n, pos + self.chunk)
            last = end == n
            logits = self.model.forward(torch.tensor(prompt[pos:end]), pos, block_ids, self.cache,
                                        layer_hook=layer_hook if first else None,
                                        save_hook=save_hook if last else None)
            pos = end
            first = False
        return logits
