#include "net/server/server_config.h"

#include <fmt/format.h>

#include <asio/ip/address.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "blk/dev/uring_device.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

namespace {

using nlohmann::json;

// Reads the members of one JSON object, remembering which keys were used so
// that finish() can name any key the schema does not have.
class Fields {
 public:
  Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  // nullptr when absent (or JSON null, which means "absent" everywhere).
  const json* find(const std::string& key) {
    used_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status get_uint(const std::string& key, uint64_t min, uint64_t max, uint64_t* out) {
    const json* v = find(key);
    if (!v) return Status::ok_status();
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0)) {
      return Status::invalid_argument(
          fmt::format("config key '{}' must be a non-negative integer", name(key)));
    }
    uint64_t x = v->get<uint64_t>();
    if (x < min || x > max) {
      return Status::invalid_argument(
          fmt::format("config key '{}' is {}, must be in [{}, {}]", name(key), x, min, max));
    }
    *out = x;
    return Status::ok_status();
  }

  template <typename T>
  Status get_uint_as(const std::string& key, uint64_t min, uint64_t max, T* out) {
    uint64_t x = *out;
    KVTIER_RETURN_IF_ERROR(get_uint(key, min, max, &x));
    *out = static_cast<T>(x);
    return Status::ok_status();
  }

  Status get_size(const std::string& key, uint64_t min, uint64_t max, uint64_t* out) {
    const json* v = find(key);
    if (!v) return Status::ok_status();
    uint64_t x = 0;
    if (v->is_string()) {
      auto r = parse_size(v->get<std::string>());
      if (!r.ok()) {
        return Status::invalid_argument(
            fmt::format("config key '{}': {}", name(key), r.status().message()));
      }
      x = *r;
    } else if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0)) {
      x = v->get<uint64_t>();
    } else {
      return Status::invalid_argument(fmt::format(
          "config key '{}' must be a byte count (integer or string like \"64MiB\")", name(key)));
    }
    if (x < min || x > max) {
      return Status::invalid_argument(
          fmt::format("config key '{}' is {} bytes, must be in [{}, {}]", name(key), x, min, max));
    }
    *out = x;
    return Status::ok_status();
  }

  Status get_bool(const std::string& key, bool* out) {
    const json* v = find(key);
    if (!v) return Status::ok_status();
    if (!v->is_boolean()) {
      return Status::invalid_argument(
          fmt::format("config key '{}' must be true or false", name(key)));
    }
    *out = v->get<bool>();
    return Status::ok_status();
  }

  Status get_string(const std::string& key, size_t max_len, std::string* out) {
    const json* v = find(key);
    if (!v) return Status::ok_status();
    if (!v->is_string()) {
      return Status::invalid_argument(fmt::format("config key '{}' must be a string", name(key)));
    }
    std::string s = v->get<std::string>();
    if (s.size() > max_len) {
      return Status::invalid_argument(
          fmt::format("config key '{}' is longer than {} bytes", name(key), max_len));
    }
    *out = std::move(s);
    return Status::ok_status();
  }

  // Unknown keys are errors, named with their full path.
  Status finish() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!used_.count(it.key())) {
        return Status::invalid_argument(fmt::format("unknown config key '{}'", name(it.key())));
      }
    }
    return Status::ok_status();
  }

 private:
  const json& obj_;
  std::string path_;
  std::set<std::string> used_;
};

Status require_object(const json* v, const std::string& name) {
  if (!v->is_object()) {
    return Status::invalid_argument(fmt::format("config key '{}' must be an object", name));
  }
  return Status::ok_status();
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(fmt::format("cannot open '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) {
    return Status::invalid_argument(fmt::format("'{}' is larger than {} bytes", path, max_bytes));
  }
  return s;
}

constexpr uint64_t kMaxRam = 1ull << 46;     // 64 TiB: far above any machine, catches typos
constexpr uint64_t kMaxVolume = 1ull << 56;  // 64 PiB

Status parse_volume(const json& v, VolumeConfig* vol) {
  Fields f(v, "store.volume");
  KVTIER_RETURN_IF_ERROR(f.get_string("path", 4096, &vol->path));
  KVTIER_RETURN_IF_ERROR(f.get_size("size", 0, kMaxVolume, &vol->size_bytes));
  KVTIER_RETURN_IF_ERROR(f.get_bool("direct", &vol->direct));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("queue_depth", 1, 4096, &vol->queue_depth));
  KVTIER_RETURN_IF_ERROR(f.finish());
  if (vol->path.empty()) {
    return Status::invalid_argument("config key 'store.volume.path' is required");
  }
  return Status::ok_status();
}

Status parse_store(const json& v, StoreConfig* s) {
  Fields f(v, "store");
  KVTIER_RETURN_IF_ERROR(f.get_size("ram_bytes", 0, kMaxRam, &s->ram_bytes));
  uint64_t obj = s->max_object_bytes;
  KVTIER_RETURN_IF_ERROR(f.get_size("max_object_bytes", 1, kMaxDataBytes, &obj));
  s->max_object_bytes = static_cast<uint32_t>(obj);
  if (const json* vol = f.find("volume")) {
    KVTIER_RETURN_IF_ERROR(require_object(vol, "store.volume"));
    VolumeConfig vc;
    KVTIER_RETURN_IF_ERROR(parse_volume(*vol, &vc));
    s->volume = std::move(vc);
  }
  KVTIER_RETURN_IF_ERROR(f.get_size("region_bytes", 1ull << 20, 1ull << 34, &s->region_bytes));
  KVTIER_RETURN_IF_ERROR(f.get_uint("io_timeout_ms", 1, 3600000, &s->io_timeout_ms));
  KVTIER_RETURN_IF_ERROR(f.get_bool("promote_on_disk_hit", &s->promote_on_disk_hit));
  KVTIER_RETURN_IF_ERROR(f.get_size("disk_write_budget_bytes_per_sec", 0, kMaxVolume,
                                    &s->disk_write_budget_bytes_per_sec));
  return f.finish();
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  std::string t(text);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  size_t i = 0;
  while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
  size_t num_start = i;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  std::string num = t.substr(num_start, i - num_start);
  while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
  std::string unit = t.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (num.empty() || num.find('.') != num.rfind('.') || num == ".") {
    return Status::invalid_argument(fmt::format("'{}' is not a size", text));
  }
  uint64_t mult = 0;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    mult = 1ull << 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    mult = 1ull << 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    mult = 1ull << 30;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    mult = 1ull << 40;
  } else {
    return Status::invalid_argument(
        fmt::format("'{}': unknown unit '{}' (use B, KiB, MiB, GiB or TiB)", text, unit));
  }
  if (num.find('.') == std::string::npos) {
    if (num.size() > 19) return Status::invalid_argument(fmt::format("'{}' is too large", text));
    uint64_t n = std::stoull(num);
    if (n > std::numeric_limits<uint64_t>::max() / mult) {
      return Status::invalid_argument(fmt::format("'{}' is too large", text));
    }
    return n * mult;
  }
  double d = std::strtod(num.c_str(), nullptr);
  double bytes = d * static_cast<double>(mult);
  if (!std::isfinite(bytes) || bytes >= 1.8e19) {
    return Status::invalid_argument(fmt::format("'{}' is too large", text));
  }
  if (bytes != std::floor(bytes)) {
    return Status::invalid_argument(fmt::format("'{}' is not a whole number of bytes", text));
  }
  return static_cast<uint64_t>(bytes);
}

Result<bool> is_loopback_address(const std::string& address) {
  std::error_code ec;
  auto a = asio::ip::make_address(address, ec);
  if (ec) {
    return Status::invalid_argument(
        fmt::format("'{}' is not an IP address (give an IPv4 or IPv6 literal)", address));
  }
  return a.is_loopback();
}

namespace {

// One tenant's entry; `names`, `tokens` and `cert_names` collect what earlier
// tenants claimed, since no two may share a name, token or certificate name.
Status validate_tenant(const TenantConfig& t, bool mutual_tls, std::set<std::string>* names,
                       std::set<std::string>* tokens, std::set<std::string>* cert_names) {
  if (t.name.empty() || t.name.size() > 64 ||
      t.name.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") !=
          std::string::npos) {
    return Status::invalid_argument(
        fmt::format("tenant name '{}' must be 1 to 64 of [A-Za-z0-9_.-]", t.name));
  }
  if (!names->insert(t.name).second) {
    return Status::invalid_argument(fmt::format("tenant '{}' is listed twice", t.name));
  }
  if (!t.client_cert_cn.empty() && !mutual_tls) {
    return Status::invalid_argument(
        fmt::format("tenant '{}': client_cert_cn needs tls.client_ca_file (mutual TLS)", t.name));
  }
  if (!t.client_cert_cn.empty() && !cert_names->insert(t.client_cert_cn).second) {
    return Status::invalid_argument(
        fmt::format("tenant '{}': its client_cert_cn is another tenant's too", t.name));
  }
  if (t.token.empty() && !t.client_cert_cn.empty()) {
    // Certificate only.
  } else if (t.token.size() < 16 || t.token.size() > kMaxStringBytes) {
    return Status::invalid_argument(
        fmt::format("tenant '{}': token must be 16 to {} bytes (or give client_cert_cn only)",
                    t.name, kMaxStringBytes));
  } else if (!tokens->insert(t.token).second) {
    return Status::invalid_argument(
        fmt::format("tenant '{}': its token is another tenant's too", t.name));
  }
  if (t.max_connections == 0 || t.max_namespaces == 0) {
    return Status::invalid_argument(
        fmt::format("tenant '{}': max_connections and max_namespaces must be >= 1", t.name));
  }
  if (t.share_ram_arena && t.max_ram_bytes == 0) {
    return Status::invalid_argument(fmt::format(
        "tenant '{}': share_ram_arena needs max_ram_bytes (the size of its own RAM arena)",
        t.name));
  }
  return Status::ok_status();
}

// Who may connect: a non-loopback listener needs a credential.
Status validate_access(const ServerConfig& c) {
  auto loop = is_loopback_address(c.listen_address);
  if (!loop.ok()) return Status::invalid_argument("listen.address: " + loop.status().message());
  const bool mutual_tls = c.tls && !c.tls->client_ca_file.empty();
  if (!*loop && c.auth_token.empty() && c.tenants.empty() && !mutual_tls) {
    return Status::invalid_argument(fmt::format(
        "listen.address {} is not loopback: a credential is required (auth_token, tenants, or "
        "tls with client_ca_file); without tls the protocol is not encrypted",
        c.listen_address));
  }
  if (c.tls && (c.tls->cert_file.empty() || c.tls->key_file.empty())) {
    return Status::invalid_argument("tls needs cert_file and key_file");
  }
  if (!c.tenants.empty()) {
    if (!c.auth_token.empty()) {
      return Status::invalid_argument("give auth_token or tenants, not both");
    }
    std::set<std::string> names, tokens, cert_names;
    for (const auto& t : c.tenants) {
      KVTIER_RETURN_IF_ERROR(validate_tenant(t, mutual_tls, &names, &tokens, &cert_names));
    }
  }
  if (c.auth_token.size() > kMaxStringBytes) {
    return Status::invalid_argument(
        fmt::format("auth_token is longer than {} bytes", kMaxStringBytes));
  }
  if (c.metrics_enabled) {
    auto ml = is_loopback_address(c.metrics_address);
    if (!ml.ok()) return Status::invalid_argument("metrics.address: " + ml.status().message());
  }
  return Status::ok_status();
}

// Threads, connections, batch and message sizes, and the store's tiers.
Status validate_limits(const ServerConfig& c) {
  const StoreConfig& store = c.store;
  if (c.io_threads == 0 || c.io_threads > 256) {
    return Status::invalid_argument("io_threads must be in [1, 256]");
  }
  if (c.store_threads == 0 || c.store_threads > 1024) {
    return Status::invalid_argument("store_threads must be in [1, 1024]");
  }
  if (c.max_connections == 0) return Status::invalid_argument("max_connections must be >= 1");
  if (c.max_pending_hello == 0) return Status::invalid_argument("max_pending_hello must be >= 1");
  if (c.max_batch == 0 || c.max_batch > kMaxBatch) {
    return Status::invalid_argument(fmt::format("max_batch must be in [1, {}]", kMaxBatch));
  }
  if (c.max_match_keys == 0 || c.max_match_keys > kMaxMatchKeys) {
    return Status::invalid_argument(
        fmt::format("max_match_keys must be in [1, {}]", kMaxMatchKeys));
  }
  if (store.max_object_bytes == 0 || store.max_object_bytes > kMaxDataBytes) {
    return Status::invalid_argument(
        fmt::format("store.max_object_bytes must be in [1, {}]", kMaxDataBytes));
  }
  if (c.max_data_bytes != 0 &&
      (c.max_data_bytes < store.max_object_bytes || c.max_data_bytes > kMaxDataBytes)) {
    return Status::invalid_argument(
        fmt::format("max_data_bytes must be in [store.max_object_bytes = {}, {}]",
                    store.max_object_bytes, kMaxDataBytes));
  }
  if (store.ram_bytes == 0 && !store.volume) {
    return Status::invalid_argument(
        "store needs a RAM tier (store.ram_bytes > 0), a volume, or both");
  }
  if (store.ram_bytes > 0 && store.ram_bytes < store.max_object_bytes) {
    return Status::invalid_argument(
        fmt::format("store.ram_bytes {} is smaller than one object of {} bytes", store.ram_bytes,
                    store.max_object_bytes));
  }
  if (store.volume && store.volume->path.empty()) {
    return Status::invalid_argument("store.volume.path is required");
  }
  return Status::ok_status();
}

// A secret kept in a file (auth_token_file, a tenant's token_file), without
// the line end an editor leaves.
Result<std::string> read_secret_file(const std::string& path, const std::string& key) {
  auto text = read_file(path, kMaxStringBytes + 2);
  if (!text.ok()) return Status::invalid_argument(key + ": " + text.status().message());
  std::string s = std::move(*text);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

Status parse_endpoints(Fields& f, bool metrics_is_null, ServerConfig* c) {
  if (const json* v = f.find("listen")) {
    KVTIER_RETURN_IF_ERROR(require_object(v, "listen"));
    Fields l(*v, "listen");
    KVTIER_RETURN_IF_ERROR(l.get_string("address", 256, &c->listen_address));
    KVTIER_RETURN_IF_ERROR(l.get_uint_as("port", 0, 65535, &c->listen_port));
    KVTIER_RETURN_IF_ERROR(l.finish());
  }
  if (const json* v = f.find("metrics")) {
    KVTIER_RETURN_IF_ERROR(require_object(v, "metrics"));
    Fields m(*v, "metrics");
    KVTIER_RETURN_IF_ERROR(m.get_bool("enabled", &c->metrics_enabled));
    KVTIER_RETURN_IF_ERROR(m.get_string("address", 256, &c->metrics_address));
    KVTIER_RETURN_IF_ERROR(m.get_uint_as("port", 0, 65535, &c->metrics_port));
    KVTIER_RETURN_IF_ERROR(m.finish());
  } else if (metrics_is_null) {
    c->metrics_enabled = false;  // "metrics": null turns the endpoint off
  }
  return Status::ok_status();
}

Status parse_auth_token(Fields& f, ServerConfig* c) {
  KVTIER_RETURN_IF_ERROR(f.get_string("auth_token", kMaxStringBytes, &c->auth_token));
  std::string token_file;
  KVTIER_RETURN_IF_ERROR(f.get_string("auth_token_file", 4096, &token_file));
  if (token_file.empty()) return Status::ok_status();
  if (!c->auth_token.empty()) {
    return Status::invalid_argument("give auth_token or auth_token_file, not both");
  }
  auto token = read_secret_file(token_file, "auth_token_file");
  if (!token.ok()) return token.status();
  if (token->empty()) return Status::invalid_argument("auth_token_file is empty");
  c->auth_token = std::move(*token);
  return Status::ok_status();
}

Result<TenantConfig> parse_tenant(const json& v, const std::string& where) {
  KVTIER_RETURN_IF_ERROR(require_object(&v, where));
  Fields t(v, where);
  TenantConfig tc;
  KVTIER_RETURN_IF_ERROR(t.get_string("name", 64, &tc.name));
  KVTIER_RETURN_IF_ERROR(t.get_string("token", kMaxStringBytes, &tc.token));
  std::string token_file;
  KVTIER_RETURN_IF_ERROR(t.get_string("token_file", 4096, &token_file));
  if (!token_file.empty()) {
    if (!tc.token.empty()) {
      return Status::invalid_argument(where + ": give token or token_file, not both");
    }
    auto token = read_secret_file(token_file, where + ".token_file");
    if (!token.ok()) return token.status();
    tc.token = std::move(*token);
  }
  KVTIER_RETURN_IF_ERROR(t.get_uint_as("max_connections", 1, 1u << 20, &tc.max_connections));
  KVTIER_RETURN_IF_ERROR(t.get_uint_as("max_namespaces", 1, 65535, &tc.max_namespaces));
  KVTIER_RETURN_IF_ERROR(t.get_uint_as("max_pinned_blocks", 0, 1ull << 32, &tc.max_pinned_blocks));
  KVTIER_RETURN_IF_ERROR(t.get_bool("share_ram_arena", &tc.share_ram_arena));
  KVTIER_RETURN_IF_ERROR(t.get_size("max_ram_bytes", 0, 1ull << 50, &tc.max_ram_bytes));
  KVTIER_RETURN_IF_ERROR(t.get_size("max_disk_bytes", 0, 1ull << 50, &tc.max_disk_bytes));
  KVTIER_RETURN_IF_ERROR(t.get_string("client_cert_cn", 255, &tc.client_cert_cn));
  KVTIER_RETURN_IF_ERROR(t.finish());
  return tc;
}

Status parse_credentials(Fields& f, ServerConfig* c) {
  KVTIER_RETURN_IF_ERROR(parse_auth_token(f, c));
  if (const json* v = f.find("tenants")) {
    if (!v->is_array()) return Status::invalid_argument("config key 'tenants' must be an array");
    for (size_t i = 0; i < v->size(); ++i) {
      auto tenant = parse_tenant((*v)[i], fmt::format("tenants[{}]", i));
      if (!tenant.ok()) return tenant.status();
      c->tenants.push_back(std::move(*tenant));
    }
  }
  if (const json* v = f.find("tls")) {
    KVTIER_RETURN_IF_ERROR(require_object(v, "tls"));
    Fields t(*v, "tls");
    ServerTlsConfig tc;
    KVTIER_RETURN_IF_ERROR(t.get_string("cert_file", 4096, &tc.cert_file));
    KVTIER_RETURN_IF_ERROR(t.get_string("key_file", 4096, &tc.key_file));
    KVTIER_RETURN_IF_ERROR(t.get_string("client_ca_file", 4096, &tc.client_ca_file));
    KVTIER_RETURN_IF_ERROR(t.finish());
    c->tls = std::move(tc);
  }
  return Status::ok_status();
}

Status parse_limits(Fields& f, ServerConfig* c) {
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("max_connections", 1, 1u << 20, &c->max_connections));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("max_pending_hello", 1, 1u << 20, &c->max_pending_hello));
  uint64_t max_data = c->max_data_bytes;
  KVTIER_RETURN_IF_ERROR(f.get_size("max_data_bytes", 0, kMaxDataBytes, &max_data));
  c->max_data_bytes = static_cast<uint32_t>(max_data);
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("max_batch", 1, kMaxBatch, &c->max_batch));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("max_match_keys", 1, kMaxMatchKeys, &c->max_match_keys));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("hello_timeout_ms", 1, 3600000, &c->hello_timeout_ms));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("idle_timeout_ms", 1, 86400000, &c->idle_timeout_ms));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("write_timeout_ms", 1, 3600000, &c->write_timeout_ms));
  KVTIER_RETURN_IF_ERROR(f.get_string("server_name", kMaxNameBytes, &c->server_name));
  KVTIER_RETURN_IF_ERROR(f.get_bool("shm_enabled", &c->shm_enabled));
  KVTIER_RETURN_IF_ERROR(
      f.get_size("shm_max_area_bytes", 1ull << 20, 1ull << 40, &c->shm_max_area_bytes));
  KVTIER_RETURN_IF_ERROR(f.get_bool("shm_direct_channel", &c->shm_direct_channel));
  KVTIER_RETURN_IF_ERROR(f.get_bool("shm_share_ram_arena", &c->shm_share_ram_arena));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("shm_max_channels", 1, 65536, &c->shm_max_channels));
  return Status::ok_status();
}

Result<EtcdMembershipConfig> parse_etcd(const json& v) {
  KVTIER_RETURN_IF_ERROR(require_object(&v, "etcd"));
  Fields e(v, "etcd");
  EtcdMembershipConfig m;
  KVTIER_RETURN_IF_ERROR(e.get_string("url", 256, &m.url));
  KVTIER_RETURN_IF_ERROR(e.get_string("prefix", 256, &m.prefix));
  KVTIER_RETURN_IF_ERROR(e.get_string("node_id", 128, &m.node_id));
  KVTIER_RETURN_IF_ERROR(e.get_string("advertise_address", 256, &m.advertise_address));
  KVTIER_RETURN_IF_ERROR(e.get_uint_as("ttl_s", 2, 3600, &m.ttl_s));
  KVTIER_RETURN_IF_ERROR(e.get_uint_as("timeout_ms", 1, 60000, &m.timeout_ms));
  KVTIER_RETURN_IF_ERROR(e.get_string("user", 256, &m.user));
  KVTIER_RETURN_IF_ERROR(e.get_string("password_file", 4096, &m.password_file));
  KVTIER_RETURN_IF_ERROR(e.get_string("ca_file", 4096, &m.tls.ca_file));
  KVTIER_RETURN_IF_ERROR(e.get_string("cert_file", 4096, &m.tls.cert_file));
  KVTIER_RETURN_IF_ERROR(e.get_string("key_file", 4096, &m.tls.key_file));
  if ((m.url.rfind("https://", 0) == 0) != m.tls.enabled()) {
    return Status::invalid_argument("an https etcd.url and etcd.ca_file go together");
  }
  if (m.user.empty() != m.password_file.empty()) {
    return Status::invalid_argument("etcd.user and etcd.password_file go together");
  }
  KVTIER_RETURN_IF_ERROR(e.finish());
  if (m.url.empty()) return Status::invalid_argument("config key 'etcd.url' is required");
  auto ep = parse_etcd_url(m.url);
  if (!ep.ok()) return Status::invalid_argument("etcd.url: " + ep.status().message());
  if (m.node_id.empty() || m.node_id.find('/') != std::string::npos) {
    return Status::invalid_argument(
        "config key 'etcd.node_id' is required and may not contain '/'");
  }
  return m;
}

}  // namespace

Status ServerConfig::validate() const {
  KVTIER_RETURN_IF_ERROR(validate_access(*this));
  return validate_limits(*this);
}

Result<ServerConfig> parse_server_config(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    return Status::invalid_argument(fmt::format("config is not valid JSON: {}", e.what()));
  }
  if (!root.is_object()) return Status::invalid_argument("config must be a JSON object");

  ServerConfig c;
  Fields f(root, "");
  KVTIER_RETURN_IF_ERROR(parse_endpoints(f, root.contains("metrics"), &c));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("io_threads", 1, 256, &c.io_threads));
  KVTIER_RETURN_IF_ERROR(f.get_uint_as("store_threads", 1, 1024, &c.store_threads));
  KVTIER_RETURN_IF_ERROR(parse_credentials(f, &c));
  KVTIER_RETURN_IF_ERROR(parse_limits(f, &c));
  if (const json* v = f.find("store")) {
    KVTIER_RETURN_IF_ERROR(require_object(v, "store"));
    KVTIER_RETURN_IF_ERROR(parse_store(*v, &c.store));
  }
  if (const json* v = f.find("etcd")) {
    auto etcd = parse_etcd(*v);
    if (!etcd.ok()) return etcd.status();
    c.etcd = std::move(*etcd);
  }
  KVTIER_RETURN_IF_ERROR(f.finish());
  KVTIER_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ServerConfig> load_server_config(const std::string& path) {
  auto text = read_file(path, 1u << 20);
  if (!text.ok()) return Status(text.status().code(), "config: " + text.status().message());
  auto c = parse_server_config(*text);
  if (!c.ok()) return Status(c.status().code(), fmt::format("{}: {}", path, c.status().message()));
  return c;
}

Result<kv::StoreOptions> make_store_options(const StoreConfig& config) {
  kv::StoreOptions o;
  o.ram_bytes = config.ram_bytes;
  o.max_object_bytes = config.max_object_bytes;
  o.promote_on_disk_hit = config.promote_on_disk_hit;
  o.io_timeout_ms = config.io_timeout_ms;
  o.disk.region_bytes = config.region_bytes;
  o.disk_write_budget_bytes_per_sec = config.disk_write_budget_bytes_per_sec;
  if (config.volume) {
    blk::UringOptions u;
    u.path = config.volume->path;
    u.create_size = config.volume->size_bytes;
    u.direct = config.volume->direct;
    u.queue_depth = config.volume->queue_depth;
    auto dev = blk::UringDevice::open(u);
    if (!dev.ok()) {
      return Status(dev.status().code(),
                    fmt::format("volume {}: {}", u.path, dev.status().message()));
    }
    o.volume = std::shared_ptr<blk::BlockDevice>(std::move(*dev));
  }
  return o;
}

}  // namespace kvtier::net
