# Type stubs of the kvtier package (the names come from the native module).
from types import TracebackType
from typing import Any, Iterator, Sequence, Union, overload

from typing_extensions import Buffer  # PEP 688; any object of the buffer protocol

__version__: str

class Error(Exception):
    """Bad input only; a call that raised changed nothing."""

class InvalidArgumentError(Error, ValueError): ...
class NotFoundError(Error, LookupError): ...
class UnavailableError(Error, ConnectionError): ...

class Key:
    """One 128-bit block key. bytes(key): 16 bytes; str(key): 32 hex digits."""
    def __init__(self, value: Union["Key", bytes, str]) -> None: ...
    def __bytes__(self) -> bytes: ...
    def hex(self) -> str: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Keys:
    """The keys of a chain of blocks, in order."""
    def __init__(self, keys: Sequence[Union[Key, bytes, str]]) -> None: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> Key: ...
    @overload
    def __getitem__(self, index: slice) -> "Keys": ...
    def __iter__(self) -> Iterator[Key]: ...

class Namespace:
    """Everything that must match for KV bytes to be reusable."""
    model: str
    revision: str
    tokenizer: str
    kv_dtype: str
    layout: str
    block_tokens: int
    tp_size: int
    tp_rank: int
    pp_size: int
    pp_rank: int
    tenant: str
    scheme: str
    digest: Key
    def __init__(
        self,
        model: str,
        revision: str,
        tokenizer: str,
        kv_dtype: str,
        layout: str,
        block_tokens: int,
        tp_size: int = 1,
        tp_rank: int = 0,
        tenant: str = "",
        pp_size: int = 1,
        pp_rank: int = 0,
        scheme: str = "xxh3_128",
    ) -> None: ...
    def block_keys(self, tokens: Union[Sequence[int], Buffer]) -> Keys:
        """Chained keys of every full block of tokens (ints in 0..2**32-1)."""

class PutResult:
    stored: bool
    outcome: str  # "stored", "deduplicated", "refused"
    tier: str | None  # "ram", "disk"
    reason: str | None  # "no_space", "index_full", "disk_error", "admission", "quota"
    def __bool__(self) -> bool: ...

class GetResult:
    hit: bool
    tier: str | None
    length: int
    reason: str | None  # "not_found", "evicted", "foreign_namespace", "corrupt", "io_error", "timeout"
    def __bool__(self) -> bool: ...

class Match:
    blocks: int
    ram: int
    disk: int

class Store:
    """A kvtier store; every method releases the GIL while the store works."""
    uri: str
    closed: bool
    def match_prefix(self, ns: Namespace, keys: Keys) -> Match: ...
    def batch_put(self, ns: Namespace, keys: Keys, buffers: Sequence[Buffer]) -> list[PutResult]: ...
    def batch_get_into(self, ns: Namespace, keys: Keys, buffers: Sequence[Buffer]) -> list[GetResult]: ...
    def pin(self, ns: Namespace, keys: Keys, ttl_s: float = 300.0) -> int: ...
    def unpin(self, ns: Namespace, keys: Keys) -> int: ...
    def remove(self, ns: Namespace, key: Key) -> bool: ...
    def stats(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Store": ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

def open(uri: str) -> Store:
    """Opens a store: mem://, file:///path, kvtier://host:port, etcd://host:port/prefix, cluster://..."""

def version() -> str: ...
