#include "types.h"

#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "api/key_bytes.h"

namespace py = pybind11;

namespace kvtier::python {

namespace {

PyObject* g_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_not_found = nullptr;
PyObject* g_unavailable = nullptr;

PyObject* new_error(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string full = std::string("kvtier.") + name;
  PyObject* e = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (e == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(e));
  return e;
}

std::string key_hex(const kv::Key128& k) { return k.to_hex(); }

py::bytes key_bytes(const kv::Key128& k) {
  uint8_t b[16];
  api::key_to_bytes(k, b);
  return py::bytes(reinterpret_cast<const char*>(b), 16);
}

// A Key from 16 bytes, 32 hex digits, or another Key.
kv::Key128 key_from_object(const py::handle& obj) {
  if (py::isinstance<Key>(obj)) return obj.cast<const Key&>().key;
  if (py::isinstance<py::str>(obj)) {
    auto k = kv::key128_from_hex(obj.cast<std::string>());
    if (!k) raise_status(Status::invalid_argument("a key in hex is exactly 32 hex digits"));
    return *k;
  }
  if (py::isinstance<py::bytes>(obj) || py::isinstance<py::bytearray>(obj) ||
      py::isinstance<py::memoryview>(obj)) {
    std::string s = py::isinstance<py::bytes>(obj)
                        ? obj.cast<std::string>()
                        : py::bytes(py::reinterpret_borrow<py::object>(obj)).cast<std::string>();
    if (s.size() != 16) raise_status(Status::invalid_argument("a key is exactly 16 bytes"));
    return api::key_from_bytes(reinterpret_cast<const uint8_t*>(s.data()));
  }
  raise_status(Status::invalid_argument("a key is a kvtier.Key, 16 bytes or 32 hex digits"));
}

// Token ids from a list of ints or a 1-D integer array (numpy, array.array):
// each must fit in 32 bits unsigned.
std::vector<uint32_t> tokens_from_object(const py::handle& obj) {
  std::vector<uint32_t> out;
  auto bad = [](const std::string& why) {
    raise_status(Status::invalid_argument("tokens: " + why));
  };
  if (PyObject_CheckBuffer(obj.ptr()) && !py::isinstance<py::bytes>(obj) &&
      !py::isinstance<py::bytearray>(obj)) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
    if (info.ndim != 1) bad("a token array must be 1-D, not " + std::to_string(info.ndim) + "-D");
    const std::string& f = info.format;
    const char code = f.empty() ? '?' : f.back();
    const bool is_signed = code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q';
    const bool is_unsigned =
        code == 'B' || code == 'H' || code == 'I' || code == 'L' || code == 'Q';
    if (!is_signed && !is_unsigned) bad("a token array must hold integers, not format '" + f + "'");
    out.resize(static_cast<size_t>(info.shape[0]));
    const auto* base = static_cast<const char*>(info.ptr);
    for (size_t i = 0; i < out.size(); ++i) {
      const char* p = base + static_cast<ssize_t>(i) * info.strides[0];
      int64_t v = 0;
      uint64_t u = 0;
      switch (info.itemsize) {
        case 1:
          is_signed ? v = *reinterpret_cast<const int8_t*>(p)
                    : u = *reinterpret_cast<const uint8_t*>(p);
          break;
        case 2:
          is_signed ? v = *reinterpret_cast<const int16_t*>(p)
                    : u = *reinterpret_cast<const uint16_t*>(p);
          break;
        case 4:
          is_signed ? v = *reinterpret_cast<const int32_t*>(p)
                    : u = *reinterpret_cast<const uint32_t*>(p);
          break;
        case 8: {
          if (is_signed) {
            std::memcpy(&v, p, 8);
          } else {
            std::memcpy(&u, p, 8);
          }
          break;
        }
        default:
          bad("unsupported integer size " + std::to_string(info.itemsize));
      }
      if (is_signed) {
        if (v < 0 || v > 0xFFFFFFFFll)
          bad("token " + std::to_string(v) + " at " + std::to_string(i) + " is not in 0..2^32-1");
        out[i] = static_cast<uint32_t>(v);
      } else {
        if (u > 0xFFFFFFFFull)
          bad("token " + std::to_string(u) + " at " + std::to_string(i) + " is not in 0..2^32-1");
        out[i] = static_cast<uint32_t>(u);
      }
    }
    return out;
  }
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj)) {
    bad("give a list of ints or a 1-D integer array");
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  out.resize(seq.size());
  for (size_t i = 0; i < out.size(); ++i) {
    py::handle item = seq[i];
    if (!PyLong_Check(item.ptr()) || PyBool_Check(item.ptr())) {
      bad("item " + std::to_string(i) + " is not an int");
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
    if (overflow != 0 || v < 0 || v > 0xFFFFFFFFll) {
      bad("item " + std::to_string(i) + " is not in 0..2^32-1");
    }
    out[i] = static_cast<uint32_t>(v);
  }
  return out;
}

kv::KeyScheme scheme_from_name(const std::string& s) {
  if (s == "xxh3_128") return kv::KeyScheme::kXxh3_128;
  if (s == "sha256") return kv::KeyScheme::kSha256;
  raise_status(Status::invalid_argument("scheme must be 'xxh3_128' or 'sha256', not '" + s + "'"));
}

py::object tier_or_none(kv::Tier t) {
  return t == kv::Tier::kNone ? py::object(py::none()) : py::object(py::str(kv::tier_name(t)));
}

const char* put_outcome_name(kv::PutResult::Outcome o) {
  switch (o) {
    case kv::PutResult::Outcome::kStored:
      return "stored";
    case kv::PutResult::Outcome::kDeduplicated:
      return "deduplicated";
    case kv::PutResult::Outcome::kRefused:
      return "refused";
  }
  return "?";
}

void register_key_types(py::module_& m) {
  py::class_<Key>(m, "Key", R"(One block key: 128 bits. bytes(key) gives its 16 bytes (high half
first, most significant byte first), str(key) its 32 hex digits.
Key(x) takes 16 bytes or 32 hex digits.)")
      .def(py::init([](const py::object& x) { return Key{key_from_object(x)}; }), py::arg("value"))
      .def("__bytes__", [](const Key& k) { return key_bytes(k.key); })
      .def("__str__", [](const Key& k) { return key_hex(k.key); })
      .def(
          "hex", [](const Key& k) { return key_hex(k.key); }, "The 32 hex digits.")
      .def("__repr__", [](const Key& k) { return "Key('" + key_hex(k.key) + "')"; })
      .def("__eq__",
           [](const Key& a, const py::object& b) {
             return py::isinstance<Key>(b) && a.key == b.cast<const Key&>().key;
           })
      .def("__hash__", [](const Key& k) { return static_cast<ssize_t>(kv::Key128Hash{}(k.key)); });

  py::class_<Keys>(m, "Keys", R"(The keys of a chain of blocks, in order. Supports len(), indexing,
slicing (a slice shares the keys, no copy) and iteration. Keys(list) builds
one from Key objects, bytes or hex strings.)")
      .def(py::init([](const py::iterable& items) {
             std::vector<kv::Key128> v;
             for (py::handle h : items) v.push_back(key_from_object(h));
             return Keys(std::move(v));
           }),
           py::arg("keys"))
      .def("__len__", &Keys::size)
      .def("__getitem__",
           [](const Keys& k, ssize_t i) {
             const auto n = static_cast<ssize_t>(k.size());
             if (i < 0) i += n;
             if (i < 0 || i >= n) throw py::index_error("key index out of range");
             return Key{k.keys()[static_cast<size_t>(i)]};
           })
      .def("__getitem__",
           [](const Keys& k, const py::slice& s) {
             size_t start = 0, stop = 0, step = 0, len = 0;
             if (!s.compute(k.size(), &start, &stop, &step, &len)) throw py::error_already_set();
             if (step == 1) return Keys(k.all(), k.begin() + start, k.begin() + start + len);
             std::vector<kv::Key128> v;
             for (size_t i = 0; i < len; ++i) v.push_back(k.keys()[start + i * step]);
             return Keys(std::move(v));
           })
      .def("__iter__",
           [](const Keys& k) {
             py::list l;
             for (const auto& key : k.keys()) l.append(Key{key});
             return py::iter(l);
           })
      .def("__eq__",
           [](const Keys& a, const py::object& b) {
             if (!py::isinstance<Keys>(b)) return false;
             auto x = a.keys(), y = b.cast<const Keys&>().keys();
             return std::equal(x.begin(), x.end(), y.begin(), y.end());
           })
      .def("__repr__", [](const Keys& k) {
        std::string s = "Keys(" + std::to_string(k.size()) + " keys";
        if (k.size() > 0) s += ", first " + key_hex(k.keys()[0]);
        return s + ")";
      });
}

void register_namespace(py::module_& m) {
  py::class_<kv::Namespace>(m, "Namespace",
                            R"(Everything that must match for KV bytes to be reusable: model and
revision, tokenizer, KV dtype and layout, tokens per block, tensor- and
pipeline-parallel shape and rank, and the tenant. Its digest seeds every
block key, so two namespaces never share a block (docs/block-keys.md).)")
      .def(py::init([](std::string model, std::string revision, std::string tokenizer,
                       std::string kv_dtype, std::string layout, uint32_t block_tokens,
                       uint32_t tp_size, uint32_t tp_rank, std::string tenant, uint32_t pp_size,
                       uint32_t pp_rank, const std::string& scheme) {
             kv::Namespace ns;
             ns.model_id = std::move(model);
             ns.model_revision = std::move(revision);
             ns.tokenizer_id = std::move(tokenizer);
             ns.kv_dtype = std::move(kv_dtype);
             ns.kv_layout = std::move(layout);
             ns.tokens_per_block = block_tokens;
             ns.tp_size = tp_size;
             ns.tp_rank = tp_rank;
             ns.pp_size = pp_size;
             ns.pp_rank = pp_rank;
             ns.tenant_salt = std::move(tenant);
             ns.scheme = scheme_from_name(scheme);
             Status st = ns.validate();
             if (!st.ok()) raise_status(st);
             return ns;
           }),
           py::arg("model"), py::arg("revision"), py::arg("tokenizer"), py::arg("kv_dtype"),
           py::arg("layout"), py::arg("block_tokens"), py::arg("tp_size") = 1,
           py::arg("tp_rank") = 0, py::arg("tenant") = "", py::arg("pp_size") = 1,
           py::arg("pp_rank") = 0, py::arg("scheme") = "xxh3_128")
      .def_readonly("model", &kv::Namespace::model_id)
      .def_readonly("revision", &kv::Namespace::model_revision)
      .def_readonly("tokenizer", &kv::Namespace::tokenizer_id)
      .def_readonly("kv_dtype", &kv::Namespace::kv_dtype)
      .def_readonly("layout", &kv::Namespace::kv_layout)
      .def_readonly("block_tokens", &kv::Namespace::tokens_per_block)
      .def_readonly("tp_size", &kv::Namespace::tp_size)
      .def_readonly("tp_rank", &kv::Namespace::tp_rank)
      .def_readonly("pp_size", &kv::Namespace::pp_size)
      .def_readonly("pp_rank", &kv::Namespace::pp_rank)
      .def_readonly("tenant", &kv::Namespace::tenant_salt)
      .def_property_readonly("scheme",
                             [](const kv::Namespace& ns) { return kv::key_scheme_name(ns.scheme); })
      .def_property_readonly(
          "digest", [](const kv::Namespace& ns) { return Key{ns.digest()}; },
          "The namespace's 128-bit digest (the seed of every key).")
      .def(
          "block_keys",
          [](const kv::Namespace& ns, const py::object& tokens) {
            std::vector<uint32_t> t = tokens_from_object(tokens);
            std::vector<kv::Key128> keys;
            {
              py::gil_scoped_release nogil;
              keys = kv::chain_block_keys(ns.scheme, ns.digest(), ns.tokens_per_block, t);
            }
            return Keys(std::move(keys));
          },
          py::arg("tokens"),
          R"(The chained keys of every full block of `tokens` (a list of ints or a
1-D integer numpy array, each in 0..2**32-1); a trailing partial block gets
no key. Equal keys mean equal prefixes under equal namespaces.)")
      .def("__eq__",
           [](const kv::Namespace& a, const py::object& b) {
             return py::isinstance<kv::Namespace>(b) &&
                    a.digest() == b.cast<const kv::Namespace&>().digest();
           })
      .def("__hash__",
           [](const kv::Namespace& ns) {
             return static_cast<ssize_t>(kv::Key128Hash{}(ns.digest()));
           })
      .def("__repr__", [](const kv::Namespace& ns) { return "Namespace(" + ns.describe() + ")"; });
}

void register_results(py::module_& m) {
  py::class_<PutOutcome>(m, "PutResult", "What a put did with one block.")
      .def_property_readonly(
          "stored", [](const PutOutcome& p) { return p.r.stored(); },
          "True when the store holds the block (stored or deduplicated).")
      .def_property_readonly(
          "outcome", [](const PutOutcome& p) { return put_outcome_name(p.r.outcome); },
          "'stored', 'deduplicated' or 'refused'.")
      .def_property_readonly(
          "tier", [](const PutOutcome& p) { return tier_or_none(p.r.tier); },
          "'ram' or 'disk' where it was stored, else None.")
      .def_property_readonly(
          "reason",
          [](const PutOutcome& p) -> py::object {
            if (p.r.stored()) return py::none();
            return py::str(kv::refuse_reason_name(p.r.refuse));
          },
          "Why it was refused ('no_space', 'index_full', 'disk_error', 'admission'), else None.")
      .def("__bool__", [](const PutOutcome& p) { return p.r.stored(); })
      .def("__repr__", [](const PutOutcome& p) {
        std::string s = std::string("PutResult(") + put_outcome_name(p.r.outcome);
        if (!p.r.stored())
          s += std::string(", reason=") + kv::refuse_reason_name(p.r.refuse);
        else if (p.r.tier != kv::Tier::kNone)
          s += std::string(", tier=") + kv::tier_name(p.r.tier);
        return s + ")";
      });

  py::class_<GetOutcome>(m, "GetResult", "What a get found for one block; true when it hit.")
      .def_property_readonly("hit", [](const GetOutcome& g) { return g.r.hit; })
      .def_property_readonly(
          "tier", [](const GetOutcome& g) { return tier_or_none(g.r.tier); },
          "'ram' or 'disk' for a hit, else None.")
      .def_property_readonly(
          "length", [](const GetOutcome& g) { return g.r.length; },
          "Bytes written into the buffer (0 for a miss).")
      .def_property_readonly(
          "reason",
          [](const GetOutcome& g) -> py::object {
            if (g.r.hit) return py::none();
            return py::str(kv::miss_reason_name(g.r.miss));
          },
          "Why it missed ('not_found', 'evicted', 'foreign_namespace', 'corrupt', "
          "'io_error', 'timeout'), else None.")
      .def("__bool__", [](const GetOutcome& g) { return g.r.hit; })
      .def("__repr__", [](const GetOutcome& g) {
        if (g.r.hit) {
          return std::string("GetResult(hit, tier=") + kv::tier_name(g.r.tier) +
                 ", length=" + std::to_string(g.r.length) + ")";
        }
        return std::string("GetResult(miss, reason=") + kv::miss_reason_name(g.r.miss) + ")";
      });

  py::class_<MatchOutcome>(m, "Match", "The longest stored prefix of a key chain.")
      .def_property_readonly(
          "blocks", [](const MatchOutcome& x) { return x.r.blocks; }, "Leading keys present.")
      .def_property_readonly(
          "ram", [](const MatchOutcome& x) { return x.r.ram_blocks; }, "Of those, in RAM.")
      .def_property_readonly(
          "disk", [](const MatchOutcome& x) { return x.r.disk_blocks; }, "Of those, on disk only.")
      .def("__repr__", [](const MatchOutcome& x) {
        return "Match(blocks=" + std::to_string(x.r.blocks) +
               ", ram=" + std::to_string(x.r.ram_blocks) +
               ", disk=" + std::to_string(x.r.disk_blocks) + ")";
      });
}

}  // namespace

void raise_status(const Status& st) {
  PyObject* type = g_error;
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists:
      type = g_invalid_argument;
      break;
    case StatusCode::kNotFound:
      type = g_not_found;
      break;
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout:
      type = g_unavailable;
      break;
    default:
      break;
  }
  PyErr_SetString(type, st.to_string().c_str());
  throw py::error_already_set();
}

void register_errors(py::module_& m) {
  g_error = new_error(m, "Error", PyExc_Exception,
                      "Base of every kvtier exception. Raised for bad input only: a miss is a "
                      "result, never an exception, and a call that raised changed nothing.");
  py::tuple value_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid_argument = new_error(m, "InvalidArgumentError", value_bases.ptr(),
                                 "Bad input: a malformed URI, a buffer of the wrong size, an "
                                 "invalid namespace, mismatched lengths. Also a ValueError.");
  py::tuple lookup_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_LookupError));
  g_not_found = new_error(m, "NotFoundError", lookup_bases.ptr(),
                          "Something named does not exist (a volume file, a token file).");
  py::tuple conn_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ConnectionError));
  g_unavailable = new_error(m, "UnavailableError", conn_bases.ptr(),
                            "A store service or etcd could not be reached when opening, or "
                            "stats() found no node that answered.");
}

void register_types(py::module_& m) {
  register_key_types(m);
  register_namespace(m);
  register_results(m);
}

}  // namespace kvtier::python
