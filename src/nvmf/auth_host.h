// The host's side of DH-HMAC-CHAP (docs/nvme-tcp.md, "In-band
// authentication"): one transaction on one queue, right after its Connect
// answered that authentication is required. The host offers every hash and
// group (the controller picks), proves it holds its key, and, when it has the
// controller's key too, makes the controller prove it holds that one: a
// controller that answers without its proof is refused, not trusted.
//
// Thread-safety: authenticate() may run on many queues at once.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "nvmf/dhchap.h"

namespace kvtier::nvmf {

struct HostAuthKeys {
  dhchap::Secret host_key;
  std::optional<dhchap::Secret> ctrl_key;  // set: bidirectional authentication
};

// The two commands the transaction is made of, on the queue being
// authenticated: Authentication Send of a message and Authentication Receive
// of at most `al` bytes.
struct AuthChannel {
  std::function<Status(dhchap::BytesView message)> send;
  std::function<Result<dhchap::Bytes>(uint32_t al)> receive;
};

// kPermissionDenied when either side's proof fails (a wrong key), kIoError or
// kTimeout when the queue does; the caller drops the connection either way.
Status authenticate(const AuthChannel& channel, const HostAuthKeys& keys,
                    const std::string& hostnqn, const std::string& subnqn, uint16_t tid);

}  // namespace kvtier::nvmf
