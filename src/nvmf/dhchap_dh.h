// The Diffie-Hellman half of DH-HMAC-CHAP (dhchap.h): a key pair in one of
// the RFC 7919 groups, its public value and the secret shared with a peer's,
// both as big-endian numbers padded to the size of the group's prime, as the
// protocol (and the Linux kernel) encode and hash them. Over OpenSSL.
#pragma once

#include <memory>

#include "nvmf/dhchap.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace kvtier::nvmf::dhchap {

class DhKeyPair {
 public:
  // A fresh key pair in `g` (not kNull).
  static Result<DhKeyPair> generate(DhGroup g);

  DhGroup group() const { return group_; }
  const Bytes& public_value() const { return public_value_; }
  // The shared secret with a peer's public value. The value must be a valid
  // public key of the group (1 < y < p-1, in the prime-order subgroup): a
  // peer that sends 1 or p-1 would force a known secret.
  Result<Bytes> shared_secret(BytesView peer_public) const;

 private:
  struct FreeKey {
    void operator()(EVP_PKEY* k) const;
  };
  DhGroup group_ = DhGroup::kNull;
  std::shared_ptr<EVP_PKEY> key_;
  Bytes public_value_;
};

}  // namespace kvtier::nvmf::dhchap
