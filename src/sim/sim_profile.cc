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
using OpCosts = Rates::OpCosts;

// One cost figure of one device or link: which device's costs, which figure.
struct OpField {
  OpCosts Rates::*device;
  double OpCosts::*figure;
};
using Field = std::variant<double engine::EngineProfile::*, uint64_t engine::EngineProfile::*,
                           double Rates::*, OpField>;

// Rates and sizes must be given and positive. Costs besides bytes may be
// left out (then a transfer pays none: 0, and one operation in flight).
enum class Kind { kRequired, kCost, kDepth };

struct NamedField {
  std::string name;
  Field field;
  Kind kind = Kind::kRequired;
};

// Every figure of a profile, as it is named in the JSON file.
const std::vector<NamedField>& figures() {
  static const std::vector<NamedField> f = [] {
    std::vector<NamedField> v = {
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
        {"lookup_s", &Rates::lookup_s, Kind::kCost},
    };
    static const std::pair<const char*, OpCosts Rates::*> devices[] = {
        {"ram", &Rates::ram_ops},
        {"disk", &Rates::disk_ops},
        {"remote", &Rates::remote_ops},
        {"direct", &Rates::direct_ops}};
    for (const auto& [device, member] : devices) {
      const std::string d = device;
      v.push_back({d + "_latency_s", OpField{member, &OpCosts::latency_s}, Kind::kCost});
      v.push_back({d + "_op_s", OpField{member, &OpCosts::op_s}, Kind::kCost});
      v.push_back({d + "_queue_depth", OpField{member, &OpCosts::queue_depth}, Kind::kDepth});
    }
    return v;
  }();
  return f;
}

// The field itself, within the profile.
double& field_of(SimProfile& p, const OpField& f) { return p.rates.*(f.device).*(f.figure); }
double& field_of(SimProfile& p, double Rates::*m) { return p.rates.*m; }
double& field_of(SimProfile& p, double engine::EngineProfile::*m) { return p.engine.*m; }
uint64_t& field_of(SimProfile& p, uint64_t engine::EngineProfile::*m) { return p.engine.*m; }

double get(const SimProfile& p, const Field& f) {
  auto& mp = const_cast<SimProfile&>(p);
  return std::visit([&](const auto& member) { return static_cast<double>(field_of(mp, member)); },
                    f);
}

void set(SimProfile& p, const Field& f, double v) {
  std::visit(
      [&](const auto& member) {
        auto& field = field_of(p, member);
        field = static_cast<std::remove_reference_t<decltype(field)>>(v);
      },
      f);
}

// Empty when `v` is a valid value of a figure of `kind`, else what it must be.
std::string invalid(Kind kind, double v) {
  if (!std::isfinite(v) || !(v < 1e18)) return "finite (and below 1e18)";
  switch (kind) {
    case Kind::kRequired:
      return v > 0 ? "" : "positive";
    case Kind::kCost:
      return v >= 0 ? "" : "zero or positive";
    case Kind::kDepth:
      return v >= 1 ? "" : "at least 1";
  }
  return "";
}

// The source a cost figure that a profile leaves out gets.
constexpr const char* kNotModeled = "not modeled: absent from the profile";

}  // namespace

nlohmann::json SimProfile::json() const {
  nlohmann::json j = {{"name", name}, {"description", description}};
  for (const auto& f : figures()) {
    const auto src = sources.find(f.name);
    const std::string source = src != sources.end()        ? src->second
                               : f.kind == Kind::kRequired ? ""
                                                           : kNotModeled;
    j[f.name] = {{"value", get(*this, f.field)}, {"source", source}};
  }
  return j;
}

Status SimProfile::check() const {
  for (const auto& f : figures()) {
    const double v = get(*this, f.field);
    if (const std::string must = invalid(f.kind, v); !must.empty()) {
      return Status::invalid_argument(
          fmt::format("profile '{}': {} must be {}, is {}", name, f.name, must, v));
    }
    const auto src = sources.find(f.name);
    if (f.kind == Kind::kRequired && (src == sources.end() || src->second.empty())) {
      return Status::invalid_argument(
          fmt::format("profile '{}': {} has no source (say where the figure comes from, or "
                      "\"calibrated: \" and why)",
                      name, f.name));
    }
    if (f.kind != Kind::kRequired && src != sources.end() && src->second.empty()) {
      return Status::invalid_argument(fmt::format("profile '{}': {} has no source", name, f.name));
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
    if (const std::string must = invalid(f->kind, figure); !must.empty()) {
      return Status::invalid_argument(
          fmt::format("sim profile: {} must be {}, is {}", key, must, figure));
    }
    set(p, f->field, figure);
    p.sources[key] = src->get<std::string>();
  }
  for (const auto& f : figures()) {
    if (j.contains(f.name)) continue;
    if (f.kind == Kind::kRequired) {
      return Status::invalid_argument(fmt::format("sim profile: {} is missing", f.name));
    }
    p.sources[f.name] = kNotModeled;
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
