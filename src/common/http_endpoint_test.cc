#include "common/http_endpoint.h"

#include <gtest/gtest.h>

#include <asio.hpp>

namespace kvtier {
namespace {

std::string http_get(uint16_t port, const std::string& request) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(request));
  std::string out;
  std::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

TEST(HttpEndpoint, ServesHandlerAndRejectsBadRequests) {
  auto ep = HttpEndpoint::start({}, [](const std::string& path) {
    if (path == "/metrics") return HttpResponse{200, "text/plain", "kvtier_up 1\n"};
    return HttpResponse{404, "text/plain", "no\n"};
  });
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  uint16_t port = (*ep)->port();
  std::string r = http_get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("kvtier_up 1"), std::string::npos);
  EXPECT_NE(http_get(port, "GET /nope HTTP/1.1\r\n\r\n").find("404"), std::string::npos);
  EXPECT_NE(http_get(port, "POST /metrics HTTP/1.1\r\n\r\n").find("405"), std::string::npos);
  EXPECT_NE(http_get(port, "garbage\r\n\r\n").find("400"), std::string::npos);
  std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(10000, 'a') + "\r\n\r\n";
  EXPECT_NE(http_get(port, huge).find("431"), std::string::npos);
  std::string head = http_get(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_NE(head.find("Content-Length: 12"), std::string::npos);
  EXPECT_EQ(head.find("kvtier_up"), std::string::npos);
}

TEST(HttpEndpoint, ParseRequestLine) {
  std::string m, p;
  EXPECT_TRUE(parse_request_line("GET /a?b=1 HTTP/1.0\r\n", &m, &p));
  EXPECT_EQ(p, "/a");
  EXPECT_FALSE(parse_request_line("GET a HTTP/1.1\r\n", &m, &p));
  EXPECT_FALSE(parse_request_line("GET /a\r\n", &m, &p));
  EXPECT_FALSE(parse_request_line(" /a HTTP/1.1", &m, &p));
}

TEST(HttpEndpoint, RefusesBadAddress) {
  HttpEndpointOptions o;
  o.address = "not-an-ip";
  EXPECT_EQ(HttpEndpoint::start(o, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
