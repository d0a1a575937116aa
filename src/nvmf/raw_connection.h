// RawConnection: one NVMe/TCP connection that speaks raw PDUs (no digests)
// and does only what its caller says, for what a real host never does: a
// Connect after another for the same queue, commands whose answers it never
// reads, R2Ts it never answers. Used by the target's hostile-host tests and
// by `kvtier bench nvmf`'s slow reader. Every wait is bounded by the
// socket's receive timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "nvmf/pdu.h"

namespace kvtier::nvmf {

class RawConnection {
 public:
  // Connects to the loopback `port`. `rcvbuf` > 0 shrinks the socket's
  // receive buffer first (a host that stops reading then stalls the
  // target's sends early). Every send and receive gives up after `timeout`.
  explicit RawConnection(uint16_t port, int rcvbuf = 0,
                         std::chrono::seconds timeout = std::chrono::seconds(5));
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  // False unless all `n` bytes were sent.
  bool send(const void* p, size_t n);
  // One whole PDU of at most 4 MiB; empty on EOF, error or timeout.
  std::vector<uint8_t> recv_pdu();
  // True once the target has closed the connection (EOF or reset), reading
  // and dropping whatever it sent before; false if it is still open after
  // `wait`.
  bool closed_by_peer(std::chrono::seconds wait = std::chrono::seconds(30));
  // ICReq; returns the ICResp (empty if none came).
  std::vector<uint8_t> handshake();
  // A command capsule, with `data` in the capsule.
  bool capsule(const Sqe& sqe, const std::vector<uint8_t>& data = {});
  // Fabrics Connect of queue `qid` to `subnqn` as `hostnqn`; returns the
  // controller id, or 0xFFFF with the status in last_status().
  uint16_t connect(uint16_t qid, const std::string& subnqn, const std::string& hostnqn,
                   uint16_t cntlid = 0xFFFF, uint32_t kato_ms = 0, uint16_t sqsize = 31);
  uint16_t last_status() const { return status_; }
  uint32_t last_dw0() const { return dw0_; }  // the last Connect's result

  // A command whose data (if any) is described by one SGL descriptor.
  static Sqe base_sqe(uint8_t opc, uint16_t cid, uint8_t sgl_type, uint32_t sgl_len);
  // Fabrics Property Set of CC = 0x460001 (EN, 64-byte SQEs, 16-byte CQEs):
  // enables the controller of an admin queue.
  static Sqe enable_sqe(uint16_t cid);
  // An I/O command on namespace 1 at `slba` for `nlb` blocks, data by
  // transport (C2HData for a read, R2T for a write).
  static Sqe io_sqe(uint8_t opc, uint16_t cid, uint64_t slba, uint32_t nlb, uint32_t bytes);

 private:
  bool recv_exact(uint8_t* p, size_t n);

  int fd_ = -1;
  bool connected_ = false;
  uint16_t status_ = 0;
  uint32_t dw0_ = 0;
};

}  // namespace kvtier::nvmf
