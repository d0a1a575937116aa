// kvtier._kvtier: the Python binding of kvtier::KvStore (pybind11). The
// Python package (python/kvtier/__init__.py) re-exports these names; the
// docstrings here are what help() shows.
//
// Zero copy: block buffers come in through the buffer protocol (numpy
// arrays, bytearray, memoryview, torch CPU tensors via .numpy()); the store
// reads from and writes into their memory directly. The GIL is released for
// every store call, with the Py_buffer views held so the memory cannot go
// away underneath.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>
#include <unordered_map>

#include "api/key_bytes.h"
#include "kvtier/kv_store.h"
#include "types.h"

namespace py = pybind11;
using namespace kvtier;
using kvtier::python::Keys;
using kvtier::python::raise_status;

namespace {

// A contiguous byte range of a Python object, held for one call.
struct HeldBuffer {
  py::buffer_info info;
  std::byte* data = nullptr;
  size_t bytes = 0;
};

HeldBuffer hold_buffer(const py::handle& obj, bool writable, size_t index) {
  if (!PyObject_CheckBuffer(obj.ptr())) {
    raise_status(Status::invalid_argument(
        "buffer " + std::to_string(index) + " (" + std::string(py::str(obj.get_type())) +
        ") does not support the buffer protocol (use a numpy array, bytearray or memoryview)"));
  }
  HeldBuffer h;
  try {
    h.info = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (const py::error_already_set& e) {
    raise_status(Status::invalid_argument("buffer " + std::to_string(index) + " is not " +
                                          (writable ? "writable" : "readable") + ": " + e.what()));
  }
  // C-contiguous only: the store writes one flat range.
  ssize_t expect = h.info.itemsize;
  for (ssize_t d = h.info.ndim - 1; d >= 0; --d) {
    if (h.info.shape[d] > 1 && h.info.strides[d] != expect) {
      raise_status(
          Status::invalid_argument("buffer " + std::to_string(index) + " is not C-contiguous"));
    }
    expect *= h.info.shape[d];
  }
  h.data = static_cast<std::byte*>(h.info.ptr);
  h.bytes = static_cast<size_t>(h.info.size * h.info.itemsize);
  return h;
}

std::vector<HeldBuffer> hold_buffers(const py::sequence& buffers, bool writable) {
  std::vector<HeldBuffer> held;
  held.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) held.push_back(hold_buffer(buffers[i], writable, i));
  return held;
}

py::dict stats_dict(const kv::StoreStats& s) {
  py::dict d;
  d["puts"] = s.puts;
  d["dedups"] = s.dedups;
  d["put_bytes"] = s.put_bytes;
  d["hits_ram"] = s.hits_ram;
  d["hits_disk"] = s.hits_disk;
  d["get_bytes"] = s.get_bytes;
  py::dict misses, refusals;
  for (size_t i = 1; i < s.misses.size(); ++i)
    misses[kv::miss_reason_name(static_cast<kv::MissReason>(i))] = s.misses[i];
  for (size_t i = 1; i < s.refusals.size(); ++i)
    refusals[kv::refuse_reason_name(static_cast<kv::RefuseReason>(i))] = s.refusals[i];
  d["misses"] = misses;
  d["refusals"] = refusals;
  d["evictions"] = s.evictions;
  d["demotions"] = s.demotions;
  d["promotions"] = s.promotions;
  d["ram_slots"] = s.ram_slots;
  d["ram_used"] = s.ram_used;
  d["ram_leased"] = s.ram_leased;
  d["index_entries"] = s.index_entries;
  d["index_capacity"] = s.index_capacity;
  d["has_disk"] = s.has_disk;
  if (s.has_disk) {
    py::dict disk;
    disk["bytes_written"] = s.disk.bytes_written;
    disk["bytes_read"] = s.disk.bytes_read;
    disk["reads"] = s.disk.reads;
    disk["read_corrupt"] = s.disk.read_corrupt;
    disk["read_io_errors"] = s.disk.read_io_errors;
    disk["regions_in_use"] = s.disk.regions_in_use;
    disk["region_count"] = s.disk.region_count;
    d["disk"] = disk;
  }
  return d;
}

// The store a Python program holds. Namespaces are registered on first use
// and their handles kept, so Python code passes Namespace objects only.
class PyStore {
 public:
  PyStore(std::unique_ptr<KvStore> s, std::string uri)
      : store_(std::move(s)), uri_(std::move(uri)) {}

  KvStore& store() {
    if (!store_) raise_status(Status::failed_precondition("the store is closed"));
    return *store_;
  }
  const std::string& uri() const { return uri_; }
  bool closed() const { return store_ == nullptr; }

  void close() {
    std::unique_ptr<KvStore> s;
    {
      std::lock_guard lk(mu_);
      s = std::move(store_);
      handles_.clear();
    }
    py::gil_scoped_release nogil;
    s.reset();
  }

  uint16_t handle(const kv::Namespace& ns) {
    const kv::Key128 digest = ns.digest();
    {
      std::lock_guard lk(mu_);
      auto it = handles_.find(digest);
      if (it != handles_.end()) return it->second;
    }
    KvStore& s = store();
    Result<uint16_t> h = Status::internal("unset");
    {
      py::gil_scoped_release nogil;
      h = s.register_namespace(ns);
    }
    if (!h.ok()) raise_status(h.status());
    std::lock_guard lk(mu_);
    handles_[digest] = *h;
    return *h;
  }

 private:
  std::mutex mu_;
  std::unique_ptr<KvStore> store_;
  std::unordered_map<kv::Key128, uint16_t, kv::Key128Hash> handles_;
  std::string uri_;
};

template <typename T>
T unwrap(Result<T> r) {
  if (!r.ok()) raise_status(r.status());
  return std::move(r).value();
}

py::list batch_put(PyStore& self, const kv::Namespace& ns, const Keys& keys,
                   const py::sequence& buffers) {
  if (buffers.size() != keys.size()) {
    raise_status(Status::invalid_argument("batch_put: " + std::to_string(keys.size()) +
                                          " keys but " + std::to_string(buffers.size()) +
                                          " buffers"));
  }
  const uint16_t h = self.handle(ns);
  auto held = hold_buffers(buffers, false);
  std::vector<ByteView> views(held.size());
  for (size_t i = 0; i < held.size(); ++i) views[i] = ByteView(held[i].data, held[i].bytes);
  KvStore& s = self.store();
  Result<std::vector<kv::PutResult>> r = Status::internal("unset");
  {
    py::gil_scoped_release nogil;
    r = s.batch_put(h, keys.keys(), views);
  }
  py::list out;
  for (const auto& p : unwrap(std::move(r))) out.append(python::PutOutcome(p));
  return out;
}

py::list batch_get_into(PyStore& self, const kv::Namespace& ns, const Keys& keys,
                        const py::sequence& buffers) {
  if (buffers.size() != keys.size()) {
    raise_status(Status::invalid_argument("batch_get_into: " + std::to_string(keys.size()) +
                                          " keys but " + std::to_string(buffers.size()) +
                                          " buffers"));
  }
  const uint16_t h = self.handle(ns);
  auto held = hold_buffers(buffers, true);
  std::vector<kv::BatchGetItem> items(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    items[i].key = keys.keys()[i];
    items[i].out = MutableByteView(held[i].data, held[i].bytes);
  }
  KvStore& s = self.store();
  Result<std::vector<kv::GetResult>> r = Status::internal("unset");
  {
    py::gil_scoped_release nogil;
    r = s.batch_get(h, items);
  }
  py::list out;
  for (const auto& g : unwrap(std::move(r))) out.append(python::GetOutcome(g));
  return out;
}

python::MatchOutcome match_prefix(PyStore& self, const kv::Namespace& ns, const Keys& keys) {
  const uint16_t h = self.handle(ns);
  KvStore& s = self.store();
  Result<kv::MatchResult> r = Status::internal("unset");
  {
    py::gil_scoped_release nogil;
    r = s.match_prefix(h, keys.keys());
  }
  return python::MatchOutcome(unwrap(std::move(r)));
}

// ---- the C++ client's own figures, for kvtier.bench ------------------------------
// The same calls as batch_get_into and match_prefix, looped in C++ with no
// Python in between: the limit the Python binding is measured against.

double cpp_batch_get_rate(PyStore& self, const kv::Namespace& ns, const Keys& keys,
                          const py::sequence& buffers, double seconds) {
  const uint16_t h = self.handle(ns);
  auto held = hold_buffers(buffers, true);
  if (held.size() != keys.size()) raise_status(Status::invalid_argument("keys and buffers differ"));
  std::vector<kv::BatchGetItem> items(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    items[i].key = keys.keys()[i];
    items[i].out = MutableByteView(held[i].data, held[i].bytes);
  }
  KvStore& s = self.store();
  py::gil_scoped_release nogil;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto until = t0 + std::chrono::duration<double>(seconds);
  uint64_t bytes = 0;
  auto t = t0;
  do {
    auto r = s.batch_get(h, items);
    if (!r.ok()) {
      py::gil_scoped_acquire gil;
      raise_status(r.status());
    }
    for (const auto& g : *r) bytes += g.length;
    t = clock::now();
  } while (t < until);
  return static_cast<double>(bytes) / std::chrono::duration<double>(t - t0).count();
}

std::vector<double> cpp_match_latencies(PyStore& self, const kv::Namespace& ns, const Keys& keys,
                                        size_t iterations) {
  const uint16_t h = self.handle(ns);
  KvStore& s = self.store();
  std::vector<double> out;
  out.reserve(iterations);
  py::gil_scoped_release nogil;
  for (size_t i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s.match_prefix(h, keys.keys());
    const auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) {
      py::gil_scoped_acquire gil;
      raise_status(r.status());
    }
    out.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_kvtier, m) {
  m.doc() = "kvtier's native module; use the kvtier package, which re-exports it.";
  python::register_errors(m);
  python::register_types(m);

  m.def(
      "open",
      [](const std::string& uri) {
        Result<std::unique_ptr<KvStore>> s = Status::internal("unset");
        {
          py::gil_scoped_release nogil;
          s = open_store(uri);
        }
        if (!s.ok()) raise_status(s.status());
        return std::make_unique<PyStore>(std::move(*s), uri);
      },
      py::arg("uri"),
      R"(Opens a store and returns a Store.

URIs (docs/store-uri.md):
  mem://?ram=64MiB                            in-process RAM tier
  file:///path/volume?ram=64MiB&disk=1GiB     in-process RAM + disk tier on a
                                              volume file (created if absent)
  kvtier://host:port?token_file=PATH          a store service
  etcd://host:port/prefix                     a cluster registered in etcd
  cluster://host:port,host:port               a cluster of listed nodes
Raises kvtier.InvalidArgumentError for a malformed URI or unknown option,
kvtier.NotFoundError for a missing volume without disk=SIZE, and
kvtier.UnavailableError when a store service does not answer in wait_ms.)");

  m.def("version", &library_version, "The version of the kvtier library.");

  py::class_<PyStore>(m, "Store", R"(A kvtier store (see kvtier.open).

Every method releases the GIL while the store works. Misses and refused
puts are results, never exceptions; exceptions (kvtier.Error and its
subclasses) are for bad input only, and a call that raises changed nothing.
Use as a context manager, or call close().)")
      .def("match_prefix", &match_prefix, py::arg("ns"), py::arg("keys"),
           R"(How many leading keys are present: a Match with .blocks, .ram, .disk.)")
      .def("batch_put", &batch_put, py::arg("ns"), py::arg("keys"), py::arg("buffers"),
           R"(Stores keys[i] with the bytes of buffers[i] (any object of the buffer
protocol, C-contiguous). Returns one PutResult per key, in order.)")
      .def("batch_get_into", &batch_get_into, py::arg("ns"), py::arg("keys"), py::arg("buffers"),
           R"(Reads keys[i] into buffers[i] in place (writable, C-contiguous, large
enough for the block, no two overlapping): a numpy array, bytearray,
memoryview, or a CPU torch tensor through .numpy(). No copy is made in
Python. Returns one GetResult per key: a hit with its tier and length, or
a miss with its reason.)")
      .def(
          "pin",
          [](PyStore& self, const kv::Namespace& ns, const Keys& keys, double ttl_s) {
            if (!(ttl_s > 0) || ttl_s > 86400 * 365) {
              raise_status(Status::invalid_argument("ttl_s must be > 0 and at most a year"));
            }
            const uint16_t h = self.handle(ns);
            KvStore& s = self.store();
            Result<size_t> r = Status::internal("unset");
            {
              py::gil_scoped_release nogil;
              r = s.pin(h, keys.keys(), static_cast<uint64_t>(ttl_s * 1000));
            }
            return unwrap(std::move(r));
          },
          py::arg("ns"), py::arg("keys"), py::arg("ttl_s") = 300.0,
          "Protects the RAM copies of keys from eviction for ttl_s seconds; how many were pinned.")
      .def(
          "unpin",
          [](PyStore& self, const kv::Namespace& ns, const Keys& keys) {
            const uint16_t h = self.handle(ns);
            KvStore& s = self.store();
            Result<size_t> r = Status::internal("unset");
            {
              py::gil_scoped_release nogil;
              r = s.unpin(h, keys.keys());
            }
            return unwrap(std::move(r));
          },
          py::arg("ns"), py::arg("keys"), "Drops pins; how many blocks were unpinned.")
      .def(
          "remove",
          [](PyStore& self, const kv::Namespace& ns, const python::Key& key) {
            const uint16_t h = self.handle(ns);
            KvStore& s = self.store();
            Result<bool> r = Status::internal("unset");
            {
              py::gil_scoped_release nogil;
              r = s.remove(h, key.key);
            }
            return unwrap(std::move(r));
          },
          py::arg("ns"), py::arg("key"), "Drops a block from every tier; whether it was present.")
      .def(
          "stats",
          [](PyStore& self) {
            KvStore& s = self.store();
            Result<kv::StoreStats> r = Status::internal("unset");
            {
              py::gil_scoped_release nogil;
              r = s.stats();
            }
            return stats_dict(unwrap(std::move(r)));
          },
          "The store's counters as a dict (hits, misses by reason, refusals by reason, tiers).")
      .def("close", &PyStore::close,
           "Closes the store (an in-process store writes its checkpoint). Idempotent.")
      .def_property_readonly("closed", &PyStore::closed)
      .def_property_readonly("uri", &PyStore::uri)
      .def(
          "__enter__", [](PyStore& self) -> PyStore& { return self; },
          py::return_value_policy::reference)
      .def("__exit__", [](PyStore& self, py::args) { self.close(); })
      .def("__repr__",
           [](const PyStore& self) {
             return std::string("<kvtier.Store ") + self.uri() +
                    (self.closed() ? " (closed)>" : ">");
           })
      .def("_cpp_batch_get_rate", &cpp_batch_get_rate, py::arg("ns"), py::arg("keys"),
           py::arg("buffers"), py::arg("seconds"),
           "Benchmark helper: bytes/s of batch_get looped in C++ (the C++ client's rate).")
      .def("_cpp_match_latencies", &cpp_match_latencies, py::arg("ns"), py::arg("keys"),
           py::arg("iterations"), "Benchmark helper: seconds per match_prefix looped in C++.");
}
