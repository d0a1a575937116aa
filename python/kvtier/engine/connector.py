"""KvtierConnector: a KV connector with the shape of vLLM's KVConnectorBase_V1.

It is built twice, as vLLM builds a connector: once with role SCHEDULER (the
hooks the scheduler calls every step) and once with role WORKER (the hooks
the model runner calls around the forward pass). Both sides talk to kvtier
through the public Python package; nothing here reaches into kvtier's C++.

What one kvtier object holds (docs/real-engine.md): one block of
``block_tokens`` tokens for every layer of the model, layer by layer, K then
V, each ``[block_tokens, kv_heads, head_dim]`` in the model's dtype, C order.
The keys are kvtier's chained block keys of the prompt's token ids under a
namespace built from the model (id, a digest of the weights, dtype, layout,
block size, tensor-parallel size and rank), so KV is only ever reused by the
model that wrote it.

Loading is pipelined by layer: start_load_kv() starts one batch_get_into of
the prefix's block objects on a background thread (the GIL is released while
kvtier reads), and then scatters layer 0's slices into the paged cache, then
layer 1's, and so on, marking each layer done; wait_for_layer_load(i) waits
for layer i only, so layer i computes while layer i+1 is being placed, and
the store read overlaps the suffix's embedding and first projections.
Saving is layer-wise too: save_kv_layer(i) copies layer i's slices of the
new full blocks into their objects as soon as layer i has written them, and
the last layer starts one batch_put in the background.

Blocks that do not load (a miss of any reason) are reported by
get_block_ids_with_load_errors() together with every later block of the
same request, and the engine recomputes them: a prefix is usable only up to
its first missing block.
"""

import dataclasses
import enum
import threading

import numpy as np
import torch

import kvtier

from .model import kv_bytes_per_token

KV_LAYOUT = "kvtier-block-v1:layer,kv,token,head,dim"


class Role(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


def model_namespace(model, block_tokens, tp_size=1, tp_rank=0, tenant=""):
    """The namespace of a model's KV: changes with the weights, dtype, layout,
    block size and parallel shape, so no other model ever matches."""
    cfg = model.cfg
    return kvtier.Namespace(cfg.name, model.weights_digest()[:32], "kvtier-engine-tokens-v1",
                            cfg.dtype, KV_LAYOUT, block_tokens=block_tokens, tp_size=tp_size,
                            tp_rank=tp_rank, tenant=tenant)


@dataclasses.dataclass
class LoadSpec:
    request_id: str
    keys: kvtier.Keys  # of the blocks to load, in order
    block_ids: list  # paged-cache block of each
    first_block: int  # index of the first loaded block in the request


@dataclasses.dataclass
class SaveSpec:
    request_id: str
    keys: kvtier.Keys
    block_ids: list


@dataclasses.dataclass
class ConnectorMetadata:
    """The per-step plan the scheduler hands the workers."""

    loads: list = dataclasses.field(default_factory=list)
    saves: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _ReqState:
    keys: kvtier.Keys
    matched_blocks: int = 0
    load: LoadSpec = None
    saved_blocks: int = 0


class KvtierConnector:
    def __init__(self, role, store, namespace, model_cfg, block_tokens=16, save=True, load=True):
        self.role = role
        self.store = store
        self.ns = namespace
        self.cfg = model_cfg
        self.block_tokens = block_tokens
        self.save_enabled = save
        self.load_enabled = load
        self.object_elems = kv_bytes_per_token(model_cfg) * block_tokens // torch.tensor(
            [], dtype=model_cfg.torch_dtype()).element_size()
        # scheduler side
        self._requests = {}
        self._pending_loads = []
        self._pending_saves = []
        # worker side
        self._k = self._v = None
        self._meta = None
        self._layer_ready = []
        self._load_thread = None
        self._load_errors = set()
        self._loaded_ok = {}
        self._save_objects = []
        self._save_thread = None
        self._save_results = []
        self.save_errors = []
        self.stats = {"blocks_loaded": 0, "blocks_load_failed": 0, "blocks_saved": 0,
                      "blocks_save_refused": 0, "load_seconds": 0.0, "load_wait_seconds": 0.0}

    # ---- scheduler side ---------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens beyond `num_computed_tokens` that kvtier can supply, and
        whether they load asynchronously (never here: loads finish in-step)."""
        bt = self.block_tokens
        keys = self.ns.block_keys(request.prompt_token_ids)
        st = self._requests.setdefault(request.request_id, _ReqState(keys))
        st.keys = keys
        if not self.load_enabled:
            return 0, False
        m = self.store.match_prefix(self.ns, keys)
        # The last prompt token is always computed: its logits start decoding.
        usable = min(m.blocks, (len(request.prompt_token_ids) - 1) // bt)
        st.matched_blocks = usable
        return max(0, usable * bt - num_computed_tokens), False

    def update_state_after_alloc(self, request, block_ids, num_external_tokens):
        st = self._requests[request.request_id]
        if num_external_tokens <= 0:
            return
        bt = self.block_tokens
        first = (st.matched_blocks * bt - num_external_tokens) // bt
        last = st.matched_blocks
        st.load = LoadSpec(request.request_id, st.keys[first:last], list(block_ids[first:last]),
                           first)
        self._pending_loads.append(st.load)

    def schedule_save(self, request, block_ids):
        """Called by the engine's scheduler when it schedules a prefill: the
        full prompt blocks kvtier does not have yet are saved this step."""
        if not self.save_enabled:
            return
        st = self._requests[request.request_id]
        full = len(request.prompt_token_ids) // self.block_tokens
        first = st.matched_blocks
        if full > first:
            self._pending_saves.append(
                SaveSpec(request.request_id, st.keys[first:full], list(block_ids[first:full])))

    def reschedule_after_load_error(self, request, block_ids, first_failed_block):
        """vLLM reschedules a request whose blocks failed to load from its
        first failed block: those blocks are computed, and saved, again."""
        st = self._requests[request.request_id]
        st.matched_blocks = first_failed_block
        st.load = None
        self.schedule_save(request, block_ids)

    def build_connector_meta(self, scheduler_output=None):
        meta = ConnectorMetadata(self._pending_loads, self._pending_saves)
        self._pending_loads, self._pending_saves = [], []
        return meta

    def request_finished(self, request, block_ids):
        """(delay_free, kv_transfer_params): saves complete within the step
        (wait_for_save), so blocks are never held back."""
        self._requests.pop(request.request_id, None)
        return False, None

    # ---- worker side ------------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        """{layer_name: (K, V)}, each [num_blocks, block_tokens, kv_heads, head_dim]."""
        names = sorted(kv_caches, key=lambda n: int(n.rsplit(".", 1)[-1]))
        self._layer_names = names
        self._k = [kv_caches[n][0] for n in names]
        self._v = [kv_caches[n][1] for n in names]

    def bind_connector_metadata(self, meta):
        self._meta = meta

    def clear_connector_metadata(self):
        self._meta = None

    def _object_view(self, obj):
        """A block object as [layers, 2, block_tokens, kv_heads, head_dim]."""
        c = self.cfg
        return obj.view(c.layers, 2, self.block_tokens, c.kv_heads, c.head_dim)

    def start_load_kv(self, forward_context=None):
        self._load_errors = set()
        self._loaded_ok = {}
        loads = self._meta.loads if self._meta else []
        n_layers = self.cfg.layers
        self._layer_ready = [threading.Event() for _ in range(n_layers)]
        if not loads:
            for e in self._layer_ready:
                e.set()
            return
        dt = self.cfg.torch_dtype()
        objects = [[torch.empty(self.object_elems, dtype=dt) for _ in spec.keys] for spec in loads]

        def run():
            import time
            t0 = time.perf_counter()
            try:
                usable = []
                for spec, objs in zip(loads, objects):
                    res = self.store.batch_get_into(
                        self.ns, spec.keys, [o.view(torch.uint8).numpy() for o in objs])
                    lead = 0
                    while lead < len(res) and res[lead].hit and \
                            res[lead].length == objs[lead].numel() * objs[lead].element_size():
                        lead += 1
                    for b in spec.block_ids[lead:]:
                        self._load_errors.add(b)
                    self._loaded_ok[spec.request_id] = lead
                    self.stats["blocks_loaded"] += lead
                    self.stats["blocks_load_failed"] += len(res) - lead
                    usable.append((spec, objs[:lead]))
                # Scatter layer by layer, releasing each as soon as it is placed.
                for layer in range(n_layers):
                    for spec, objs in usable:
                        if not objs:
                            continue
                        ids = torch.tensor(spec.block_ids[: len(objs)], dtype=torch.long)
                        stacked = torch.stack([self._object_view(o)[layer] for o in objs])
                        self._k[layer][ids] = stacked[:, 0]
                        self._v[layer][ids] = stacked[:, 1]
                    self._layer_ready[layer].set()
            except Exception as e:  # noqa: BLE001 - a failed load is recomputed, never fatal
                self.save_errors.append(f"load: {e}")
                for spec in loads:
                    self._load_errors.update(spec.block_ids)
                    self._loaded_ok[spec.request_id] = 0
            finally:
                for e in self._layer_ready:
                    e.set()
                self.stats["load_seconds"] += time.perf_counter() - t0

        self._load_thread = threading.Thread(target=run, name="kvtier-load")
        self._load_thread.start()

    def wait_for_layer_load(self, layer_name):
        import time
        i = self._layer_index(layer_name)
        if self._layer_ready:
            t0 = time.perf_counter()
            self._layer_ready[i].wait()
            self.stats["load_wait_seconds"] += time.perf_counter() - t0
        if i == self.cfg.layers - 1 and self._load_thread is not None:
            self._load_thread.join()
            self._load_thread = None

    def save_kv_layer(self, layer_name, kv_layer=None, attn_metadata=None):
        saves = self._meta.saves if self._meta else []
        if not saves:
            return
        i = self._layer_index(layer_name)
        if i == 0:
            dt = self.cfg.torch_dtype()
            self._save_objects = [[torch.empty(self.object_elems, dtype=dt) for _ in s.keys]
                                  for s in saves]
        for spec, objs in zip(saves, self._save_objects):
            ids = torch.tensor(spec.block_ids, dtype=torch.long)
            k, v = self._k[i][ids], self._v[i][ids]
            for j, o in enumerate(objs):
                view = self._object_view(o)
                view[i, 0] = k[j]
                view[i, 1] = v[j]
        if i == self.cfg.layers - 1:
            # A request whose load failed computed its suffix over a prefix
            # with holes: its K/V are not saved (the recompute pass saves).
            failed = {s.request_id for s in (self._meta.loads if self._meta else [])
                      if self._loaded_ok.get(s.request_id, len(s.keys)) < len(s.keys)}
            pairs = [(s, o) for s, o in zip(saves, self._save_objects)
                     if s.request_id not in failed]

            def run():
                for spec, objs in pairs:
                    try:
                        res = self.store.batch_put(self.ns, spec.keys,
                                                   [o.view(torch.uint8).numpy() for o in objs])
                    except kvtier.Error as e:
                        # A save is best effort: a store that will not take
                        # these keys (e.g. another namespace holds them) costs
                        # a cache entry, never the request.
                        self.save_errors.append(str(e))
                        res = [None] * len(spec.keys)
                    self._save_results.append((spec.request_id, res))

            self._save_thread = threading.Thread(target=run, name="kvtier-save")
            self._save_thread.start()

    def wait_for_save(self):
        if self._save_thread is not None:
            self._save_thread.join()
            self._save_thread = None
        for _, res in self._save_results:
            self.stats["blocks_saved"] += sum(1 for r in res if r is not None and r.stored)
            self.stats["blocks_save_refused"] += sum(1 for r in res if r is None or not r.stored)
        self._save_results = []

    def get_finished(self, finished_req_ids):
        """(requests whose async saves finished, requests whose async loads
        finished): both complete within their step here, so none are pending."""
        return set(), set()

    def get_block_ids_with_load_errors(self):
        return set(self._load_errors)

    def loaded_blocks(self, request_id):
        return self._loaded_ok.get(request_id, 0)

    def _layer_index(self, layer_name):
        return int(str(layer_name).rsplit(".", 1)[-1])
