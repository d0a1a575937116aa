// libFuzzer target: RAID assembly from members whose superblocks and
// bitmaps an attacker wrote. A template array of each level is created once;
// every input copies its member images, overwrites superblock fields of the
// members it picks (re-encoded with a valid checksum, so the geometry checks
// are what is exercised, not the CRC) and bitmap bytes, then assembles and,
// if that succeeds, reads the first and last blocks. Any crash, sanitizer
// report or allocation past -malloc_limit_mb is a finding.
//
// Input: [level selector][member mask] then records of
// [field id][8 bytes little-endian value]; field ids past the superblock's
// fields overwrite bitmap bytes instead.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "blk/dev/mem_device.h"
#include "blk/raid/raid_array.h"
#include "blk/testing/test_util.h"

namespace {

using namespace kvtier;       // NOLINT
using namespace kvtier::blk;  // NOLINT

constexpr uint64_t kMemberBytes = 2ull << 20;
constexpr uint32_t kBlock = 512;

struct Template {
  std::vector<std::vector<std::byte>> images;
};

Template make_template(RaidLevel level, size_t n, uint32_t copies) {
  auto mems = blk::testing::mem_members(n, kMemberBytes, kBlock);
  const auto members = blk::testing::as_devices(mems);
  RaidOptions o;
  o.level = level;
  o.strip_bytes = 4096;
  o.copies = copies;
  RaidRuntimeOptions rt;
  rt.workers = 1;
  { auto a = RaidArray::create(members, o, rt); }
  Template t;
  for (auto& m : mems) t.images.emplace_back(m->raw().begin(), m->raw().end());
  return t;
}

const std::vector<Template>& templates() {
  static const std::vector<Template> t = {
      make_template(RaidLevel::kRaid5, 3, 0), make_template(RaidLevel::kRaid6, 4, 0),
      make_template(RaidLevel::kRaid1, 2, 0), make_template(RaidLevel::kRaid10, 4, 2)};
  return t;
}

void set_field(RaidSuperblock& s, uint8_t id, uint64_t v) {
  switch (id % 14) {
    case 0:
      s.level = static_cast<uint32_t>(v);
      break;
    case 1:
      s.member_count = static_cast<uint32_t>(v);
      break;
    case 2:
      s.member_index = static_cast<uint32_t>(v);
      break;
    case 3:
      s.block_size = static_cast<uint32_t>(v);
      break;
    case 4:
      s.copies = static_cast<uint32_t>(v);
      break;
    case 5:
      s.strip_bytes = v;
      break;
    case 6:
      s.data_offset = v;
      break;
    case 7:
      s.rows = v;
      break;
    case 8:
      s.bitmap_offset = v;
      break;
    case 9:
      s.bitmap_area_bytes = v;
      break;
    case 10:
      s.rows_per_bit = v;
      break;
    case 11:
      s.recovery_row = v;
      break;
    case 12:
      s.event = v;
      break;
    default:
      s.states[v % kRaidMaxMembers] = static_cast<MemberState>(v % 4);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Template& t = templates()[data[0] % templates().size()];
  const uint8_t mask = data[1];
  std::vector<std::shared_ptr<MemDevice>> mems;
  for (const auto& img : t.images) {
    auto m = std::make_shared<MemDevice>(kMemberBytes, kBlock);
    std::memcpy(m->raw().data(), img.data(), img.size());
    mems.push_back(std::move(m));
  }
  for (size_t i = 0; i < mems.size(); ++i) {
    if (!((mask >> i) & 1)) continue;
    auto sb = RaidArray::read_superblock(*mems[i]);
    if (!sb.ok()) continue;
    for (size_t off = 2; off + 9 <= size; off += 9) {
      const uint8_t id = data[off];
      uint64_t v = 0;
      std::memcpy(&v, data + off + 1, 8);
      if (id < 128) {
        set_field(*sb, id, v);
      } else {
        // A bitmap byte (the area follows the superblock).
        auto raw = mems[i]->raw();
        raw[(kRaidSuperblockBytes + v % 8192) % raw.size()] = static_cast<std::byte>(id);
      }
    }
    AlignedBuffer buf(kRaidSuperblockBytes, 4096);
    sb->encode(buf.view());
    std::memcpy(mems[i]->raw().data(), buf.data(), kRaidSuperblockBytes);
  }
  std::vector<std::shared_ptr<BlockDevice>> devs(mems.begin(), mems.end());
  RaidRuntimeOptions rt;
  rt.workers = 1;
  auto a = RaidArray::assemble(devs, rt);
  if (a.ok() && (*a)->capacity() >= kBlock) {
    AlignedBuffer out(kBlock, 4096);
    (void)(*a)->read_sync(0, out.view());
    (void)(*a)->read_sync((*a)->capacity() - kBlock, out.view());
  }
  return 0;
}
