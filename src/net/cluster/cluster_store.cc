#include "net/cluster/cluster_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "net/cluster/etcd_client.h"
#include "net/cluster/placement.h"

namespace kvtier::net {

namespace {

// One node's connection and the handles its RemoteStore gave our namespaces
// (registered lazily, on first use). Shared by every view the node is in.
struct NodeConn {
  ClusterNode node;
  std::shared_ptr<RemoteStore> remote;  // null for an in-process node
  std::shared_ptr<KvStore> store;       // the remote store, or the in-process one
  std::mutex mu;
  std::vector<std::optional<uint16_t>> handles;  // by cluster namespace handle
};

// The elements of `all` at `positions`, in order: one node's share of a batch.
template <typename T>
std::vector<T> gather(std::span<const T> all, const std::vector<size_t>& positions) {
  std::vector<T> out;
  out.reserve(positions.size());
  for (size_t i : positions) out.push_back(all[i]);
  return out;
}

// What a put or get answers while the cluster has no node to ask.
kv::PutResult refused_put() {
  kv::PutResult r;
  r.outcome = kv::PutResult::Outcome::kRefused;
  r.refuse = kv::RefuseReason::kDiskError;
  return r;
}
kv::GetResult unreachable_get() {
  kv::GetResult r;
  r.miss = kv::MissReason::kIoError;
  return r;
}

// Puts a node's answers back at the batch positions they were asked for.
template <typename T>
void scatter(const std::vector<T>& answers, const std::vector<size_t>& positions,
             std::vector<T>& out) {
  for (size_t j = 0; j < positions.size() && j < answers.size(); ++j)
    out[positions[j]] = answers[j];
}

// An immutable node set: placement and the connection of each node (same order).
struct View {
  Placement placement{{}};
  std::vector<std::shared_ptr<NodeConn>> conns;
};

std::string trim_slashes(const std::string& s) {
  size_t b = s.find_first_not_of('/');
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of('/');
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string etcd_nodes_key_prefix(const std::string& prefix) {
  std::string p = trim_slashes(prefix);
  return p.empty() ? "/nodes/" : "/" + p + "/nodes/";
}

Result<ClusterNode> parse_node_address(const std::string& id, const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::invalid_argument(
        fmt::format("node '{}': address '{}' is not host:port", id, address));
  }
  ClusterNode n;
  n.id = id;
  n.host = address.substr(0, colon);
  if (n.host.size() >= 2 && n.host.front() == '[' && n.host.back() == ']') {
    n.host = n.host.substr(1, n.host.size() - 2);
  }
  std::string port = address.substr(colon + 1);
  char* end = nullptr;
  unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (*end != '\0' || p == 0 || p > 65535) {
    return Status::invalid_argument(fmt::format("node '{}': bad port in '{}'", id, address));
  }
  n.port = static_cast<uint16_t>(p);
  return n;
}

Result<std::vector<ClusterNode>> read_etcd_nodes(const std::string& etcd_url,
                                                 const std::string& prefix, uint32_t timeout_ms,
                                                 const EtcdCredentials& credentials) {
  auto ep = parse_etcd_url(etcd_url);
  if (!ep.ok()) return ep.status();
  EtcdClient etcd(*ep, timeout_ms, credentials);
  std::string key_prefix = etcd_nodes_key_prefix(prefix);
  auto kvs = etcd.range_prefix(key_prefix);
  if (!kvs.ok()) return kvs.status();
  std::vector<ClusterNode> nodes;
  for (const auto& kv : *kvs) {
    std::string id = kv.key.substr(key_prefix.size());
    if (id.empty() || id.find('/') != std::string::npos) continue;  // not a node key
    auto n = parse_node_address(id, kv.value);
    if (!n.ok()) continue;  // a malformed entry is not a node; the rest still work
    nodes.push_back(std::move(*n));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const ClusterNode& a, const ClusterNode& b) { return a.id < b.id; });
  return nodes;
}

struct ClusterStore::Impl {
  ClusterStoreOptions options;
  mutable std::mutex mu;  // guards view, namespaces, stop
  std::shared_ptr<const View> view = std::make_shared<View>();
  std::vector<kv::Namespace> namespaces;
  std::condition_variable cv;
  bool stop = false;
  std::thread poller;
  std::mutex refresh_mu;  // one refresh at a time
  // In-process nodes (over_stores): their calls run one after another on
  // the caller's thread, since a thread per node would cost more than the
  // call and would make a simulation depend on thread timing.
  bool serial_calls = false;

  std::shared_ptr<const View> snapshot() const {
    std::lock_guard<std::mutex> lock(mu);
    return view;
  }

  // Replaces the node set, keeping the connections of nodes whose address
  // did not change.
  Status set_nodes(const std::vector<ClusterNode>& nodes) {
    auto old = snapshot();
    std::map<std::string, std::shared_ptr<NodeConn>> by_id;
    for (const auto& c : old->conns) by_id[c->node.id] = c;
    std::vector<std::string> ids;
    std::map<std::string, std::shared_ptr<NodeConn>> next;
    for (const auto& n : nodes) {
      if (next.count(n.id)) continue;
      auto it = by_id.find(n.id);
      if (it != by_id.end() && it->second->node.host == n.host && it->second->node.port == n.port) {
        next[n.id] = it->second;
      } else {
        RemoteStoreOptions o = options.node_options;
        o.host = n.host;
        o.port = n.port;
        auto store = RemoteStore::open(o);
        if (!store.ok()) {
          return Status(store.status().code(),
                        fmt::format("node '{}': {}", n.id, store.status().message()));
        }
        auto conn = std::make_shared<NodeConn>();
        conn->node = n;
        conn->remote = std::move(*store);
        conn->store = conn->remote;
        next[n.id] = std::move(conn);
      }
      ids.push_back(n.id);
    }
    // A node new to the set gets keys at once: give its connections up to
    // connect_timeout_ms (one deadline shared by all new nodes) to come up,
    // so that its first calls are not refused as "no connection yet". A node
    // still down after that is in the set anyway (its keys are misses).
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(options.node_options.connect_timeout_ms);
    for (const auto& [id, conn] : next) {
      if (by_id.count(id) && by_id[id] == conn) continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      if (conn->remote) (void)conn->remote->wait_connected(static_cast<uint32_t>(left.count()));
    }
    auto v = std::make_shared<View>();
    v->placement = Placement(ids);
    for (const auto& id : v->placement.node_ids()) v->conns.push_back(next[id]);
    std::lock_guard<std::mutex> lock(mu);
    view = std::move(v);
    return Status::ok_status();
  }

  Status refresh() {
    if (options.etcd_url.empty()) return Status::ok_status();
    std::lock_guard<std::mutex> r(refresh_mu);
    auto credentials = load_etcd_credentials(options.etcd_user, options.etcd_password_file);
    if (!credentials.ok()) return credentials.status();
    credentials->tls = options.etcd_tls;
    auto nodes = read_etcd_nodes(options.etcd_url, options.etcd_prefix, options.etcd_timeout_ms,
                                 *credentials);
    if (!nodes.ok()) return nodes.status();
    return set_nodes(*nodes);
  }

  void poll_loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, std::chrono::milliseconds(options.poll_ms));
      if (stop) break;
      lock.unlock();
      (void)refresh();  // on failure the last node set stays
      lock.lock();
    }
  }

  // The node's handle for cluster namespace `ns`, registering it on first use.
  Result<uint16_t> handle(NodeConn& c, uint16_t ns) {
    kv::Namespace def;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (ns >= namespaces.size()) {
        return Status::invalid_argument(fmt::format("unknown namespace handle {}", ns));
      }
      def = namespaces[ns];
    }
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.handles.size() <= ns) c.handles.resize(ns + 1);
    if (c.handles[ns]) return *c.handles[ns];
    auto h = c.store->register_namespace(def);
    if (!h.ok()) return h.status();
    c.handles[ns] = *h;
    return *h;
  }

  Status check_ns(uint16_t ns) const {
    std::lock_guard<std::mutex> lock(mu);
    if (ns >= namespaces.size()) {
      return Status::invalid_argument(fmt::format("unknown namespace handle {}", ns));
    }
    return Status::ok_status();
  }

  // op(store, handle for `ns`) on the node that owns `key`; `no_nodes` when
  // the cluster has none.
  template <typename T, typename Op>
  Result<T> call_owner(uint16_t ns, const kv::Key128& key, T no_nodes, Op&& op) {
    KVTIER_RETURN_IF_ERROR(check_ns(ns));
    auto v = snapshot();
    if (v->conns.empty()) return no_nodes;
    NodeConn& c = *v->conns[v->placement.owner(key)];
    auto h = handle(c, ns);
    if (!h.ok()) return h.status();
    return op(*c.store, *h);
  }

  // Runs fn(node store, the node's handle for `ns`, positions) for each node
  // that owns some of the `count` keys, in parallel; returns the first error.
  template <typename Fn>
  Status for_each_owner(const View& v, uint16_t ns, size_t count,
                        const std::function<kv::Key128(size_t)>& key, Fn&& fn) {
    std::vector<std::vector<size_t>> groups(v.conns.size());
    for (size_t i = 0; i < count; ++i) groups[v.placement.owner(key(i))].push_back(i);
    auto run = [&](size_t n) -> Status {
      NodeConn& c = *v.conns[n];
      auto h = handle(c, ns);
      if (!h.ok()) return h.status();
      return fn(*c.store, *h, groups[n]);
    };
    std::vector<std::future<Status>> pending;
    Status first = Status::ok_status();
    if (serial_calls) {
      for (size_t n = 0; n < groups.size(); ++n) {
        if (groups[n].empty()) continue;
        Status st = run(n);
        if (first.ok() && !st.ok()) first = st;
      }
      return first;
    }
    size_t inline_node = v.conns.size();
    for (size_t n = 0; n < groups.size(); ++n) {
      if (groups[n].empty()) continue;
      if (inline_node == v.conns.size()) {
        inline_node = n;
        continue;
      }
      pending.push_back(std::async(std::launch::async, [&, n] { return run(n); }));
    }
    if (inline_node != v.conns.size()) first = run(inline_node);
    for (auto& f : pending) {
      Status st = f.get();
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  }

  // Pin and unpin: `op(node store, node handle, the node's keys)` on each
  // owner of some of `keys`, in parallel; the sum of the counts it returns.
  template <typename Op>
  Result<size_t> count_per_owner(uint16_t ns, std::span<const kv::Key128> keys, Op&& op) {
    KVTIER_RETURN_IF_ERROR(check_ns(ns));
    auto v = snapshot();
    if (v->conns.empty()) return size_t{0};
    std::atomic<size_t> total{0};
    Status st = for_each_owner(
        *v, ns, keys.size(), [&](size_t i) { return keys[i]; },
        [&](KvStore& node, uint16_t h, const std::vector<size_t>& idx) -> Status {
          auto r = op(node, h, gather(keys, idx));
          if (!r.ok()) return r.status();
          total += *r;
          return Status::ok_status();
        });
    if (!st.ok()) return st;
    return total.load();
  }
};

ClusterStore::ClusterStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClusterStore::~ClusterStore() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->poller.joinable()) impl_->poller.join();
}

Result<std::unique_ptr<ClusterStore>> ClusterStore::open(const ClusterStoreOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.etcd_url.empty()) {
    if (options.nodes.empty()) {
      return Status::invalid_argument("a cluster needs a static node list or an etcd URL");
    }
    KVTIER_RETURN_IF_ERROR(impl->set_nodes(options.nodes));
  } else {
    if (options.poll_ms == 0) return Status::invalid_argument("poll_ms must be >= 1");
    KVTIER_RETURN_IF_ERROR(impl->refresh());
  }
  std::unique_ptr<ClusterStore> cs(new ClusterStore(std::move(impl)));
  if (!options.etcd_url.empty()) {
    Impl* p = cs->impl_.get();
    cs->impl_->poller = std::thread([p] { p->poll_loop(); });
  }
  return cs;
}

std::unique_ptr<ClusterStore> ClusterStore::over_stores(
    const std::vector<std::pair<std::string, KvStore*>>& nodes) {
  auto impl = std::make_unique<Impl>();
  impl->serial_calls = true;
  auto v = std::make_shared<View>();
  std::map<std::string, std::shared_ptr<NodeConn>> by_id;
  std::vector<std::string> ids;
  for (const auto& [id, store] : nodes) {
    if (by_id.count(id)) continue;
    auto conn = std::make_shared<NodeConn>();
    conn->node.id = id;
    conn->store = std::shared_ptr<KvStore>(store, [](KvStore*) {});  // not owned
    by_id[id] = conn;
    ids.push_back(id);
  }
  v->placement = Placement(ids);
  for (const auto& id : v->placement.node_ids()) v->conns.push_back(by_id[id]);
  impl->view = std::move(v);
  return std::unique_ptr<ClusterStore>(new ClusterStore(std::move(impl)));
}

std::vector<ClusterNode> ClusterStore::nodes() const {
  auto v = impl_->snapshot();
  std::vector<ClusterNode> out;
  for (const auto& c : v->conns) out.push_back(c->node);
  return out;
}

std::string ClusterStore::owner_of(const kv::Key128& key) const {
  auto v = impl_->snapshot();
  if (v->conns.empty()) return "";
  return v->conns[v->placement.owner(key)]->node.id;
}

Status ClusterStore::refresh() { return impl_->refresh(); }

Result<uint16_t> ClusterStore::register_namespace(const kv::Namespace& ns) {
  uint16_t h;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->namespaces.size() >= 0xffff) {
      return Status::invalid_argument("too many namespaces");
    }
    h = static_cast<uint16_t>(impl_->namespaces.size());
    impl_->namespaces.push_back(ns);
  }
  // Register on every current node now so that a namespace a server rejects
  // is reported here (later nodes register it on first use).
  auto v = impl_->snapshot();
  for (const auto& c : v->conns) {
    auto r = impl_->handle(*c, h);
    if (!r.ok()) return r.status();
  }
  return h;
}

Result<kv::PutResult> ClusterStore::put(uint16_t ns, const kv::Key128& key, ByteView data) {
  return impl_->call_owner(ns, key, refused_put(),
                           [&](KvStore& node, uint16_t h) { return node.put(h, key, data); });
}

Result<kv::GetResult> ClusterStore::get(uint16_t ns, const kv::Key128& key, MutableByteView out) {
  return impl_->call_owner(ns, key, unreachable_get(),
                           [&](KvStore& node, uint16_t h) { return node.get(h, key, out); });
}

Result<std::vector<kv::PutResult>> ClusterStore::batch_put(uint16_t ns,
                                                           std::span<const kv::Key128> keys,
                                                           std::span<const ByteView> data) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (keys.size() != data.size()) {
    return Status::invalid_argument("batch_put: keys and data differ in length");
  }
  std::vector<kv::PutResult> out(keys.size(), refused_put());
  auto v = impl_->snapshot();
  if (v->conns.empty()) return out;
  Status st = impl_->for_each_owner(
      *v, ns, keys.size(), [&](size_t i) { return keys[i]; },
      [&](KvStore& node, uint16_t h, const std::vector<size_t>& idx) -> Status {
        auto r = node.batch_put(h, gather(keys, idx), gather(data, idx));
        if (!r.ok()) return r.status();
        scatter(*r, idx, out);
        return Status::ok_status();
      });
  if (!st.ok()) return st;
  return out;
}

Result<std::vector<kv::GetResult>> ClusterStore::batch_get(
    uint16_t ns, std::span<const kv::BatchGetItem> items) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  std::vector<kv::GetResult> out(items.size(), unreachable_get());
  auto v = impl_->snapshot();
  if (v->conns.empty()) return out;
  Status st = impl_->for_each_owner(
      *v, ns, items.size(), [&](size_t i) { return items[i].key; },
      [&](KvStore& node, uint16_t h, const std::vector<size_t>& idx) -> Status {
        auto r = node.batch_get(h, gather(items, idx));
        if (!r.ok()) return r.status();
        scatter(*r, idx, out);
        return Status::ok_status();
      });
  if (!st.ok()) return st;
  return out;
}

Result<kv::MatchResult> ClusterStore::match_prefix(uint16_t ns, std::span<const kv::Key128> keys) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  kv::MatchResult result;
  auto v = impl_->snapshot();
  if (v->conns.empty() || keys.empty()) return result;
  // Per chain position: the tier its owner reported (kNone: not reported present).
  std::vector<kv::Tier> tiers(keys.size(), kv::Tier::kNone);
  std::mutex first_miss_mu;
  size_t first_miss = keys.size();
  Status st = impl_->for_each_owner(
      *v, ns, keys.size(), [&](size_t i) { return keys[i]; },
      [&](KvStore& node, uint16_t h, const std::vector<size_t>& idx) -> Status {
        auto r = node.match_prefix(h, gather(keys, idx));
        if (!r.ok()) return r.status();
        size_t m = std::min(r->blocks, idx.size());
        for (size_t j = 0; j < m; ++j) {
          tiers[idx[j]] = j < r->tiers.size() ? r->tiers[j] : kv::Tier::kRam;
        }
        if (m < idx.size()) {
          std::lock_guard<std::mutex> lock(first_miss_mu);
          first_miss = std::min(first_miss, idx[m]);
        }
        return Status::ok_status();
      });
  if (!st.ok()) return st;
  result.blocks = first_miss;
  result.tiers.assign(tiers.begin(), tiers.begin() + static_cast<ptrdiff_t>(first_miss));
  for (kv::Tier t : result.tiers) {
    if (t == kv::Tier::kDisk) {
      ++result.disk_blocks;
    } else {
      ++result.ram_blocks;
    }
  }
  return result;
}

Result<bool> ClusterStore::remove(uint16_t ns, const kv::Key128& key) {
  return impl_->call_owner(ns, key, false,
                           [&](KvStore& node, uint16_t h) { return node.remove(h, key); });
}

Result<size_t> ClusterStore::pin(uint16_t ns, std::span<const kv::Key128> keys, uint64_t ttl_ms) {
  return impl_->count_per_owner(ns, keys, [ttl_ms](KvStore& node, uint16_t h, const auto& sub) {
    return node.pin(h, sub, ttl_ms);
  });
}

Result<size_t> ClusterStore::unpin(uint16_t ns, std::span<const kv::Key128> keys) {
  return impl_->count_per_owner(
      ns, keys, [](KvStore& node, uint16_t h, const auto& sub) { return node.unpin(h, sub); });
}

void add_store_stats(kv::StoreStats& sum, const kv::StoreStats& add) {
  for (const auto& f : store_stat_fields()) f.set(sum, f.get(sum) + f.get(add));
}

Result<ClusterStoreStats> ClusterStore::cluster_stats() {
  auto v = impl_->snapshot();
  if (v->conns.empty()) return Status::unavailable("the cluster has no nodes");
  ClusterStoreStats out;
  out.nodes = v->conns.size();
  out.per_node.resize(v->conns.size());
  // In parallel: a dead node costs its call timeout once, not once per node.
  std::vector<std::future<Result<kv::StoreStats>>> pending;
  for (const auto& c : v->conns) {
    pending.push_back(
        std::async(std::launch::async, [store = c->store.get()] { return store->stats(); }));
  }
  for (size_t i = 0; i < v->conns.size(); ++i) {
    ClusterNodeStats& n = out.per_node[i];
    n.node = v->conns[i]->node;
    auto r = pending[i].get();
    if (!r.ok()) {
      n.status = r.status();
      continue;
    }
    n.stats = *r;
    add_store_stats(out.total, *r);
    ++out.answered;
  }
  std::sort(
      out.per_node.begin(), out.per_node.end(),
      [](const ClusterNodeStats& a, const ClusterNodeStats& b) { return a.node.id < b.node.id; });
  return out;
}

Result<kv::StoreStats> ClusterStore::stats() {
  auto r = cluster_stats();
  if (!r.ok()) return r.status();
  if (r->answered == 0) {
    return Status::unavailable(fmt::format("none of the {} store nodes answered", r->nodes));
  }
  return r->total;
}

}  // namespace kvtier::net
