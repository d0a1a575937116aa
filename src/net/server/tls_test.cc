// TLS on the store protocol: real server, real client, real OpenSSL, with
// certificates made for the test (net/wire/tls_certs.h). Each case asserts what
// gets through and what does not: a plain client, a client that does not
// trust the server, a server whose certificate does not name the address,
// a client without a certificate (or with one from another CA) under mutual
// TLS, and tenants named by their certificates, who cannot reach each
// other's blocks.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/buffer.h"
#include "net/testing/store_test_util.h"
#include "net/wire/tls_certs.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

class StoreTls : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-tls-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto pki = write_test_pki(dir_ / "pki", {"alice", "bob"});
    ASSERT_TRUE(pki.ok()) << pki.status().to_string();
    pki_ = *pki;
    auto rogue = write_test_pki(dir_ / "rogue", {"alice"});
    ASSERT_TRUE(rogue.ok()) << rogue.status().to_string();
    rogue_ = *rogue;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ServerConfig tls_config(bool mutual) const {
    ServerConfig c = test_config();
    c.tls = ServerTlsConfig{pki_.server_cert, pki_.server_key, mutual ? pki_.ca_file : ""};
    return c;
  }
  RemoteStoreOptions tls_client(uint16_t port, const std::string& cert_name = "",
                                const TestPki* issuer = nullptr) const {
    RemoteStoreOptions o = client_options(port);
    o.tls.ca_file = pki_.ca_file;
    if (!cert_name.empty()) {
      const TestPki& p = issuer ? *issuer : pki_;
      o.tls.cert_file = p.client_cert(cert_name);
      o.tls.key_file = p.client_key(cert_name);
    }
    return o;
  }
  // Whether a client with these options gets a session: OK, or the first
  // error whose message holds `expect`.
  static Status try_connect(const RemoteStoreOptions& o, const std::string& expect = "") {
    auto c = RemoteStore::open(o);
    if (!c.ok()) return c.status();
    return wait_answered(**c, expect);
  }

  std::filesystem::path dir_;
  TestPki pki_, rogue_;
};

// Puts and gets of every size class over TLS give back the bytes put.
void round_trip(RemoteStore& c) {
  auto ns = c.register_namespace(test_namespace());
  ASSERT_TRUE(ns.ok()) << ns.status().to_string();
  std::vector<kv::Key128> keys;
  for (uint32_t size : {1u, 4095u, 4096u, 65536u}) {
    const kv::Key128 k = test_key(size);
    keys.push_back(k);
    std::vector<std::byte> in(size), out(kObj);
    fill_payload(k, in);
    auto p = c.put(*ns, k, in);
    ASSERT_TRUE(p.ok() && p->stored()) << size;
    auto g = c.get(*ns, k, out);
    ASSERT_TRUE(g.ok() && g->hit) << size;
    ASSERT_EQ(g->length, size);
    EXPECT_TRUE(payload_matches(k, ByteView(out).first(size))) << size;
  }
  std::vector<AlignedBuffer> bufs;
  std::vector<kv::BatchGetItem> items;
  for (const auto& k : keys) {
    bufs.emplace_back(kObj);
    items.push_back({k, bufs.back().view()});
  }
  auto b = c.batch_get(*ns, items);
  ASSERT_TRUE(b.ok());
  for (const auto& r : *b) EXPECT_TRUE(r.hit);
  auto m = c.match_prefix(*ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, keys.size());
}

TEST_F(StoreTls, ServerCertificateOnlyCarriesEveryCall) {
  auto s = start_server(tls_config(false));
  ASSERT_TRUE(s);
  RemoteStoreOptions o = tls_client(s->port());
  o.shared_memory = false;
  auto c = connect(o);
  round_trip(*c);
  EXPECT_EQ(c->client_stats().shm_calls, 0u);  // every byte went through TLS
  // The same through the name in the certificate's DNS entry.
  o.host = "localhost";
  auto by_name = connect(o);
  EXPECT_TRUE(by_name->connected());
}

TEST_F(StoreTls, PlainClientsAndUntrustingClientsGetNothing) {
  auto s = start_server(tls_config(false));
  ASSERT_TRUE(s);
  const uint64_t before =
      metric_value(s->render_metrics(), "kvtier_server_connections_refused_total{reason=\"tls\"}");
  // A plain client speaks Hello into a TLS handshake: no session.
  EXPECT_FALSE(try_connect(client_options(s->port())).ok());
  // A client that trusts another CA refuses the server.
  RemoteStoreOptions o = tls_client(s->port());
  o.tls.ca_file = rogue_.ca_file;
  Status st = try_connect(o, "TLS handshake");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("TLS handshake"), std::string::npos) << st.to_string();
  // The server counts a failed handshake when its side of it ends, which may
  // be after the client has given up.
  EXPECT_TRUE(kvtier::testing::eventually([&] {
    return metric_value(s->render_metrics(),
                        "kvtier_server_connections_refused_total{reason=\"tls\"}") > before;
  }));
  // A legitimate client is still served.
  auto c = connect(tls_client(s->port()));
  EXPECT_TRUE(c->connected());
}

TEST_F(StoreTls, CertificateMustNameTheAddress) {
  // 127.0.0.2 is loopback, but the server's certificate does not name it.
  ServerConfig cfg = tls_config(false);
  cfg.listen_address = "127.0.0.2";
  auto s = start_server(cfg);
  ASSERT_TRUE(s);
  RemoteStoreOptions o = tls_client(s->port());
  o.host = "127.0.0.2";
  Status st = try_connect(o, "TLS handshake");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("TLS handshake"), std::string::npos) << st.to_string();
}

TEST_F(StoreTls, MutualTlsNeedsAClientCertificateFromTheCa) {
  auto s = start_server(tls_config(true));
  ASSERT_TRUE(s);
  EXPECT_FALSE(try_connect(tls_client(s->port())).ok());                    // no certificate
  EXPECT_FALSE(try_connect(tls_client(s->port(), "alice", &rogue_)).ok());  // another CA's
  auto c = connect(tls_client(s->port(), "alice"));
  round_trip(*c);
}

TEST_F(StoreTls, TenantsNamedByCertificateCannotReachEachOther) {
  ServerConfig cfg = tls_config(true);
  TenantConfig a, b;
  a.name = "team-a";
  a.client_cert_cn = "alice";
  b.name = "team-b";
  b.client_cert_cn = "bob";
  b.token = "token-of-team-b-0123456789";
  cfg.tenants = {a, b};
  auto s = start_server(cfg);
  ASSERT_TRUE(s);
  auto alice = connect(tls_client(s->port(), "alice"));
  auto bob = connect(tls_client(s->port(), "bob"));
  const uint16_t na = *alice->register_namespace(test_namespace());
  const uint16_t nb = *bob->register_namespace(test_namespace());
  std::vector<std::byte> in(4096), out(kObj);
  fill_payload(test_key(7), in);
  ASSERT_TRUE(alice->put(na, test_key(7), in)->stored());
  auto g = bob->get(nb, test_key(7), out);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);  // same model fields, same key: another tenant's block
  EXPECT_EQ(bob->match_prefix(nb, std::vector<kv::Key128>{test_key(7)})->blocks, 0u);
  EXPECT_TRUE(alice->get(na, test_key(7), out)->hit);
  // Alice's certificate with Bob's token: the two disagree, refused.
  RemoteStoreOptions mixed = tls_client(s->port(), "alice");
  mixed.auth_token = b.token;
  Status st = try_connect(mixed, "authentication failed");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("authentication failed"), std::string::npos) << st.to_string();
}

TEST(StoreTlsConfig, ParsedAndChecked) {
  auto ok = parse_server_config(R"({"listen": {"address": "0.0.0.0"},
      "tls": {"cert_file": "s.pem", "key_file": "s.key", "client_ca_file": "ca.pem"},
      "tenants": [{"name": "a", "client_cert_cn": "alice"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();  // mutual TLS stands in for a token
  ASSERT_TRUE(ok->tls.has_value());
  EXPECT_EQ(ok->tls->client_ca_file, "ca.pem");
  EXPECT_EQ(ok->tenants[0].client_cert_cn, "alice");
  // Off loopback, TLS without client certificates still needs a credential.
  EXPECT_FALSE(parse_server_config(R"({"listen": {"address": "0.0.0.0"},
      "tls": {"cert_file": "s.pem", "key_file": "s.key"}})")
                   .ok());
  // A tenant named by certificate needs mutual TLS.
  EXPECT_FALSE(parse_server_config(R"({"tls": {"cert_file": "s.pem", "key_file": "s.key"},
      "tenants": [{"name": "a", "client_cert_cn": "alice"}]})")
                   .ok());
  EXPECT_FALSE(parse_server_config(R"({"tls": {"cert_file": "s.pem"}})").ok());
  EXPECT_FALSE(parse_server_config(R"({"tls": {"cert_file": "s.pem", "key_file": "k",
      "typo": 1}})")
                   .ok());
  // Files that do not exist: the server does not start, and says which.
  ServerConfig c = test_config();
  c.tls = ServerTlsConfig{"/nonexistent/s.pem", "/nonexistent/s.key", ""};
  auto s = StoreServer::start(c, small_store());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/s.pem"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::net
