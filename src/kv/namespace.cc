// Namespace validation, canonical encoding and digest; see docs/block-keys.md.
#include "kv/namespace.h"

#include <string_view>

namespace kvtier::kv {
namespace {

constexpr std::string_view kEncodingTag = "kvtier-ns-v1";
constexpr uint32_t kMaxTokensPerBlock = 1u << 20;

void append_u32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 24));
}

void append_str(std::string& out, std::string_view s) {
  append_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// The canonical, versioned encoding of every field, in a fixed order
// (docs/block-keys.md, "Namespace encoding").
std::string canonical_encoding(const Namespace& ns) {
  std::string out;
  out.reserve(kEncodingTag.size() + 6 * 4 + 5 * 4 + 1 + ns.model_id.size() +
              ns.model_revision.size() + ns.tokenizer_id.size() + ns.kv_dtype.size() +
              ns.kv_layout.size() + ns.tenant_salt.size());
  out.append(kEncodingTag);
  append_str(out, ns.model_id);
  append_str(out, ns.model_revision);
  append_str(out, ns.tokenizer_id);
  append_str(out, ns.kv_dtype);
  append_str(out, ns.kv_layout);
  append_u32(out, ns.tokens_per_block);
  append_u32(out, ns.tp_size);
  append_u32(out, ns.tp_rank);
  append_u32(out, ns.pp_size);
  append_u32(out, ns.pp_rank);
  append_str(out, ns.tenant_salt);
  out.push_back(static_cast<char>(ns.scheme));
  return out;
}

Status too_long(const char* field) {
  return Status::invalid_argument(std::string("Namespace.") + field +
                                  " is longer than 2^32-1 bytes");
}

}  // namespace

Namespace Namespace::of_model(std::string model_id, std::string model_revision,
                              std::string tokenizer_id, uint32_t tokens_per_block,
                              std::string kv_dtype, std::string kv_layout) {
  Namespace ns;
  ns.model_id = std::move(model_id);
  ns.model_revision = std::move(model_revision);
  ns.tokenizer_id = std::move(tokenizer_id);
  ns.tokens_per_block = tokens_per_block;
  ns.kv_dtype = std::move(kv_dtype);
  ns.kv_layout = std::move(kv_layout);
  return ns;
}

Status Namespace::validate() const {
  const std::pair<const char*, const std::string*> required[] = {
      {"model_id", &model_id}, {"tokenizer_id", &tokenizer_id}, {"kv_dtype", &kv_dtype}};
  for (const auto& [name, value] : required) {
    if (value->empty()) {
      return Status::invalid_argument(std::string("Namespace.") + name + " is empty");
    }
  }
  const std::pair<const char*, const std::string*> strings[] = {
      {"model_id", &model_id}, {"model_revision", &model_revision}, {"tokenizer_id", &tokenizer_id},
      {"kv_dtype", &kv_dtype}, {"kv_layout", &kv_layout},           {"tenant_salt", &tenant_salt}};
  for (const auto& [name, value] : strings) {
    if (value->size() > UINT32_MAX) return too_long(name);
  }
  if (tokens_per_block < 1 || tokens_per_block > kMaxTokensPerBlock) {
    return Status::invalid_argument(
        "Namespace.tokens_per_block = " + std::to_string(tokens_per_block) + " is outside [1, " +
        std::to_string(kMaxTokensPerBlock) + "]");
  }
  if (tp_size < 1) return Status::invalid_argument("Namespace.tp_size = 0: must be >= 1");
  if (pp_size < 1) return Status::invalid_argument("Namespace.pp_size = 0: must be >= 1");
  if (tp_rank >= tp_size) {
    return Status::invalid_argument("Namespace.tp_rank = " + std::to_string(tp_rank) +
                                    " must be < tp_size = " + std::to_string(tp_size));
  }
  if (pp_rank >= pp_size) {
    return Status::invalid_argument("Namespace.pp_rank = " + std::to_string(pp_rank) +
                                    " must be < pp_size = " + std::to_string(pp_size));
  }
  if (scheme != KeyScheme::kXxh3_128 && scheme != KeyScheme::kSha256) {
    return Status::invalid_argument(
        "Namespace.scheme = " + std::to_string(static_cast<unsigned>(scheme)) +
        " is not a known KeyScheme (1 = xxh3_128, 2 = sha256)");
  }
  return Status::ok_status();
}

Key128 Namespace::digest() const {
  const std::string enc = canonical_encoding(*this);
  return digest128(
      scheme, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(enc.data()), enc.size()));
}

std::string Namespace::describe() const {
  std::string out = model_id;
  if (!model_revision.empty()) out += "@" + model_revision;
  out += "/" + tokenizer_id + "/" + kv_dtype + "/" + kv_layout;
  out += "/b" + std::to_string(tokens_per_block);
  out += "/tp" + std::to_string(tp_rank) + "of" + std::to_string(tp_size);
  out += "/pp" + std::to_string(pp_rank) + "of" + std::to_string(pp_size);
  if (!tenant_salt.empty()) out += "/salted";  // never the salt itself
  if (scheme != KeyScheme::kXxh3_128) out += std::string("/") + key_scheme_name(scheme);
  return out;
}

}  // namespace kvtier::kv
