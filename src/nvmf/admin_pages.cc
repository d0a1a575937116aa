// Identify data, discovery log and CAP, laid out as NVMe 1.3 / NVMe-oF 1.1 say.
#include "nvmf/admin_pages.h"

#include <algorithm>
#include <cstring>

#include "nvmf/pdu.h"

namespace kvtier::nvmf {
namespace {

void put_padded(uint8_t* dst, size_t width, const std::string& s, char pad = ' ') {
  std::memset(dst, pad, width);
  std::memcpy(dst, s.data(), std::min(width, s.size()));
}
void put_nqn(uint8_t* dst, const std::string& s) {  // 256 bytes, NUL-terminated
  std::memset(dst, 0, 256);
  std::memcpy(dst, s.data(), std::min<size_t>(255, s.size()));
}
uint8_t log2_u32(uint32_t v) {
  uint8_t r = 0;
  while (v > 1) v >>= 1, ++r;
  return r;
}

}  // namespace

uint64_t capabilities(const TargetConfig& cfg) {
  uint64_t cap = (cfg.queue_depth - 1) & 0xFFFF;  // MQES, 0's based
  cap |= 1ull << 16;                              // CQR: contiguous queues required
  cap |= 10ull << 24;                             // TO: 5 s in 500 ms units
  cap |= 1ull << 37;                              // CSS: NVM command set
  return cap;                                     // MPSMIN = MPSMAX = 0 (4 KiB), CRMS = 0
}

std::vector<uint8_t> identify_controller(const TargetConfig& cfg, const Controller& c) {
  std::vector<uint8_t> d(kIdentifySize, 0);
  uint8_t* p = d.data();
  put16(p + 0, 0x1b36);  // VID (generic)
  put16(p + 2, 0x1b36);
  put_padded(p + 4, 20, c.subsystem ? c.subsystem->config.serial : std::string("discovery"));
  put_padded(p + 24, 40, "kvtier");
  put_padded(p + 64, 8, "0.1");
  p[72] = 6;                                  // RAB
  p[77] = log2_u32(cfg.max_transfer / 4096);  // MDTS in 4 KiB pages
  put16(p + 78, c.cntlid);                    // CNTLID
  put32(p + 80, kNvmeVersion);                // VER
  p[111] = c.is_discovery() ? 2 : 1;          // CNTRLTYPE
  p[258] = 3;                                 // ACL
  p[259] = 3;                                 // AERL
  p[261] = 0x04;                              // LPA: extended data for Get Log Page
  p[262] = 0;                                 // ELPE
  put16(p + 320, 1);                          // KAS: 100 ms granularity
  p[512] = 0x66;                              // SQES
  p[513] = 0x44;                              // CQES
  put16(p + 514, uint16_t(cfg.queue_depth));  // MAXCMD
  if (!c.is_discovery()) {
    put32(p + 516, uint32_t(c.subsystem->config.namespaces.size()));  // NN
    put16(p + 520, (1u << 2) | (1u << 3));  // ONCS: Dataset Management, Write Zeroes
    p[525] = 0x01;                          // VWC present (Flush is meaningful)
  }
  put32(p + 536, 0x1 | (1u << 20));  // SGLS: supported (byte aligned), offset addressing
  put_nqn(p + 768, c.is_discovery() ? std::string(kDiscoveryNqn) : c.subsystem->config.nqn);
  // NVMe-oF attributes.
  put32(p + 1792, (kSqeSize + cfg.in_capsule_data) / 16);  // IOCCSZ
  put32(p + 1796, 1);                                      // IORCSZ
  put16(p + 1800, 0);                                      // ICDOFF
  p[1803] = 1;                                             // MSDBD
  return d;
}

std::vector<uint8_t> identify_namespace(const Subsystem& s, uint32_t nsid) {
  std::vector<uint8_t> d(kIdentifySize, 0);
  uint8_t* p = d.data();
  const auto& dev = *s.config.namespaces[nsid - 1];
  const uint64_t blocks = dev.capacity() / dev.block_size();
  put64(p + 0, blocks);                                 // NSZE
  put64(p + 8, blocks);                                 // NCAP
  put64(p + 16, blocks);                                // NUSE
  p[24] = 0;                                            // NSFEAT
  p[25] = 0;                                            // NLBAF: one format
  p[26] = 0;                                            // FLBAS: format 0
  std::memcpy(p + 104, s.nguids[nsid - 1].data(), 16);  // NGUID
  p[128 + 2] = log2_u32(dev.block_size());              // LBAF0.LBADS
  return d;
}

std::vector<uint8_t> active_namespace_list(const Subsystem& s, uint32_t above) {
  std::vector<uint8_t> d(kIdentifySize, 0);
  uint32_t n = 0;
  for (uint32_t id = 1; id <= s.config.namespaces.size() && n < 1024; ++id) {
    if (id > above) put32(d.data() + 4 * n++, id);
  }
  return d;
}

std::vector<uint8_t> namespace_descriptors(const Subsystem& s, uint32_t nsid) {
  std::vector<uint8_t> d(kIdentifySize, 0);
  d[0] = 2;   // NIDT: NGUID
  d[1] = 16;  // NIDL
  std::memcpy(d.data() + 4, s.nguids[nsid - 1].data(), 16);
  return d;
}

std::vector<uint8_t> discovery_log(const TargetState& st, const std::string& hostnqn,
                                   uint64_t generation) {
  std::vector<const Subsystem*> visible;
  for (const auto& s : st.subsystems())
    if (s.host_allowed(hostnqn)) visible.push_back(&s);
  std::vector<uint8_t> d(1024 * (1 + visible.size()), 0);
  put64(d.data(), generation);
  put64(d.data() + 8, visible.size());
  for (size_t i = 0; i < visible.size(); ++i) {
    uint8_t* e = d.data() + 1024 * (i + 1);
    e[0] = 3;              // TRTYPE: TCP
    e[1] = 1;              // ADRFAM: IPv4
    e[2] = 2;              // SUBTYPE: NVM subsystem
    e[3] = 2;              // TREQ: secure channel not required
    put16(e + 4, 1);       // PORTID
    put16(e + 6, 0xFFFF);  // CNTLID: dynamic
    put16(e + 8, 32);      // ASQSZ
    put_padded(e + 32, 32, std::to_string(st.config().port));
    put_nqn(e + 256, visible[i]->config.nqn);
    put_padded(e + 512, 256, st.config().address);
    e[768] = 0;  // TSAS.SECTYPE: none
  }
  return d;
}

}  // namespace kvtier::nvmf
