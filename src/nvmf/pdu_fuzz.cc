// libFuzzer target over the NVMe/TCP target's receive path: the input is the
// byte stream a host sends on one queue (ICReq, capsules, H2CData, ...), fed
// to a QueueConnection serving a RAM namespace. Every PDU the target sends
// back must be self-consistent (plen equal to the bytes actually sent). Build
// and run with scripts/fuzz-nvmf.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "blk/dev/mem_device.h"
#include "nvmf/queue_connection.h"

namespace {

using namespace kvtier;
using namespace kvtier::nvmf;

class FuzzStream : public PduStream {
 public:
  FuzzStream(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  Status read_exact(void* buf, size_t n) override {
    if (closed_ || n > n_ - pos_) return Status::unavailable("end of input");
    std::memcpy(buf, d_ + pos_, n);
    pos_ += n;
    return Status::ok_status();
  }
  Status write_all(const iovec* iov, int count) override {
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += iov[i].iov_len;
    if (total < 8) __builtin_trap();
    const auto* h = static_cast<const uint8_t*>(iov[0].iov_base);
    if (get32(h + 4) != total) __builtin_trap();  // one PDU per write, plen exact
    if (h[0] == 0x00 || h[0] == 0x02 || h[0] == 0x04 || h[0] == 0x06) __builtin_trap();
    return closed_ ? Status::unavailable("closed") : Status::ok_status();
  }
  void shutdown() override { closed_ = true; }
  // What is left of the input counts as received, so the target's sends
  // take their held (write_more) path as they would with a real socket.
  size_t buffered() const override { return n_ - pos_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
  bool closed_ = false;
};

TargetConfig make_config() {
  TargetConfig c;
  SubsystemConfig s;
  s.nqn = "nqn.2024-01.io.kvtier:fuzz";
  s.allowed_hosts = {"nqn.2024-01.io.kvtier:fuzz-host"};
  s.namespaces.push_back(std::make_shared<blk::MemDevice>(1 << 20, 512, 1));
  s.namespaces.push_back(std::make_shared<blk::MemDevice>(1 << 20, 4096, 1));
  c.subsystems.push_back(s);
  c.max_transfer = 64 << 10;
  c.maxh2cdata = 16 << 10;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TargetConfig config = make_config();
  TargetState state(config);
  // A live controller (cntlid 1, enabled) so that I/O queue Connects in the
  // corpus reach the I/O command path.
  auto ctrl =
      state.create_controller(&state.subsystems()[0], "nqn.2024-01.io.kvtier:fuzz-host", {}, 0);
  ctrl->cc = 1;
  FuzzStream stream(data, size);
  {
    QueueConnection q(state, stream);
    (void)q.run();
  }
  state.destroy_all();
  return 0;
}
