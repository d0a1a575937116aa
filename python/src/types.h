// The value types of the Python binding: Key, Keys, Namespace (kv::Namespace
// itself), the per-block results and the exception classes.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <span>
#include <vector>

#include "kvtier/kv_store.h"

namespace kvtier::python {

// Raises the kvtier exception for a non-OK status (never returns).
[[noreturn]] void raise_status(const Status& st);

struct Key {
  kv::Key128 key;
};

// A list of keys that slices without copying its owner's vector: a slice
// shares the vector and keeps its own [begin, end).
class Keys {
 public:
  Keys() : all_(std::make_shared<std::vector<kv::Key128>>()) {}
  explicit Keys(std::vector<kv::Key128> keys)
      : all_(std::make_shared<std::vector<kv::Key128>>(std::move(keys))), end_(all_->size()) {}
  Keys(std::shared_ptr<const std::vector<kv::Key128>> all, size_t begin, size_t end)
      : all_(std::move(all)), begin_(begin), end_(end) {}
  size_t size() const { return end_ - begin_; }
  std::span<const kv::Key128> keys() const {
    return std::span<const kv::Key128>(all_->data() + begin_, size());
  }
  const std::shared_ptr<const std::vector<kv::Key128>>& all() const { return all_; }
  size_t begin() const { return begin_; }

 private:
  std::shared_ptr<const std::vector<kv::Key128>> all_;
  size_t begin_ = 0, end_ = 0;
};

struct PutOutcome {
  explicit PutOutcome(const kv::PutResult& r) : r(r) {}
  kv::PutResult r;
};
struct GetOutcome {
  explicit GetOutcome(const kv::GetResult& r) : r(r) {}
  kv::GetResult r;
};
struct MatchOutcome {
  explicit MatchOutcome(kv::MatchResult r) : r(std::move(r)) {}
  kv::MatchResult r;
};

void register_errors(pybind11::module_& m);
void register_types(pybind11::module_& m);

}  // namespace kvtier::python
