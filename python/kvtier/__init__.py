"""kvtier: a shared tier of RAM and NVMe for the KV cache of LLM prompt prefixes.

Five lines to a round trip::

    import kvtier, numpy as np
    ns = kvtier.Namespace("my-model", "v1", "my-tok", "bf16", "NHD", block_tokens=16)
    keys = ns.block_keys(list(range(64)))                  # 4 full blocks
    with kvtier.open("mem://?ram=64MiB") as store:
        store.batch_put(ns, keys, [np.full(4096, i, np.uint8) for i in range(4)])
        out = [np.empty(4096, np.uint8) for _ in range(4)]
        print(store.match_prefix(ns, keys), store.batch_get_into(ns, keys, out))

Stores: ``mem://``, ``file:///path?disk=1GiB``, ``kvtier://host:port``,
``etcd://host:port/prefix``, ``cluster://host:port,host:port``
(docs/store-uri.md). Buffers are any writable object of the buffer protocol
(numpy arrays, bytearray, memoryview, CPU torch tensors through .numpy()) and
are read or written in place. Misses are results with a reason; exceptions
(kvtier.Error and subclasses) are for bad input only.
"""

from ._kvtier import (
    Error,
    GetResult,
    InvalidArgumentError,
    Key,
    Keys,
    Match,
    Namespace,
    NotFoundError,
    PutResult,
    Store,
    UnavailableError,
    open,
    version,
)

__version__ = version()

__all__ = [
    "Error",
    "GetResult",
    "InvalidArgumentError",
    "Key",
    "Keys",
    "Match",
    "Namespace",
    "NotFoundError",
    "PutResult",
    "Store",
    "UnavailableError",
    "open",
    "version",
    "__version__",
]
