// HttpEndpoint: a minimal HTTP/1.1 server for operational endpoints such as
// Prometheus' /metrics and a /health probe. It is deliberately not a general
// web server: GET and HEAD only, the request head is bounded (8 KiB), one
// response per connection, a slow client is cut off after a timeout. It runs
// on its own thread so scrapes never compete with the data path's I/O threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvtier {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
};

struct HttpEndpointOptions {
  std::string address = "127.0.0.1";  // loopback unless configured
  uint16_t port = 0;                  // 0 = pick a free port
  uint32_t request_timeout_ms = 5000;
};

class HttpEndpoint {
 public:
  // Called on the endpoint's thread with the request path ("/metrics").
  using Handler = std::function<HttpResponse(const std::string& path)>;

  static Result<std::unique_ptr<HttpEndpoint>> start(const HttpEndpointOptions& options,
                                                     Handler handler);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  uint16_t port() const;

 private:
  struct Impl;
  explicit HttpEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Parses "GET /path HTTP/1.1" into method and path; false if malformed.
bool parse_request_line(const std::string& head, std::string* method, std::string* path);

}  // namespace kvtier
