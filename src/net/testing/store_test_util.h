// Shared by the store service's tests: a small real Store, a loopback
// server config, clients, and a raw POSIX client for speaking broken or
// hostile protocol.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "blk/dev/mem_device.h"
#include "common/testing/eventually.h"
#include "kv/test_payload.h"
#include "kv/testing/small_store.h"
#include "net/client/remote_store.h"
#include "net/server/server_config.h"
#include "net/server/store_server.h"
#include "net/wire/protocol.h"

namespace kvtier::net::testing {

using std::chrono::milliseconds;

inline constexpr uint32_t kObj = 64 << 10;

// The payload and key helpers every store-service test uses, so that a test
// file needs only this header and `using namespace testing`.
using kv::fill_payload;
using kv::payload_matches;
using kv::test_key;
using kv::test_namespace;

inline std::unique_ptr<kv::Store> small_store(uint64_t ram_slots = 64) {
  return kv::testing::open_store(kv::testing::small_store_options(
      std::make_shared<blk::MemDevice>(64 << 20), ram_slots, kObj));
}

inline ServerConfig test_config() {
  ServerConfig c;
  c.listen_port = 0;
  c.metrics_port = 0;
  c.io_threads = 2;
  c.store_threads = 2;
  c.hello_timeout_ms = 2000;
  c.store.max_object_bytes = kObj;
  return c;
}

inline std::unique_ptr<StoreServer> start_server(const ServerConfig& c = test_config(),
                                                 std::unique_ptr<kv::Store> store = nullptr) {
  auto s = StoreServer::start(c, store ? std::move(store) : small_store());
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline RemoteStoreOptions client_options(uint16_t port) {
  RemoteStoreOptions o;
  o.port = port;
  o.connections = 2;
  // Generous: these tests share two cores with everything else. The tests
  // about timeouts set their own.
  o.call_timeout_ms = 5000;
  o.connect_timeout_ms = 2000;
  o.reconnect_min_ms = 10;
  o.reconnect_max_ms = 100;
  return o;
}

// TCP only (no shared memory, no direct channel): what a client on another
// host gets.
inline RemoteStoreOptions tcp_client_options(uint16_t port, unsigned connections = 2) {
  RemoteStoreOptions o = client_options(port);
  o.shared_memory = false;
  o.connections = connections;
  return o;
}

inline std::unique_ptr<RemoteStore> connect(const RemoteStoreOptions& o, bool must_connect = true) {
  auto c = RemoteStore::open(o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (must_connect) {
    Status st = (*c)->wait_connected(20000);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  return std::move(c).value();
}

// Waits until a client's connection attempt is answered either way: OK once
// a session is up, otherwise the first error whose message holds `expect`
// (any error when empty). Unlike wait_connected(ms), which returns whatever
// error it last saw when its time runs out, a refusal that comes late on a
// busy machine is still recognised; the long bound only catches a hang.
inline Status wait_answered(RemoteStore& c, const std::string& expect = "",
                            milliseconds timeout = milliseconds(30000)) {
  Status last;
  const bool answered = kvtier::testing::eventually(
      [&] {
        if (c.connected()) return true;
        last = c.last_error();
        return !last.ok() && last.message().find(expect) != std::string::npos;
      },
      timeout);
  if (c.connected()) return Status::ok_status();
  return answered ? last : Status::timeout("no answer; last error: " + last.to_string());
}

// A blocking POSIX client for speaking raw (and broken) protocol.
class RawClient {
 public:
  // `rcvbuf` > 0: a small receive buffer, so that the server's writes block.
  explicit RawClient(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool send(ByteView bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool send_message(const Message& m, uint64_t id, std::span<const ByteView> data = {}) {
    auto f = encode_message_frame(m, id, data);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() && send(*f);
  }
  bool hello(const std::string& token = "") {
    HelloRequest h;
    h.client_name = "raw-test";
    h.auth_token = token;
    if (!send_message(h, 1)) return false;
    auto f = read_frame();
    return f.ok() && f->header.type == MessageType::kHelloResponse;
  }

  // The next frame, or an error: Unavailable at EOF or reset, Timeout.
  Result<Frame> read_frame(int timeout_ms = 3000) {
    auto until = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
    for (;;) {
      if (!pending_.empty()) {
        auto used = dec_.feed(pending_);
        if (!used.ok()) return used.status();
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(*used));
        if (dec_.state() == FrameDecoder::State::kReady) return dec_.take_frame();
      }
      auto left =
          std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Status::timeout("no frame");
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      std::byte buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return Status::unavailable("connection closed");
      pending_.insert(pending_.end(), buf, buf + n);
    }
  }

  // True if the server closes the connection within the timeout (frames it
  // sends first are skipped).
  bool closed_by_peer(int timeout_ms = 3000) {
    auto until = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
    for (;;) {
      auto left =
          std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      std::byte buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  FrameDecoder dec_;
  std::vector<std::byte> pending_;
};

inline uint64_t metric_value(const std::string& text, const std::string& name) {
  size_t at = 0;
  while ((at = text.find(name, at)) != std::string::npos) {
    if ((at == 0 || text[at - 1] == '\n') && text[at + name.size()] == ' ') {
      return std::stoull(text.substr(at + name.size() + 1));
    }
    at += name.size();
  }
  return UINT64_MAX;
}

inline std::string http_fetch(uint16_t port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Hello and RegisterNamespace(test_namespace()) on a raw client: the handle.
inline std::optional<uint16_t> raw_session(RawClient& raw) {
  if (!raw.connected() || !raw.hello()) return std::nullopt;
  if (!raw.send_message(RegisterNamespaceRequest{test_namespace()}, 2)) return std::nullopt;
  auto reg = raw.read_frame();
  if (!reg.ok()) return std::nullopt;
  auto handle = RegisterNamespaceResponse::decode(reg->descriptor);
  if (!handle.ok()) return std::nullopt;
  return handle->handle;
}

}  // namespace kvtier::net::testing
