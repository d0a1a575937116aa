#include "engine/store_client.h"

namespace kvtier::engine {

namespace {

// Both stores have the same method set; one template adapts either.
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
  Result<kv::StoreStats> stats() override { return s_->stats(); }

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

}  // namespace kvtier::engine
