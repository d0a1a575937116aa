#include "sim/sim_profile.h"

#include <gtest/gtest.h>

namespace kvtier::sim {
namespace {

TEST(SimProfile, BuiltInProfilesAreCompleteAndSourced) {
  ASSERT_FALSE(builtin_sim_profiles().empty());
  for (const auto& p : builtin_sim_profiles()) {
    EXPECT_TRUE(p.check().ok()) << p.check().to_string();
  }
  EXPECT_TRUE(find_sim_profile("study-h100").has_value());
  EXPECT_FALSE(find_sim_profile("nope").has_value());
}

TEST(SimProfile, JsonRoundTrip) {
  const SimProfile p = *find_sim_profile("study-h100");
  auto back = parse_sim_profile(p.json().dump());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->json(), p.json());
}

TEST(SimProfile, BadFilesSayWhatIsWrong) {
  nlohmann::json j = find_sim_profile("study-h100")->json();
  auto expect_error = [](const nlohmann::json& bad, const std::string& says) {
    auto r = parse_sim_profile(bad.dump());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().to_string();
  };
  auto unknown = j;
  unknown["disk_lode_bytes_per_s"] = j["disk_load_bytes_per_s"];
  expect_error(unknown, "unknown key 'disk_lode_bytes_per_s'");
  auto missing = j;
  missing.erase("ram_load_bytes_per_s");
  expect_error(missing, "ram_load_bytes_per_s is missing");
  auto unsourced = j;
  unsourced["save_bytes_per_s"]["source"] = "";
  expect_error(unsourced, "save_bytes_per_s has no source");
  auto negative = j;
  negative["prefill_tokens_per_s"]["value"] = -1;
  expect_error(negative, "prefill_tokens_per_s must be positive");
  auto bare = j;
  bare["decode_s_per_token"] = 0.015;
  expect_error(bare, "decode_s_per_token must be {\"value\"");
  EXPECT_FALSE(parse_sim_profile("not json").ok());
}

}  // namespace
}  // namespace kvtier::sim
