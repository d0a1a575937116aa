// RemoteStore's batch calls: a batch is cut into frames that fit the
// server's limits, sent pipelined, and its results merged in order.
#include "net/client/remote_store.h"
#include "net/client/remote_store_impl.h"

namespace kvtier::net {

namespace {

using Parts = std::vector<std::pair<size_t, size_t>>;

// A batch cut into frames within the server's batch and frame limits.
template <typename SizeOf>
Parts frame_parts(size_t n, const ServerLimits& lim, uint64_t max_obj, SizeOf&& size_of) {
  return chunks(n, std::max<uint32_t>(1, lim.max_batch),
                std::max<uint64_t>(lim.max_data_bytes, max_obj), size_of);
}

// The request of one frame: items [part.first, part.second) of the batch.
template <typename Request, typename ItemOf>
Message part_request(uint16_t sns, std::pair<size_t, size_t> part, ItemOf&& item_of) {
  Request req;
  req.ns = sns;
  for (size_t k = part.first; k < part.second; ++k) req.items.push_back(item_of(k));
  return Message(std::move(req));
}

}  // namespace

Result<std::vector<kv::PutResult>> RemoteStore::batch_put(uint16_t ns,
                                                          std::span<const kv::Key128> keys,
                                                          std::span<const ByteView> data) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (keys.size() != data.size()) {
    return Status::invalid_argument(
        fmt::format("batch_put: {} keys but {} objects", keys.size(), data.size()));
  }
  const ServerLimits lim = server_limits();
  const uint64_t max_obj = lim.max_object_bytes ? lim.max_object_bytes : kMaxDataBytes;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].is_zero()) return Status::invalid_argument("the all-zero key is reserved");
    if (data[i].empty()) return Status::invalid_argument("put of an empty object");
    if (data[i].size() > max_obj) {
      return Status::invalid_argument(
          fmt::format("object of {} bytes exceeds max_object_bytes {}", data[i].size(), max_obj));
    }
  }
  if (keys.empty()) return std::vector<kv::PutResult>{};
  // Chunks within the server's batch and frame limits, pipelined.
  const Parts parts =
      frame_parts(keys.size(), lim, max_obj, [&](size_t i) { return data[i].size(); });
  Status bad;
  auto replies = impl_->request_pipelined(
      ns, parts.size(),
      [&](size_t p, uint16_t sns) {
        return part_request<BatchPutRequest>(sns, parts[p], [&](size_t k) {
          return KeyLength{keys[k], static_cast<uint32_t>(data[k].size())};
        });
      },
      [&](size_t p) { return data.subspan(parts[p].first, parts[p].second - parts[p].first); },
      [](size_t) { return std::span<const MutableByteView>(); }, MessageType::kBatchPutResponse,
      &bad);
  if (!bad.ok()) return bad;
  std::vector<kv::PutResult> results;
  results.reserve(keys.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    const size_t n = parts[p].second - parts[p].first;
    std::optional<BatchPutResponse> resp;
    if (replies[p].ok()) {
      auto d = BatchPutResponse::decode(replies[p].call->descriptor);
      if (d.ok() && d->results.size() == n) resp = std::move(*d);
    }
    for (size_t k = 0; k < n; ++k) {
      results.push_back(resp ? resp->results[k].to_result() : Impl::refused());
    }
  }
  return results;
}

Result<std::vector<kv::GetResult>> RemoteStore::batch_get(uint16_t ns,
                                                          std::span<const kv::BatchGetItem> items) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  for (const auto& it : items) {
    if (it.key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
    if (it.out.empty()) return Status::invalid_argument("get into an empty buffer");
  }
  if (items.empty()) return std::vector<kv::GetResult>{};
  const ServerLimits lim = server_limits();
  const uint64_t max_obj = lim.max_object_bytes ? lim.max_object_bytes : kMaxDataBytes;
  if (auto direct = batch_get_direct(ns, items, max_obj)) return std::move(*direct);
  // A buffer larger than any object is announced as max_object_bytes (the
  // server sizes its staging area by the announced lengths).
  std::vector<MutableByteView> outs;
  outs.reserve(items.size());
  for (const auto& it : items)
    outs.push_back(it.out.first(std::min<uint64_t>(it.out.size(), max_obj)));
  const Parts parts =
      frame_parts(items.size(), lim, max_obj, [&](size_t i) { return outs[i].size(); });
  Status bad;
  auto replies = impl_->request_pipelined(
      ns, parts.size(),
      [&](size_t p, uint16_t sns) {
        return part_request<BatchGetRequest>(sns, parts[p], [&](size_t k) {
          return KeyLength{items[k].key, static_cast<uint32_t>(outs[k].size())};
        });
      },
      [](size_t) { return std::span<const ByteView>(); },
      [&](size_t p) {
        return std::span<const MutableByteView>(outs).subspan(parts[p].first,
                                                              parts[p].second - parts[p].first);
      },
      MessageType::kBatchGetResponse, &bad);
  if (!bad.ok()) return bad;
  std::vector<kv::GetResult> results;
  results.reserve(items.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    const size_t n = parts[p].second - parts[p].first;
    std::optional<BatchGetResponse> resp;
    // Hits whose bytes did not land in the caller's buffers are misses.
    if (replies[p].ok() && replies[p].call->data_in.empty()) {
      auto d = BatchGetResponse::decode(replies[p].call->descriptor);
      if (d.ok() && d->results.size() == n) resp = std::move(*d);
    }
    for (size_t k = 0; k < n; ++k) {
      if (resp) {
        results.push_back(resp->results[k].to_result());
      } else {
        kv::GetResult miss;
        miss.miss = Impl::miss_of(replies[p].error);
        results.push_back(miss);
      }
    }
  }
  return results;
}

// Same-host batches: each block through the direct channel (a RAM hit is
// one copy, by this thread, out of the server's arena), instead of one TCP
// request whose bytes cross the socket. Taken only when no item can be
// refused half-way through the batch: every buffer holds the largest object
// the server takes (so none is too small) and no two overlap; the server
// validated the rest above. Otherwise nullopt, and the batch goes over TCP.
std::optional<Result<std::vector<kv::GetResult>>> RemoteStore::batch_get_direct(
    uint16_t ns, std::span<const kv::BatchGetItem> items, uint64_t max_object_bytes) {
  if (!impl_->direct_channel_up()) return std::nullopt;
  std::vector<std::pair<const std::byte*, const std::byte*>> ranges;
  ranges.reserve(items.size());
  for (const auto& it : items) {
    if (it.out.size() < max_object_bytes) return std::nullopt;
    ranges.emplace_back(it.out.data(), it.out.data() + it.out.size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Result<std::vector<kv::GetResult>>(
          Status::invalid_argument("batch_get: output buffers overlap"));
    }
  }
  std::vector<kv::GetResult> results;
  results.reserve(items.size());
  for (const auto& it : items) {
    auto r = get(ns, it.key, it.out);
    if (!r.ok()) return Result<std::vector<kv::GetResult>>(r.status());
    results.push_back(*r);
  }
  return Result<std::vector<kv::GetResult>>(std::move(results));
}

}  // namespace kvtier::net
