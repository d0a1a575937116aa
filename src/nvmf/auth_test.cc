// DH-HMAC-CHAP over NVMe/TCP between kvtier's host (NvmeTcpDevice) and
// kvtier's target: a host with a key configured on the subsystem is asked
// to authenticate every queue, works with the right keys (one way and both
// ways, with and without a DH group), is refused with a wrong or missing
// key, and gets Authentication Required for anything it sends first.
#include <gtest/gtest.h>

#include "blk/dev/mem_device.h"
#include "nvmf/dhchap.h"
#include "nvmf/host_device.h"
#include "nvmf/target.h"
#include "nvmf/testing/one_namespace.h"
#include "nvmf/testing/raw_host.h"

namespace kvtier::nvmf {
namespace {

using namespace std::chrono_literals;
using testing::RawHost;
constexpr const char* kNqn = testing::kRawNqn;
constexpr const char* kHost = testing::kRawHostNqn;

struct Keys {
  dhchap::Secret host = *dhchap::generate_secret(1, 32);
  dhchap::Secret ctrl = *dhchap::generate_secret(2, 48);
};

std::unique_ptr<NvmfTarget> start_target(const Keys& k, bool with_ctrl_key, dhchap::DhGroup group) {
  TargetConfig c = testing::one_namespace_target(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1),
                                                 kNqn, kHost);
  HostAuthConfig a;
  a.host_key = k.host;
  if (with_ctrl_key) a.ctrl_key = k.ctrl;
  a.group = group;
  c.subsystems[0].host_keys[kHost] = a;
  auto t = NvmfTarget::start(c);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

HostOptions host(uint16_t port, const std::string& secret, const std::string& ctrl_secret = "") {
  HostOptions o = testing::host_options_for(port, kNqn, kHost);
  o.io_queues = 2;
  o.reconnect_delay = 0ms;
  o.dhchap_secret = secret;
  o.dhchap_ctrl_secret = ctrl_secret;
  return o;
}

void write_and_read_back(NvmeTcpDevice& d) {
  std::vector<std::byte> out(8192, std::byte{0x5A}), in(8192);
  ASSERT_TRUE(d.write_sync(4096, out).ok());
  ASSERT_TRUE(d.read_sync(4096, in).ok());
  EXPECT_EQ(in, out);
}

TEST(NvmfAuth, RightKeysAuthenticateEveryQueue) {
  Keys k;
  for (auto group : {dhchap::DhGroup::kNull, dhchap::DhGroup::kFfdhe2048}) {
    for (bool bidirectional : {false, true}) {
      auto t = start_target(k, bidirectional, group);
      ASSERT_TRUE(t);
      auto d = NvmeTcpDevice::connect(host(t->port(), dhchap::format_secret(k.host),
                                           bidirectional ? dhchap::format_secret(k.ctrl) : ""));
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      write_and_read_back(**d);
      EXPECT_EQ(t->counters().auth_successes, 3u);  // the admin queue and two I/O queues
      EXPECT_EQ(t->counters().auth_failures, 0u);
    }
  }
}

TEST(NvmfAuth, WrongOrMissingKeysAreRefused) {
  Keys k;
  auto t = start_target(k, true, dhchap::DhGroup::kFfdhe2048);
  ASSERT_TRUE(t);
  const Keys other;
  auto wrong = NvmeTcpDevice::connect(host(t->port(), dhchap::format_secret(other.host)));
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status().to_string();
  EXPECT_EQ(t->counters().auth_failures, 1u);
  auto none = NvmeTcpDevice::connect(host(t->port(), ""));
  EXPECT_EQ(none.status().code(), StatusCode::kPermissionDenied) << none.status().to_string();
  // The host is right but the controller cannot prove itself to it.
  auto impostor = NvmeTcpDevice::connect(
      host(t->port(), dhchap::format_secret(k.host), dhchap::format_secret(other.ctrl)));
  EXPECT_EQ(impostor.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(impostor.status().message().find("controller"), std::string::npos);
  // A malformed secret is the caller's mistake, said before connecting.
  EXPECT_EQ(NvmeTcpDevice::connect(host(t->port(), "DHHC-1:00:nope:")).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(NvmfAuth, AHostThatWantsTheControllerToProveItselfRefusesOneThatDoesNotAsk) {
  TargetConfig c = testing::one_namespace_target(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1),
                                                 kNqn, kHost);
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok());
  Keys k;
  auto d = NvmeTcpDevice::connect(
      host((*t)->port(), dhchap::format_secret(k.host), dhchap::format_secret(k.ctrl)));
  EXPECT_EQ(d.status().code(), StatusCode::kPermissionDenied) << d.status().to_string();
  // With only its own secret, a host connects to a target that asks nothing.
  EXPECT_TRUE(NvmeTcpDevice::connect(host((*t)->port(), dhchap::format_secret(k.host))).ok());
}

TEST(NvmfAuth, CommandsBeforeAuthenticationGetAuthenticationRequired) {
  Keys k;
  auto t = start_target(k, false, dhchap::DhGroup::kNull);
  ASSERT_TRUE(t);
  RawHost h(t->port());
  ASSERT_EQ(h.handshake().size(), 128u);
  ASSERT_NE(h.connect(0, kHost, 0xFFFF, 5000), 0xFFFF);
  EXPECT_TRUE(h.last_dw0() & dhchap::kConnectAtr);
  h.capsule(RawHost::enable_sqe(2));  // not yet allowed
  auto r = h.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  const auto st = testing::cqe_status(r);
  EXPECT_EQ(st.sct, 1);
  EXPECT_EQ(st.sc, 0x91);
  EXPECT_TRUE(st.dnr);
}

TEST(NvmfAuth, AnUnfinishedTransactionIsDroppedAtTheHandshakeBound) {
  Keys k;
  TargetConfig c = testing::one_namespace_target(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1),
                                                 kNqn, kHost);
  c.handshake_timeout_ms = 300;
  HostAuthConfig a;
  a.host_key = k.host;
  c.subsystems[0].host_keys[kHost] = a;
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok());
  RawHost h((*t)->port());
  h.handshake();
  ASSERT_NE(h.connect(0, kHost, 0xFFFF, 5000), 0xFFFF);
  EXPECT_TRUE(h.closed_by_peer());  // Connect, then silence: dropped, not kept
}

}  // namespace
}  // namespace kvtier::nvmf
