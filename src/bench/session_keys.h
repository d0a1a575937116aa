// The block keys of every turn of one session, each block hashed and stored
// once.
//
// An agent's context grows turn by turn, so a turn's keys are mostly the
// previous turn's followed by new ones. Each turn's keys are therefore kept
// as a prefix of one of the session's chains: a turn that extends the
// chain's context appends its new blocks, one that ends earlier is a shorter
// prefix of it, and one that changes the context before its end (a compacted
// history) starts a new chain that copies the common front. At the study's
// scale this is about 20 MB of keys a run instead of 500 MB, and a few
// percent of the simulator's time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bench/workload.h"
#include "kv/block_key.h"

namespace kvtier::bench {

class SessionKeys {
 public:
  // Keys of each turn of `session` under `ns_digest` (kv::chain_block_keys_from_ids
  // of its block ids).
  SessionKeys(kv::KeyScheme scheme, const kv::Key128& ns_digest, const Session& session);

  size_t turn_count() const { return turns_.size(); }
  // Valid while this object lives (the chains never change after
  // construction).
  std::span<const kv::Key128> turn(size_t t) const {
    const Turn& x = turns_[t];
    return std::span(chains_[x.chain]).first(x.blocks);
  }
  size_t chain_count() const { return chains_.size(); }
  // Which chain turn `t`'s keys are a prefix of (0 .. chain_count() - 1).
  size_t chain_of(size_t t) const { return turns_[t].chain; }

 private:
  struct Turn {
    uint32_t chain = 0;
    size_t blocks = 0;
  };
  std::vector<std::vector<kv::Key128>> chains_;
  std::vector<Turn> turns_;
};

}  // namespace kvtier::bench
