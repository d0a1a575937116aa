// KvStore: the one interface of every kvtier store, whether it runs in this
// process (a RAM tier, optionally over a disk tier on a block volume), is a
// store service on another process or host, or is a cluster of such
// services. An engine written against KvStore runs over any of them, and
// open_store() picks one from a URI.
//
// Contract, for every implementation:
// - A namespace (model, revision, tokenizer, KV dtype and layout, block size,
//   parallel shape, tenant) is registered once; the returned handle names it
//   in every other call. Blocks of different namespaces are never shared.
// - Block bytes move between the store and the caller's buffers with no copy
//   made on the caller's side: a put reads the caller's views, a get writes
//   into them.
// - A block that is missing, evicted, corrupt, of another namespace or that
//   cannot be read in time is a miss (GetResult with a MissReason), never an
//   error and never wrong bytes. A put the store cannot take is a refusal
//   (PutResult with a RefuseReason). An unreachable store service is a miss
//   or a refusal too, answered within the client's call timeout.
// - A non-OK Status means bad input (unknown namespace handle, the reserved
//   all-zero key, an empty or oversized object, a buffer too small, overlapping
//   buffers, mismatched lengths); such a call changed nothing.
//
// Thread-safety: every method may be called concurrently from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/bytes.h"
#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "kvtier/store_types.h"

namespace kvtier {

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Validates `ns` and returns the handle the calls below take. Registering
  // the same namespace again returns the same handle.
  virtual Result<uint16_t> register_namespace(const kv::Namespace& ns) = 0;

  virtual Result<kv::PutResult> put(uint16_t ns, const kv::Key128& key, ByteView data) = 0;
  virtual Result<kv::GetResult> get(uint16_t ns, const kv::Key128& key, MutableByteView out) = 0;
  // keys[i] gets the bytes of data[i]; one result per key, in order.
  virtual Result<std::vector<kv::PutResult>> batch_put(uint16_t ns,
                                                       std::span<const kv::Key128> keys,
                                                       std::span<const ByteView> data) = 0;
  // Reads every item into its buffer (disk reads in flight together); one
  // result per item, in order. Buffers must not overlap.
  virtual Result<std::vector<kv::GetResult>> batch_get(uint16_t ns,
                                                       std::span<const kv::BatchGetItem> items) = 0;
  // How many leading keys of a chain are present, and in which tier.
  virtual Result<kv::MatchResult> match_prefix(uint16_t ns, std::span<const kv::Key128> keys) = 0;
  // Drops a block from every tier; whether it was present.
  virtual Result<bool> remove(uint16_t ns, const kv::Key128& key) = 0;
  // Protects the RAM copies of `keys` from eviction for `ttl_ms` (a session
  // likely to return); how many were pinned. Pins expire by themselves.
  virtual Result<size_t> pin(uint16_t ns, std::span<const kv::Key128> keys, uint64_t ttl_ms) = 0;
  virtual Result<size_t> unpin(uint16_t ns, std::span<const kv::Key128> keys) = 0;
  // The store's counters. For a store service, its own; for a cluster, the
  // sum over the nodes that answered (Unavailable when none did).
  virtual Result<kv::StoreStats> stats() = 0;
};

// Opens a store from a URI (docs/store-uri.md):
//   mem://?ram=64MiB                                 in-process RAM tier
//   file:///path/to/volume?ram=64MiB&disk=1GiB        in-process RAM + disk tier
//                                                     on a volume file (created
//                                                     at `disk` bytes if absent)
//   kvtier://host:port[?token_file=PATH&...]          a store service
//   etcd://host:port[/prefix]                         a cluster whose nodes
//                                                     register in etcd
//   cluster://host:port,host:port[,...]               a cluster of listed nodes
// Sizes take B, KiB, MiB, GiB, TiB (or K, M, G, T). An unknown scheme or
// option, or a malformed value, is an InvalidArgument that names it.
Result<std::unique_ptr<KvStore>> open_store(std::string_view uri);

// The version of the library, "MAJOR.MINOR.PATCH".
const char* library_version();

}  // namespace kvtier
