// Looking up a named item (a profile, a preset) in a list of them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvtier {

// A copy of the first item of `items` whose `name` is `name`, or nullopt.
template <typename T>
std::optional<T> find_by_name(const std::vector<T>& items, const std::string& name) {
  for (const auto& item : items) {
    if (item.name == name) return item;
  }
  return std::nullopt;
}

}  // namespace kvtier
