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
  auto negative_cost = j;
  negative_cost["disk_latency_s"]["value"] = -1e-6;
  expect_error(negative_cost, "disk_latency_s must be zero or positive");
  auto shallow = j;
  shallow["remote_queue_depth"]["value"] = 0.5;
  expect_error(shallow, "remote_queue_depth must be at least 1");
}

// Costs besides bytes may be left out of a profile: then a transfer pays
// none, and the profile says the figure is not modeled.
TEST(SimProfile, CostsLeftOutAreNotModeled) {
  nlohmann::json j = find_sim_profile("study-h100")->json();
  ASSERT_GT(j["disk_latency_s"]["value"].get<double>(), 0);
  ASSERT_GT(j["lookup_s"]["value"].get<double>(), 0);
  for (const char* k : {"lookup_s", "disk_latency_s", "disk_op_s", "disk_queue_depth"}) j.erase(k);
  auto p = parse_sim_profile(j.dump());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->rates.lookup_s, 0);
  EXPECT_EQ(p->rates.disk_ops.latency_s, 0);
  EXPECT_EQ(p->rates.disk_ops.op_s, 0);
  EXPECT_EQ(p->rates.disk_ops.queue_depth, 1);
  EXPECT_GT(p->rates.remote_ops.latency_s, 0);  // the figures given are kept
  EXPECT_NE(p->json()["disk_op_s"]["source"].get<std::string>().find("not modeled"),
            std::string::npos);
  EXPECT_TRUE(parse_sim_profile(p->json().dump()).ok());
}

TEST(SimProfile, ATransferPaysLatencyBytesAndOperationsInFlight) {
  bench::StudyOptions::ModeledStoreRates::OpCosts c;
  EXPECT_EQ(c.seconds(8e9, 4, 4e9), 2.0);  // no costs: bytes over the rate
  c.latency_s = 0.5;
  c.op_s = 0.25;
  c.queue_depth = 2;
  EXPECT_DOUBLE_EQ(c.seconds(8e9, 4, 4e9), 0.5 + 2.0 + 4 * 0.25 / 2);
  // Two nodes: each its own device, so twice the operations in flight.
  EXPECT_DOUBLE_EQ(c.seconds(8e9, 4, 4e9, 2), 0.5 + 2.0 + 4 * 0.25 / 4);
  EXPECT_EQ(c.seconds(0, 0, 4e9), 0);  // nothing moved, nothing paid
}

}  // namespace
}  // namespace kvtier::sim
