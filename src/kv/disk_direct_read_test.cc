// Direct cold reads (format version 2): the payload goes from the device
// straight into a page-aligned caller buffer, is verified there, and a read
// past its deadline never writes the buffer after the get has returned.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "blk/dev/mem_device.h"
#include "blk/dev/uring_device.h"
#include "blk/raid/raid0.h"
#include "blk/stack/faulty_device.h"
#include "blk/stack/partition.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "kv/store.h"
#include "kv/test_payload.h"
#include "kv/testing/raw_volume.h"
#include "kv/testing/small_store.h"

namespace kvtier::kv {
namespace {

using kvtier::testing::eventually;

constexpr uint32_t kObj = 64 << 10;

Namespace direct_namespace() { return test_namespace("direct-model"); }

StoreOptions direct_options(std::shared_ptr<blk::BlockDevice> volume) {
  StoreOptions o = testing::small_store_options(std::move(volume), 0, kObj);
  // No RAM tier: every get is a cold disk read.
  o.disk.read_depth = 4;
  o.disk.direct_reads = DiskTierOptions::DirectReads::kAlways;
  return o;
}

// Direct reads where the volume's capabilities allow them.
StoreOptions auto_direct_options(std::shared_ptr<blk::BlockDevice> volume) {
  StoreOptions o = direct_options(std::move(volume));
  o.disk.direct_reads = DiskTierOptions::DirectReads::kAuto;
  return o;
}

struct Opened {
  std::unique_ptr<Store> store;
  uint16_t ns = 0;
  explicit Opened(const StoreOptions& o) : store(testing::open_store(o)) {
    ns = *store->register_namespace(direct_namespace());
  }
  void put(uint64_t i, uint32_t len) {
    AlignedBuffer b(len);
    fill_payload(test_key(i), b.view());
    auto r = store->put(ns, test_key(i), b.view());
    ASSERT_TRUE(r.ok() && r->stored()) << i;
  }
  // Fills the open region so the blocks put so far are read from the device,
  // not from a region buffer, then flushes.
  void push_to_device() {
    for (uint64_t i = 0; i < 20; ++i) put(1000 + i, kObj);
    ASSERT_TRUE(store->flush().ok());
  }
  uint64_t direct_reads() const { return store->local_stats().disk.direct_reads; }
};

TEST(DiskDirectRead, AlignedBufferGetsThePayloadWithoutStaging) {
  Opened s(direct_options(std::make_shared<blk::MemDevice>(32 << 20)));
  // Whole pages, a partial last page, and less than a page (always staged).
  const uint32_t lens[] = {kObj, kObj - 100, 4096 + 1, 4096, 1000};
  for (uint64_t i = 0; i < 5; ++i) s.put(i, lens[i]);
  s.push_to_device();
  for (uint64_t i = 0; i < 5; ++i) {
    AlignedBuffer out(kObj + 4096);
    std::memset(out.data(), 0xEE, out.size());
    const uint64_t before = s.direct_reads();
    auto g = s.store->get(s.ns, test_key(i), out.view());
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(g->hit) << i;
    EXPECT_EQ(g->length, lens[i]);
    EXPECT_TRUE(payload_matches(test_key(i), ByteView(out.data(), lens[i]))) << i;
    // Nothing past the payload is written, not even the page padding.
    for (size_t b = lens[i]; b < out.size(); ++b) {
      ASSERT_EQ(out.data()[b], std::byte{0xEE}) << "block " << i << " byte " << b;
    }
    EXPECT_EQ(s.direct_reads() - before, lens[i] >= 4096 ? 1u : 0u) << i;
  }
}

// On a real O_DIRECT file: a direct get is one device request (header page,
// payload and partial last page in one vectored read), and the bytes are right.
// A volume file for the tests that need a real io_uring device (removed
// with the object); `volume` stays null where O_DIRECT is not supported.
struct UringVolume {
  std::filesystem::path dir;
  std::shared_ptr<blk::UringDevice> volume;
  std::string skip;
  explicit UringVolume(const char* tag) {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
          (std::string("kvtier-") + tag + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    blk::UringOptions uo;
    uo.path = (dir / "vol").string();
    uo.create_size = 32 << 20;
    auto dev = blk::UringDevice::open(uo);
    if (!dev.ok() && dev.status().code() == StatusCode::kFailedPrecondition) {
      skip = dev.status().to_string();
      return;
    }
    EXPECT_TRUE(dev.ok()) << dev.status().to_string();
    if (dev.ok()) volume = std::move(dev).value();
  }
  ~UringVolume() {
    volume.reset();
    std::filesystem::remove_all(dir);
  }
};

// On a UringDevice the caller's pages are pinned for the read (so it can be
// given up at its deadline): the header and the partial last page are read
// into the tier's own buffer, the whole pages by a fixed-buffer read. Where
// pinning is refused (RLIMIT_MEMLOCK) it is one vectored request.
TEST(DiskDirectRead, OnUringDeviceADirectGetReadsThePagesIntoPinnedMemory) {
  UringVolume u("direct-readv");
  if (!u.skip.empty()) GTEST_SKIP() << u.skip;
  ASSERT_TRUE(u.volume);
  std::shared_ptr<blk::UringDevice> volume = u.volume;
  {
    Opened s(direct_options(volume));
    const uint32_t lens[] = {kObj, kObj - 100, 4096 + 1, 4096};
    for (uint64_t i = 0; i < 4; ++i) s.put(i, lens[i]);
    s.push_to_device();
    for (uint64_t i = 0; i < 4; ++i) {
      AlignedBuffer out(kObj);
      const uint64_t direct_before = s.direct_reads();
      const uint64_t dev_before = volume->stats().reads;
      const uint64_t fixed_before = volume->fixed_buffer_ios();
      auto g = s.store->get(s.ns, test_key(i), out.view());
      ASSERT_TRUE(g.ok());
      ASSERT_TRUE(g->hit) << i;
      EXPECT_EQ(g->length, lens[i]);
      EXPECT_TRUE(payload_matches(test_key(i), ByteView(out.data(), lens[i]))) << i;
      EXPECT_EQ(s.direct_reads() - direct_before, 1u) << i;
      const uint64_t fixed = volume->fixed_buffer_ios() - fixed_before;
      const uint64_t requests = volume->stats().reads - dev_before;
      if (fixed == 1) {
        EXPECT_EQ(requests, lens[i] % 4096 ? 3u : 2u) << "device requests for entry " << i;
      } else {
        EXPECT_EQ(fixed, 0u);
        EXPECT_EQ(requests, 1u) << "device requests for entry " << i;
      }
    }
  }
}

TEST(DiskDirectRead, UnalignedBufferFallsBackToStaging) {
  Opened s(direct_options(std::make_shared<blk::MemDevice>(32 << 20)));
  s.put(1, kObj);
  s.push_to_device();
  AlignedBuffer out(kObj + 4096);
  auto g = s.store->get(s.ns, test_key(1), out.subview(16, kObj));
  ASSERT_TRUE(g.ok() && g->hit);
  EXPECT_TRUE(payload_matches(test_key(1), ByteView(out.data() + 16, kObj)));
  EXPECT_EQ(s.direct_reads(), 0u);
  EXPECT_EQ(s.store->local_stats().disk.reads, 1u);
}

TEST(DiskDirectRead, NeverUsedOnUserSpaceDevicesByDefault) {
  auto o = direct_options(std::make_shared<blk::MemDevice>(32 << 20));
  o.disk.direct_reads = DiskTierOptions::DirectReads::kAuto;
  Opened s(o);
  s.put(1, kObj);
  s.push_to_device();
  AlignedBuffer out(kObj);
  auto g = s.store->get(s.ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok() && g->hit);
  EXPECT_EQ(s.direct_reads(), 0u);
}

TEST(DiskDirectRead, CorruptPayloadIsVerifiedInPlaceAndDropped) {
  auto mem = std::make_shared<blk::MemDevice>(32 << 20);
  Opened s(direct_options(mem));
  s.put(1, kObj);
  s.push_to_device();
  // Flip one payload byte on the volume.
  const Key128 k = test_key(1);
  auto raw = mem->raw();
  const auto entries = testing::entry_offsets(raw, k);
  ASSERT_FALSE(entries.empty());
  for (size_t off : entries) raw[off + disk::kPayloadOffset + 777] ^= std::byte{0x04};
  AlignedBuffer out(kObj);
  auto g = s.store->get(s.ns, k, out.view());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, MissReason::kCorrupt);
  EXPECT_EQ(s.direct_reads(), 1u);
  EXPECT_EQ(s.store->local_stats().disk.read_corrupt, 1u);
  g = s.store->get(s.ns, k, out.view());  // dropped: now simply absent
  EXPECT_EQ(g->miss, MissReason::kNotFound);
}

// A get into memory a client can see (its shared-memory area) never lets
// the device write there: a corrupt payload is caught in a staging buffer and
// the client's bytes are untouched; a plain get of the same damage shows why
// (the direct read lands the unverified bytes in the caller's buffer first).
TEST(DiskDirectRead, SharedBuffersNeverHoldUnverifiedBytes) {
  auto mem = std::make_shared<blk::MemDevice>(32 << 20);
  Opened s(direct_options(mem));
  s.put(1, kObj);
  s.put(2, kObj);
  s.push_to_device();
  auto raw = mem->raw();
  int flipped = 0;
  for (size_t off = 0; off + sizeof(disk::EntryHeader) <= raw.size(); off += disk::kPageBytes) {
    disk::EntryHeader h;
    std::memcpy(&h, raw.data() + off, sizeof(h));
    for (uint64_t i : {1, 2}) {
      const Key128 k = test_key(i);
      if (h.magic == disk::kEntryMagic && h.key_hi == k.hi && h.key_lo == k.lo) {
        raw[off + disk::kPayloadOffset + 777] ^= std::byte{0x04};
        ++flipped;
      }
    }
  }
  ASSERT_EQ(flipped, 2);
  AlignedBuffer shared(kObj);
  std::memset(shared.data(), 0xEE, shared.size());
  auto g = s.store->get_into_shared(s.ns, test_key(1), shared.view());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->miss, MissReason::kCorrupt);
  EXPECT_EQ(s.direct_reads(), 0u);
  size_t untouched = 0;
  for (size_t b = 0; b < shared.size(); ++b) untouched += shared.data()[b] == std::byte{0xEE};
  EXPECT_EQ(untouched, shared.size()) << "unverified bytes reached the shared buffer";
  // The same damage through a direct read does reach a private buffer.
  AlignedBuffer mine(kObj);
  std::memset(mine.data(), 0xEE, mine.size());
  g = s.store->get(s.ns, test_key(2), mine.view());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->miss, MissReason::kCorrupt);
  EXPECT_EQ(s.direct_reads(), 1u);
  EXPECT_NE(mine.data()[0], std::byte{0xEE});
}

// A direct read whose device hangs past the deadline is a timeout, but the
// get returns only when the device has let go of the buffer; meanwhile other
// reads are staged, so they can still give up at their own deadline.
TEST(DiskDirectRead, TimedOutDirectReadNeverWritesTheBufferAfterReturning) {
  auto mem = std::make_shared<blk::MemDevice>(32 << 20);
  auto faulty = std::make_shared<blk::FaultyDevice>(mem);
  auto o = direct_options(faulty);
  o.io_timeout_ms = 100;
  Opened s(o);
  for (uint64_t i = 0; i < 4; ++i) s.put(i, kObj);
  s.push_to_device();

  faulty->set_hang(true);  // an hour: only release_hung() below lets it answer
  AlignedBuffer first(kObj);
  GetResult first_result;
  std::atomic<bool> first_returned{false};
  std::thread reader([&] {
    auto g = s.store->get(s.ns, test_key(1), first.view());
    ASSERT_TRUE(g.ok());
    first_result = *g;
    first_returned = true;
    // Handed back: from now on the buffer is the caller's alone.
    std::memset(first.data(), 0x5A, first.size());
  });
  // The first read reaches the device and passes its deadline.
  EXPECT_TRUE(eventually([&] { return s.store->local_stats().disk.direct_overdue_now == 1; }));
  AlignedBuffer second(kObj);
  auto g2 = s.store->get(s.ns, test_key(2), second.view());
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->miss, MissReason::kTimeout)
      << "a read started while another is overdue must be abandonable";
  EXPECT_FALSE(first_returned) << "returned while the device still owned the buffer";
  EXPECT_EQ(s.direct_reads(), 1u);  // the second read was staged
  faulty->set_hang(false);
  faulty->release_hung();
  reader.join();
  EXPECT_FALSE(first_result.hit);
  EXPECT_EQ(first_result.miss, MissReason::kTimeout);
  EXPECT_TRUE(eventually([&] { return faulty->pending_delayed() == 0; }));
  for (size_t b = 0; b < first.size(); ++b) ASSERT_EQ(first.data()[b], std::byte{0x5A}) << b;
  // The device is back: direct reads again.
  auto g3 = s.store->get(s.ns, test_key(3), first.view());
  ASSERT_TRUE(g3.ok() && g3->hit);
  EXPECT_TRUE(payload_matches(test_key(3), first.view()));
  EXPECT_EQ(s.direct_reads(), 2u);
}

// A direct read on a device that pins the caller's pages is given up at its
// deadline like a staged one: the get returns a timeout miss while the
// device still holds the read, the caller's range is fresh memory from then
// on, and the device's late answer neither writes it nor drops the block.
TEST(DiskDirectRead, PinnedDirectReadIsGivenUpAtItsDeadline) {
  UringVolume u("direct-revoke");
  if (!u.skip.empty()) GTEST_SKIP() << u.skip;
  ASSERT_TRUE(u.volume);
  auto faulty = std::make_shared<blk::FaultyDevice>(u.volume);
  auto o = direct_options(faulty);
  o.io_timeout_ms = 100;
  Opened s(o);
  for (uint64_t i = 0; i < 4; ++i) s.put(i, kObj);
  s.push_to_device();
  // Pinning needs locked-memory room; without it the read is not direct.
  AlignedBuffer probe(kObj);
  auto pin = u.volume->register_buffer(probe.view());
  if (!pin.ok()) GTEST_SKIP() << "cannot pin buffers here: " << pin.status().to_string();
  ASSERT_TRUE(u.volume->unregister_buffer(*pin).ok());

  // Held for an hour: only giving the read up can let the get return.
  faulty->set_hang(true);
  AlignedBuffer first(kObj);
  std::memset(first.data(), 0x11, first.size());
  auto g = s.store->get(s.ns, test_key(1), first.view());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, MissReason::kTimeout);
  EXPECT_EQ(s.direct_reads(), 1u);
  EXPECT_GT(faulty->fault_counters().hung, 0u) << "the device still holds the read";
  // The range is the caller's again: fresh zero pages, whatever the device did.
  for (size_t b = 0; b < first.size(); ++b) ASSERT_EQ(first.data()[b], std::byte{0}) << b;
  std::memset(first.data(), 0x5A, first.size());
  // While that read is overdue, others are staged.
  AlignedBuffer second(kObj);
  auto g2 = s.store->get(s.ns, test_key(2), second.view());
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->miss, MissReason::kTimeout);
  EXPECT_EQ(s.direct_reads(), 1u);

  faulty->set_hang(false);
  faulty->release_hung();
  for (int i = 0; i < 2000 && s.store->local_stats().disk.direct_revoked == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.store->local_stats().disk.direct_revoked, 1u);
  for (size_t b = 0; b < first.size(); ++b) ASSERT_EQ(first.data()[b], std::byte{0x5A}) << b;
  // Nothing was dropped, and with the device back reads are direct again.
  EXPECT_EQ(s.store->local_stats().disk.read_corrupt, 0u);
  auto g3 = s.store->get(s.ns, test_key(1), first.view());
  ASSERT_TRUE(g3.ok() && g3->hit);
  EXPECT_TRUE(payload_matches(test_key(1), first.view()));
  EXPECT_EQ(s.direct_reads(), 2u);
}

// The direct path is chosen by what the device offers, not by its class: a
// partition of an io_uring file forwards the file's direct reads and gets
// them under kAuto; a RAID0 of io_uring files declines them (raid0.cc) and
// stages, into buffers registered with its members.
TEST(DiskDirectRead, ChosenByCapabilitiesNotByDeviceClass) {
  UringVolume a("direct-caps-a"), b("direct-caps-b");
  if (!a.skip.empty()) GTEST_SKIP() << a.skip;
  ASSERT_TRUE(a.volume && b.volume);
  if (!a.volume->capabilities().registered_buffers) GTEST_SKIP() << "no registered buffers here";
  AlignedBuffer out(kObj);
  {
    auto part = blk::Partition::create(a.volume, 0, 16 << 20, "p");
    ASSERT_TRUE(part.ok()) << part.status().to_string();
    Opened s(auto_direct_options(std::move(part).value()));
    s.put(1, kObj);
    s.push_to_device();
    auto g = s.store->get(s.ns, test_key(1), out.view());
    ASSERT_TRUE(g.ok() && g->hit);
    EXPECT_TRUE(payload_matches(test_key(1), ByteView(out.data(), kObj)));
    const auto disk = s.store->local_stats().disk;
    // Direct, or staged only because the kernel refused to pin the pages.
    EXPECT_EQ(disk.direct_reads + disk.direct_unpinned, 1u);
  }
  auto raid = blk::Raid0::create({a.volume, b.volume}, 64 << 10);
  ASSERT_TRUE(raid.ok()) << raid.status().to_string();
  Opened m(auto_direct_options(std::move(raid).value()));
  m.put(1, kObj);
  m.push_to_device();
  const uint64_t fixed_before = a.volume->fixed_buffer_ios() + b.volume->fixed_buffer_ios();
  auto g = m.store->get(m.ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok() && g->hit);
  EXPECT_TRUE(payload_matches(test_key(1), ByteView(out.data(), kObj)));
  EXPECT_EQ(m.direct_reads(), 0u);
  EXPECT_EQ(m.store->local_stats().disk.direct_unpinned, 0u);
  // The staged read went into a buffer registered with the members.
  EXPECT_GT(a.volume->fixed_buffer_ios() + b.volume->fixed_buffer_ios(), fixed_before);
}

}  // namespace
}  // namespace kvtier::kv
