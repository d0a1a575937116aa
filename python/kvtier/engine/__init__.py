"""kvtier's real engine: a small PyTorch transformer on the CPU with a paged KV
cache and a KV connector shaped like vLLM's KVConnectorBase_V1, used to prove
that KV loaded from kvtier gives exactly the tokens recomputation gives.

- ``kvtier.engine.model``: ModelConfig, Transformer, PagedKVCache
- ``kvtier.engine.connector``: KvtierConnector (scheduler and worker roles)
- ``kvtier.engine.engine``: Engine (chunked prefill, greedy decode)
- ``python3 -m kvtier.engine.prove --json``: the proof (docs/real-engine.md)
"""

from .connector import KV_LAYOUT, KvtierConnector, Role, model_namespace
from .engine import Engine, Generation
from .model import ModelConfig, PagedKVCache, Transformer, kv_bytes_per_token

__all__ = ["Engine", "Generation", "KV_LAYOUT", "KvtierConnector", "ModelConfig",
           "PagedKVCache", "Role", "Transformer", "kv_bytes_per_token", "model_namespace"]
