#include "net/wire/tls_certs.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

namespace kvtier::net {

namespace {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

Status fail(const std::string& what) { return Status::internal("test PKI: " + what); }

bool add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key` named `cn`, signed by `issuer_key` (self-signed
// when `issuer` is null).
Result<Cert> make_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                       long serial, bool ca, const char* san) {
  Cert cert(X509_new());
  if (!cert) return fail("X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 2L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer ? issuer : cert.get();
  if (!add_extension(cert.get(), signer, NID_basic_constraints,
                     ca ? "critical,CA:TRUE" : "critical,CA:FALSE") ||
      !add_extension(cert.get(), signer, NID_key_usage,
                     ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature") ||
      (san && !add_extension(cert.get(), signer, NID_subject_alt_name, san))) {
    return fail("adding extensions to '" + cn + "'");
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return fail("signing '" + cn + "'");
  return cert;
}

Status write_pem(const std::string& path, EVP_PKEY* key, X509* cert) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot write " + path);
  FILE* f = ::fdopen(fd, "w");
  if (!f) {
    ::close(fd);
    return fail("cannot write " + path);
  }
  const bool ok = key ? PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1
                      : PEM_write_X509(f, cert) == 1;
  const bool closed = std::fclose(f) == 0;
  return ok && closed ? Status::ok_status() : fail("cannot write " + path);
}

Result<Key> new_key() {
  Key k(EVP_EC_gen("P-256"));
  if (!k) return fail("EVP_EC_gen");
  return k;
}

}  // namespace

Result<TestPki> write_test_pki(const std::string& dir, const std::vector<std::string>& clients) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail("cannot create " + dir + ": " + ec.message());
  TestPki pki;
  pki.dir = dir;
  pki.ca_file = dir + "/ca.pem";
  pki.server_cert = dir + "/server.pem";
  pki.server_key = dir + "/server.key";

  auto ca_key = new_key();
  if (!ca_key.ok()) return ca_key.status();
  auto ca = make_cert(ca_key->get(), "kvtier test CA", nullptr, ca_key->get(), 1, true, nullptr);
  if (!ca.ok()) return ca.status();
  KVTIER_RETURN_IF_ERROR(write_pem(pki.ca_file, nullptr, ca->get()));
  KVTIER_RETURN_IF_ERROR(write_pem(dir + "/ca.key", ca_key->get(), nullptr));

  long serial = 2;
  auto issue = [&](const std::string& cn, const char* san, const std::string& cert_path,
                   const std::string& key_path) -> Status {
    auto key = new_key();
    if (!key.ok()) return key.status();
    auto cert = make_cert(key->get(), cn, ca->get(), ca_key->get(), serial++, false, san);
    if (!cert.ok()) return cert.status();
    KVTIER_RETURN_IF_ERROR(write_pem(cert_path, nullptr, cert->get()));
    return write_pem(key_path, key->get(), nullptr);
  };
  KVTIER_RETURN_IF_ERROR(
      issue("127.0.0.1", "IP:127.0.0.1,IP:::1,DNS:localhost", pki.server_cert, pki.server_key));
  for (const auto& name : clients) {
    KVTIER_RETURN_IF_ERROR(issue(name, nullptr, pki.client_cert(name), pki.client_key(name)));
  }
  return pki;
}

}  // namespace kvtier::net
