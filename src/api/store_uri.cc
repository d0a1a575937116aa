#include "api/store_uri.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <optional>

#include "blk/dev/uring_device.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "kv/store.h"
#include "kvtier/kv_store.h"
#include "net/client/remote_store.h"
#include "net/cluster/cluster_store.h"
#include "net/server/server_config.h"

namespace kvtier::api {

namespace {

using Scheme = StoreUri::Scheme;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size() || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0) {
      return Status::invalid_argument(fmt::format("bad %-escape in '{}'", s));
    }
    out.push_back(static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
    i += 2;
  }
  return out;
}

const char* scheme_name(Scheme s) {
  static constexpr const char* kNames[] = {"mem", "file", "kvtier", "etcd", "cluster"};
  return enum_name<Scheme::kCluster>(s, kNames, "?");
}

// "host:port" or "[v6]:port" with a port in 1..65535.
Status check_host_port(const std::string& hp) {
  auto node = net::parse_node_address("uri", hp);
  return node.ok() ? Status::ok_status() : node.status();
}

Status parse_query(std::string_view query, Scheme scheme, StoreUri* out) {
  const auto& known = store_uri_options(scheme);
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Status::invalid_argument(fmt::format("option '{}' is not name=value", item));
    }
    auto name = percent_decode(item.substr(0, eq));
    auto value = percent_decode(item.substr(eq + 1));
    if (!name.ok()) return name.status();
    if (!value.ok()) return value.status();
    if (std::find(known.begin(), known.end(), *name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Status::invalid_argument(fmt::format("unknown option '{}' for {}:// (known: {})",
                                                  *name, scheme_name(scheme), list));
    }
    if (out->options.count(*name)) {
      return Status::invalid_argument(fmt::format("option '{}' given twice", *name));
    }
    out->options[*name] = *value;
  }
  return Status::ok_status();
}

// ---- option values ------------------------------------------------------------

class OptionReader {
 public:
  explicit OptionReader(const StoreUri& uri) : uri_(uri) {}

  Result<uint64_t> size(const std::string& name, uint64_t dflt) const {
    auto it = uri_.options.find(name);
    if (it == uri_.options.end()) return dflt;
    auto v = net::parse_size(it->second);
    if (!v.ok()) return Status::invalid_argument(name + ": " + v.status().message());
    return *v;
  }
  Result<uint64_t> number(const std::string& name, uint64_t dflt, uint64_t lo, uint64_t hi) const {
    auto it = uri_.options.find(name);
    if (it == uri_.options.end()) return dflt;
    const std::string& s = it->second;
    if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), ::isdigit)) {
      return Status::invalid_argument(fmt::format("{}: '{}' is not a whole number", name, s));
    }
    uint64_t v = std::stoull(s);
    if (v < lo || v > hi) {
      return Status::invalid_argument(fmt::format("{}: {} is not in {}..{}", name, v, lo, hi));
    }
    return v;
  }
  Result<bool> flag(const std::string& name, bool dflt) const {
    auto it = uri_.options.find(name);
    if (it == uri_.options.end()) return dflt;
    if (it->second == "1" || it->second == "true" || it->second == "on") return true;
    if (it->second == "0" || it->second == "false" || it->second == "off") return false;
    return Status::invalid_argument(
        fmt::format("{}: '{}' is not one of 1, 0, true, false, on, off", name, it->second));
  }
  std::string text(const std::string& name, const std::string& dflt) const {
    auto it = uri_.options.find(name);
    return it == uri_.options.end() ? dflt : it->second;
  }

 private:
  const StoreUri& uri_;
};

// The options of an in-process store; the volume is opened by the caller.
Result<kv::StoreOptions> local_options(const OptionReader& r, uint64_t default_ram) {
  kv::StoreOptions so;
  auto ram = r.size("ram", default_ram);
  auto max_object = r.size("max_object", so.max_object_bytes);
  auto timeout = r.number("io_timeout_ms", so.io_timeout_ms, 1, 3600000);
  if (!ram.ok()) return ram.status();
  if (!max_object.ok()) return max_object.status();
  if (!timeout.ok()) return timeout.status();
  if (*max_object == 0 || *max_object > (1ull << 30)) {
    return Status::invalid_argument("max_object must be between 1 byte and 1 GiB");
  }
  so.ram_bytes = *ram;
  so.max_object_bytes = static_cast<uint32_t>(*max_object);
  so.io_timeout_ms = *timeout;
  return so;
}

Result<std::unique_ptr<KvStore>> open_mem(const StoreUri& uri) {
  OptionReader r(uri);
  auto so = local_options(r, 64ull << 20);
  if (!so.ok()) return so.status();
  if (so->ram_bytes == 0) return Status::invalid_argument("mem:// needs ram > 0");
  auto s = kv::Store::open(*so);
  if (!s.ok()) return s.status();
  return std::unique_ptr<KvStore>(std::move(*s));
}

Result<std::unique_ptr<KvStore>> open_file(const StoreUri& uri) {
  OptionReader r(uri);
  auto so = local_options(r, 64ull << 20);
  if (!so.ok()) return so.status();
  auto disk = r.size("disk", 0);
  if (!disk.ok()) return disk.status();
  struct stat st {};
  const bool exists = ::stat(uri.path.c_str(), &st) == 0;
  if (!exists && *disk == 0) {
    return Status::not_found(
        fmt::format("volume {} does not exist; add disk=SIZE to create it", uri.path));
  }
  blk::UringOptions uo;
  uo.path = uri.path;
  uo.create_size = *disk;
  auto dev = blk::UringDevice::open(uo);
  if (!dev.ok()) return dev.status();
  const uint64_t capacity = (*dev)->capacity();
  // Regions of 64 MiB, fewer bytes on a small volume (at least 8 regions),
  // never smaller than one object; `region` overrides.
  uint64_t region = std::clamp<uint64_t>(capacity / 8 / (1 << 20) * (1 << 20), 1 << 20, 64 << 20);
  region = std::max<uint64_t>(region, (so->max_object_bytes + 8191) / 4096 * 4096);
  auto region_opt = r.size("region", region);
  auto depth = r.number("read_depth", so->disk.read_depth, 1, 1024);
  if (!region_opt.ok()) return region_opt.status();
  if (!depth.ok()) return depth.status();
  so->disk.region_bytes = *region_opt;
  so->disk.read_depth = static_cast<unsigned>(*depth);
  so->disk.max_payload_bytes = std::max<uint32_t>(so->max_object_bytes, 4096);
  so->volume = std::shared_ptr<blk::BlockDevice>(std::move(*dev));
  auto s = kv::Store::open(*so);
  if (!s.ok()) return s.status();
  return std::unique_ptr<KvStore>(std::move(*s));
}

// The RemoteStore options shared by kvtier://, etcd:// and cluster://.
Result<net::RemoteStoreOptions> remote_options(const OptionReader& r) {
  net::RemoteStoreOptions o;
  auto connections = r.number("connections", o.connections, 1, 64);
  auto timeout = r.number("timeout_ms", o.call_timeout_ms, 1, 600000);
  auto connect_timeout = r.number("connect_timeout_ms", o.connect_timeout_ms, 1, 600000);
  auto shm = r.flag("shared_memory", o.shared_memory);
  auto direct = r.flag("direct_channel", o.direct_channel);
  for (const Status& st : {connections.status(), timeout.status(), connect_timeout.status(),
                           shm.status(), direct.status()}) {
    if (!st.ok()) return st;
  }
  o.connections = static_cast<unsigned>(*connections);
  o.call_timeout_ms = static_cast<uint32_t>(*timeout);
  o.connect_timeout_ms = static_cast<uint32_t>(*connect_timeout);
  o.shared_memory = *shm;
  o.direct_channel = *direct;
  o.client_name = r.text("client_name", o.client_name);
  // TLS: a CA turns it on; a certificate and key add mutual TLS.
  o.tls.ca_file = r.text("tls_ca", "");
  o.tls.cert_file = r.text("tls_cert", "");
  o.tls.key_file = r.text("tls_key", "");
  if (!o.tls.enabled() && (!o.tls.cert_file.empty() || !o.tls.key_file.empty())) {
    return Status::invalid_argument("tls_cert and tls_key need tls_ca (the server's CA)");
  }
  const std::string token_file = r.text("token_file", "");
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return Status::not_found(fmt::format("token_file {} cannot be read", token_file));
    std::getline(in, o.auth_token);
    while (!o.auth_token.empty() && std::isspace(static_cast<unsigned char>(o.auth_token.back())))
      o.auth_token.pop_back();
    if (o.auth_token.empty()) {
      return Status::invalid_argument(fmt::format("token_file {} is empty", token_file));
    }
  }
  return o;
}

Result<std::unique_ptr<KvStore>> open_kvtier(const StoreUri& uri) {
  OptionReader r(uri);
  auto o = remote_options(r);
  if (!o.ok()) return o.status();
  auto node = net::parse_node_address("uri", uri.hosts.front());
  if (!node.ok()) return node.status();
  o->host = node->host;
  o->port = node->port;
  auto wait = r.number("wait_ms", 2000, 0, 600000);
  if (!wait.ok()) return wait.status();
  auto s = net::RemoteStore::open(*o);
  if (!s.ok()) return s.status();
  // A typo in the address should not pass for a cold cache: unless told not
  // to wait (wait_ms=0: calls are misses until the service is up), the
  // service must answer within wait_ms.
  if (*wait > 0) {
    Status st = (*s)->wait_connected(static_cast<uint32_t>(*wait));
    if (!st.ok()) {
      return Status(st.code(), fmt::format("store service {} did not answer in {} ms: {} (add "
                                           "wait_ms=0 to open it anyway)",
                                           uri.hosts.front(), *wait, st.message()));
    }
  }
  return std::unique_ptr<KvStore>(std::move(*s));
}

Result<std::unique_ptr<KvStore>> open_cluster(const StoreUri& uri) {
  OptionReader r(uri);
  auto o = remote_options(r);
  if (!o.ok()) return o.status();
  net::ClusterStoreOptions co;
  co.node_options = *o;
  if (uri.scheme == Scheme::kEtcd) {
    auto poll = r.number("poll_ms", co.poll_ms, 10, 600000);
    if (!poll.ok()) return poll.status();
    co.poll_ms = static_cast<uint32_t>(*poll);
    // etcd behind TLS: its CA (and a client certificate) make the URL https.
    co.etcd_tls.ca_file = r.text("etcd_ca", "");
    co.etcd_tls.cert_file = r.text("etcd_cert", "");
    co.etcd_tls.key_file = r.text("etcd_key", "");
    co.etcd_url = (co.etcd_tls.enabled() ? "https://" : "http://") + uri.hosts.front();
    if (!uri.path.empty()) co.etcd_prefix = uri.path;
    co.etcd_user = r.text("etcd_user", "");
    co.etcd_password_file = r.text("etcd_password_file", "");
    if (co.etcd_user.empty() != co.etcd_password_file.empty()) {
      return Status::invalid_argument("etcd_user and etcd_password_file go together");
    }
  } else {
    for (size_t i = 0; i < uri.hosts.size(); ++i) {
      // The address is the node's id (as for a static list in a cluster
      // config), so placement does not depend on the order of the list.
      auto node = net::parse_node_address(uri.hosts[i], uri.hosts[i]);
      if (!node.ok()) return node.status();
      co.nodes.push_back(*node);
    }
  }
  auto s = net::ClusterStore::open(co);
  if (!s.ok()) return s.status();
  return std::unique_ptr<KvStore>(std::move(*s));
}

}  // namespace

const std::vector<std::string>& store_uri_options(Scheme scheme) {
  static const std::vector<std::string> mem = {"ram", "max_object", "io_timeout_ms"};
  static const std::vector<std::string> file = {"ram",  "max_object", "io_timeout_ms",
                                                "disk", "region",     "read_depth"};
  static const std::vector<std::string> remote = {
      "token_file",    "connections",    "timeout_ms",  "connect_timeout_ms",
      "shared_memory", "direct_channel", "client_name", "wait_ms",
      "tls_ca",        "tls_cert",       "tls_key"};
  static const std::vector<std::string> etcd = [] {
    auto v = remote;
    v.erase(std::remove(v.begin(), v.end(), "wait_ms"), v.end());
    v.push_back("poll_ms");
    v.push_back("etcd_user");
    v.push_back("etcd_password_file");
    v.push_back("etcd_ca");
    v.push_back("etcd_cert");
    v.push_back("etcd_key");
    return v;
  }();
  static const std::vector<std::string> cluster = [] {
    auto v = remote;
    v.erase(std::remove(v.begin(), v.end(), "wait_ms"), v.end());
    return v;
  }();
  switch (scheme) {
    case Scheme::kMem:
      return mem;
    case Scheme::kFile:
      return file;
    case Scheme::kKvtier:
      return remote;
    case Scheme::kEtcd:
      return etcd;
    case Scheme::kCluster:
      return cluster;
  }
  return mem;
}

namespace {

// The scheme's checks of the authority and path, and where they go in `out`.
Status set_location(std::string_view authority, const std::string& path, StoreUri& out) {
  switch (out.scheme) {
    case Scheme::kMem:
      if (!authority.empty() || !path.empty()) {
        return Status::invalid_argument(
            "mem:// takes no host or path, only options (mem://?ram=64MiB)");
      }
      break;
    case Scheme::kFile:
      if (!authority.empty() && authority != "localhost") {
        return Status::invalid_argument(
            fmt::format("file:// names a local volume (file:///path), not host '{}'", authority));
      }
      if (path.size() < 2) {
        return Status::invalid_argument("file:// needs an absolute path (file:///path/to/volume)");
      }
      out.path = path;
      break;
    case Scheme::kKvtier:
    case Scheme::kEtcd:
    case Scheme::kCluster: {
      if (authority.empty()) {
        return Status::invalid_argument(
            fmt::format("{}:// needs host:port", scheme_name(out.scheme)));
      }
      std::string_view a = authority;
      while (true) {
        size_t comma = a.find(',');
        out.hosts.emplace_back(a.substr(0, comma));
        if (comma == std::string_view::npos) break;
        a = a.substr(comma + 1);
      }
      for (const auto& h : out.hosts) KVTIER_RETURN_IF_ERROR(check_host_port(h));
      if (out.scheme != Scheme::kCluster && out.hosts.size() != 1) {
        return Status::invalid_argument(fmt::format(
            "{}:// takes one host:port (cluster:// takes a list)", scheme_name(out.scheme)));
      }
      if (out.scheme == Scheme::kEtcd) {
        std::string prefix = path;
        while (!prefix.empty() && prefix.front() == '/') prefix.erase(prefix.begin());
        while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
        out.path = prefix;
      } else if (!path.empty() && path != "/") {
        return Status::invalid_argument(
            fmt::format("{}:// takes no path", scheme_name(out.scheme)));
      }
      break;
    }
  }
  return Status::ok_status();
}

// The scheme named `name`, if it is one.
std::optional<Scheme> scheme_of(std::string_view name) {
  for (Scheme s : {Scheme::kMem, Scheme::kFile, Scheme::kKvtier, Scheme::kEtcd, Scheme::kCluster}) {
    if (name == scheme_name(s)) return s;
  }
  return std::nullopt;
}

}  // namespace

Result<StoreUri> parse_store_uri(std::string_view uri) {
  StoreUri out;
  const size_t sep = uri.find("://");
  if (sep == std::string_view::npos) {
    return Status::invalid_argument(fmt::format(
        "'{}' is not a store URI (mem://, file:///path, kvtier://host:port, etcd://host:port, "
        "cluster://host:port,...)",
        uri));
  }
  const std::string_view scheme = uri.substr(0, sep);
  auto known = scheme_of(scheme);
  if (!known) {
    return Status::invalid_argument(fmt::format(
        "unknown store URI scheme '{}' (use mem, file, kvtier, etcd or cluster)", scheme));
  }
  out.scheme = *known;
  std::string_view rest = uri.substr(sep + 3);
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  auto path =
      percent_decode(slash == std::string_view::npos ? std::string_view() : rest.substr(slash));
  if (!path.ok()) return path.status();

  KVTIER_RETURN_IF_ERROR(set_location(authority, *path, out));
  KVTIER_RETURN_IF_ERROR(parse_query(query, out.scheme, &out));
  return out;
}

}  // namespace kvtier::api

namespace kvtier {

Result<std::unique_ptr<KvStore>> open_store(std::string_view uri_text) {
  // A library logs warnings and errors to stderr only (KVTIER_LOG=info or
  // debug for more), never to the caller's stdout.
  static std::once_flag logging_once;
  std::call_once(logging_once, init_logging);
  auto uri = api::parse_store_uri(uri_text);
  if (!uri.ok()) return uri.status();
  switch (uri->scheme) {
    case api::StoreUri::Scheme::kMem:
      return api::open_mem(*uri);
    case api::StoreUri::Scheme::kFile:
      return api::open_file(*uri);
    case api::StoreUri::Scheme::kKvtier:
      return api::open_kvtier(*uri);
    case api::StoreUri::Scheme::kEtcd:
    case api::StoreUri::Scheme::kCluster:
      return api::open_cluster(*uri);
  }
  return Status::invalid_argument("unknown scheme");
}

const char* library_version() { return KVTIER_VERSION_STRING; }

}  // namespace kvtier
