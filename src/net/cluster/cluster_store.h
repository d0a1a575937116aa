// ClusterStore: a client of several store nodes that looks like one store
// (the operations and result types of kv::Store and RemoteStore). Each block
// key lives on one node, chosen by rendezvous hashing over the live node set
// (net/cluster/placement.h); the client keeps one RemoteStore per node and sends
// each operation to the key's owner. Batch operations are split per node,
// sent to the nodes in parallel, and merged back in the caller's order.
//
// match_prefix of a chain asks each node, in one call, for the keys of the
// chain it owns (in chain order). A node answers how many of its keys lead
// present; its first missing key, if any, sits at some chain position. The
// answer is the smallest such position over all nodes (the whole chain when
// no node misses): the longest prefix whose every key is present on its
// owner.
//
// Membership: a static list of nodes, or etcd (`/<prefix>/nodes/<node-id>` =
// "host:port" under each node's lease, written by `kvtier store serve`),
// which a background thread reads every `poll_ms`. A node whose key is gone
// (lease expired or revoked) drops out of the set and its keys move to the
// remaining nodes (they were stored on the node that left: misses). A node
// that appears takes its share of keys, new writes included; the client
// gives its connections up to connect_timeout_ms to come up before it
// enters the set. While a node is
// in the set but down, its keys are misses answered within the RemoteStore
// call timeout, never errors. If etcd cannot be read, the last node set is
// kept.
//
// Thread-safety: every method may be called concurrently from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/store.h"
#include "kvtier/kv_store.h"
#include "net/client/remote_store.h"
#include "net/cluster/etcd_client.h"

namespace kvtier::net {

struct ClusterNode {
  std::string id;
  std::string host;
  uint16_t port = 0;
};

struct ClusterStoreOptions {
  // Either a static node list ...
  std::vector<ClusterNode> nodes;
  // ... or etcd membership (used when etcd_url is set).
  std::string etcd_url;  // "http://127.0.0.1:2379"
  std::string etcd_prefix = "kvtier";
  uint32_t poll_ms = 500;
  uint32_t etcd_timeout_ms = 1000;
  // etcd user/password auth: the user and a file holding the password.
  std::string etcd_user;
  std::string etcd_password_file;
  // etcd behind TLS (an https etcd_url): its CA, and a client certificate.
  ClientTlsOptions etcd_tls;
  // Options of each node's RemoteStore (host and port are replaced).
  RemoteStoreOptions node_options;
};

// "host:port" or "[v6]:port" to a node; the value a node registers in etcd.
Result<ClusterNode> parse_node_address(const std::string& id, const std::string& address);
// Reads the live nodes registered under `prefix` (docs/store-service.md).
Result<std::vector<ClusterNode>> read_etcd_nodes(const std::string& etcd_url,
                                                 const std::string& prefix, uint32_t timeout_ms,
                                                 const EtcdCredentials& credentials = {});
// "/<prefix>/nodes/" with the prefix's slashes trimmed.
std::string etcd_nodes_key_prefix(const std::string& prefix);

// What stats() gathered: the sum over the nodes that answered, and each
// node's own answer. Counters add up; so do levels (slots, entries), which
// then describe the whole cluster; the flags has_disk and
// disk.recovered_from_checkpoint are true when any answering node's is.
struct ClusterNodeStats {
  ClusterNode node;
  Status status;         // OK when the node answered
  kv::StoreStats stats;  // valid when status is OK
};
struct ClusterStoreStats {
  kv::StoreStats total;
  size_t nodes = 0;                        // nodes in the set when asked
  size_t answered = 0;                     // of which answered
  std::vector<ClusterNodeStats> per_node;  // in node id order
};
// Adds every StoreStats field of `add` into `sum` (the fields the wire
// carries, net/client/remote_store.h store_stat_fields()).
void add_store_stats(kv::StoreStats& sum, const kv::StoreStats& add);

class ClusterStore final : public KvStore {
 public:
  // With etcd, reads the node set once (an error if etcd cannot be read) and
  // starts polling.
  static Result<std::unique_ptr<ClusterStore>> open(const ClusterStoreOptions& options);
  // A fixed cluster of in-process stores, (node id, store) each (a repeated
  // id is kept once), with the same placement, splitting and merging; the
  // stores must outlive it. Its
  // calls to the nodes run one after another on the caller's thread. The
  // simulator's store nodes (StudyOptions::store_nodes).
  static std::unique_ptr<ClusterStore> over_stores(
      const std::vector<std::pair<std::string, KvStore*>>& nodes);
  ~ClusterStore() override;
  ClusterStore(const ClusterStore&) = delete;
  ClusterStore& operator=(const ClusterStore&) = delete;

  // The current node set, sorted by id.
  std::vector<ClusterNode> nodes() const;
  // Id of the node that owns `key` now ("" when there is none).
  std::string owner_of(const kv::Key128& key) const;
  // Reads etcd now instead of waiting for the next poll.
  Status refresh();

  Result<uint16_t> register_namespace(const kv::Namespace& ns) override;
  Result<kv::PutResult> put(uint16_t ns, const kv::Key128& key, ByteView data) override;
  Result<kv::GetResult> get(uint16_t ns, const kv::Key128& key, MutableByteView out) override;
  Result<std::vector<kv::PutResult>> batch_put(uint16_t ns, std::span<const kv::Key128> keys,
                                               std::span<const ByteView> data) override;
  Result<std::vector<kv::GetResult>> batch_get(uint16_t ns,
                                               std::span<const kv::BatchGetItem> items) override;
  Result<kv::MatchResult> match_prefix(uint16_t ns, std::span<const kv::Key128> keys) override;
  Result<bool> remove(uint16_t ns, const kv::Key128& key) override;
  Result<size_t> pin(uint16_t ns, std::span<const kv::Key128> keys, uint64_t ttl_ms) override;
  Result<size_t> unpin(uint16_t ns, std::span<const kv::Key128> keys) override;

  // Asks every node of the current set for its statistics, all at once
  // (each bounded by the node's call timeout). A node that does not answer
  // is counted out, never an error; Unavailable only when the set is empty.
  Result<ClusterStoreStats> cluster_stats();
  // KvStore::stats(): the sum over the nodes that answered (Unavailable when
  // none did).
  Result<kv::StoreStats> stats() override;

 private:
  struct Impl;
  explicit ClusterStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::net
