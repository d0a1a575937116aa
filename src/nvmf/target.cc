// Listener, connection threads and keep-alive sweeper of the NVMe/TCP target.
#include "nvmf/target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "nvmf/queue_connection.h"
#include "nvmf/socket_stream.h"

namespace kvtier::nvmf {

struct NvmfTarget::Conn {
  std::unique_ptr<SocketStream> stream;
  std::thread thread;
  std::atomic<bool> done{false};
};

Result<std::unique_ptr<NvmfTarget>> NvmfTarget::start(TargetConfig config) {
  KVTIER_RETURN_IF_ERROR(validate_target_config(config));
  std::unique_ptr<NvmfTarget> t(new NvmfTarget());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(config.port);
  if (inet_pton(AF_INET, config.address.c_str(), &addr.sin_addr) != 1) {
    return Status::invalid_argument("nvmf: listen address must be IPv4: " + config.address);
  }
  t->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (t->listen_fd_ < 0) return Status::io_error("nvmf: socket failed");
  int one = 1;
  setsockopt(t->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(t->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(t->listen_fd_, 128) != 0) {
    return Status::unavailable("nvmf: cannot listen on " + config.address + ":" +
                               std::to_string(config.port) + ": " + strerror(errno));
  }
  socklen_t len = sizeof addr;
  getsockname(t->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  t->port_ = ntohs(addr.sin_port);
  config.port = t->port_;
  t->state_ = std::make_unique<TargetState>(std::move(config));
  t->acceptor_ = std::thread([p = t.get()] { p->accept_loop(); });
  t->keepalive_ = std::thread([p = t.get()] { p->keepalive_loop(); });
  return t;
}

NvmfTarget::~NvmfTarget() { stop(); }

void NvmfTarget::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (keepalive_.joinable()) keepalive_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  {
    std::lock_guard lk(conns_mu_);
    for (auto& c : conns_) c->stream->shutdown();
  }
  reap(true);
}

void NvmfTarget::reap(bool all) {
  std::list<std::unique_ptr<Conn>> finished;
  {
    std::lock_guard lk(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all || (*it)->done) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) c->thread.join();
}

size_t NvmfTarget::live_connections() {
  std::lock_guard lk(conns_mu_);
  size_t n = 0;
  for (const auto& c : conns_) n += c->done ? 0 : 1;
  return n;
}

void NvmfTarget::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) {
      reap(false);
      continue;
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    reap(false);
    if (live_connections() >= state_->config().max_connections) {
      // A flood of idle connections must not cost a thread each: close at
      // once; the ones already here lose their slot at the handshake deadline.
      ::close(fd);
      state_->count(TargetState::Event::kConnectionRefused);
      continue;
    }
    tune_socket(fd);
    bound_socket_sends(fd, state_->config().send_timeout_ms, state_->config().tcp_user_timeout_ms);
    auto c = std::make_unique<Conn>();
    c->stream = std::make_unique<SocketStream>(fd);
    c->stream->set_send_timeout(state_->config().send_timeout_ms);
    Conn* raw = c.get();
    {
      std::lock_guard lk(conns_mu_);
      conns_.push_back(std::move(c));
    }
    ++served_;
    raw->thread = std::thread([this, raw] {
      {
        QueueConnection q(*state_, *raw->stream);
        Status st = q.run();
        spdlog::debug("nvmf: connection ended: {}", st.to_string());
      }
      raw->done = true;
    });
    reap(false);
  }
}

void NvmfTarget::keepalive_loop() {
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int n = state_->expire_keepalives(monotonic_ns());
    if (n) spdlog::warn("nvmf: {} controller(s) keep-alive timer expired", n);
  }
}

}  // namespace kvtier::nvmf
