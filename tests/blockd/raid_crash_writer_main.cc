// kvtier_raid_crash_writer: the victim process of raid_crash_test.cc. It
// creates (or assembles) a RAID5/RAID6 array over member files opened with
// O_DIRECT and writes random partial and full stripes from several threads
// at once, forever, never flushing. It prints "ready" once the array is up;
// the test SIGKILLs it mid-write and then assembles the members itself.
//
// Usage: kvtier_raid_crash_writer LEVEL(5|6) MEMBERS DIR MEMBER_BYTES STRIP SEED
// Exit codes: 2 bad usage, 3 open/create failed, 4 a write failed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "blk/dev/uring_device.h"
#include "blk/raid/raid_array.h"
#include "common/buffer.h"

using namespace kvtier;  // NOLINT

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s LEVEL MEMBERS DIR MEMBER_BYTES STRIP SEED\n", argv[0]);
    return 2;
  }
  const int level = std::atoi(argv[1]);
  const int n = std::atoi(argv[2]);
  const std::string dir = argv[3];
  const uint64_t member_bytes = std::strtoull(argv[4], nullptr, 10);
  const uint64_t strip = std::strtoull(argv[5], nullptr, 10);
  const uint64_t seed = std::strtoull(argv[6], nullptr, 10);
  std::vector<std::shared_ptr<blk::BlockDevice>> members;
  for (int i = 0; i < n; ++i) {
    blk::UringOptions o;
    o.path = dir + "/member" + std::to_string(i);
    o.create_size = member_bytes;
    auto d = blk::UringDevice::open(o);
    if (!d.ok() && d.status().code() == StatusCode::kFailedPrecondition) {
      o.direct = false;  // a filesystem without O_DIRECT (tmpfs)
      d = blk::UringDevice::open(o);
    }
    if (!d.ok()) {
      std::fprintf(stderr, "open %s: %s\n", o.path.c_str(), d.status().message().c_str());
      return 3;
    }
    members.push_back(std::move(*d));
  }
  blk::RaidOptions ro;
  ro.level = level == 6 ? blk::RaidLevel::kRaid6 : blk::RaidLevel::kRaid5;
  ro.strip_bytes = strip;
  ro.name = "crash";
  // Later lives assemble what the earlier ones left (and resync it).
  auto array = blk::RaidArray::read_superblock(*members[0]).ok()
                   ? blk::RaidArray::assemble(members)
                   : blk::RaidArray::create(members, ro);
  if (!array.ok()) {
    std::fprintf(stderr, "create: %s\n", array.status().message().c_str());
    return 3;
  }
  std::shared_ptr<blk::RaidArray> a = std::move(*array);
  std::printf("ready %llu\n", static_cast<unsigned long long>(a->capacity()));
  std::fflush(stdout);
  // Several writers keep many stripes in flight, so a kill lands mid-stripe.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([a, t, seed, strip] {
      std::mt19937_64 rng(seed * 31 + t);
      const uint64_t bs = a->block_size();
      const uint64_t blocks = a->capacity() / bs;
      AlignedBuffer buf(4 * strip * 4, 4096);
      for (;;) {
        const uint64_t len = (1 + rng() % (buf.size() / bs)) * bs;
        const uint64_t off = (rng() % (blocks - len / bs + 1)) * bs;
        for (uint64_t i = 0; i < len; i += 8) {
          const uint64_t v = rng();
          std::memcpy(buf.data() + i, &v, 8);
        }
        if (!a->write_sync(off, buf.subview(0, len)).ok()) std::_Exit(4);
      }
    });
  }
  for (auto& t : threads) t.join();
  return 0;
}
