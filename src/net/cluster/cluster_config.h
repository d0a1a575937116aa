// The configuration of a cluster client: which store nodes a ClusterStore
// talks to, as a JSON document (docs/store-service.md, "Cluster clients").
//
//   {"nodes": ["10.0.0.1:7470", {"id": "b", "address": "10.0.0.2:7470"}]}
//   {"etcd_url": "http://10.0.0.9:2379", "etcd_prefix": "kvtier"}
//
// Exactly one of `nodes` (a static list) and `etcd_url` (membership read
// from etcd) is given. A static node named by its address alone gets that
// address as its id; ids place keys, so every client of one cluster must
// name the nodes alike (give the ids the nodes register in etcd to mix
// static and etcd clients). Optional keys: auth_token, connections,
// call_timeout_ms, connect_timeout_ms, shared_memory, poll_ms,
// etcd_timeout_ms. Unknown keys are errors, so a typo is not ignored.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "net/cluster/cluster_store.h"

namespace kvtier::net {

Result<ClusterStoreOptions> parse_cluster_client_config(std::string_view json_text);
Result<ClusterStoreOptions> load_cluster_client_config(const std::string& path);

}  // namespace kvtier::net
