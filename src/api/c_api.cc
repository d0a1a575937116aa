// The C API (include/kvtier/kvtier.h) over kvtier::KvStore. Every entry point
// validates its pointers, converts, calls the store and converts back; no
// exception crosses into C (an allocation failure is KVTIER_ERR_INTERNAL).
#include "kvtier/kvtier.h"

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "api/key_bytes.h"
#include "kvtier/kv_store.h"

struct kvtier_store {
  std::unique_ptr<kvtier::KvStore> store;
};

namespace {

using kvtier::Result;
using kvtier::Status;

thread_local std::string g_last_error;

int fail(const Status& st) {
  g_last_error = st.to_string();
  return static_cast<int>(st.code());
}
int fail_arg(const char* message) { return fail(Status::invalid_argument(message)); }

// Runs `body` (which returns a kvtier_error code), turning exceptions into
// KVTIER_ERR_INTERNAL so none unwinds through a C caller.
template <typename F>
int guarded(F&& body) {
  try {
    g_last_error.clear();
    return body();
  } catch (const std::exception& e) {
    return fail(Status::internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return fail(Status::internal("unexpected exception"));
  }
}

Result<kvtier::kv::Namespace> to_namespace(const kvtier_namespace* c) {
  if (c == nullptr) return Status::invalid_argument("namespace is NULL");
  auto str = [](const char* s) { return s ? std::string(s) : std::string(); };
  kvtier::kv::Namespace ns;
  ns.model_id = str(c->model_id);
  ns.model_revision = str(c->model_revision);
  ns.tokenizer_id = str(c->tokenizer_id);
  ns.kv_dtype = str(c->kv_dtype);
  ns.kv_layout = str(c->kv_layout);
  ns.tokens_per_block = c->tokens_per_block;
  ns.tp_size = c->tp_size;
  ns.tp_rank = c->tp_rank;
  ns.pp_size = c->pp_size;
  ns.pp_rank = c->pp_rank;
  ns.tenant_salt = str(c->tenant_salt);
  ns.scheme = static_cast<kvtier::kv::KeyScheme>(c->key_scheme);
  KVTIER_RETURN_IF_ERROR(ns.validate());
  return ns;
}

std::vector<kvtier::kv::Key128> to_keys(const kvtier_key* keys, size_t n) {
  std::vector<kvtier::kv::Key128> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = kvtier::api::key_from_bytes(keys[i].bytes);
  return out;
}

void to_c(const kvtier::kv::PutResult& r, kvtier_put_result* out) {
  out->outcome = static_cast<int32_t>(r.outcome);
  out->tier = static_cast<int32_t>(r.tier);
  out->refuse_reason = static_cast<int32_t>(r.refuse);
}
void to_c(const kvtier::kv::GetResult& r, kvtier_get_result* out) {
  out->hit = r.hit ? 1 : 0;
  out->tier = static_cast<int32_t>(r.tier);
  out->miss_reason = static_cast<int32_t>(r.miss);
  out->length = r.length;
}

#define KVTIER_CHECK_ARG(cond, message)    \
  do {                                     \
    if (!(cond)) return fail_arg(message); \
  } while (0)

}  // namespace

extern "C" {

const char* kvtier_version(void) { return kvtier::library_version(); }
const char* kvtier_last_error(void) { return g_last_error.c_str(); }

const char* kvtier_error_name(int code) {
  if (code < 0 || code > KVTIER_ERR_PERMISSION_DENIED) return "unknown";
  static thread_local std::string name;
  name = std::string(kvtier::status_code_name(static_cast<kvtier::StatusCode>(code)));
  return name.c_str();
}
const char* kvtier_tier_name(int tier) {
  return tier < 0 || tier > KVTIER_TIER_DISK
             ? "unknown"
             : kvtier::kv::tier_name(static_cast<kvtier::kv::Tier>(tier));
}
const char* kvtier_miss_reason_name(int reason) {
  return reason < 0 || reason >= static_cast<int>(kvtier::kv::MissReason::kCount)
             ? "unknown"
             : kvtier::kv::miss_reason_name(static_cast<kvtier::kv::MissReason>(reason));
}
const char* kvtier_refuse_reason_name(int reason) {
  return reason < 0 || reason >= static_cast<int>(kvtier::kv::RefuseReason::kCount)
             ? "unknown"
             : kvtier::kv::refuse_reason_name(static_cast<kvtier::kv::RefuseReason>(reason));
}

int kvtier_open(const char* uri, kvtier_store** out) {
  return guarded([&] {
    KVTIER_CHECK_ARG(uri != nullptr && out != nullptr, "kvtier_open: uri and out must be set");
    auto s = kvtier::open_store(uri);
    if (!s.ok()) return fail(s.status());
    *out = new kvtier_store{std::move(*s)};
    return 0;
  });
}

void kvtier_close(kvtier_store* store) {
  try {
    delete store;
  } catch (...) {
  }
}

void kvtier_namespace_init(kvtier_namespace* ns) {
  if (ns == nullptr) return;
  std::memset(ns, 0, sizeof(*ns));
  ns->tokens_per_block = 16;
  ns->tp_size = 1;
  ns->pp_size = 1;
  ns->key_scheme = KVTIER_KEYS_XXH3_128;
}

int kvtier_namespace_digest(const kvtier_namespace* cns, kvtier_key* out) {
  return guarded([&] {
    KVTIER_CHECK_ARG(out != nullptr, "kvtier_namespace_digest: out is NULL");
    auto ns = to_namespace(cns);
    if (!ns.ok()) return fail(ns.status());
    kvtier::api::key_to_bytes(ns->digest(), out->bytes);
    return 0;
  });
}

int kvtier_block_keys(const kvtier_namespace* cns, const uint32_t* tokens, size_t n_tokens,
                      kvtier_key* keys, size_t capacity, size_t* n_keys) {
  return guarded([&] {
    KVTIER_CHECK_ARG(n_keys != nullptr, "kvtier_block_keys: n_keys is NULL");
    KVTIER_CHECK_ARG(tokens != nullptr || n_tokens == 0, "kvtier_block_keys: tokens is NULL");
    auto ns = to_namespace(cns);
    if (!ns.ok()) return fail(ns.status());
    const size_t need = n_tokens / ns->tokens_per_block;
    *n_keys = need;
    if (need > capacity || (need > 0 && keys == nullptr)) {
      return fail_arg("kvtier_block_keys: the key array is too small (*n_keys says how many)");
    }
    auto chain = kvtier::kv::chain_block_keys(ns->scheme, ns->digest(), ns->tokens_per_block,
                                              std::span<const uint32_t>(tokens, n_tokens));
    for (size_t i = 0; i < chain.size(); ++i) kvtier::api::key_to_bytes(chain[i], keys[i].bytes);
    return 0;
  });
}

void kvtier_key_to_hex(const kvtier_key* key, char out[33]) {
  static const char* kHex = "0123456789abcdef";
  if (out == nullptr) return;
  if (key == nullptr) {
    out[0] = '\0';
    return;
  }
  for (int i = 0; i < 16; ++i) {
    out[2 * i] = kHex[key->bytes[i] >> 4];
    out[2 * i + 1] = kHex[key->bytes[i] & 15];
  }
  out[32] = '\0';
}

int kvtier_register_namespace(kvtier_store* store, const kvtier_namespace* cns, uint16_t* handle) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store != nullptr && handle != nullptr,
                     "kvtier_register_namespace: store and handle must be set");
    auto ns = to_namespace(cns);
    if (!ns.ok()) return fail(ns.status());
    auto h = store->store->register_namespace(*ns);
    if (!h.ok()) return fail(h.status());
    *handle = *h;
    return 0;
  });
}

int kvtier_put(kvtier_store* store, uint16_t ns, const kvtier_key* key, const void* data,
               size_t length, kvtier_put_result* result) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && key && result && (data || length == 0),
                     "kvtier_put: store, key, data and result must be set");
    auto r = store->store->put(ns, kvtier::api::key_from_bytes(key->bytes),
                               kvtier::as_bytes_view(data, length));
    if (!r.ok()) return fail(r.status());
    to_c(*r, result);
    return 0;
  });
}

int kvtier_get(kvtier_store* store, uint16_t ns, const kvtier_key* key, void* buffer,
               size_t capacity, kvtier_get_result* result) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && key && result && (buffer || capacity == 0),
                     "kvtier_get: store, key, buffer and result must be set");
    auto r = store->store->get(ns, kvtier::api::key_from_bytes(key->bytes),
                               kvtier::as_mutable_view(buffer, capacity));
    if (!r.ok()) return fail(r.status());
    to_c(*r, result);
    return 0;
  });
}

int kvtier_batch_put(kvtier_store* store, uint16_t ns, const kvtier_key* keys,
                     const void* const* data, const size_t* lengths, size_t n,
                     kvtier_put_result* results) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && (n == 0 || (keys && data && lengths && results)),
                     "kvtier_batch_put: store, keys, data, lengths and results must be set");
    auto k = to_keys(keys, n);
    std::vector<kvtier::ByteView> views(n);
    for (size_t i = 0; i < n; ++i) {
      KVTIER_CHECK_ARG(data[i] || lengths[i] == 0, "kvtier_batch_put: a data pointer is NULL");
      views[i] = kvtier::as_bytes_view(data[i], lengths[i]);
    }
    auto r = store->store->batch_put(ns, k, views);
    if (!r.ok()) return fail(r.status());
    for (size_t i = 0; i < n; ++i) to_c((*r)[i], &results[i]);
    return 0;
  });
}

int kvtier_batch_get_into(kvtier_store* store, uint16_t ns, const kvtier_key* keys,
                          void* const* buffers, const size_t* capacities, size_t n,
                          kvtier_get_result* results) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && (n == 0 || (keys && buffers && capacities && results)),
                     "kvtier_batch_get_into: store, keys, buffers, capacities and results "
                     "must be set");
    std::vector<kvtier::kv::BatchGetItem> items(n);
    for (size_t i = 0; i < n; ++i) {
      KVTIER_CHECK_ARG(buffers[i] || capacities[i] == 0,
                       "kvtier_batch_get_into: a buffer pointer is NULL");
      items[i].key = kvtier::api::key_from_bytes(keys[i].bytes);
      items[i].out = kvtier::as_mutable_view(buffers[i], capacities[i]);
    }
    auto r = store->store->batch_get(ns, items);
    if (!r.ok()) return fail(r.status());
    for (size_t i = 0; i < n; ++i) to_c((*r)[i], &results[i]);
    return 0;
  });
}

int kvtier_match_prefix(kvtier_store* store, uint16_t ns, const kvtier_key* keys, size_t n,
                        kvtier_match_result* result) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && result && (keys || n == 0),
                     "kvtier_match_prefix: store, keys and result must be set");
    auto r = store->store->match_prefix(ns, to_keys(keys, n));
    if (!r.ok()) return fail(r.status());
    result->blocks = r->blocks;
    result->ram_blocks = r->ram_blocks;
    result->disk_blocks = r->disk_blocks;
    return 0;
  });
}

int kvtier_remove(kvtier_store* store, uint16_t ns, const kvtier_key* key, int* was_present) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && key, "kvtier_remove: store and key must be set");
    auto r = store->store->remove(ns, kvtier::api::key_from_bytes(key->bytes));
    if (!r.ok()) return fail(r.status());
    if (was_present) *was_present = *r ? 1 : 0;
    return 0;
  });
}

int kvtier_pin(kvtier_store* store, uint16_t ns, const kvtier_key* keys, size_t n, uint64_t ttl_ms,
               size_t* pinned) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && (keys || n == 0), "kvtier_pin: store and keys must be set");
    auto r = store->store->pin(ns, to_keys(keys, n), ttl_ms);
    if (!r.ok()) return fail(r.status());
    if (pinned) *pinned = *r;
    return 0;
  });
}

int kvtier_unpin(kvtier_store* store, uint16_t ns, const kvtier_key* keys, size_t n,
                 size_t* unpinned) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && (keys || n == 0), "kvtier_unpin: store and keys must be set");
    auto r = store->store->unpin(ns, to_keys(keys, n));
    if (!r.ok()) return fail(r.status());
    if (unpinned) *unpinned = *r;
    return 0;
  });
}

int kvtier_get_stats(kvtier_store* store, kvtier_stats* out) {
  return guarded([&] {
    KVTIER_CHECK_ARG(store && out, "kvtier_get_stats: store and stats must be set");
    auto r = store->store->stats();
    if (!r.ok()) return fail(r.status());
    const auto& s = *r;
    std::memset(out, 0, sizeof(*out));
    out->puts = s.puts;
    out->dedups = s.dedups;
    out->put_bytes = s.put_bytes;
    out->hits_ram = s.hits_ram;
    out->hits_disk = s.hits_disk;
    out->get_bytes = s.get_bytes;
    static_assert(static_cast<size_t>(kvtier::kv::MissReason::kCount) <= KVTIER_REASON_SLOTS);
    static_assert(static_cast<size_t>(kvtier::kv::RefuseReason::kCount) <= KVTIER_REASON_SLOTS);
    for (size_t i = 0; i < s.misses.size(); ++i) out->misses[i] = s.misses[i];
    for (size_t i = 0; i < s.refusals.size(); ++i) out->refusals[i] = s.refusals[i];
    out->evictions = s.evictions;
    out->demotions = s.demotions;
    out->promotions = s.promotions;
    out->ram_slots = s.ram_slots;
    out->ram_used = s.ram_used;
    out->ram_leased = s.ram_leased;
    out->index_entries = s.index_entries;
    out->index_capacity = s.index_capacity;
    out->disk_bytes_written = s.disk.bytes_written;
    out->disk_bytes_read = s.disk.bytes_read;
    out->has_disk = s.has_disk ? 1 : 0;
    return 0;
  });
}

}  // extern "C"
