// StoreServer: writing responses (one gather write per response, one write
// in flight per connection, a deadline on each) and answering malformed
// frames.
#include "net/server/server_impl.h"

namespace kvtier::net {

asio::awaitable<bool> StoreServer::Impl::wait_write(ServerConnection& c) {
  while (c.writing) {
    c.write_timer.expires_at(asio::steady_timer::time_point::max());
    std::error_code ec;
    co_await c.write_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return !c.write_failed;
}

asio::awaitable<bool> StoreServer::Impl::send(ServerConnection& c, const Message& msg,
                                              uint64_t request_id, std::span<const ByteView> data,
                                              std::optional<uint32_t> data_crc,
                                              std::optional<uint32_t> leased_slot) {
  if (!co_await wait_write(c)) {
    if (leased_slot) store->release_ram_lease(*leased_slot);
    co_return false;
  }
  ServerConnection::BufferSet& set = c.set();
  std::vector<std::byte>& out = set.out;
  out.clear();
  const uint16_t version = c.version;
  Status st =
      data_crc ? encode_message_prefix_with_data_crc(msg, request_id, data, *data_crc, out, version)
               : encode_message_prefix(msg, request_id, data, out, version);
  if (!st.ok()) {
    // A response this server built broke a protocol rule: a bug, but the
    // client still gets an answer.
    spdlog::error("store server: cannot encode {} for {}: {}",
                  message_type_name(message_type_of(msg)), c.peer, st.to_string());
    out.clear();
    data = {};
    Status enc = encode_message_prefix(
        ErrorResponse::from_status(Status::internal("response encoding failed")), request_id, {},
        out, version);
    if (!enc.ok()) co_return false;
  }
  const std::byte* lo = set.buf.data();
  const std::byte* hi = lo + set.buf.size();
  bool in_set = true;
  if (leased_slot) {
    set.leased_slot = leased_slot;  // pinned by the lease: no copy
    if (data.empty()) {             // the encoding failed: nothing will read it
      store->release_ram_lease(*set.leased_slot);
      set.leased_slot.reset();
    }
  }
  for (ByteView d : data) {
    if (set.leased_slot) break;
    if (!d.empty() && (set.buf.empty() || d.data() < lo || d.data() + d.size() > hi)) {
      in_set = false;
    }
  }
  if (!in_set) {
    for (ByteView d : data) out.insert(out.end(), d.begin(), d.end());
    data = {};
  }
  set.gather.clear();
  set.gather.push_back(asio::buffer(out));
  for (ByteView d : data) {
    if (!d.empty()) set.gather.push_back(asio::buffer(d.data(), d.size()));
  }
  c.writing = true;
  c.write_set = c.cur;
  // A client that stops reading must not keep its RAM slot leased: past
  // the deadline the socket is closed, the write fails, the lease goes.
  c.write_deadline.expires_after(std::chrono::milliseconds(cfg.write_timeout_ms));
  c.write_deadline.async_wait([this, &c](std::error_code ec) {
    if (ec) return;  // cancelled: written in time (or the connection is gone)
    m->refused.at("write_timeout")->add();
    spdlog::warn("store server: {} did not read its response within {} ms; closing", c.peer,
                 cfg.write_timeout_ms);
    c.close();
  });
  // The handler runs on the connection's strand; the connection outlives
  // it (serve() and refuse() wait for the last write before they end).
  asio::async_write(c.sock, set.gather, [this, &c, &set](std::error_code ec, size_t n) {
    if (set.leased_slot) {
      store->release_ram_lease(*set.leased_slot);
      set.leased_slot.reset();
    }
    m->bytes_out.add(n);
    if (ec) {
      c.write_failed = true;
    } else {
      m->frames_out.add();
    }
    c.writing = false;
    c.write_deadline.cancel();
    c.write_timer.cancel();
  });
  co_return true;
}

asio::awaitable<bool> StoreServer::Impl::send_error(ServerConnection& c, uint64_t request_id,
                                                    const Status& st) {
  auto code = static_cast<size_t>(st.code());
  if (code > 0 && code < m->error_responses.size()) m->error_responses[code]->add();
  co_return co_await send(c, ErrorResponse::from_status(st), request_id);
}

asio::awaitable<void> StoreServer::Impl::malformed(ServerConnection& c, const Status& st,
                                                   uint64_t request_id) {
  ProtocolError pe = protocol_error_of(st);
  if (pe != ProtocolError::kNone) m->malformed[static_cast<size_t>(pe)]->add();
  spdlog::warn("store server: malformed frame from {}: {}; closing that connection", c.peer,
               st.message());
  co_await send_error(c, request_id, st);
}

}  // namespace kvtier::net
