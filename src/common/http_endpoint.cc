#include "common/http_endpoint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <asio.hpp>
#include <memory>
#include <thread>

namespace kvtier {

namespace {

constexpr size_t kMaxHead = 8192;

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string render(const HttpResponse& r, bool head_only) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
      r.status, reason_phrase(r.status), r.content_type, r.body.size());
  if (!head_only) out += r.body;
  return out;
}

}  // namespace

bool parse_request_line(const std::string& head, std::string* method, std::string* path) {
  size_t eol = head.find("\r\n");
  std::string line = head.substr(0, eol);
  size_t a = line.find(' ');
  if (a == std::string::npos || a == 0) return false;
  size_t b = line.find(' ', a + 1);
  if (b == std::string::npos || b == a + 1) return false;
  if (line.compare(b + 1, 5, "HTTP/") != 0) return false;
  *method = line.substr(0, a);
  *path = line.substr(a + 1, b - a - 1);
  if ((*path)[0] != '/') return false;
  size_t q = path->find('?');
  if (q != std::string::npos) path->resize(q);
  return true;
}

struct HttpEndpoint::Impl {
  HttpEndpointOptions opts;
  Handler handler;
  asio::io_context io{1};
  asio::ip::tcp::acceptor acceptor{io};
  std::thread thread;

  asio::awaitable<void> serve(asio::ip::tcp::socket accepted) {
    // The deadline's handler may already be queued when the request ends
    // and this frame is freed: it holds the socket weakly, never a
    // reference into the frame, and closes without throwing.
    auto sock = std::make_shared<asio::ip::tcp::socket>(std::move(accepted));
    asio::ip::tcp::socket& socket = *sock;
    asio::steady_timer deadline(socket.get_executor());
    deadline.expires_after(std::chrono::milliseconds(opts.request_timeout_ms));
    deadline.async_wait([weak = std::weak_ptr<asio::ip::tcp::socket>(sock)](std::error_code ec) {
      auto s = weak.lock();
      if (ec || !s) return;
      std::error_code ignored;
      s->close(ignored);
    });
    std::string head;
    HttpResponse resp;
    bool head_only = false;
    try {
      auto buf = asio::dynamic_buffer(head, kMaxHead);
      co_await asio::async_read_until(socket, buf, "\r\n\r\n", asio::use_awaitable);
      std::string method, path;
      if (!parse_request_line(head, &method, &path)) {
        resp = {400, "text/plain", "malformed request line\n"};
      } else if (method != "GET" && method != "HEAD") {
        resp = {405, "text/plain", "only GET and HEAD\n"};
      } else {
        head_only = method == "HEAD";
        resp = handler(path);
      }
    } catch (const std::system_error& e) {
      if (e.code() == asio::error::not_found) {  // head larger than kMaxHead
        resp = {431, "text/plain", "request head too large\n"};
      } else {
        deadline.cancel();
        co_return;  // client went away or timed out
      }
    }
    std::string out = render(resp, head_only);
    std::error_code ec;
    co_await asio::async_write(socket, asio::buffer(out),
                               asio::redirect_error(asio::use_awaitable, ec));
    deadline.cancel();
    socket.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  }

  asio::awaitable<void> listen() {
    for (;;) {
      std::error_code ec;
      auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue;
      }
      asio::co_spawn(io, serve(std::move(socket)), asio::detached);
    }
  }
};

HttpEndpoint::HttpEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::start(const HttpEndpointOptions& options,
                                                          Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->opts = options;
  impl->handler = std::move(handler);
  std::error_code ec;
  auto addr = asio::ip::make_address(options.address, ec);
  if (ec) return Status::invalid_argument(fmt::format("bad listen address '{}'", options.address));
  asio::ip::tcp::endpoint ep(addr, options.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::unavailable(
        fmt::format("cannot listen on {}:{}: {}", options.address, options.port, ec.message()));
  }
  Impl* raw = impl.get();
  asio::co_spawn(raw->io, raw->listen(), asio::detached);
  raw->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<HttpEndpoint>(new HttpEndpoint(std::move(impl)));
}

HttpEndpoint::~HttpEndpoint() {
  asio::post(impl_->io, [this] {
    std::error_code ec;
    impl_->acceptor.close(ec);
    impl_->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t HttpEndpoint::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace kvtier
