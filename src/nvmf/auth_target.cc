#include "nvmf/auth_target.h"

#include <algorithm>

#include <fmt/format.h>

namespace kvtier::nvmf {

using dhchap::Reason;

TargetAuth::TargetAuth(const HostAuthConfig& config, std::string subnqn, std::string hostnqn)
    : config_(config), subnqn_(std::move(subnqn)), hostnqn_(std::move(hostnqn)) {}

void TargetAuth::fail(Reason reason, std::string why) {
  reason_ = reason;
  failure_ = fmt::format("host {}: {} ({})", hostnqn_, why, dhchap::reason_text(reason));
  step_ = Step::kFailure1;
}

void TargetAuth::on_send(dhchap::BytesView data) {
  if (step_ == Step::kFailed || step_ == Step::kFailure1) return;
  auto decoded = dhchap::decode(data);
  if (!decoded.ok()) return fail(Reason::kIncorrectPayload, decoded.status().message());
  dhchap::Message& m = *decoded;
  if (auto* f = std::get_if<dhchap::Failure>(&m); f && !f->from_controller) {
    failure_ = fmt::format("host {} gave up: {}", hostnqn_, dhchap::reason_text(f->reason));
    step_ = Step::kFailed;
    return;
  }
  // A Negotiate restarts the transaction at any point but a failure: a host
  // may authenticate an authenticated queue again.
  if (auto* n = std::get_if<dhchap::Negotiate>(&m)) return negotiate(*n);
  if (auto* r = std::get_if<dhchap::Reply>(&m); r && step_ == Step::kReply) {
    if (r->tid != tid_) return fail(Reason::kIncorrectPayload, "Reply of another transaction");
    return reply(*r);
  }
  if (auto* s = std::get_if<dhchap::Success2>(&m); s && step_ == Step::kSuccess2) {
    if (s->tid != tid_) return fail(Reason::kIncorrectPayload, "Success2 of another transaction");
    authenticated_ = true;
    step_ = Step::kNegotiate;
    return;
  }
  fail(Reason::kIncorrectMessage, "message out of order");
}

void TargetAuth::negotiate(const dhchap::Negotiate& m) {
  tid_ = m.tid;
  if (m.sc_c != 0) return fail(Reason::kConcatMismatch, "secure channel concatenation asked");
  // The configured hash if the host offers it, else the first the host
  // offers that exists: every one of them is a sound HMAC.
  const auto offered = [](const std::vector<uint8_t>& ids, uint8_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  if (offered(m.hashes, static_cast<uint8_t>(config_.hash))) {
    hash_ = config_.hash;
  } else {
    auto it = std::find_if(m.hashes.begin(), m.hashes.end(), dhchap::known_hash);
    if (it == m.hashes.end()) return fail(Reason::kHashUnusable, "no hash in common");
    hash_ = dhchap::Hash(*it);
  }
  // The group is not the host's to weaken: it must offer the configured one.
  if (!offered(m.groups, static_cast<uint8_t>(config_.group))) {
    return fail(Reason::kDhGroupUnusable,
                fmt::format("host does not offer DH group {}", dhchap::group_name(config_.group)));
  }
  group_ = config_.group;
  step_ = Step::kChallenge;
}

void TargetAuth::reply(const dhchap::Reply& m) {
  if (m.response.size() != dhchap::digest_bytes(hash_)) {
    return fail(Reason::kHashUnusable, "Reply's hash length is not the negotiated hash's");
  }
  if (m.dhv.size() != dhchap::dh_value_bytes(group_)) {
    return fail(Reason::kIncorrectPayload, "Reply's DH value does not fit the group");
  }
  dhchap::Bytes z;
  if (dh_) {
    auto shared = dh_->shared_secret(m.dhv);
    if (!shared.ok()) return fail(Reason::kDhGroupUnusable, shared.status().message());
    z = std::move(*shared);
  }
  const auto challenge = [&](const dhchap::Bytes& c) {
    return dh_ ? dhchap::augmented_challenge(hash_, z, c) : c;
  };
  const dhchap::Bytes expected =
      dhchap::host_response(hash_, dhchap::transformed_key(config_.host_key, hostnqn_),
                            challenge(c1_), s1_, tid_, hostnqn_, subnqn_);
  if (!dhchap::equal_secret(expected, m.response)) {
    return fail(Reason::kFailed, "wrong response (the host's key differs)");
  }
  r2_.clear();
  if (m.cvalid) {
    if (!config_.ctrl_key) {
      return fail(Reason::kFailed, "host asked the controller to authenticate; no key is set");
    }
    r2_ = dhchap::controller_response(hash_, dhchap::transformed_key(*config_.ctrl_key, subnqn_),
                                      challenge(m.c2), m.seqnum, tid_, subnqn_, hostnqn_);
  } else {
    authenticated_ = true;
  }
  step_ = Step::kSuccess1;
}

dhchap::Bytes TargetAuth::on_receive() {
  switch (step_) {
    case Step::kChallenge: {
      dhchap::Challenge c;
      c.tid = tid_;
      c.hash = hash_;
      c.group = group_;
      s1_ = dhchap::random_nonzero32();
      c.seqnum = s1_;
      c1_ = dhchap::random_bytes(dhchap::digest_bytes(hash_));
      c.c1 = c1_;
      dh_.reset();
      if (group_ != dhchap::DhGroup::kNull) {
        auto kp = dhchap::DhKeyPair::generate(group_);
        if (!kp.ok()) {
          fail(Reason::kDhGroupUnusable, kp.status().message());
          return on_receive();
        }
        dh_ = std::move(*kp);
        c.dhv = dh_->public_value();
      }
      step_ = Step::kReply;
      return dhchap::encode(c);
    }
    case Step::kSuccess1: {
      dhchap::Success1 s;
      s.tid = tid_;
      s.hl = static_cast<uint8_t>(dhchap::digest_bytes(hash_));
      s.rvalid = !r2_.empty();
      s.response = r2_;
      step_ = s.rvalid ? Step::kSuccess2 : Step::kNegotiate;
      return dhchap::encode(s);
    }
    case Step::kFailure1:
      step_ = Step::kFailed;
      return dhchap::encode(dhchap::Failure{tid_, true, reason_});
    case Step::kFailed:
      return dhchap::encode(dhchap::Failure{tid_, true, reason_});
    default:
      fail(Reason::kIncorrectMessage, "Receive out of order");
      return on_receive();
  }
}

}  // namespace kvtier::nvmf
