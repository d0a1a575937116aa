#include "sim/sim_profile.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <variant>

#include "common/find_by_name.h"

namespace kvtier::sim {

namespace {

using Rates = bench::StudyOptions::ModeledStoreRates;
using Field = std::variant<double engine::EngineProfile::*, uint64_t engine::EngineProfile::*,
                           double Rates::*>;

struct NamedField {
  const char* name;
  Field field;
};

// Every figure of a profile, as it is named in the JSON file.
const std::vector<NamedField>& figures() {
  static const std::vector<NamedField> f = {
      {"prefill_tokens_per_s", &engine::EngineProfile::prefill_tokens_per_s},
      {"decode_s_per_token", &engine::EngineProfile::decode_s_per_token},
      {"kv_bytes_per_token", &engine::EngineProfile::kv_bytes_per_token},
      {"hbm_pool_tokens", &engine::EngineProfile::hbm_pool_tokens},
      {"pd_link_bytes_per_s", &engine::EngineProfile::pd_link_bytes_per_s},
      {"ram_load_bytes_per_s", &Rates::ram_load_bytes_per_s},
      {"save_bytes_per_s", &Rates::save_bytes_per_s},
      {"disk_load_bytes_per_s", &Rates::disk_load_bytes_per_s},
      {"remote_load_bytes_per_s", &Rates::remote_load_bytes_per_s},
      {"remote_save_bytes_per_s", &Rates::remote_save_bytes_per_s},
      {"direct_load_bytes_per_s", &Rates::direct_load_bytes_per_s},
  };
  return f;
}

// The field's object within the profile: the engine's or the rates'.
engine::EngineProfile& owner(SimProfile& p, double engine::EngineProfile::*) { return p.engine; }
engine::EngineProfile& owner(SimProfile& p, uint64_t engine::EngineProfile::*) { return p.engine; }
Rates& owner(SimProfile& p, double Rates::*) { return p.rates; }

double get(const SimProfile& p, const Field& f) {
  auto& mp = const_cast<SimProfile&>(p);
  return std::visit([&](auto member) { return static_cast<double>(owner(mp, member).*member); }, f);
}

void set(SimProfile& p, const Field& f, double v) {
  std::visit(
      [&](auto member) {
        auto& field = owner(p, member).*member;
        field = static_cast<std::remove_reference_t<decltype(field)>>(v);
      },
      f);
}

}  // namespace

nlohmann::json SimProfile::json() const {
  nlohmann::json j = {{"name", name}, {"description", description}};
  for (const auto& f : figures()) {
    const auto src = sources.find(f.name);
    j[f.name] = {{"value", get(*this, f.field)},
                 {"source", src == sources.end() ? "" : src->second}};
  }
  return j;
}

Status SimProfile::check() const {
  for (const auto& f : figures()) {
    const double v = get(*this, f.field);
    if (!(v > 0) || !std::isfinite(v)) {
      return Status::invalid_argument(
          fmt::format("profile '{}': {} must be positive, is {}", name, f.name, v));
    }
    const auto src = sources.find(f.name);
    if (src == sources.end() || src->second.empty()) {
      return Status::invalid_argument(
          fmt::format("profile '{}': {} has no source (say where the figure comes from, or "
                      "\"calibrated: \" and why)",
                      name, f.name));
    }
  }
  return Status::ok_status();
}

Result<SimProfile> parse_sim_profile(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::invalid_argument("sim profile: not a JSON object");
  }
  SimProfile p;
  for (const auto& [key, value] : j.items()) {
    if (key == "name" || key == "description") {
      if (!value.is_string()) {
        return Status::invalid_argument(fmt::format("sim profile: {} must be a string", key));
      }
      (key == "name" ? p.name : p.description) = value.get<std::string>();
      continue;
    }
    const NamedField* f = nullptr;
    for (const auto& nf : figures()) {
      if (key == nf.name) f = &nf;
    }
    if (!f) return Status::invalid_argument(fmt::format("sim profile: unknown key '{}'", key));
    const auto v = value.find("value");
    const auto src = value.find("source");
    if (!value.is_object() || v == value.end() || !v->is_number() || src == value.end() ||
        !src->is_string()) {
      return Status::invalid_argument(
          fmt::format("sim profile: {} must be {{\"value\": number, \"source\": \"...\"}}", key));
    }
    // Checked before it is stored: a negative or huge value would not
    // convert to the integer fields.
    const double figure = v->get<double>();
    if (!(figure > 0) || !(figure < 1e18)) {
      return Status::invalid_argument(
          fmt::format("sim profile: {} must be positive (and below 1e18), is {}", key, figure));
    }
    set(p, f->field, figure);
    p.sources[key] = src->get<std::string>();
  }
  for (const auto& f : figures()) {
    if (!j.contains(f.name)) {
      return Status::invalid_argument(fmt::format("sim profile: {} is missing", f.name));
    }
  }
  if (p.name.empty()) return Status::invalid_argument("sim profile: name is missing");
  KVTIER_RETURN_IF_ERROR(p.check());
  return p;
}

Result<SimProfile> load_sim_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found("sim profile: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto p = parse_sim_profile(ss.str());
  if (!p.ok()) return Status(p.status().code(), path + ": " + p.status().message());
  return p;
}

std::optional<SimProfile> find_sim_profile(const std::string& name) {
  return find_by_name(builtin_sim_profiles(), name);
}

Result<SimProfile> resolve_sim_profile(const std::string& name, const std::string& file) {
  if (!file.empty()) return load_sim_profile(file);
  if (auto p = find_sim_profile(name)) return *p;
  std::string known;
  for (const auto& p : builtin_sim_profiles()) known += " " + p.name;
  return Status::not_found("no built-in sim profile '" + name + "' (built-in:" + known + ")");
}

}  // namespace kvtier::sim
