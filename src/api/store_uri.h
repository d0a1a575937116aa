// Store URIs: the one string that says which kvtier store to open
// (docs/store-uri.md). parse_store_uri() splits and checks it without opening
// anything; kvtier::open_store() (include/kvtier/kv_store.h) opens it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::api {

struct StoreUri {
  enum class Scheme { kMem, kFile, kKvtier, kEtcd, kCluster };
  Scheme scheme = Scheme::kMem;
  std::string path;                // file: the volume's path; etcd: the key prefix
  std::vector<std::string> hosts;  // "host:port" each (kvtier: one; etcd: one; cluster: many)
  std::map<std::string, std::string> options;  // the query, decoded
};

// Splits `uri` into scheme, authority, path and query ("a=1&b=2", with %XX
// escapes decoded). Checks the shape of each form and that every option is
// known for its scheme; values are checked when the store is opened.
Result<StoreUri> parse_store_uri(std::string_view uri);

// The options each scheme accepts, for messages and --help.
const std::vector<std::string>& store_uri_options(StoreUri::Scheme scheme);

}  // namespace kvtier::api
