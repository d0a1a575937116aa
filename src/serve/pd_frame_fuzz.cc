// libFuzzer target for the PD transfer frame and its ack (docs/pd-transfer.md).
//
// The first input byte picks a mode; the rest is the frame:
//   0  decoded as it is;
//   1  the header and table CRCs are recomputed first, so that the fuzzer
//      gets past them into the limit, length and namespace checks;
//   2  as 1, and every block's CRC too, to reach the payload checks;
//   3  decoded as an ack.
// Nothing may crash or allocate more than the limits allow; a frame that
// decodes must re-encode to the very same bytes (the encoding is canonical).
//
// Build and run: scripts/fuzz-pd-frame.sh [SECONDS].
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "serve/pd_frame.h"

namespace {

using kvtier::ByteView;
namespace serve = kvtier::serve;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "pd_frame_fuzz: %s\n", what);
    std::abort();
  }
}

template <typename T>
T get(const std::vector<std::byte>& f, size_t off) {
  T v;
  std::memcpy(&v, f.data() + off, sizeof v);
  return v;
}
template <typename T>
void put(std::vector<std::byte>* f, size_t off, T v) {
  std::memcpy(f->data() + off, &v, sizeof v);
}

// Recomputes the CRCs the mode asks for, where the bytes reach them.
void reseal(std::vector<std::byte>* f, bool blocks) {
  if (f->size() < serve::kPdHeaderSize) return;
  put<uint32_t>(f, 44, kvtier::crc32c(f->data(), 44));
  const uint32_t count = std::min<uint32_t>(get<uint32_t>(*f, 32), 4096);
  const size_t body = size_t{count} * serve::kPdBlockEntrySize;
  if (f->size() < serve::kPdHeaderSize + body + 4) return;
  std::byte* table = f->data() + serve::kPdHeaderSize;
  size_t at = serve::kPdHeaderSize + body + 4;
  for (uint32_t i = 0; blocks && i < count; ++i) {
    const uint32_t len = get<uint32_t>(*f, serve::kPdHeaderSize + i * 24 + 16);
    if (f->size() - at < len) break;
    put<uint32_t>(f, serve::kPdHeaderSize + i * 24 + 20, kvtier::crc32c(f->data() + at, len));
    at += len;
  }
  put<uint32_t>(f, serve::kPdHeaderSize + body, kvtier::crc32c(table, body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 4;
  std::vector<std::byte> f(reinterpret_cast<const std::byte*>(data + 1),
                           reinterpret_cast<const std::byte*>(data + size));
  if (mode == 3) {
    auto a = serve::decode_pd_ack(f);
    if (!a.ok()) {
      check(serve::pd_error_of(a.status()) != serve::PdError::kNone, "unclassified ack error");
      return 0;
    }
    std::byte again[serve::kPdAckSize];
    serve::encode_pd_ack(*a, again);
    check(std::memcmp(again, f.data(), serve::kPdAckSize) == 0, "ack does not re-encode");
    return 0;
  }
  if (mode >= 1) reseal(&f, mode == 2);
  serve::PdLimits limits;
  limits.max_blocks = 64;
  limits.max_block_bytes = 4096;
  limits.max_payload_bytes = 65536;
  auto d = serve::decode_pd_frame(f, limits, nullptr, true);
  if (!d.ok()) {
    check(serve::pd_error_of(d.status()) != serve::PdError::kNone, "unclassified frame error");
    return 0;
  }
  check(d->frame_bytes <= f.size(), "frame longer than its input");
  std::vector<kvtier::kv::Key128> keys;
  std::vector<ByteView> blocks;
  size_t at = serve::kPdHeaderSize + serve::pd_table_bytes(d->header.block_count);
  for (const auto& e : d->entries) {
    keys.push_back(e.key);
    blocks.emplace_back(f.data() + at, e.length);
    at += e.length;
  }
  const auto again =
      serve::encode_pd_frame(d->header.request_id, d->header.ns_digest, keys, blocks);
  check(again.size() == d->frame_bytes && std::equal(again.begin(), again.end(), f.begin()),
        "decoded frame does not re-encode to the same bytes");
  return 0;
}
