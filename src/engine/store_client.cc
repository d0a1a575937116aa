#include "engine/store_client.h"

#include <fmt/format.h>

namespace kvtier::engine {

namespace {

Result<kv::StoreStats> stats_of(kv::Store* s) { return s->stats(); }
Result<kv::StoreStats> stats_of(net::RemoteStore* s) { return s->stats(); }
Result<kv::StoreStats> stats_of(net::ClusterStore* s) {
  auto r = s->stats();
  if (!r.ok()) return r.status();
  if (r->answered == 0) {
    return Status::unavailable(fmt::format("none of the {} store nodes answered", r->nodes));
  }
  return r->total;
}

// The stores have the same method set; one template adapts each.
template <typename S>
class StoreClientOf final : public StoreClient {
 public:
  explicit StoreClientOf(S* s) : s_(s) {}
  Result<uint16_t> register_namespace(const kv::Namespace& ns) override {
    return s_->register_namespace(ns);
  }
  Result<kv::MatchResult> match_prefix(uint16_t ns, std::span<const kv::Key128> keys) override {
    return s_->match_prefix(ns, keys);
  }
  Result<std::vector<kv::GetResult>> batch_get(uint16_t ns,
                                               std::span<const kv::BatchGetItem> items) override {
    return s_->batch_get(ns, items);
  }
  Result<std::vector<kv::PutResult>> batch_put(uint16_t ns, std::span<const kv::Key128> keys,
                                               std::span<const ByteView> data) override {
    return s_->batch_put(ns, keys, data);
  }
  Result<kv::StoreStats> stats() override { return stats_of(s_); }

 private:
  S* s_;
};

}  // namespace

std::unique_ptr<StoreClient> make_local_store_client(kv::Store* store) {
  return std::make_unique<StoreClientOf<kv::Store>>(store);
}
std::unique_ptr<StoreClient> make_remote_store_client(net::RemoteStore* store) {
  return std::make_unique<StoreClientOf<net::RemoteStore>>(store);
}
std::unique_ptr<StoreClient> make_cluster_store_client(net::ClusterStore* store) {
  return std::make_unique<StoreClientOf<net::ClusterStore>>(store);
}

namespace {
// A cluster client that owns its ClusterStore.
class OwningClusterClient final : public StoreClient {
 public:
  explicit OwningClusterClient(std::unique_ptr<net::ClusterStore> s)
      : store_(std::move(s)), client_(make_cluster_store_client(store_.get())) {}
  Result<uint16_t> register_namespace(const kv::Namespace& ns) override {
    return client_->register_namespace(ns);
  }
  Result<kv::MatchResult> match_prefix(uint16_t ns, std::span<const kv::Key128> keys) override {
    return client_->match_prefix(ns, keys);
  }
  Result<std::vector<kv::GetResult>> batch_get(uint16_t ns,
                                               std::span<const kv::BatchGetItem> items) override {
    return client_->batch_get(ns, items);
  }
  Result<std::vector<kv::PutResult>> batch_put(uint16_t ns, std::span<const kv::Key128> keys,
                                               std::span<const ByteView> data) override {
    return client_->batch_put(ns, keys, data);
  }
  Result<kv::StoreStats> stats() override { return client_->stats(); }

 private:
  std::unique_ptr<net::ClusterStore> store_;
  std::unique_ptr<StoreClient> client_;
};
}  // namespace

Result<std::unique_ptr<StoreClient>> open_cluster_store_client(
    const net::ClusterStoreOptions& options) {
  auto cs = net::ClusterStore::open(options);
  if (!cs.ok()) return cs.status();
  return std::unique_ptr<StoreClient>(std::make_unique<OwningClusterClient>(std::move(*cs)));
}

}  // namespace kvtier::engine
