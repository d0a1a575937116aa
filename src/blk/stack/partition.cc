#include "blk/stack/partition.h"

#include <fmt/format.h>

namespace kvtier::blk {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}

Result<std::unique_ptr<Partition>> Partition::create(std::shared_ptr<BlockDevice> inner,
                                                     uint64_t offset, uint64_t length,
                                                     std::string label) {
  if (!inner) return Status::invalid_argument("partition: no device");
  const uint32_t bs = std::max(inner->block_size(), inner->buffer_alignment());
  if (length == 0 || offset % bs != 0 || length % bs != 0) {
    return Status::invalid_argument(
        fmt::format("partition: offset {} and length {} must be multiples of {} (length non-zero)",
                    offset, length, bs));
  }
  if (offset > inner->capacity() || length > inner->capacity() - offset) {
    return Status::invalid_argument(
        fmt::format("partition: [{}, +{}) is past the end of {} ({} bytes)", offset, length,
                    inner->name(), inner->capacity()));
  }
  std::string name = label.empty() ? fmt::format("{}@{}+{}", inner->name(), offset, length) : label;
  return std::unique_ptr<Partition>(
      new Partition(std::move(inner), offset, length, std::move(name)));
}

IoCallback Partition::count(IoCallback cb, int op, uint64_t bytes) {
  return [this, cb = std::move(cb), op, bytes](Status st) {
    if (!st.ok()) {
      io_.errors.fetch_add(1, kRelaxed);
    } else if (op == 0) {
      io_.reads.fetch_add(1, kRelaxed);
      io_.bytes_read.fetch_add(bytes, kRelaxed);
    } else if (op == 1) {
      io_.writes.fetch_add(1, kRelaxed);
      io_.bytes_written.fetch_add(bytes, kRelaxed);
    } else if (op == 2) {
      io_.flushes.fetch_add(1, kRelaxed);
    } else {
      io_.trims.fetch_add(1, kRelaxed);
    }
    cb(std::move(st));
  };
}

void Partition::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) return count(std::move(cb), 0, 0)(std::move(st));
  inner_->read(offset_ + offset, dst, count(std::move(cb), 0, dst.size()));
}

void Partition::readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) {
  uint64_t total = 0;
  for (const auto& p : parts) {
    Status st = check_io(offset + total, p.size(), p.data());
    if (!st.ok()) return count(std::move(cb), 0, 0)(std::move(st));
    total += p.size();
  }
  if (parts.empty()) {
    return count(std::move(cb), 0, 0)(Status::invalid_argument(name() + ": readv of nothing"));
  }
  inner_->readv(offset_ + offset, parts, count(std::move(cb), 0, total));
}

void Partition::write(uint64_t offset, ByteView src, IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) return count(std::move(cb), 1, 0)(std::move(st));
  inner_->write(offset_ + offset, src, count(std::move(cb), 1, src.size()));
}

void Partition::flush(IoCallback cb) { inner_->flush(count(std::move(cb), 2, 0)); }

void Partition::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  if (!st.ok()) return count(std::move(cb), 3, 0)(std::move(st));
  inner_->trim(offset_ + offset, length, count(std::move(cb), 3, length));
}

DeviceStats Partition::stats() const { return io_.snapshot(); }

}  // namespace kvtier::blk
