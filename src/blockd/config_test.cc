// Daemon config: JSON round trip, validation of references and names,
// refusal of other versions, atomic save; peer filtering of the gRPC API.
#include "blockd/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "blockd/grpc_service.h"

namespace kvtier::blockd {
namespace {

DaemonConfig sample() {
  DaemonConfig c;
  VolumeConfig f;
  f.name = "f0";
  f.kind = "file";
  f.path = "/dev/null-ish";
  f.size_bytes = 1 << 20;
  c.volumes.push_back(f);
  f.name = "f1";
  f.path = "other";
  c.volumes.push_back(f);
  VolumeConfig a;
  a.name = "r1";
  a.kind = "raid1";
  a.members = {"f0", "f1"};
  a.strip_bytes = 65536;
  a.qos.read_iops = 100;
  a.qos.burst_seconds = 0.5;
  c.volumes.push_back(a);
  VolumeConfig p;
  p.name = "p0";
  p.kind = "partition";
  p.parent = "r1";
  p.offset_bytes = 4096;
  p.length_bytes = 8192;
  c.volumes.push_back(p);
  return c;
}

TEST(ConfigTest, RoundTrip) {
  const DaemonConfig c = sample();
  auto back = config_from_json(config_to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->volumes.size(), 4u);
  EXPECT_EQ(back->volumes[2].members, (std::vector<std::string>{"f0", "f1"}));
  EXPECT_EQ(back->volumes[2].qos.read_iops, 100u);
  EXPECT_DOUBLE_EQ(back->volumes[2].qos.burst_seconds, 0.5);
  EXPECT_EQ(back->volumes[3].parent, "r1");
  EXPECT_EQ(back->volumes[3].length_bytes, 8192u);
}

TEST(ConfigTest, RejectsMalformed) {
  EXPECT_FALSE(config_from_json("not json").ok());
  EXPECT_FALSE(config_from_json("[]").ok());
  EXPECT_FALSE(
      config_from_json(R"({"format":"kvtier-blockd-config","version":5,"volumes":[]})").ok());
  EXPECT_FALSE(config_from_json(R"({"format":"other","version":1,"volumes":[]})").ok());
  EXPECT_FALSE(config_from_json(
                   R"({"format":"kvtier-blockd-config","version":1,"volumes":[{"kind":"mem"}]})")
                   .ok());
  // Reference to a later volume, unknown kind, bad name, duplicate.
  DaemonConfig c = sample();
  std::swap(c.volumes[2], c.volumes[3]);
  EXPECT_FALSE(validate_config(c).ok());
  c = sample();
  c.volumes[0].kind = "floppy";
  EXPECT_FALSE(validate_config(c).ok());
  c = sample();
  c.volumes[0].name = "a b";
  EXPECT_FALSE(validate_config(c).ok());
  c = sample();
  c.volumes[1].name = "f0";
  EXPECT_FALSE(validate_config(c).ok());
  EXPECT_TRUE(validate_config(sample()).ok());
}

TEST(ConfigTest, ExportsRoundTripAndAreValidated) {
  DaemonConfig c = sample();
  ExportConfig e;
  e.nqn = "nqn.2024-01.io.kvtier:vol";
  e.volume = "p0";
  e.port = 4555;
  e.allowed_hosts = {"nqn.2024-01.io.kvtier:host"};
  c.exports.push_back(e);
  auto back = config_from_json(config_to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->exports.size(), 1u);
  EXPECT_EQ(back->exports[0].nqn, e.nqn);
  EXPECT_EQ(back->exports[0].volume, "p0");
  EXPECT_EQ(back->exports[0].address, "127.0.0.1");
  EXPECT_EQ(back->exports[0].port, 4555);
  EXPECT_EQ(back->exports[0].allowed_hosts, e.allowed_hosts);
  EXPECT_FALSE(back->exports[0].allow_any_host);
  // Version 1 files (no exports) are still read; exports in one are not.
  EXPECT_TRUE(
      config_from_json(R"({"format":"kvtier-blockd-config","version":1,"volumes":[]})").ok());
  EXPECT_FALSE(
      config_from_json(R"({"format":"kvtier-blockd-config","version":1,"volumes":[],"exports":[]})")
          .ok());
  EXPECT_FALSE(config_from_json(R"({"format":"kvtier-blockd-config","version":2,"volumes":[],)"
                                R"("exports":[{"nqn":"nqn.x","volume":"v","port":70000}]})")
                   .ok());
  DaemonConfig bad = c;
  bad.exports[0].volume = "nope";
  EXPECT_FALSE(validate_config(bad).ok());
  bad = c;
  bad.exports[0].nqn = "not-an-nqn";
  EXPECT_FALSE(validate_config(bad).ok());
  bad = c;
  bad.exports.push_back(e);  // same NQN twice
  EXPECT_FALSE(validate_config(bad).ok());
  bad = c;
  bad.exports.push_back(e);
  bad.exports[1].nqn = "nqn.2024-01.io.kvtier:other";  // same volume twice
  EXPECT_FALSE(validate_config(bad).ok());
  bad = c;
  bad.exports[0].allowed_hosts = {"bad host"};
  EXPECT_FALSE(validate_config(bad).ok());
}

TEST(ConfigTest, RemoteVolumesRoundTripAndAreValidated) {
  DaemonConfig c;
  VolumeConfig r;
  r.name = "r0";
  r.kind = "remote";
  r.remote.address = "10.0.0.7";
  r.remote.port = 4421;
  r.remote.nqn = "nqn.2024-01.io.kvtier:shared";
  r.remote.nsid = 3;
  r.remote.io_queues = 4;
  r.remote.ddgst = true;
  r.remote.ctrl_loss_tmo_ms = -1;
  r.remote.fast_io_fail_tmo_ms = 250;
  c.volumes.push_back(r);
  auto back = config_from_json(config_to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->volumes.size(), 1u);
  const RemoteConfig& b = back->volumes[0].remote;
  EXPECT_EQ(b.address, "10.0.0.7");
  EXPECT_EQ(b.port, 4421);
  EXPECT_EQ(b.nqn, r.remote.nqn);
  EXPECT_EQ(b.hostnqn, "nqn.2024-01.io.kvtier:blockd");
  EXPECT_EQ(b.nsid, 3u);
  EXPECT_EQ(b.io_queues, 4u);
  EXPECT_FALSE(b.hdgst);
  EXPECT_TRUE(b.ddgst);
  EXPECT_EQ(b.reconnect_delay_ms, 1000);
  EXPECT_EQ(b.ctrl_loss_tmo_ms, -1);
  EXPECT_EQ(b.fast_io_fail_tmo_ms, 250);
  // A remote volume needs version 3 and its remote object.
  EXPECT_FALSE(
      config_from_json(R"({"format":"kvtier-blockd-config","version":2,"volumes":[)"
                       R"({"name":"r","kind":"remote","remote":{"address":"a","nqn":"nqn.x"}}]})")
          .ok());
  EXPECT_FALSE(config_from_json(R"({"format":"kvtier-blockd-config","version":3,"volumes":[)"
                                R"({"name":"r","kind":"remote"}]})")
                   .ok());
  EXPECT_FALSE(
      config_from_json(
          R"({"format":"kvtier-blockd-config","version":3,"volumes":[)"
          R"({"name":"r","kind":"remote","remote":{"address":"a","nqn":"nqn.x","port":0}}]})")
          .ok());
  for (auto breaks : std::vector<void (*)(RemoteConfig&)>{
           [](RemoteConfig& x) { x.address.clear(); },
           [](RemoteConfig& x) { x.nqn = "not-an-nqn"; },
           [](RemoteConfig& x) { x.hostnqn = "host with spaces"; },
           [](RemoteConfig& x) { x.nsid = 0; }, [](RemoteConfig& x) { x.nsid = 0xffffffffu; },
           [](RemoteConfig& x) { x.io_queues = 0; }, [](RemoteConfig& x) { x.io_queues = 65; },
           [](RemoteConfig& x) { x.reconnect_delay_ms = 0; }}) {
    DaemonConfig bad = c;
    breaks(bad.volumes[0].remote);
    EXPECT_FALSE(validate_config(bad).ok());
  }
}

TEST(ConfigTest, SaveIsAtomicAndLoadReadsItBack) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvtier-cfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "blockd.json").string();
  auto empty = load_config(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->volumes.empty());
  ASSERT_TRUE(save_config_atomic(path, sample()).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto back = load_config(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->volumes.size(), 4u);
  std::ofstream(path) << "{ torn";
  auto bad = load_config(path);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PeerTest, HostOfAGrpcPeer) {
  EXPECT_EQ(peer_host("ipv4:127.0.0.1:5000"), "127.0.0.1");
  EXPECT_EQ(peer_host("ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(peer_host("unix:/run/x.sock"), "unix:/run/x.sock");
}

}  // namespace
}  // namespace kvtier::blockd
