// Namespace tests: golden digests and the documented canonical encoding,
// sensitivity to every field, validate() and describe().
#include "kv/namespace.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <functional>
#include <string>
#include <vector>

namespace kvtier::kv {
namespace {

// N1 of docs/block-keys.md.
Namespace n1() { return Namespace::of_model("llama-3-8b", "r1", "llama3-tok", 4); }
Namespace n2() {
  Namespace n = n1();
  n.scheme = KeyScheme::kSha256;
  return n;
}
Namespace n3() {
  Namespace n = n2();
  n.tenant_salt = "tenant-a";
  n.tp_size = 2;
  n.tp_rank = 1;
  return n;
}

std::vector<uint8_t> from_hex(const std::string& h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(NamespaceGolden, Digests) {
  EXPECT_EQ(n1().digest().to_hex(), "5ca6fbe112807d0a8e68402437311ff4");
  EXPECT_EQ(n2().digest().to_hex(), "db1cfea735abb62eec6fc0fee2e33ef0");
  EXPECT_EQ(n3().digest().to_hex(), "66a49cb5d575772cc6870d5174e7ea7a");
}

TEST(NamespaceGolden, ChainsFromNamespace) {
  std::vector<uint32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Namespace n = n1();
  auto keys = chain_block_keys(n.scheme, n.digest(), n.tokens_per_block, t);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].to_hex(), "128f96c6c3911c8ea33dfc521e4f25a6");
  EXPECT_EQ(keys[1].to_hex(), "8bac8613b843147e65099fe50cbf6d5d");
}

// The canonical encoding of N2 exactly as docs/block-keys.md prints it; its
// SHA-256 as printed by `openssl dgst -sha256` over those 86 bytes.
const char* kN2EncodingHex =
    "6b76746965722d6e732d7631"      // "kvtier-ns-v1"
    "0a0000006c6c616d612d332d3862"  // model_id "llama-3-8b"
    "020000007231"                  // model_revision "r1"
    "0a0000006c6c616d61332d746f6b"  // tokenizer_id "llama3-tok"
    "0400000062663136"              // kv_dtype "bf16"
    "030000004e4844"                // kv_layout "NHD"
    "04000000"                      // tokens_per_block 4
    "0100000000000000"              // tp_size 1, tp_rank 0
    "0100000000000000"              // pp_size 1, pp_rank 0
    "00000000"                      // tenant_salt ""
    "02";                           // scheme sha256
const char* kN2OpensslDgst = "db1cfea735abb62eec6fc0fee2e33ef079b4f90a473942f90b8cdbfbc45ad174";

TEST(NamespaceEncoding, DocumentedBytesMatchDigest) {
  auto bytes = from_hex(kN2EncodingHex);
  ASSERT_EQ(bytes.size(), 86u);
  uint8_t md[SHA256_DIGEST_LENGTH];
  SHA256(bytes.data(), bytes.size(), md);
  char hex[65];
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", md[i]);
  ASSERT_EQ(std::string(hex), kN2OpensslDgst);
  EXPECT_EQ(n2().digest().to_hex(), std::string(kN2OpensslDgst).substr(0, 32));
  EXPECT_EQ(digest128(KeyScheme::kSha256, bytes), n2().digest());

  // Same bytes with the last one set to 0x01 are N1's encoding, under XXH3-128.
  bytes.back() = 0x01;
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  EXPECT_EQ(n1().digest(), (Key128{h.high64, h.low64}));
}

TEST(NamespaceDigest, EveryFieldChangesTheDigest) {
  const std::vector<std::pair<const char*, std::function<void(Namespace&)>>> mutations = {
      {"model_id", [](Namespace& n) { n.model_id += "x"; }},
      {"model_revision", [](Namespace& n) { n.model_revision = "r2"; }},
      {"tokenizer_id", [](Namespace& n) { n.tokenizer_id = "other-tok"; }},
      {"kv_dtype", [](Namespace& n) { n.kv_dtype = "fp8_e4m3"; }},
      {"kv_layout", [](Namespace& n) { n.kv_layout = "HND"; }},
      {"tokens_per_block", [](Namespace& n) { n.tokens_per_block = 16; }},
      {"tp_size", [](Namespace& n) { n.tp_size = 2; }},
      {"tp_rank", [](Namespace& n) { n.tp_size = 2, n.tp_rank = 1; }},
      {"pp_size", [](Namespace& n) { n.pp_size = 2; }},
      {"pp_rank", [](Namespace& n) { n.pp_size = 2, n.pp_rank = 1; }},
      {"tenant_salt", [](Namespace& n) { n.tenant_salt = "tenant-a"; }},
      {"scheme", [](Namespace& n) { n.scheme = KeyScheme::kSha256; }},
  };
  for (Namespace base : {n1(), n2()}) {
    if (base.scheme == KeyScheme::kSha256) base.tokens_per_block = 32;  // vary the base too
    const Key128 d = base.digest();
    std::vector<Key128> all = {d};
    for (const auto& [name, mutate] : mutations) {
      Namespace m = base;
      mutate(m);
      if (std::string(name) == "scheme" && base.scheme == KeyScheme::kSha256) {
        m.scheme = KeyScheme::kXxh3_128;
      }
      ASSERT_TRUE(m.validate().ok()) << name;
      EXPECT_NE(m.digest(), d) << name;
      all.push_back(m.digest());
    }
    // tp_rank differs from tp_size alone, and pp likewise.
    for (size_t i = 0; i < all.size(); ++i) {
      for (size_t j = i + 1; j < all.size(); ++j) EXPECT_NE(all[i], all[j]) << i << " vs " << j;
    }
  }
}

TEST(NamespaceDigest, LengthPrefixesSeparateFields) {
  Namespace a = n1(), b = n1();
  a.model_id = "ab";
  a.model_revision = "c";
  b.model_id = "a";
  b.model_revision = "bc";
  EXPECT_NE(a.digest(), b.digest());
  Namespace c = n1(), d = n1();
  c.kv_layout = "";
  c.tenant_salt = "x";
  d.kv_layout = "x";
  d.tenant_salt = "";
  EXPECT_NE(c.digest(), d.digest());
}

TEST(NamespaceDigest, DeterministicAndIgnoresNothingElse) {
  EXPECT_EQ(n1().digest(), n1().digest());
  Namespace copy = n3();
  EXPECT_EQ(copy.digest(), n3().digest());
}

TEST(NamespaceValidate, AcceptsGoodNamespaces) {
  EXPECT_TRUE(n1().validate().ok());
  EXPECT_TRUE(n2().validate().ok());
  EXPECT_TRUE(n3().validate().ok());
  Namespace n = n1();
  n.model_revision = "";
  n.kv_layout = "";
  n.tokens_per_block = 1u << 20;
  n.pp_size = 4;
  n.pp_rank = 3;
  EXPECT_TRUE(n.validate().ok()) << n.validate().to_string();
}

TEST(NamespaceValidate, RejectsEachBadField) {
  const std::vector<std::pair<const char*, std::function<void(Namespace&)>>> bad = {
      {"model_id", [](Namespace& n) { n.model_id.clear(); }},
      {"tokenizer_id", [](Namespace& n) { n.tokenizer_id.clear(); }},
      {"kv_dtype", [](Namespace& n) { n.kv_dtype.clear(); }},
      {"tokens_per_block", [](Namespace& n) { n.tokens_per_block = 0; }},
      {"tokens_per_block", [](Namespace& n) { n.tokens_per_block = (1u << 20) + 1; }},
      {"tp_size", [](Namespace& n) { n.tp_size = 0; }},
      {"pp_size", [](Namespace& n) { n.pp_size = 0; }},
      {"tp_rank", [](Namespace& n) { n.tp_rank = 1; }},
      {"tp_rank", [](Namespace& n) { n.tp_size = 4, n.tp_rank = 4; }},
      {"pp_rank", [](Namespace& n) { n.pp_rank = 1; }},
      {"pp_rank", [](Namespace& n) { n.pp_size = 2, n.pp_rank = 7; }},
      {"scheme", [](Namespace& n) { n.scheme = static_cast<KeyScheme>(0); }},
      {"scheme", [](Namespace& n) { n.scheme = static_cast<KeyScheme>(3); }},
  };
  for (const auto& [field, mutate] : bad) {
    Namespace n = n1();
    mutate(n);
    Status st = n.validate();
    ASSERT_FALSE(st.ok()) << field;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(std::string("Namespace.") + field), std::string::npos)
        << field << ": " << st.message();
  }
}

TEST(NamespaceDescribe, Format) {
  EXPECT_EQ(n1().describe(), "llama-3-8b@r1/llama3-tok/bf16/NHD/b4/tp0of1/pp0of1");
  EXPECT_EQ(n3().describe(), "llama-3-8b@r1/llama3-tok/bf16/NHD/b4/tp1of2/pp0of1/salted/sha256");
  EXPECT_EQ(n3().describe().find("tenant-a"), std::string::npos);  // the salt is never logged
  Namespace n = n1();
  n.model_revision = "";
  EXPECT_EQ(n.describe(), "llama-3-8b/llama3-tok/bf16/NHD/b4/tp0of1/pp0of1");
}

}  // namespace
}  // namespace kvtier::kv
