#include "nvmf/auth_host.h"

#include <fmt/format.h>

#include "nvmf/dhchap_dh.h"

namespace kvtier::nvmf {

namespace {

using dhchap::Reason;

// Auth Receive's allocation length: every message fits (the kernel host
// asks for the same).
constexpr uint32_t kReceiveBytes = 4096;

class Transaction {
 public:
  Transaction(const AuthChannel& ch, const HostAuthKeys& keys, const std::string& hostnqn,
              const std::string& subnqn, uint16_t tid)
      : ch_(ch), keys_(keys), hostnqn_(hostnqn), subnqn_(subnqn), tid_(tid) {}

  Status run() {
    dhchap::Negotiate n;
    n.tid = tid_;
    n.hashes = {1, 2, 3};
    n.groups = {0, 1, 2, 3, 4, 5};
    KVTIER_RETURN_IF_ERROR(ch_.send(dhchap::encode(n)));
    auto challenge = receive<dhchap::Challenge>("Challenge");
    if (!challenge.ok()) return challenge.status();
    Status sent = reply(*challenge);
    if (!sent.ok()) return after_reply(sent);
    auto success = receive<dhchap::Success1>("Success1");
    if (!success.ok()) return after_reply(success.status());
    return finish(*success);
  }

 private:
  // The next message, which must be a T and of this transaction; a Failure1
  // is the controller's refusal.
  template <typename T>
  Result<T> receive(const char* what) {
    auto data = ch_.receive(kReceiveBytes);
    if (!data.ok()) return data.status();
    auto m = dhchap::decode(*data);
    if (!m.ok()) return give_up(Reason::kIncorrectPayload, m.status().message());
    if (auto* f = std::get_if<dhchap::Failure>(&*m); f && f->from_controller) {
      return Status::permission_denied(fmt::format(
          "nvmf host: the controller refused authentication: {}", dhchap::reason_text(f->reason)));
    }
    auto* t = std::get_if<T>(&*m);
    if (!t) return give_up(Reason::kIncorrectMessage, fmt::format("expected {}", what));
    if (t->tid != tid_) return give_up(Reason::kIncorrectMessage, "another transaction's id");
    return std::move(*t);
  }

  Status reply(const dhchap::Challenge& c) {
    hash_ = c.hash;
    dhchap::Reply r;
    r.tid = tid_;
    if (c.group != dhchap::DhGroup::kNull) {
      auto kp = dhchap::DhKeyPair::generate(c.group);
      if (!kp.ok()) return give_up(Reason::kDhGroupUnusable, kp.status().message());
      auto z = kp->shared_secret(c.dhv);
      if (!z.ok()) return give_up(Reason::kIncorrectPayload, z.status().message());
      z_ = std::move(*z);
      r.dhv = kp->public_value();
    }
    r.response = dhchap::host_response(hash_, dhchap::transformed_key(keys_.host_key, hostnqn_),
                                       challenge(c.c1), c.seqnum, tid_, hostnqn_, subnqn_);
    // S2 is never 0, so that no controller takes the C2 as unused.
    r.seqnum = dhchap::random_nonzero32();
    s2_ = r.seqnum;
    if (keys_.ctrl_key) {
      r.cvalid = true;
      c2_ = dhchap::random_bytes(dhchap::digest_bytes(hash_));
      r.c2 = c2_;
    }
    return ch_.send(dhchap::encode(r));
  }

  Status finish(const dhchap::Success1& s) {
    if (!keys_.ctrl_key) return Status::ok_status();
    if (!s.rvalid) {
      return give_up(Reason::kFailed, "the controller did not prove it holds its key");
    }
    const dhchap::Bytes expected =
        dhchap::controller_response(hash_, dhchap::transformed_key(*keys_.ctrl_key, subnqn_),
                                    challenge(c2_), s2_, tid_, subnqn_, hostnqn_);
    if (!dhchap::equal_secret(expected, s.response)) {
      return give_up(Reason::kFailed, "the controller's response is wrong (its key differs)");
    }
    return ch_.send(dhchap::encode(dhchap::Success2{tid_}));
  }

  dhchap::Bytes challenge(const dhchap::Bytes& c) const {
    return z_.empty() ? c : dhchap::augmented_challenge(hash_, z_, c);
  }

  // Tells the controller (Failure2) and fails the transaction.
  // Once the controller has our response it may refuse by dropping the
  // queue instead of sending Failure1 (the Linux target tears the queue down
  // as it queues Failure1, so either can arrive first). The code stays
  // Unavailable, since a network failure at this moment looks the same, but
  // the message says what probably happened.
  static Status after_reply(const Status& st) {
    if (st.code() != StatusCode::kUnavailable) return st;
    return Status::unavailable(
        fmt::format("nvmf host: the controller closed the connection after the host's DH-HMAC-CHAP "
                    "response (it may have refused the host key): {}",
                    st.message()));
  }

  Status give_up(Reason reason, const std::string& why) {
    (void)ch_.send(dhchap::encode(dhchap::Failure{tid_, false, reason}));
    return Status::permission_denied(fmt::format("nvmf host: authentication failed: {}", why));
  }

  const AuthChannel& ch_;
  const HostAuthKeys& keys_;
  const std::string& hostnqn_;
  const std::string& subnqn_;
  const uint16_t tid_;
  dhchap::Hash hash_ = dhchap::Hash::kSha256;
  dhchap::Bytes z_;   // the DH shared secret; empty with the null group
  dhchap::Bytes c2_;  // our challenge to the controller
  uint32_t s2_ = 0;
};

}  // namespace

Status authenticate(const AuthChannel& channel, const HostAuthKeys& keys,
                    const std::string& hostnqn, const std::string& subnqn, uint16_t tid) {
  return Transaction(channel, keys, hostnqn, subnqn, tid).run();
}

}  // namespace kvtier::nvmf
