#include "bench/session_keys.h"

#include <algorithm>

namespace kvtier::bench {

SessionKeys::SessionKeys(kv::KeyScheme scheme, const kv::Key128& ns_digest,
                         const Session& session) {
  std::vector<uint64_t> chain_ids;  // the block ids of chains_.back()
  for (const TraceRequest& t : session.turns) {
    const std::vector<uint64_t>& ids = t.block_ids;
    const size_t common =
        std::mismatch(ids.begin(), ids.end(), chain_ids.begin(), chain_ids.end()).first -
        ids.begin();
    if (chains_.empty() || (common < ids.size() && common < chain_ids.size())) {
      // The first turn, or a context changed before its end: a new chain
      // that shares the common front of the last one.
      std::vector<kv::Key128> chain;
      if (!chains_.empty()) {
        const auto& last = chains_.back();
        chain.assign(last.begin(), last.begin() + static_cast<ptrdiff_t>(common));
      }
      chains_.push_back(std::move(chain));
      chain_ids.resize(common);
    }
    std::vector<kv::Key128>& chain = chains_.back();
    if (ids.size() > chain_ids.size()) {
      const kv::Key128 prev = chain.empty() ? kv::Key128{} : chain.back();
      const std::span<const uint64_t> more = std::span(ids).subspan(chain_ids.size());
      const auto keys = kv::chain_block_keys_from_ids(scheme, ns_digest, prev, more);
      chain.insert(chain.end(), keys.begin(), keys.end());
      chain_ids.insert(chain_ids.end(), more.begin(), more.end());
    }
    turns_.push_back({static_cast<uint32_t>(chains_.size() - 1), ids.size()});
  }
}

}  // namespace kvtier::bench
