#include "nvmf/dhchap.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "nvmf/pdu.h"

namespace kvtier::nvmf::dhchap {

namespace {

const EVP_MD* md_of(Hash h) {
  switch (h) {
    case Hash::kSha256:
      return EVP_sha256();
    case Hash::kSha384:
      return EVP_sha384();
    case Hash::kSha512:
      return EVP_sha512();
  }
  return EVP_sha256();
}

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32()): what the secret's text
// form appends to the key so that a mistyped key is refused, not used.
uint32_t crc32_ieee(BytesView data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

bool valid_key_length(size_t n) { return n == 32 || n == 48 || n == 64; }

void append(Bytes& out, BytesView b) { out.insert(out.end(), b.begin(), b.end()); }
void append(Bytes& out, std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }

// The message both responses are an HMAC of, but for their labels and the
// order of the NQNs.
Bytes response_input(BytesView challenge, uint32_t seqnum, uint16_t tid, std::string_view label,
                     std::string_view first_nqn, std::string_view second_nqn) {
  Bytes m;
  m.reserve(challenge.size() + 16 + label.size() + first_nqn.size() + second_nqn.size());
  append(m, challenge);
  uint8_t w[7];
  put32(w, seqnum);
  put16(w + 4, tid);
  w[6] = 0;  // SC_C: no secure channel concatenation
  append(m, BytesView(w, sizeof w));
  append(m, label);
  append(m, first_nqn);
  m.push_back(0);
  append(m, second_nqn);
  return m;
}

Status bad(std::string what) { return Status::invalid_argument("dhchap: " + std::move(what)); }

}  // namespace

size_t digest_bytes(Hash h) {
  switch (h) {
    case Hash::kSha256:
      return 32;
    case Hash::kSha384:
      return 48;
    case Hash::kSha512:
      return 64;
  }
  return 0;
}

const char* hash_name(Hash h) {
  switch (h) {
    case Hash::kSha256:
      return "sha256";
    case Hash::kSha384:
      return "sha384";
    case Hash::kSha512:
      return "sha512";
  }
  return "?";
}

Result<Hash> parse_hash(std::string_view name) {
  for (Hash h : {Hash::kSha256, Hash::kSha384, Hash::kSha512}) {
    if (name == hash_name(h) || name == fmt::format("hmac({})", hash_name(h))) return h;
  }
  return bad(fmt::format("unknown hash '{}' (sha256, sha384 or sha512)", name));
}

bool known_hash(uint8_t id) { return id >= 1 && id <= 3; }

size_t dh_value_bytes(DhGroup g) {
  static constexpr size_t kBytes[] = {0, 256, 384, 512, 768, 1024};
  const auto i = static_cast<size_t>(g);
  return i < std::size(kBytes) ? kBytes[i] : 0;
}

const char* group_name(DhGroup g) {
  static constexpr const char* kNames[] = {"null",      "ffdhe2048", "ffdhe3072",
                                           "ffdhe4096", "ffdhe6144", "ffdhe8192"};
  const auto i = static_cast<size_t>(g);
  return i < std::size(kNames) ? kNames[i] : "?";
}

Result<DhGroup> parse_group(std::string_view name) {
  for (uint8_t i = 0; i <= 5; ++i) {
    if (name == group_name(DhGroup(i))) return DhGroup(i);
  }
  return bad(fmt::format("unknown DH group '{}' (null, ffdhe2048 ... ffdhe8192)", name));
}

bool known_group(uint8_t id) { return id <= 5; }

Result<Secret> parse_secret(std::string_view text) {
  // Whitespace around it (a key file's newline) is not part of the secret.
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  constexpr std::string_view kPrefix = "DHHC-1:";
  if (text.substr(0, kPrefix.size()) != kPrefix || text.size() < kPrefix.size() + 4 ||
      text[kPrefix.size() + 2] != ':') {
    return bad("a secret has the form DHHC-1:<00..03>:<base64>:");
  }
  const std::string_view hh = text.substr(kPrefix.size(), 2);
  if (hh[0] != '0' || hh[1] < '0' || hh[1] > '3') {
    return bad(fmt::format("secret transform '{}' is not 00, 01, 02 or 03", hh));
  }
  std::string_view b64 = text.substr(kPrefix.size() + 3);
  if (!b64.empty() && b64.back() == ':') b64.remove_suffix(1);
  if (b64.empty() || b64.size() % 4 != 0 || b64.size() > 4 * ((68 + 2) / 3)) {
    return bad("the secret's base64 part is not 36, 52 or 68 bytes long");
  }
  Bytes raw(b64.size() / 4 * 3);
  const int n = EVP_DecodeBlock(raw.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  if (n < 0) return bad("the secret's base64 part has characters outside base64");
  size_t len = static_cast<size_t>(n);
  for (size_t i = b64.size(); i > 0 && b64[i - 1] == '='; --i) --len;
  if (!valid_key_length(len - 4)) {
    return bad(fmt::format("the secret decodes to {} bytes; 36, 52 or 68 expected", len));
  }
  Secret s;
  s.transform = static_cast<uint8_t>(hh[1] - '0');
  s.key.assign(raw.begin(), raw.begin() + static_cast<ptrdiff_t>(len - 4));
  const uint32_t crc = get32(raw.data() + len - 4);
  OPENSSL_cleanse(raw.data(), raw.size());
  if (crc != crc32_ieee(s.key)) return bad("the secret's CRC does not match its key (mistyped?)");
  return s;
}

Result<Secret> read_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return bad(fmt::format("cannot open secret file {}: {}", path, std::strerror(errno)));
  struct stat st {};
  std::string text(512, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) == 0) {
    n = ::read(fd, text.data(), text.size());
  }
  ::close(fd);
  if (!S_ISREG(st.st_mode)) return bad(fmt::format("secret file {} is not a regular file", path));
  if (st.st_mode & 077) {
    return Status::permission_denied(
        fmt::format("dhchap: secret file {} may be read by other users (mode {:o}); chmod 600 it",
                    path, st.st_mode & 0777));
  }
  if (n < 0 || static_cast<size_t>(n) == text.size()) {
    return bad(fmt::format("secret file {} is unreadable or longer than a secret", path));
  }
  text.resize(static_cast<size_t>(n));
  auto s = parse_secret(text);
  OPENSSL_cleanse(text.data(), text.size());
  if (!s.ok()) return Status::invalid_argument(path + ": " + s.status().message());
  return s;
}

std::string format_secret(const Secret& s) {
  Bytes raw = s.key;
  raw.resize(s.key.size() + 4);
  put32(raw.data() + s.key.size(), crc32_ieee(s.key));
  std::string b64(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), raw.data(),
                                static_cast<int>(raw.size()));
  OPENSSL_cleanse(raw.data(), raw.size());
  b64.resize(static_cast<size_t>(n));
  return fmt::format("DHHC-1:{:02x}:{}:", s.transform, b64);
}

Result<Secret> generate_secret(uint8_t transform, size_t key_bytes) {
  if (transform > 3) return bad("transform must be 0 (none), 1, 2 or 3");
  if (!valid_key_length(key_bytes)) return bad("a key is 32, 48 or 64 bytes");
  return Secret{transform, random_bytes(key_bytes)};
}

Bytes transformed_key(const Secret& s, std::string_view nqn) {
  if (s.transform == 0) return s.key;
  Bytes m;
  append(m, nqn);
  append(m, std::string_view("NVMe-over-Fabrics"));
  return hmac(Hash(s.transform), s.key, m);
}

Bytes hmac(Hash h, BytesView key, BytesView message) {
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int n = 0;
  HMAC(md_of(h), key.data(), static_cast<int>(key.size()), message.data(), message.size(),
       out.data(), &n);
  out.resize(n);
  return out;
}

Bytes digest(Hash h, BytesView message) {
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int n = 0;
  EVP_Digest(message.data(), message.size(), out.data(), &n, md_of(h), nullptr);
  out.resize(n);
  return out;
}

Bytes random_bytes(size_t n) {
  Bytes b(n);
  // RAND_bytes fails only when the system's entropy source is gone; a
  // predictable challenge would be worse than stopping.
  if (n > 0 && RAND_bytes(b.data(), static_cast<int>(n)) != 1) std::abort();
  return b;
}

uint32_t random_nonzero32() {
  for (;;) {
    const Bytes b = random_bytes(4);
    const uint32_t v = get32(b.data());
    if (v != 0) return v;
  }
}

bool equal_secret(BytesView a, BytesView b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Bytes host_response(Hash h, BytesView host_key, BytesView challenge, uint32_t seqnum, uint16_t tid,
                    std::string_view hostnqn, std::string_view subnqn) {
  return hmac(h, host_key, response_input(challenge, seqnum, tid, "HostHost", hostnqn, subnqn));
}

Bytes controller_response(Hash h, BytesView ctrl_key, BytesView challenge, uint32_t seqnum,
                          uint16_t tid, std::string_view subnqn, std::string_view hostnqn) {
  return hmac(h, ctrl_key, response_input(challenge, seqnum, tid, "Controller", subnqn, hostnqn));
}

Bytes augmented_challenge(Hash h, BytesView shared_secret, BytesView challenge) {
  return hmac(h, digest(h, shared_secret), challenge);
}

const char* reason_text(Reason r) {
  switch (r) {
    case Reason::kFailed:
      return "authentication failed";
    case Reason::kNotUsable:
      return "authentication protocol not usable";
    case Reason::kConcatMismatch:
      return "secure channel concatenation mismatch";
    case Reason::kHashUnusable:
      return "no usable hash function";
    case Reason::kDhGroupUnusable:
      return "no usable DH group";
    case Reason::kIncorrectPayload:
      return "incorrect payload";
    case Reason::kIncorrectMessage:
      return "incorrect protocol message";
  }
  return "unknown reason";
}

}  // namespace kvtier::nvmf::dhchap
