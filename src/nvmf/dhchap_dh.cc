#include "nvmf/dhchap_dh.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <fmt/format.h>

namespace kvtier::nvmf::dhchap {

namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using Pkey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Bignum = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using ParamBuild = std::unique_ptr<OSSL_PARAM_BLD, Deleter<OSSL_PARAM_BLD, OSSL_PARAM_BLD_free>>;
using Params = std::unique_ptr<OSSL_PARAM, Deleter<OSSL_PARAM, OSSL_PARAM_free>>;

Status openssl_error(const char* what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return Status::internal(fmt::format("dhchap: {}: {}", what, buf));
}

}  // namespace

void DhKeyPair::FreeKey::operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }

Result<DhKeyPair> DhKeyPair::generate(DhGroup g) {
  if (g == DhGroup::kNull || !known_group(static_cast<uint8_t>(g))) {
    return Status::invalid_argument("dhchap: a key pair needs an ffdhe group");
  }
  PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1) return openssl_error("DH keygen init");
  char* name = const_cast<char*>(group_name(g));
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, name, 0), OSSL_PARAM_END};
  if (EVP_PKEY_CTX_set_params(ctx.get(), params) != 1) return openssl_error("DH group");
  EVP_PKEY* raw = nullptr;
  if (EVP_PKEY_generate(ctx.get(), &raw) != 1) return openssl_error("DH keygen");
  DhKeyPair kp;
  kp.group_ = g;
  kp.key_.reset(raw, FreeKey{});
  BIGNUM* pub = nullptr;
  if (EVP_PKEY_get_bn_param(raw, OSSL_PKEY_PARAM_PUB_KEY, &pub) != 1) {
    return openssl_error("DH public value");
  }
  Bignum owned(pub);
  kp.public_value_.resize(dh_value_bytes(g));
  if (BN_bn2binpad(pub, kp.public_value_.data(), static_cast<int>(kp.public_value_.size())) < 0) {
    return openssl_error("DH public value size");
  }
  return kp;
}

Result<Bytes> DhKeyPair::shared_secret(BytesView peer_public) const {
  if (!key_ || peer_public.size() != dh_value_bytes(group_)) {
    return Status::invalid_argument(fmt::format("dhchap: a {} public value is {} bytes, not {}",
                                                group_name(group_), dh_value_bytes(group_),
                                                peer_public.size()));
  }
  Bignum pub(BN_bin2bn(peer_public.data(), static_cast<int>(peer_public.size()), nullptr));
  ParamBuild bld(OSSL_PARAM_BLD_new());
  if (!pub || !bld ||
      OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group_name(group_),
                                      0) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, pub.get()) != 1) {
    return openssl_error("peer DH value");
  }
  Params params(OSSL_PARAM_BLD_to_param(bld.get()));
  PkeyCtx fctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  EVP_PKEY* peer_raw = nullptr;
  if (!params || !fctx || EVP_PKEY_fromdata_init(fctx.get()) != 1 ||
      EVP_PKEY_fromdata(fctx.get(), &peer_raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return openssl_error("peer DH key");
  }
  Pkey peer(peer_raw);
  PkeyCtx dctx(EVP_PKEY_CTX_new(key_.get(), nullptr));
  if (!dctx || EVP_PKEY_derive_init(dctx.get()) != 1 ||
      EVP_PKEY_CTX_set_dh_pad(dctx.get(), 1) != 1) {
    return openssl_error("DH derive init");
  }
  // validate_peer = 1: OpenSSL's public key check for the named group.
  if (EVP_PKEY_derive_set_peer_ex(dctx.get(), peer.get(), 1) != 1) {
    ERR_clear_error();
    return Status::invalid_argument(
        fmt::format("dhchap: the peer's {} public value is not a valid key", group_name(group_)));
  }
  size_t len = 0;
  if (EVP_PKEY_derive(dctx.get(), nullptr, &len) != 1) return openssl_error("DH derive size");
  Bytes z(len);
  if (EVP_PKEY_derive(dctx.get(), z.data(), &len) != 1) return openssl_error("DH derive");
  z.resize(len);
  if (z.size() != dh_value_bytes(group_)) return Status::internal("dhchap: unpadded DH secret");
  return z;
}

}  // namespace kvtier::nvmf::dhchap
