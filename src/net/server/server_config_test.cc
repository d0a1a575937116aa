// The store server's configuration (schema, errors, the token rule) and its
// constant-time token comparison.
#include "net/server/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "blk/dev/mem_device.h"
#include "common/clock.h"
#include "net/client/remote_store.h"
#include "net/server/server_config.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

// ---- Config ---------------------------------------------------------------------------

TEST(ServerConfig, DefaultsAndFullSchema) {
  auto d = parse_server_config("{}");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->listen_address, "127.0.0.1");
  EXPECT_EQ(d->io_threads, 2u);
  EXPECT_TRUE(d->metrics_enabled);
  EXPECT_FALSE(d->store.volume.has_value());

  auto c = parse_server_config(R"({
    // comments are allowed
    "listen": {"address": "0.0.0.0", "port": 9000},
    "metrics": {"address": "127.0.0.1", "port": 9001},
    "io_threads": 4, "store_threads": 8, "auth_token": "t0ken",
    "max_connections": 10, "max_data_bytes": "8MiB", "max_batch": 64,
    "max_match_keys": 4096, "hello_timeout_ms": 1000, "server_name": "s1",
    "store": {"ram_bytes": "1GiB", "max_object_bytes": "1.5MiB",
              "volume": {"path": "/tmp/x.vol", "size": "2GiB", "direct": false, "queue_depth": 32},
              "region_bytes": "16MiB", "io_timeout_ms": 500, "promote_on_disk_hit": false,
              "disk_write_budget_bytes_per_sec": 1000000}
  })");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->listen_address, "0.0.0.0");
  EXPECT_EQ(c->listen_port, 9000);
  EXPECT_EQ(c->metrics_port, 9001);
  EXPECT_EQ(c->io_threads, 4u);
  EXPECT_EQ(c->max_data_bytes, 8u << 20);
  EXPECT_EQ(c->store.ram_bytes, 1ull << 30);
  EXPECT_EQ(c->store.max_object_bytes, 1536u << 10);
  ASSERT_TRUE(c->store.volume.has_value());
  EXPECT_EQ(c->store.volume->size_bytes, 2ull << 30);
  EXPECT_FALSE(c->store.volume->direct);
  EXPECT_EQ(c->store.region_bytes, 16ull << 20);
  EXPECT_FALSE(c->store.promote_on_disk_hit);

  auto off = parse_server_config(R"({"metrics": null})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->metrics_enabled);
}

TEST(ServerConfig, ErrorsNameTheKey) {
  auto e1 = parse_server_config(R"({"listen": {"adress": "127.0.0.1"}})");
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.status().message().find("'listen.adress'"), std::string::npos)
      << e1.status().message();
  auto e2 = parse_server_config(R"({"store": {"volume": {"path": "/x", "sise": 1}}})");
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("'store.volume.sise'"), std::string::npos);
  auto e3 = parse_server_config(R"({"io_threads": "two"})");
  ASSERT_FALSE(e3.ok());
  EXPECT_NE(e3.status().message().find("'io_threads'"), std::string::npos);
  auto e4 = parse_server_config(R"({"store": {"ram_bytes": "12 parsecs"}})");
  ASSERT_FALSE(e4.ok());
  EXPECT_NE(e4.status().message().find("store.ram_bytes"), std::string::npos);
  EXPECT_FALSE(parse_server_config("[1, 2]").ok());
  EXPECT_FALSE(parse_server_config("{").ok());
  EXPECT_FALSE(parse_server_config(R"({"listen": {"port": 70000}})").ok());
  EXPECT_FALSE(parse_server_config(R"({"listen": {"address": "localhost"}})").ok());
  EXPECT_FALSE(parse_server_config(R"({"store": {"ram_bytes": 0}})").ok());  // no tier at all
}

TEST(ServerConfig, NonLoopbackListenerNeedsAToken) {
  auto bad = parse_server_config(R"({"listen": {"address": "0.0.0.0"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a credential is required"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(parse_server_config(R"({"listen": {"address": "::"}})").ok());
  EXPECT_TRUE(parse_server_config(R"({"listen": {"address": "::1"}})").ok());
  EXPECT_TRUE(parse_server_config(R"({"listen": {"address": "127.0.0.2"}})").ok());
  EXPECT_TRUE(parse_server_config(R"({"listen": {"address": "0.0.0.0"}, "auth_token": "x"})").ok());

  // Enforced by StoreServer::start too, whatever built the config.
  ServerConfig c = test_config();
  c.listen_address = "0.0.0.0";
  auto s = StoreServer::start(c, small_store());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("auth_token"), std::string::npos);

  // A token file works and its trailing newline is not part of the token.
  std::string path = ::testing::TempDir() + "/kvtier_token_test";
  std::ofstream(path) << "from-file\n";
  auto f = parse_server_config(R"({"listen": {"address": "0.0.0.0"}, "auth_token_file": ")" + path +
                               "\"}");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->auth_token, "from-file");
  std::remove(path.c_str());
}

TEST(ServerConfig, ParseSize) {
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("64KiB"), 64u << 10);
  EXPECT_EQ(*parse_size("1.5 MiB"), 1536u << 10);
  EXPECT_EQ(*parse_size("2g"), 2ull << 30);
  EXPECT_EQ(*parse_size("1TiB"), 1ull << 40);
  EXPECT_FALSE(parse_size("").ok());
  EXPECT_FALSE(parse_size("MiB").ok());
  EXPECT_FALSE(parse_size("1.2.3").ok());
  EXPECT_FALSE(parse_size("0.3B").ok());
  EXPECT_FALSE(parse_size("99999999999999999999").ok());
  EXPECT_FALSE(parse_size("20000000TiB").ok());
}

TEST(StoreServer, TokenCompare) {
  EXPECT_TRUE(token_equal("abc", "abc"));
  EXPECT_FALSE(token_equal("abc", "abd"));
  EXPECT_FALSE(token_equal("abc", "abcd"));
  EXPECT_FALSE(token_equal("", "x"));
  EXPECT_TRUE(token_equal("", ""));
}

}  // namespace
}  // namespace kvtier::net
