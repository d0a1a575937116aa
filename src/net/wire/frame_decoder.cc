// FrameDecoder: the store protocol's incremental frame decoder (header
// checked before anything is allocated, then descriptor, then data).
#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "net/wire/codec_detail.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

using detail::hex32;
using detail::perr;

// ---- Public: FrameDecoder -------------------------------------------------------------------

FrameDecoder::FrameDecoder(FrameLimits limits) : limits_(limits) {
  limits_.max_descriptor_bytes = std::min(limits_.max_descriptor_bytes, kMaxDescriptorBytes);
  limits_.max_data_bytes = std::min(limits_.max_data_bytes, kMaxDataBytes);
}

Status FrameDecoder::fail(Status st) {
  state_ = State::kFailed;
  error_ = std::move(st);
  // The partial frame is of no use any more; give its memory back now.
  std::vector<std::byte>().swap(descriptor_);
  std::vector<std::byte>().swap(data_);
  dest_.clear();
  return error_;
}

void FrameDecoder::reset() {
  state_ = State::kHeader;
  filled_ = 0;
  header_ = FrameHeader{};
  descriptor_.clear();
  data_.clear();
  dest_.clear();
  dest_part_ = dest_off_ = 0;
  data_crc_ = 0;
}

MutableByteView FrameDecoder::wanted() {
  switch (state_) {
    case State::kHeader:
      return {header_buf_ + filled_, kFrameHeaderSize - filled_};
    case State::kDescriptor:
      return {descriptor_.data() + filled_, descriptor_.size() - filled_};
    case State::kData:
      if (dest_.empty()) {
        // No destination given: the decoder keeps the data itself. data_len
        // was checked against the limit with the header.
        data_.resize(header_.data_len);
        dest_.push_back(MutableByteView(data_));
      }
      while (dest_part_ < dest_.size() && dest_off_ == dest_[dest_part_].size()) {
        ++dest_part_;
        dest_off_ = 0;
      }
      if (dest_part_ == dest_.size()) return {};
      return dest_[dest_part_].subspan(dest_off_);
    case State::kReady:
    case State::kFailed:
      break;
  }
  return {};
}

Status FrameDecoder::advance(size_t n) {
  if (state_ == State::kFailed) return error_;
  if (n == 0) return Status::ok_status();
  MutableByteView w = wanted();
  if (n > w.size()) {
    return fail(Status::invalid_argument("FrameDecoder::advance(" + std::to_string(n) +
                                         ") past the " + std::to_string(w.size()) +
                                         " bytes wanted"));
  }
  switch (state_) {
    case State::kHeader: {
      filled_ += n;
      if (filled_ < kFrameHeaderSize) return Status::ok_status();
      auto h = decode_header(ByteView(header_buf_, kFrameHeaderSize), limits_, min_version_,
                             max_version_);
      if (!h.ok()) return fail(h.status());
      header_ = *h;
      // Allocated only now, after descriptor_len passed its limit.
      descriptor_.resize(header_.descriptor_len);
      filled_ = 0;
      state_ = State::kDescriptor;
      break;
    }
    case State::kDescriptor:
      filled_ += n;
      break;
    case State::kData:
      // CRC while the bytes are still in cache, instead of a second pass.
      data_crc_ = crc32c_extend(data_crc_, w.data(), n);
      dest_off_ += n;
      filled_ += n;
      break;
    case State::kReady:
    case State::kFailed:
      break;
  }
  return settle();
}

Status FrameDecoder::settle() {
  if (state_ == State::kDescriptor && filled_ == descriptor_.size()) {
    Status st = verify_descriptor(header_, descriptor_);
    if (!st.ok()) return fail(std::move(st));
    state_ = State::kData;
    filled_ = 0;
    data_crc_ = 0;
  }
  if (state_ == State::kData && filled_ == header_.data_len) {
    if (data_crc_ != header_.data_crc) {
      return fail(perr(ProtocolError::kDataCrcMismatch, "header says " + hex32(header_.data_crc) +
                                                            ", bytes give " + hex32(data_crc_)));
    }
    state_ = State::kReady;
  }
  return Status::ok_status();
}

Status FrameDecoder::set_data_destination(std::span<const MutableByteView> parts) {
  if (state_ == State::kFailed) return error_;
  if (state_ != State::kData || filled_ != 0) {
    return Status::failed_precondition(
        "set_data_destination: only before the first data byte of a frame");
  }
  uint64_t total = 0;
  for (MutableByteView p : parts) total += p.size();
  if (total != header_.data_len) {
    return Status::invalid_argument("set_data_destination: parts hold " + std::to_string(total) +
                                    " bytes, the frame has " + std::to_string(header_.data_len));
  }
  std::vector<std::byte>().swap(data_);
  dest_.assign(parts.begin(), parts.end());
  dest_part_ = dest_off_ = 0;
  return Status::ok_status();
}

Frame FrameDecoder::take_frame() {
  Frame f;
  if (state_ != State::kReady) return f;
  f.header = header_;
  f.descriptor = std::move(descriptor_);
  f.data = std::move(data_);
  reset();
  return f;
}

Result<size_t> FrameDecoder::feed(ByteView bytes) {
  if (state_ == State::kFailed) return error_;
  size_t used = 0;
  while (used < bytes.size() && state_ != State::kReady) {
    MutableByteView w = wanted();
    size_t n = std::min(w.size(), bytes.size() - used);
    if (n == 0) break;
    std::memcpy(w.data(), bytes.data() + used, n);
    used += n;
    KVTIER_RETURN_IF_ERROR(advance(n));
  }
  return used;
}

Result<Frame> decode_frame(ByteView bytes, const FrameLimits& limits) {
  FrameDecoder d(limits);
  auto used = d.feed(bytes);
  if (!used.ok()) return used.status();
  if (d.state() != FrameDecoder::State::kReady) {
    return perr(ProtocolError::kTruncatedFrame,
                "stream ended after " + std::to_string(bytes.size()) + " bytes, inside a frame");
  }
  if (*used != bytes.size()) {
    return perr(ProtocolError::kTrailingFrameBytes, std::to_string(bytes.size() - *used) +
                                                        " bytes after a " + std::to_string(*used) +
                                                        "-byte frame");
  }
  return d.take_frame();
}

}  // namespace kvtier::net
