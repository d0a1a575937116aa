// libFuzzer target over DH-HMAC-CHAP (dhchap.h): what a hostile peer can send
// to either side. The first byte picks the side:
//   0: the decoder alone; a message it accepts must encode back to the same
//      bytes it was decoded from (no field silently dropped or invented);
//   1: the controller's state machine (TargetAuth), fed the input's messages
//      (each a 2-byte length and its bytes) as Authentication Sends, with a
//      Receive after each; it must never call an unknown host authenticated;
//   2: the host's transaction, fed the input's messages as the controller's
//      answers; with a controller key it must never succeed (no input can
//      hold the controller's response to the host's random challenge).
// Build and run with scripts/fuzz-dhchap.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvmf/auth_host.h"
#include "nvmf/auth_target.h"
#include "nvmf/dhchap.h"
#include "nvmf/pdu.h"

namespace {

using namespace kvtier;
using namespace kvtier::nvmf;

// The input after its mode byte, as messages.
class Messages {
 public:
  Messages(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool next(dhchap::Bytes* m) {
    if (n_ - pos_ < 2) return false;
    size_t len = get16(d_ + pos_);
    pos_ += 2;
    len = std::min(len, n_ - pos_);
    m->assign(d_ + pos_, d_ + pos_ + len);
    pos_ += len;
    return true;
  }

 private:
  const uint8_t* d_;
  size_t n_, pos_ = 0;
};

const HostAuthConfig& target_config() {
  static const HostAuthConfig c = [] {
    HostAuthConfig a;
    a.host_key = dhchap::Secret{1, dhchap::Bytes(32, 0x11)};
    a.ctrl_key = dhchap::Secret{2, dhchap::Bytes(48, 0x22)};
    a.group = dhchap::DhGroup::kNull;  // keeps inputs fast; groups are checked by the tests
    return a;
  }();
  return c;
}

void decoder(const uint8_t* d, size_t n) {
  auto m = dhchap::decode(dhchap::BytesView(d, n));
  if (!m.ok()) return;
  const dhchap::Bytes again = dhchap::encode(*m);
  if (again.size() > n) __builtin_trap();
  auto back = dhchap::decode(again);
  if (!back.ok() || dhchap::encode(*back) != again) __builtin_trap();
}

void controller(const uint8_t* d, size_t n) {
  TargetAuth t(target_config(), "nqn.2024-01.io.fuzz:sub", "nqn.2024-01.io.fuzz:host");
  Messages in(d, n);
  dhchap::Bytes m;
  while (in.next(&m) && !t.failed()) {
    t.on_send(m);
    const dhchap::Bytes answer = t.on_receive();
    if (answer.size() > dhchap::kMaxMessageBytes) __builtin_trap();
    // The host key is fixed but the challenge is random: no input holds the
    // response to it.
    if (t.authenticated()) __builtin_trap();
  }
}

void host(const uint8_t* d, size_t n, bool with_ctrl_key) {
  Messages in(d, n);
  AuthChannel ch;
  ch.send = [](dhchap::BytesView m) {
    if (m.size() > dhchap::kMaxMessageBytes) __builtin_trap();
    return Status::ok_status();
  };
  ch.receive = [&in](uint32_t al) -> Result<dhchap::Bytes> {
    dhchap::Bytes m;
    if (!in.next(&m)) return Status::unavailable("end of input");
    if (m.size() > al) m.resize(al);
    return m;
  };
  HostAuthKeys keys;
  keys.host_key = dhchap::Secret{0, dhchap::Bytes(32, 0x33)};
  if (with_ctrl_key) keys.ctrl_key = dhchap::Secret{0, dhchap::Bytes(32, 0x44)};
  const Status st =
      authenticate(ch, keys, "nqn.2024-01.io.fuzz:host", "nqn.2024-01.io.fuzz:sub", 9);
  if (with_ctrl_key && st.ok()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 4) {
    case 0:
      decoder(data + 1, size - 1);
      break;
    case 1:
      controller(data + 1, size - 1);
      break;
    default:
      host(data + 1, size - 1, data[0] % 4 == 3);
      break;
  }
  return 0;
}
