// Throwaway certificates for tests and benchmarks (`kvtier bench service`
// measures TLS without asking anyone for a PKI): a fresh CA, a server
// certificate for 127.0.0.1, ::1 and localhost, and client certificates
// with the given common names, all signed by that CA (ECDSA P-256, valid for
// two days). Keys are written mode 0600. Never for production: the CA's key
// is written beside its certificate.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::net {

struct TestPki {
  std::string dir;
  std::string ca_file;      // <dir>/ca.pem
  std::string server_cert;  // <dir>/server.pem
  std::string server_key;   // <dir>/server.key
  std::string client_cert(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string client_key(const std::string& name) const { return dir + "/" + name + ".key"; }
};

// Writes the files into `dir` (created if absent).
Result<TestPki> write_test_pki(const std::string& dir, const std::vector<std::string>& clients);

}  // namespace kvtier::net
