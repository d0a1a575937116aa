#include "net/wire/frame_stream_reader.h"

#include <algorithm>
#include <cstring>

namespace kvtier::net {

FrameStreamReader::FrameStreamReader(FrameLimits limits)
    : decoder_(std::make_unique<FrameDecoder>(limits)) {}

void FrameStreamReader::reset(FrameLimits limits, uint16_t version) {
  decoder_ = std::make_unique<FrameDecoder>(limits);
  decoder_->set_required_version(version);
  parts_.clear();
  data_done_ = 0;
}

Status FrameStreamReader::pump(bool data) {
  while (ahead_pos_ < ahead_len_) {
    auto st = decoder_->state();
    bool wants = st == FrameDecoder::State::kHeader || st == FrameDecoder::State::kDescriptor ||
                 (data && st == FrameDecoder::State::kData);
    if (!wants) break;
    MutableByteView w = decoder_->wanted();
    if (w.empty()) break;
    size_t n = std::min(w.size(), ahead_len_ - ahead_pos_);
    std::memcpy(w.data(), ahead_.data() + ahead_pos_, n);
    ahead_pos_ += n;
    if (st == FrameDecoder::State::kData) data_done_ += n;
    KVTIER_RETURN_IF_ERROR(decoder_->advance(n));
  }
  if (ahead_pos_ == ahead_len_) ahead_pos_ = ahead_len_ = 0;
  return Status::ok_status();
}

asio::awaitable<Status> FrameStreamReader::read_head(Socket& socket, std::error_code& ec) {
  ec = {};
  parts_.clear();
  data_done_ = 0;
  for (;;) {
    Status st = pump(false);
    if (!st.ok()) co_return st;
    auto state = decoder_->state();
    if (state == FrameDecoder::State::kData || state == FrameDecoder::State::kReady) {
      co_return Status::ok_status();
    }
    if (state == FrameDecoder::State::kFailed) co_return decoder_->error();
    // The read-ahead buffer is empty here. Header or descriptor bytes go
    // straight where the decoder wants them; whatever follows lands in the
    // read-ahead buffer.
    MutableByteView w = decoder_->wanted();
    std::array<asio::mutable_buffer, 2> bufs{asio::buffer(w.data(), w.size()),
                                             asio::buffer(ahead_.data(), ahead_.size())};
    size_t n = co_await socket.async_read_some(bufs, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("connection: " + ec.message());
    bytes_read_ += n;
    size_t k = std::min(n, w.size());
    ahead_pos_ = 0;
    ahead_len_ = n - k;
    st = decoder_->advance(k);
    if (!st.ok()) co_return st;
  }
}

Status FrameStreamReader::set_data_destination(std::span<const MutableByteView> parts) {
  KVTIER_RETURN_IF_ERROR(decoder_->set_data_destination(parts));
  parts_.assign(parts.begin(), parts.end());
  data_done_ = 0;
  return Status::ok_status();
}

asio::awaitable<Status> FrameStreamReader::read_data(Socket& socket, std::error_code& ec) {
  ec = {};
  // Data bytes that arrived with the header (at most kReadAhead) are copied
  // once; everything after them is read in place.
  Status st = pump(true);
  if (!st.ok()) co_return st;
  std::vector<asio::mutable_buffer> bufs;
  while (decoder_->state() == FrameDecoder::State::kData) {
    bufs.clear();
    size_t want = 0;
    bool all = true;  // the list reaches the end of the data section
    if (parts_.empty()) {
      MutableByteView w = decoder_->wanted();  // the decoder's own buffer
      bufs.push_back(asio::buffer(w.data(), w.size()));
      want = w.size();
    } else {
      size_t skip = data_done_;
      for (MutableByteView p : parts_) {
        if (skip >= p.size()) {
          skip -= p.size();
          continue;
        }
        if (bufs.size() == kMaxReadParts) {  // one readv; the loop continues with the rest
          all = false;
          break;
        }
        bufs.push_back(asio::buffer(p.data() + skip, p.size() - skip));
        want += p.size() - skip;
        skip = 0;
      }
    }
    // Bytes past the data section (the next frame) go to the read-ahead
    // buffer; only when the list covers the whole rest of the section, or
    // data bytes would land there.
    if (all) bufs.push_back(asio::buffer(ahead_.data(), ahead_.size()));
    size_t n = co_await socket.async_read_some(bufs, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("connection: " + ec.message());
    bytes_read_ += n;
    size_t k = std::min(n, want);
    ahead_pos_ = 0;
    ahead_len_ = n - k;
    data_done_ += k;
    // The bytes are where the decoder wants them; advance it part by part
    // (it computes the data CRC over them while they are still in cache).
    while (k > 0) {
      MutableByteView w = decoder_->wanted();
      size_t m = std::min(k, w.size());
      if (m == 0) co_return Status::internal("FrameStreamReader: data destination out of step");
      st = decoder_->advance(m);
      if (!st.ok()) co_return st;
      k -= m;
    }
  }
  if (decoder_->state() == FrameDecoder::State::kFailed) co_return decoder_->error();
  co_return Status::ok_status();
}

}  // namespace kvtier::net
