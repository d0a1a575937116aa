// NVMe in-band authentication, DH-HMAC-CHAP (NVMe Base Specification 2.0,
// "Authentication"; docs/nvme-tcp.md, "In-band authentication"): secrets,
// the HMAC responses and the six messages, as the Linux kernel's host and
// target exchange them. No I/O here: the target's state machine is in
// auth_target.h, the host's transaction in auth_host.h.
//
// Every decoder takes bytes a peer chose and trusts none of its lengths: a
// message is accepted only when every length field agrees with the hash and
// group it names and with the bytes received.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace kvtier::nvmf::dhchap {

using Bytes = std::vector<uint8_t>;
using BytesView = std::span<const uint8_t>;

// Authentication Send/Receive (fabrics command types 05h and 06h) carry
// these in SECP, SPSP0 and SPSP1.
constexpr uint8_t kSecurityProtocol = 0xE9;
constexpr uint8_t kSpsp0 = 0x01;
constexpr uint8_t kSpsp1 = 0x01;
// Connect response DW0: authentication required (ATR) and authentication with
// a secure channel required (ASCR; TLS, not offered by kvtier).
constexpr uint32_t kConnectAtr = 1u << 17;
constexpr uint32_t kConnectAscr = 1u << 18;
// The largest message either side sends (Reply with SHA-512 and ffdhe8192).
constexpr size_t kMaxMessageBytes = 16 + 2 * 64 + 1024;

enum class Hash : uint8_t { kSha256 = 1, kSha384 = 2, kSha512 = 3 };
size_t digest_bytes(Hash h);
const char* hash_name(Hash h);  // "sha256"
Result<Hash> parse_hash(std::string_view name);
bool known_hash(uint8_t id);

// RFC 7919 groups; kNull: no Diffie-Hellman exchange.
enum class DhGroup : uint8_t {
  kNull = 0,
  kFfdhe2048 = 1,
  kFfdhe3072 = 2,
  kFfdhe4096 = 3,
  kFfdhe6144 = 4,
  kFfdhe8192 = 5
};
size_t dh_value_bytes(DhGroup g);   // size of the prime; 0 for kNull
const char* group_name(DhGroup g);  // "null", "ffdhe2048", ...
Result<DhGroup> parse_group(std::string_view name);
bool known_group(uint8_t id);

// A secret in the textual form nvme-cli and the kernel use:
// "DHHC-1:<hh>:<base64 of key + CRC-32 of key, little-endian>:". `transform`
// (<hh>) is the hash that binds the key to an NQN before use; 0: none.
struct Secret {
  uint8_t transform = 0;
  Bytes key;  // 32, 48 or 64 bytes
};
Result<Secret> parse_secret(std::string_view text);
std::string format_secret(const Secret& s);
// Reads a secret from a file that only its owner may read (mode 0600 or
// stricter: a key readable by other users is refused, not used).
Result<Secret> read_secret_file(const std::string& path);
// A fresh random key of `key_bytes` (32, 48 or 64) with transform `transform`.
Result<Secret> generate_secret(uint8_t transform, size_t key_bytes);
// The key the responses are keyed with: HMAC(transform hash, key,
// nqn || "NVMe-over-Fabrics"), or the key itself when transform is 0. The
// host's secret binds to the host NQN, the controller's to the subsystem NQN.
Bytes transformed_key(const Secret& s, std::string_view nqn);

Bytes hmac(Hash h, BytesView key, BytesView message);
Bytes digest(Hash h, BytesView message);
Bytes random_bytes(size_t n);
uint32_t random_nonzero32();
// Constant-time equality of two byte strings of the same length.
bool equal_secret(BytesView a, BytesView b);

// The responses. `challenge` is C1 (C2), or its augmented form when a group
// was negotiated (augmented_challenge below).
Bytes host_response(Hash h, BytesView host_key, BytesView challenge, uint32_t seqnum, uint16_t tid,
                    std::string_view hostnqn, std::string_view subnqn);
Bytes controller_response(Hash h, BytesView ctrl_key, BytesView challenge, uint32_t seqnum,
                          uint16_t tid, std::string_view subnqn, std::string_view hostnqn);
// HMAC(H(shared secret), challenge): binds the response to the exchange.
Bytes augmented_challenge(Hash h, BytesView shared_secret, BytesView challenge);

// Failure reason codes (RESCODE_EXP).
enum class Reason : uint8_t {
  kFailed = 0x01,
  kNotUsable = 0x02,
  kConcatMismatch = 0x03,
  kHashUnusable = 0x04,
  kDhGroupUnusable = 0x05,
  kIncorrectPayload = 0x06,
  kIncorrectMessage = 0x07,
};
const char* reason_text(Reason r);

struct Negotiate {
  uint16_t tid = 0;
  uint8_t sc_c = 0;             // secure channel concatenation: 0, none
  std::vector<uint8_t> hashes;  // Hash ids, the host's order
  std::vector<uint8_t> groups;  // DhGroup ids
};
struct Challenge {
  uint16_t tid = 0;
  Hash hash = Hash::kSha256;
  DhGroup group = DhGroup::kNull;
  uint32_t seqnum = 0;
  Bytes c1;   // digest_bytes(hash)
  Bytes dhv;  // dh_value_bytes(group): the controller's public value
};
struct Reply {
  uint16_t tid = 0;
  uint32_t seqnum = 0;  // S2
  Bytes response;       // R1
  bool cvalid = false;  // c2 is a challenge for the controller
  Bytes c2;             // as long as the response, zeros unless cvalid
  Bytes dhv;            // the host's public value
};
struct Success1 {
  uint16_t tid = 0;
  uint8_t hl = 0;
  bool rvalid = false;
  Bytes response;  // R2 when rvalid (hl bytes)
};
struct Success2 {
  uint16_t tid = 0;
};
struct Failure {
  uint16_t tid = 0;
  bool from_controller = true;  // Failure1; else Failure2 (from the host)
  Reason reason = Reason::kFailed;
};
using Message = std::variant<Negotiate, Challenge, Reply, Success1, Success2, Failure>;

Bytes encode(const Message& m);
// Decodes one message from the start of `data` (a Receive's data may be
// padded with zeros beyond it). kInvalidArgument names the first bad field.
Result<Message> decode(BytesView data);

}  // namespace kvtier::nvmf::dhchap
