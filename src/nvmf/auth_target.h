// The controller's side of DH-HMAC-CHAP for one queue (docs/nvme-tcp.md,
// "In-band authentication"). A host whose NQN has a key in the subsystem's
// configuration is told at Connect that authentication is required (ATR), on
// the admin queue and on every I/O queue; until the transaction succeeds,
// the queue serves nothing but Authentication Send and Receive.
//
// The host drives the transaction: Negotiate (Send), Challenge (Receive),
// Reply (Send), Success1 or Failure1 (Receive), and, when the host asked the
// controller to prove itself too, Success2 (Send). A message out of order, a
// wrong response or one that names another transaction makes the next Receive
// answer Failure1, after which the connection must end (failed()).
//
// Thread-safety: none; the queue's receiving thread owns it.
#pragma once

#include <optional>
#include <string>

#include "nvmf/dhchap.h"
#include "nvmf/dhchap_dh.h"

namespace kvtier::nvmf {

// What the target knows about one host (target_config.h: a subsystem's
// "hosts" entries).
struct HostAuthConfig {
  dhchap::Secret host_key;                    // the host proves it holds this
  std::optional<dhchap::Secret> ctrl_key;     // the controller proves it holds this, when asked
  dhchap::Hash hash = dhchap::Hash::kSha256;  // used when the host offers it
  dhchap::DhGroup group = dhchap::DhGroup::kFfdhe2048;  // required of the host
};

class TargetAuth {
 public:
  TargetAuth(const HostAuthConfig& config, std::string subnqn, std::string hostnqn);

  // An Authentication Send's data. Problems are answered by the next
  // Receive (Failure1), as the protocol asks.
  void on_send(dhchap::BytesView data);
  // What an Authentication Receive returns.
  dhchap::Bytes on_receive();

  bool authenticated() const { return authenticated_; }
  // The transaction failed (Failure1 returned or Failure2 received): the
  // connection must end.
  bool failed() const { return step_ == Step::kFailed; }
  const std::string& failure() const { return failure_; }

 private:
  enum class Step { kNegotiate, kChallenge, kReply, kSuccess1, kSuccess2, kFailure1, kFailed };
  void negotiate(const dhchap::Negotiate& m);
  void reply(const dhchap::Reply& m);
  void fail(dhchap::Reason reason, std::string why);

  const HostAuthConfig& config_;
  const std::string subnqn_, hostnqn_;
  Step step_ = Step::kNegotiate;
  bool authenticated_ = false;
  uint16_t tid_ = 0;
  dhchap::Hash hash_ = dhchap::Hash::kSha256;
  dhchap::DhGroup group_ = dhchap::DhGroup::kNull;
  std::optional<dhchap::DhKeyPair> dh_;
  uint32_t s1_ = 0;
  dhchap::Bytes c1_;
  dhchap::Bytes r2_;  // the controller's response, when the host asked for it
  dhchap::Reason reason_ = dhchap::Reason::kFailed;
  std::string failure_;
};

}  // namespace kvtier::nvmf
