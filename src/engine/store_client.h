// StoreClient: the part of the store API the KV connector uses, so that one
// connector serves an in-process kv::Store, a net::RemoteStore and a
// net::ClusterStore (several nodes) alike.
//
// Thread-safety: as the wrapped store (both are safe for concurrent use).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kv/store.h"
#include "net/cluster_store.h"
#include "net/remote_store.h"

namespace kvtier::engine {

class StoreClient {
 public:
  virtual ~StoreClient() = default;
  virtual Result<uint16_t> register_namespace(const kv::Namespace& ns) = 0;
  virtual Result<kv::MatchResult> match_prefix(uint16_t ns, std::span<const kv::Key128> keys) = 0;
  virtual Result<std::vector<kv::GetResult>> batch_get(uint16_t ns,
                                                       std::span<const kv::BatchGetItem> items) = 0;
  virtual Result<std::vector<kv::PutResult>> batch_put(uint16_t ns,
                                                       std::span<const kv::Key128> keys,
                                                       std::span<const ByteView> data) = 0;
  virtual Result<kv::StoreStats> stats() = 0;
};

// Wraps a store that the caller keeps alive.
std::unique_ptr<StoreClient> make_local_store_client(kv::Store* store);
std::unique_ptr<StoreClient> make_remote_store_client(net::RemoteStore* store);
// stats() of a cluster client is the sum over the nodes that answered
// (Unavailable when none did).
std::unique_ptr<StoreClient> make_cluster_store_client(net::ClusterStore* store);
// Opens a ClusterStore (options from net::parse_cluster_client_config, a
// static node list or etcd) and returns a client that owns it.
Result<std::unique_ptr<StoreClient>> open_cluster_store_client(
    const net::ClusterStoreOptions& options);

}  // namespace kvtier::engine
