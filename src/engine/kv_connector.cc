#include "engine/kv_connector.h"

#include <algorithm>
#include <chrono>

#include "engine/kv_content.h"

namespace kvtier::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

KvConnector::KvConnector(KvStore* store, uint16_t ns, uint32_t block_bytes)
    : store_(store), ns_(ns), block_bytes_(block_bytes) {}

MutableByteView KvConnector::scratch(size_t blocks) {
  const size_t need = blocks * block_bytes_;
  if (buf_.size() < need) buf_ = AlignedBuffer(align_up(need * 2, kDirectIoAlignment));
  return buf_.subview(0, need);
}

Result<kv::MatchResult> KvConnector::lookup(std::span<const kv::Key128> keys) {
  return store_->match_prefix(ns_, keys);
}

Result<LoadOutcome> KvConnector::load_prefix(std::span<const kv::Key128> keys, size_t from,
                                             const LoadStartChooser& choose_start) {
  LoadOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  auto m = store_->match_prefix(ns_, keys);
  if (!m.ok()) return m.status();
  out.store_matched = m->blocks;
  if (choose_start && m->blocks > from) from = std::clamp(choose_start(*m), from, m->blocks);
  out.load_from = from;
  if (m->blocks <= from) {
    out.wall_s = seconds_since(t0);
    return out;
  }
  const size_t n = m->blocks - from;
  auto buf = scratch(n);
  // Split by the tier the match reported; a block that moves between the
  // match and the read is still read correctly, only timed with the other batch.
  std::vector<kv::BatchGetItem> ram_items, disk_items;
  std::vector<size_t> ram_index, disk_index;
  for (size_t i = 0; i < n; ++i) {
    const kv::BatchGetItem item{keys[from + i], buf.subspan(i * block_bytes_, block_bytes_)};
    const bool on_disk = from + i < m->tiers.size() && m->tiers[from + i] == kv::Tier::kDisk;
    (on_disk ? disk_items : ram_items).push_back(item);
    (on_disk ? disk_index : ram_index).push_back(i);
  }
  std::vector<kv::GetResult> results(n);
  std::vector<kv::BatchGetItem> items(n);
  auto read_batch = [&](const std::vector<kv::BatchGetItem>& batch,
                        const std::vector<size_t>& index) -> Status {
    if (batch.empty()) return Status::ok_status();
    auto got = store_->batch_get(ns_, batch);
    if (!got.ok()) return got.status();
    for (size_t j = 0; j < batch.size(); ++j) {
      results[index[j]] = (*got)[j];
      items[index[j]] = batch[j];
    }
    return Status::ok_status();
  };
  const auto ram_t0 = std::chrono::steady_clock::now();
  if (auto st = read_batch(ram_items, ram_index); !st.ok()) return st;
  if (!ram_items.empty()) out.ram_wall_s = seconds_since(ram_t0);
  const auto disk_t0 = std::chrono::steady_clock::now();
  if (auto st = read_batch(disk_items, disk_index); !st.ok()) return st;
  if (!disk_items.empty()) out.disk_wall_s = seconds_since(disk_t0);
  out.wall_s = seconds_since(t0);
  bool run = true;  // still inside the leading run of good blocks
  for (size_t i = 0; i < n; ++i) {
    const auto& g = results[i];
    if (!g.hit) {
      ++out.misses;
      run = false;
      continue;
    }
    out.bytes += g.length;
    if (from + i < m->tiers.size() && m->tiers[from + i] == kv::Tier::kDisk) {
      out.disk_bytes += g.length;
    }
    const bool good = g.length == block_bytes_ &&
                      verify_kv_block(items[i].key, ByteView(items[i].out.data(), g.length));
    if (!good) {
      ++out.verify_failures;
      run = false;
      continue;
    }
    if (run) {
      ++out.loaded;
      if (g.tier == kv::Tier::kRam) ++out.from_ram;
      if (g.tier == kv::Tier::kDisk) ++out.from_disk;
    }
  }
  return out;
}

Result<SaveOutcome> KvConnector::save(std::span<const kv::Key128> keys) {
  SaveOutcome out;
  if (keys.empty()) return out;
  auto buf = scratch(keys.size());
  std::vector<ByteView> data(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = buf.subspan(i * block_bytes_, block_bytes_);
    fill_kv_block(keys[i], v);
    data[i] = v;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto put = store_->batch_put(ns_, keys, data);
  out.wall_s = seconds_since(t0);
  if (!put.ok()) return put.status();
  for (const auto& r : *put) {
    if (r.outcome == kv::PutResult::Outcome::kStored) {
      ++out.stored;
      out.bytes += block_bytes_;
    } else if (r.outcome == kv::PutResult::Outcome::kDeduplicated) {
      ++out.deduplicated;
    } else {
      ++out.refused;
    }
  }
  return out;
}

}  // namespace kvtier::engine
