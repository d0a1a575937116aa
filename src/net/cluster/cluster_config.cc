#include "net/cluster/cluster_config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace kvtier::net {

namespace {

using nlohmann::json;

Status bad(const std::string& what) {
  return Status::invalid_argument("cluster client config: " + what);
}

// An unsigned member in [min, max], left unchanged when absent.
template <typename T>
Status get_uint(const json& obj, const char* key, uint64_t min, uint64_t max, T* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::ok_status();
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
    return bad(fmt::format("'{}' must be a non-negative integer", key));
  }
  uint64_t v = it->get<uint64_t>();
  if (v < min || v > max)
    return bad(fmt::format("'{}' is {}, must be in [{}, {}]", key, v, min, max));
  *out = static_cast<T>(v);
  return Status::ok_status();
}

Status get_string(const json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::ok_status();
  if (!it->is_string()) return bad(fmt::format("'{}' must be a string", key));
  *out = it->get<std::string>();
  return Status::ok_status();
}

Result<ClusterNode> parse_node(const json& entry, size_t index) {
  if (entry.is_string()) {
    const std::string address = entry.get<std::string>();
    return parse_node_address(address, address);
  }
  if (!entry.is_object()) {
    return bad(fmt::format("nodes[{}] must be \"host:port\" or {{\"id\", \"address\"}}", index));
  }
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    if (it.key() != "id" && it.key() != "address") {
      return bad(fmt::format("unknown key 'nodes[{}].{}'", index, it.key()));
    }
  }
  std::string id, address;
  KVTIER_RETURN_IF_ERROR(get_string(entry, "id", &id));
  KVTIER_RETURN_IF_ERROR(get_string(entry, "address", &address));
  if (address.empty()) return bad(fmt::format("nodes[{}] has no address", index));
  if (id.empty()) id = address;
  return parse_node_address(id, address);
}

}  // namespace

Result<ClusterStoreOptions> parse_cluster_client_config(std::string_view json_text) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("not valid JSON");
  if (!doc.is_object()) return bad("must be a JSON object");
  static const std::set<std::string> known = {"nodes",
                                              "etcd_url",
                                              "etcd_prefix",
                                              "poll_ms",
                                              "etcd_timeout_ms",
                                              "auth_token",
                                              "connections",
                                              "call_timeout_ms",
                                              "connect_timeout_ms",
                                              "shared_memory",
                                              "client_name",
                                              "etcd_user",
                                              "etcd_password_file",
                                              "etcd_ca_file",
                                              "etcd_cert_file",
                                              "etcd_key_file",
                                              "tls_ca_file",
                                              "tls_cert_file",
                                              "tls_key_file"};
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!known.count(it.key())) return bad(fmt::format("unknown key '{}'", it.key()));
  }
  ClusterStoreOptions o;
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_url", &o.etcd_url));
  const bool has_nodes = doc.contains("nodes") && !doc["nodes"].is_null();
  if (has_nodes == !o.etcd_url.empty()) {
    return bad("give exactly one of 'nodes' (a static list) and 'etcd_url'");
  }
  if (has_nodes) {
    const json& nodes = doc["nodes"];
    if (!nodes.is_array() || nodes.empty()) return bad("'nodes' must be a non-empty array");
    std::set<std::string> ids;
    for (size_t i = 0; i < nodes.size(); ++i) {
      auto n = parse_node(nodes[i], i);
      if (!n.ok()) return n.status();
      if (!ids.insert(n->id).second) return bad(fmt::format("node id '{}' appears twice", n->id));
      o.nodes.push_back(std::move(*n));
    }
  } else if (o.etcd_url.rfind("http://", 0) != 0 && o.etcd_url.rfind("https://", 0) != 0) {
    return bad(fmt::format("etcd_url '{}' must start with http:// or https://", o.etcd_url));
  }
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_ca_file", &o.etcd_tls.ca_file));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_cert_file", &o.etcd_tls.cert_file));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_key_file", &o.etcd_tls.key_file));
  if ((o.etcd_url.rfind("https://", 0) == 0) != o.etcd_tls.enabled()) {
    return bad("an https etcd_url and etcd_ca_file go together");
  }
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_prefix", &o.etcd_prefix));
  KVTIER_RETURN_IF_ERROR(get_uint(doc, "poll_ms", 1, 3600000, &o.poll_ms));
  KVTIER_RETURN_IF_ERROR(get_uint(doc, "etcd_timeout_ms", 1, 600000, &o.etcd_timeout_ms));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_user", &o.etcd_user));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "etcd_password_file", &o.etcd_password_file));
  if (o.etcd_user.empty() != o.etcd_password_file.empty()) {
    return bad("'etcd_user' and 'etcd_password_file' go together");
  }
  RemoteStoreOptions& r = o.node_options;
  KVTIER_RETURN_IF_ERROR(get_string(doc, "auth_token", &r.auth_token));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "client_name", &r.client_name));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "tls_ca_file", &r.tls.ca_file));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "tls_cert_file", &r.tls.cert_file));
  KVTIER_RETURN_IF_ERROR(get_string(doc, "tls_key_file", &r.tls.key_file));
  KVTIER_RETURN_IF_ERROR(get_uint(doc, "connections", 1, 1024, &r.connections));
  KVTIER_RETURN_IF_ERROR(get_uint(doc, "call_timeout_ms", 1, 600000, &r.call_timeout_ms));
  KVTIER_RETURN_IF_ERROR(get_uint(doc, "connect_timeout_ms", 1, 600000, &r.connect_timeout_ms));
  if (auto it = doc.find("shared_memory"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("'shared_memory' must be true or false");
    r.shared_memory = it->get<bool>();
  }
  return o;
}

Result<ClusterStoreOptions> load_cluster_client_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found(fmt::format("cannot read cluster client config {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto o = parse_cluster_client_config(ss.str());
  if (!o.ok()) return Status(o.status().code(), path + ": " + o.status().message());
  return o;
}

}  // namespace kvtier::net
