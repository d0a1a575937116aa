// DH-HMAC-CHAP's pieces: the secret's text form (the NVMe specification's
// example secret), key transforms and responses against vectors computed
// outside this code from the specification's rules, the messages' layouts,
// the Diffie-Hellman exchange, and a whole transaction between the host's
// code and the controller's in memory, with right and wrong keys.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>

#include <fmt/format.h>

#include "common/testing/temp_dir.h"
#include "nvmf/auth_host.h"
#include "nvmf/auth_target.h"
#include "nvmf/dhchap.h"
#include "nvmf/dhchap_dh.h"

namespace kvtier::nvmf {
namespace {

using namespace dhchap;

std::string hex(BytesView b) {
  std::string s;
  for (uint8_t c : b) s += fmt::format("{:02x}", c);
  return s;
}
Bytes counting(uint8_t from, size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(from + i);
  return b;
}

constexpr const char* kSpecSecret = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
constexpr const char* kHostNqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
constexpr const char* kSubNqn = "nqn.2024-01.io.example:subsys1";

TEST(Dhchap, TheSpecificationsExampleSecretParsesAndFormatsBack) {
  auto s = parse_secret(kSpecSecret);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->transform, 0);
  EXPECT_EQ(hex(s->key), "89aeb31a874eaf84841b46736b0dfdf2ba58d30aa2a545a3e235a3521e07594c");
  EXPECT_EQ(format_secret(*s), kSpecSecret);
  // A newline from a key file is not part of it.
  EXPECT_TRUE(parse_secret(std::string(kSpecSecret) + "\n").ok());
}

TEST(Dhchap, MalformedSecretsAreRefusedWithTheReason) {
  std::string typo = kSpecSecret;
  typo[20] = typo[20] == 'A' ? 'B' : 'A';  // one character off: the CRC catches it
  EXPECT_NE(parse_secret(typo).status().message().find("CRC"), std::string::npos);
  EXPECT_FALSE(parse_secret("DHHC-2:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:").ok());
  EXPECT_FALSE(parse_secret("DHHC-1:04:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:").ok());
  EXPECT_FALSE(parse_secret("DHHC-1:00:ia6zGodOr4SEG0Zz:").ok());  // 12 bytes
  EXPECT_FALSE(parse_secret("DHHC-1:00:!!!!GodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:").ok());
  EXPECT_FALSE(parse_secret("").ok());
  for (size_t n : {32u, 48u, 64u}) {
    auto g = generate_secret(1, n);
    ASSERT_TRUE(g.ok());
    auto back = parse_secret(format_secret(*g));
    ASSERT_TRUE(back.ok()) << format_secret(*g);
    EXPECT_EQ(back->key, g->key);
    EXPECT_EQ(back->transform, 1);
  }
}

// The vectors were computed with Python's hmac/hashlib from the rules in
// docs/nvme-tcp.md ("In-band authentication"), not by this code.
TEST(Dhchap, KeyTransformAndResponsesMatchVectors) {
  Secret s = *parse_secret(kSpecSecret);
  s.transform = 1;
  const Bytes tk_host = transformed_key(s, kHostNqn);
  const Bytes tk_ctrl = transformed_key(s, kSubNqn);
  EXPECT_EQ(hex(tk_host), "30ec326a9164ef751470fc129b83a2f17593c43d19f4c615c46e65ba3ff72021");
  EXPECT_EQ(hex(tk_ctrl), "d18e9f486cc18ae55fc39adf5c26d9cddb47c3532f81e7f2e6753493553eb1e0");
  s.transform = 2;
  EXPECT_EQ(hex(transformed_key(s, kHostNqn)),
            "b1b647e1306a77ca73842f3252bd58ee3b705e14d89a961238c7d245f628a363ce6fc0ea1e94b21b61437"
            "61b782ecfe2");
  const Bytes c1 = counting(0x00, 32), c2 = counting(0x20, 32);
  EXPECT_EQ(hex(host_response(Hash::kSha256, tk_host, c1, 0x12345678, 1, kHostNqn, kSubNqn)),
            "aa1929e2d35e2ca96e809b73ff75bd1faa48830a77ef15865a5c75e6a5522262");
  EXPECT_EQ(hex(controller_response(Hash::kSha256, tk_ctrl, c2, 0x9abcdef0, 1, kSubNqn, kHostNqn)),
            "9b0011c2628faee3edfad3a2ef90ce6bed1c7266a6c7db2c4de916ae456cf446");
  s.transform = 0;  // untransformed: the key itself keys the HMAC
  EXPECT_EQ(hex(host_response(Hash::kSha256, transformed_key(s, kHostNqn), c1, 0x12345678, 1,
                              kHostNqn, kSubNqn)),
            "10d02f90dc66cbc70003f4fe41bc5f1066e3e3c77d0c27bb5034557bc76946ef");
  // With a group: the shared secret is hashed whole, padded to the prime's size.
  Bytes z(256, 0);
  z.back() = 0x40;
  EXPECT_EQ(hex(augmented_challenge(Hash::kSha256, z, c1)),
            "575058699823e7447c59daab7be80a1b9d184be8b9753ce3831d947b3370515c");
  EXPECT_EQ(hex(host_response(Hash::kSha256, tk_host, augmented_challenge(Hash::kSha256, z, c1),
                              0x12345678, 1, kHostNqn, kSubNqn)),
            "2208d81dd68548b6cb4841e21f1d9de9d40290bbc5fb93cbc8974dd3565a4905");
}

TEST(Dhchap, NegotiateHasTheKernelsLayout) {
  Negotiate n;
  n.hashes = {1, 2, 3};
  n.groups = {0, 1, 2, 3, 4, 5};
  const Bytes b = encode(n);
  ASSERT_EQ(b.size(), 72u);
  EXPECT_EQ(hex(BytesView(b).first(15)), "000000000000000101000306010203");
  EXPECT_EQ(hex(BytesView(b).subspan(42, 6)), "000102030405");
  auto back = decode(b);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<Negotiate>(*back).groups, n.groups);
}

TEST(Dhchap, MessagesRoundTripAndShortOnesAreRefused) {
  Challenge c{7, Hash::kSha384, DhGroup::kFfdhe2048, 99, counting(1, 48), counting(9, 256)};
  Reply r{7, 5, counting(2, 48), true, counting(3, 48), counting(4, 256)};
  Success1 s1{7, 48, true, counting(5, 48)};
  for (const Message& m : {Message(c), Message(r), Message(s1), Message(Success2{7}),
                           Message(Failure{7, true, Reason::kFailed})}) {
    const Bytes b = encode(m);
    auto back = decode(b);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(encode(*back), b);
    // Padding after a message (a Receive's allocation length) is ignored...
    Bytes padded = b;
    padded.resize(4096);
    EXPECT_TRUE(decode(padded).ok());
    // ...and a message cut short is refused, whatever its fields claim.
    if (b.size() > 8) {
      EXPECT_FALSE(decode(BytesView(b).first(b.size() - 1)).ok());
    }
  }
  Bytes bad = encode(c);
  bad[6] = 32;  // a hash length that is not SHA-384's
  EXPECT_FALSE(decode(bad).ok());
  bad = encode(c);
  bad[11] = 0;  // DHVLEN 0 (LE16 at 10): not the group's 256
  EXPECT_FALSE(decode(bad).ok());
}

TEST(Dhchap, DiffieHellmanAgreesAndRefusesDegenerateValues) {
  auto a = DhKeyPair::generate(DhGroup::kFfdhe2048);
  auto b = DhKeyPair::generate(DhGroup::kFfdhe2048);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  ASSERT_EQ(a->public_value().size(), 256u);
  auto zab = a->shared_secret(b->public_value());
  auto zba = b->shared_secret(a->public_value());
  ASSERT_TRUE(zab.ok() && zba.ok()) << zab.status().to_string();
  EXPECT_EQ(*zab, *zba);
  EXPECT_EQ(zab->size(), 256u);
  Bytes one(256, 0);
  one.back() = 1;  // y = 1 would make the secret 1, whatever a's key
  EXPECT_FALSE(a->shared_secret(one).ok());
  EXPECT_FALSE(a->shared_secret(Bytes(256, 0)).ok());
  EXPECT_FALSE(a->shared_secret(Bytes(255, 7)).ok());  // not the group's size
}

// The host's transaction against the controller's state machine, in memory.
struct Pair {
  HostAuthConfig target_side;
  HostAuthKeys host_side;
  Status run(TargetAuth& t) {
    AuthChannel ch;
    ch.send = [&](BytesView m) {
      t.on_send(m);
      return Status::ok_status();
    };
    ch.receive = [&](uint32_t al) -> Result<Bytes> {
      Bytes b = t.on_receive();
      b.resize(al);  // as the target pads it
      return b;
    };
    return authenticate(ch, host_side, kHostNqn, kSubNqn, 3);
  }
};

Pair keys(bool bidirectional, DhGroup group) {
  Pair p;
  p.target_side.host_key = *generate_secret(1, 32);
  p.target_side.group = group;
  p.host_side.host_key = p.target_side.host_key;
  if (bidirectional) {
    p.target_side.ctrl_key = *generate_secret(3, 64);
    p.host_side.ctrl_key = p.target_side.ctrl_key;
  }
  return p;
}

TEST(DhchapTransaction, RightKeysAuthenticateInEveryMode) {
  for (bool bidirectional : {false, true}) {
    for (DhGroup g : {DhGroup::kNull, DhGroup::kFfdhe2048, DhGroup::kFfdhe4096}) {
      Pair p = keys(bidirectional, g);
      TargetAuth t(p.target_side, kSubNqn, kHostNqn);
      EXPECT_TRUE(p.run(t).ok()) << group_name(g) << " bidirectional " << bidirectional;
      EXPECT_TRUE(t.authenticated());
      EXPECT_FALSE(t.failed());
      // A second transaction on the same queue (re-authentication) works too.
      EXPECT_TRUE(p.run(t).ok());
    }
  }
}

TEST(DhchapTransaction, WrongKeysFailOnTheSideThatChecks) {
  {  // the host's key differs: the controller refuses it (Failure1)
    Pair p = keys(false, DhGroup::kFfdhe2048);
    p.host_side.host_key = *generate_secret(1, 32);
    TargetAuth t(p.target_side, kSubNqn, kHostNqn);
    const Status st = p.run(t);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
    EXPECT_NE(st.message().find("refused"), std::string::npos) << st.to_string();
    EXPECT_FALSE(t.authenticated());
    EXPECT_TRUE(t.failed());
  }
  {  // the controller's key differs: the host refuses the controller (Failure2)
    Pair p = keys(true, DhGroup::kNull);
    p.host_side.ctrl_key = *generate_secret(3, 64);
    TargetAuth t(p.target_side, kSubNqn, kHostNqn);
    const Status st = p.run(t);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
    EXPECT_NE(st.message().find("controller's response is wrong"), std::string::npos);
    EXPECT_FALSE(t.authenticated());
    EXPECT_TRUE(t.failed());
  }
  {  // the host asks the controller to prove itself; the controller has no key
    Pair p = keys(false, DhGroup::kNull);
    p.host_side.ctrl_key = *generate_secret(1, 32);
    TargetAuth t(p.target_side, kSubNqn, kHostNqn);
    EXPECT_EQ(p.run(t).code(), StatusCode::kPermissionDenied);
    EXPECT_TRUE(t.failed());
  }
}

TEST(DhchapTransaction, MessagesOutOfOrderFailTheTransaction) {
  Pair p = keys(false, DhGroup::kNull);
  TargetAuth t(p.target_side, kSubNqn, kHostNqn);
  t.on_send(encode(Success2{0}));  // before any Negotiate
  auto m = decode(t.on_receive());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(std::holds_alternative<Failure>(*m));
  EXPECT_EQ(std::get<Failure>(*m).reason, Reason::kIncorrectMessage);
  EXPECT_TRUE(t.failed());
  EXPECT_FALSE(t.authenticated());
}

TEST(Dhchap, SecretFilesMustBeTheirOwnersAlone) {
  kvtier::testing::TempDir dir("dhchap");
  const std::string path = dir.path() + "/key";
  std::ofstream(path) << kSpecSecret << "\n";
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(read_secret_file(path).status().code(), StatusCode::kPermissionDenied);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  auto s = read_secret_file(path);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(format_secret(*s), kSpecSecret);
  EXPECT_FALSE(read_secret_file(dir.path() + "/missing").ok());
}

}  // namespace
}  // namespace kvtier::nvmf
