// Names for the values of a dense enum (0, 1, ..., last), for logs, metric
// labels and JSON: one table in value order instead of a switch per enum.
#pragma once

#include <cstddef>

namespace kvtier {

// Returns names[value], or `unknown` for a value outside the table (one read
// off the wire or cast from an int). `kLast` is the enum's last value; the
// table must name every value up to it, so an enum that grows without its
// table does not compile (the check -Wswitch made for a switch).
template <auto kLast, std::size_t N>
constexpr const char* enum_name(decltype(kLast) value, const char* const (&names)[N],
                                const char* unknown) {
  static_assert(N == static_cast<std::size_t>(kLast) + 1, "one name for each value, in order");
  const auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : unknown;
}

}  // namespace kvtier
