// Crash consistency with a real process: kvtier_crash_writer writes blocks to
// a Store on an O_DIRECT file and is SIGKILLed in the middle of its write
// load; the volume is then reopened in this process. No corrupt or stale
// block may ever be served, and every block the writer reported flushed
// before the kill (nothing is evicted in these tests) must be found again.
//
// Set KVTIER_CRASH_SEED to replay the kill timing of a failed run (the seed
// is printed at the start of each test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "blk/dev/uring_device.h"
#include "common/crc32c.h"
#include "common/testing/temp_dir.h"
#include "kv/disk_format.h"
#include "kv/store.h"
#include "kv/test_payload.h"

#ifndef KVTIER_CRASH_WRITER
#error "KVTIER_CRASH_WRITER must name the kvtier_crash_writer binary"
#endif

namespace kvtier::kv {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Geometry shared with the writer: the volume must be reopened exactly as it
// was written or it is reformatted. 256 MiB of 4 MiB regions is ~60 regions;
// each life writes a few MiB, so nothing is ever evicted.
constexpr uint64_t kVolumeBytes = 256ull << 20;
constexpr uint32_t kObj = 64 << 10;
constexpr uint64_t kRamBytes = 16ull * kObj;   // small: most blocks are demoted
constexpr uint64_t kRegionBytes = 4ull << 20;  // crash_writer_main.cc's default
// Flush intervals of the lives, in blocks: short ones make the kill land
// mostly in a flush, long ones mostly between flushes (puts, demotions and
// sealed-region writes).
constexpr uint64_t kFlushEvery[] = {24, 160, 64};
// The most blocks one life may write; also how far past the last reported
// flush the checks look for blocks that made it to disk anyway.
constexpr uint64_t kMaxBlocksPerLife = 3000;
// Lives write disjoint key ranges.
constexpr uint64_t kLifeStride = 1000000;

// Must match crash_writer_main.cc.
uint32_t block_length(uint64_t i, uint32_t max) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  if (h % 4 == 0) return max;
  return static_cast<uint32_t>(1 + (h >> 8) % max);
}

Namespace crash_namespace() { return test_namespace("crash-test-model"); }

// One run of kvtier_crash_writer with its stdout on a pipe.
class WriterProcess {
 public:
  WriterProcess() = default;
  WriterProcess(const WriterProcess&) = delete;
  WriterProcess& operator=(const WriterProcess&) = delete;
  ~WriterProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Starts the writer for blocks start, start+1, ...
  void start(const std::string& volume, uint64_t start, uint64_t flush_every) {
    std::vector<std::string> args = {
        KVTIER_CRASH_WRITER,          volume,
        std::to_string(kVolumeBytes), std::to_string(kObj),
        std::to_string(kRamBytes),    std::to_string(start),
        std::to_string(flush_every),  std::to_string(kMaxBlocksPerLife),
        std::to_string(kRegionBytes)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0) << std::strerror(errno);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0) << "fork: " << std::strerror(errno);
    if (pid_ == 0) {
      // Child: async-signal-safe calls only.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      if (::dup2(p[1], STDOUT_FILENO) < 0) ::_exit(126);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(p[1]);
    fd_ = p[0];
  }

  // Waits for the next complete line from the writer; nullopt on EOF or at
  // the deadline.
  std::optional<std::string> next_line(Clock::time_point deadline) {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      if (eof_) return std::nullopt;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd pfd{fd_, POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return std::nullopt;
      char tmp[4096];
      ssize_t n = ::read(fd_, tmp, sizeof(tmp));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof_ = true;
        continue;
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  // SIGKILLs the writer and reaps it. Returns a description of how it ended
  // when that was not our SIGKILL (it died on its own).
  std::string kill_and_reap() {
    std::string how;
    int status = 0;
    // Did it already exit?
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      r = ::waitpid(pid_, &status, 0);
      if (r == pid_ && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        how = "ended with status " + std::to_string(status);
      }
    } else if (r == pid_) {
      how = WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                              : "died of signal " + std::to_string(WTERMSIG(status));
    } else {
      how = std::string("waitpid failed: ") + std::strerror(errno);
    }
    pid_ = -1;
    return how;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
};

// What one life of the writer reported.
struct Life {
  uint64_t start = 0;
  uint64_t flushed = 0;  // blocks [start, flushed) were reported durable
  int flush_lines = 0;
  bool stopped = false;  // printed "full" or "done": it was not writing when killed
  std::string ready;
};

// Runs the writer on `volume` from block `start` until it has reported
// `min_flushes` flushes, lets it write on for a random moment, SIGKILLs it,
// and collects every flush it reported before it died.
void run_and_kill(const std::string& volume, uint64_t start, uint64_t flush_every, int min_flushes,
                  std::mt19937_64& rng, Life* life) {
  life->start = start;
  life->flushed = start;
  WriterProcess w;
  ASSERT_NO_FATAL_FAILURE(w.start(volume, start, flush_every));
  auto handle = [&](const std::string& line) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "flushed") {
      uint64_t n = 0;
      in >> n;
      EXPECT_GE(n, life->flushed) << "flush counts must not go backwards";
      life->flushed = std::max(life->flushed, n);
      ++life->flush_lines;
    } else if (word == "full" || word == "done") {
      life->stopped = true;
    } else if (word == "ready") {
      life->ready = line;
    }
  };
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (life->flush_lines < min_flushes && !life->stopped) {
    auto line = w.next_line(deadline);
    if (!line) break;
    handle(*line);
  }
  ASSERT_GE(life->flush_lines, min_flushes) << "the writer did not report " << min_flushes
                                            << " flushes in time (" << w.kill_and_reap() << ")";
  // Let it write on for a random moment: anywhere from right after the flush
  // to a few flush intervals later, so the kill lands in puts, demotions,
  // region writes or the flush itself.
  std::uniform_int_distribution<int> pause_us(0, 40000);
  std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
  const std::string how = w.kill_and_reap();
  EXPECT_EQ(how, "") << "the writer was supposed to be killed while writing";
  // Lines already in the pipe were written before the kill: those flushes
  // completed before it.
  while (auto line = w.next_line(Clock::now() + std::chrono::seconds(5))) handle(*line);
  EXPECT_FALSE(life->stopped) << "the writer stopped writing before the kill (volume full or "
                                 "block limit reached); the test is sized wrong";
}

StoreOptions verify_options(const std::string& volume) {
  blk::UringOptions uo;
  uo.path = volume;
  uo.direct = true;  // no create_size: the writer made the file
  auto dev = blk::UringDevice::open(uo);
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  StoreOptions o;
  o.ram_bytes = kRamBytes;
  o.max_object_bytes = kObj;
  if (dev.ok()) o.volume = std::shared_ptr<blk::BlockDevice>(std::move(dev).value());
  o.disk.region_bytes = kRegionBytes;
  o.disk.flush_chunk_bytes = 256u << 10;
  o.disk.format_if_invalid = false;  // a reformat would silently "lose" everything
  o.promote_on_disk_hit = false;     // checks only read
  o.io_timeout_ms = 10000;
  return o;
}

// The in-process reader of a volume the writer left behind.
struct Checker {
  std::unique_ptr<Store> store;
  uint16_t ns = 0;
  AlignedBuffer out{kObj};
  uint64_t wrong = 0;  // hits with wrong bytes or length

  void open(const std::string& volume) {
    auto s = Store::open(verify_options(volume));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store = std::move(s).value();
    auto h = store->register_namespace(crash_namespace());
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    ns = *h;
  }

  // Gets block i: a hit must carry exactly its bytes (counted in `wrong`
  // otherwise, and reported).
  GetResult get(uint64_t i) {
    auto r = store->get(ns, test_key(i), out.view());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    if (r->hit) {
      const uint32_t len = block_length(i, kObj);
      if (r->length != len || !payload_matches(test_key(i), ByteView(out.data(), r->length))) {
        if (++wrong <= 5) {
          ADD_FAILURE() << "block " << i << " served with wrong bytes (length " << r->length
                        << ", expected " << len << ", tier " << tier_name(r->tier) << ")";
        }
      }
    }
    return *r;
  }

  uint64_t misses(MissReason r) const {
    return store->local_stats().misses[static_cast<size_t>(r)];
  }
};

uint64_t seed_from_env() {
  if (const char* s = std::getenv("KVTIER_CRASH_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 0);
  }
  return std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
}

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dir_ = kvtier::testing::make_direct_io_dir("kvtier_crash_test", &why);
    if (dir_.empty()) GTEST_SKIP() << "no filesystem with O_DIRECT support found: " << why;
    volume_ = dir_ + "/volume.img";
    seed_ = seed_from_env();
    rng_.seed(seed_);
    std::printf("KVTIER_CRASH_SEED=%" PRIu64 "\n", seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  void TearDown() override {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  std::string dir_, volume_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// Three lives of the writer on one volume, each SIGKILLed mid-write. After
// each kill, every block any life reported flushed is found with its bytes,
// every other hit has the right bytes, and nothing found once is lost later.
TEST_F(CrashTest, SigkillMidWriteLosesNoFlushedBlockAndServesNoBadOne) {
  constexpr int kLives = 3;
  std::vector<Life> lives;
  std::set<uint64_t> found_before;     // every block found after the previous kill
  uint64_t entries_at_last_close = 0;  // what the previous check's checkpoint holds
  for (int k = 0; k < kLives; ++k) {
    SCOPED_TRACE("life " + std::to_string(k));
    Life life;
    ASSERT_NO_FATAL_FAILURE(run_and_kill(volume_, static_cast<uint64_t>(k) * kLifeStride,
                                         kFlushEvery[k], 3, rng_, &life));
    lives.push_back(life);
    // The writer of a later life started from the checkpoint the previous
    // check wrote at its clean close, and found all of it.
    {
      std::istringstream in(life.ready);
      std::string word;
      uint64_t regions = 0, recovered = UINT64_MAX;
      int from_ckpt = -1;
      in >> word >> regions >> recovered >> from_ckpt;
      EXPECT_EQ(word, "ready") << "the writer did not report its open";
      EXPECT_EQ(from_ckpt, k > 0 ? 1 : 0) << life.ready;
      EXPECT_EQ(recovered, entries_at_last_close) << life.ready;
    }

    Checker c;
    ASSERT_NO_FATAL_FAILURE(c.open(volume_));
    const StoreStats at_open = c.store->local_stats();
    // The writer's open invalidated the checkpoint: a kill is followed by a scan.
    EXPECT_FALSE(at_open.disk.recovered_from_checkpoint);
    EXPECT_EQ(at_open.disk.regions_reclaimed, 0u);

    std::set<uint64_t> found;
    uint64_t lost = 0;
    for (const Life& l : lives) {
      for (uint64_t i = l.start; i < l.start + kMaxBlocksPerLife; ++i) {
        GetResult g = c.get(i);
        if (g.hit) {
          EXPECT_EQ(g.tier, Tier::kDisk);
          found.insert(i);
        } else if (i < l.flushed || found_before.count(i) != 0) {
          if (++lost <= 5) {
            ADD_FAILURE() << "block " << i << " (life starting at " << l.start
                          << ", reported flushed below " << l.flushed
                          << ") lost: " << miss_reason_name(g.miss);
          }
        }
      }
    }
    const StoreStats st = c.store->local_stats();
    EXPECT_EQ(lost, 0u) << "flushed (or previously recovered) blocks lost after the kill";
    EXPECT_EQ(c.wrong, 0u) << "blocks served with wrong bytes";
    EXPECT_EQ(c.misses(MissReason::kCorrupt), 0u);
    EXPECT_EQ(st.disk.read_corrupt, 0u);
    EXPECT_EQ(st.disk.read_io_errors, 0u);
    // The scan recovered exactly the blocks the writers wrote (every key it
    // indexed is one of ours, found above).
    EXPECT_EQ(at_open.disk.recovered_entries, found.size());
    EXPECT_EQ(st.index_entries, found.size());
    uint64_t reported = 0;
    for (const Life& l : lives) reported += l.flushed - l.start;
    const uint64_t extra = static_cast<uint64_t>(
        std::count_if(found.begin(), found.end(), [&](uint64_t i) { return i >= life.flushed; }));
    std::printf("life %d: blocks [%" PRIu64 ", %" PRIu64
                ") reported flushed (%d flushes of %" PRIu64 "), %" PRIu64
                " more found; all lives: %zu found, %" PRIu64
                " reported flushed, scan dropped %" PRIu64 "\n",
                k, life.start, life.flushed, life.flush_lines, kFlushEvery[k], extra, found.size(),
                reported, at_open.disk.recovery_dropped);
    EXPECT_GE(found.size(), reported);
    found_before = found;
    entries_at_last_close = st.index_entries;
    ASSERT_TRUE(c.store->close().ok());
  }

  // The last check closed cleanly: a warm restart from that checkpoint finds
  // the same blocks.
  Checker c;
  ASSERT_NO_FATAL_FAILURE(c.open(volume_));
  EXPECT_TRUE(c.store->local_stats().disk.recovered_from_checkpoint);
  EXPECT_EQ(c.store->local_stats().index_entries, found_before.size());
  for (uint64_t i : found_before) EXPECT_TRUE(c.get(i).hit) << i;
  EXPECT_EQ(c.wrong, 0u);
}

// Reads the raw volume file: the superblock and where each of our blocks'
// entries lies.
struct VolumeImage {
  disk::Superblock sb{};
  std::map<uint64_t, std::vector<uint64_t>> offsets;  // block -> entry offsets

  void load(const std::string& path, const std::vector<Life>& lives) {
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> by_key;
    for (const Life& l : lives) {
      for (uint64_t i = l.start; i < l.start + kMaxBlocksPerLife; ++i) {
        const Key128 k = test_key(i);
        by_key[{k.hi, k.lo}] = i;
      }
    }
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pread(fd, &sb, sizeof(sb), 0), static_cast<ssize_t>(sizeof(sb)));
    ASSERT_EQ(sb.magic, disk::kSuperMagic);
    std::vector<std::byte> chunk(kRegionBytes);
    for (uint64_t base = sb.data_offset; base + kRegionBytes <= kVolumeBytes;
         base += kRegionBytes) {
      ASSERT_EQ(::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(base)),
                static_cast<ssize_t>(chunk.size()));
      for (size_t off = 0; off + sizeof(disk::EntryHeader) <= chunk.size();
           off += disk::kPageBytes) {
        disk::EntryHeader h;
        std::memcpy(&h, chunk.data() + off, sizeof(h));
        if (h.magic != disk::kEntryMagic || h.volume_id != sb.volume_id) continue;
        auto it = by_key.find({h.key_hi, h.key_lo});
        if (it != by_key.end()) offsets[it->second].push_back(base + off);
      }
    }
    ::close(fd);
  }
  uint64_t region_of(uint64_t offset) const { return (offset - sb.data_offset) / kRegionBytes; }
};

void flip_byte(const std::string& path, uint64_t offset, uint8_t mask) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  uint8_t b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= mask;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ASSERT_EQ(::fdatasync(fd), 0);
  ::close(fd);
}

// Bytes damaged on the volume after a kill, and while a store has it open:
// never served, and only the damaged entries (plus, after a broken header,
// the rest of that region's log) go missing.
TEST_F(CrashTest, CorruptedVolumeAfterKillNeverServesBadBytes) {
  std::vector<Life> lives(1);
  ASSERT_NO_FATAL_FAILURE(run_and_kill(volume_, 0, 32, 6, rng_, &lives[0]));
  const Life& life = lives[0];
  VolumeImage img;
  ASSERT_NO_FATAL_FAILURE(img.load(volume_, lives));

  // Flushed blocks with exactly one entry on the volume, by region.
  std::map<uint64_t, std::vector<uint64_t>> by_region;
  for (uint64_t i = life.start; i < life.flushed; ++i) {
    auto it = img.offsets.find(i);
    ASSERT_NE(it, img.offsets.end()) << "flushed block " << i << " has no entry on the volume";
    if (it->second.size() == 1) by_region[img.region_of(it->second[0])].push_back(i);
  }
  ASSERT_GE(by_region.size(), 2u) << "the writer should have filled more than one region";
  auto first_region = by_region.begin();
  auto second_region = std::next(first_region);
  ASSERT_GE(first_region->second.size(), 4u);
  ASSERT_GE(second_region->second.size(), 4u);

  // (a) a payload byte of a block in the first region: only it is lost.
  const uint64_t a = first_region->second[1];
  const uint64_t a_off = img.offsets[a][0];
  ASSERT_NO_FATAL_FAILURE(
      flip_byte(volume_, a_off + sizeof(disk::EntryHeader) + block_length(a, kObj) / 2, 0x10));
  // (b) a header byte (the key) of a block in the second region: the scan
  // cannot step past it, so the rest of that region's log is lost too.
  const uint64_t b = second_region->second[second_region->second.size() / 2];
  const uint64_t b_off = img.offsets[b][0];
  ASSERT_NO_FATAL_FAILURE(flip_byte(volume_, b_off + offsetof(disk::EntryHeader, key_lo), 0x01));
  // (c) random bytes anywhere in the used data area (header, payload or
  // padding); whatever they hit may be lost, nothing may be served wrong.
  uint64_t used_end = 0;
  for (const auto& [i, offs] : img.offsets) {
    for (uint64_t o : offs) {
      used_end = std::max(used_end, o + disk::entry_bytes(block_length(i, kObj)));
    }
  }
  std::uniform_int_distribution<uint64_t> where(img.sb.data_offset, used_end - 1);
  std::vector<uint64_t> random_flips;
  for (int n = 0; n < 8; ++n) {
    random_flips.push_back(where(rng_));
    ASSERT_NO_FATAL_FAILURE(flip_byte(volume_, random_flips.back(), 0x04));
  }
  // Which blocks may go: the entries a flip lands in, and, for a flip in a
  // header, every later entry of that region.
  auto may_be_lost = [&](uint64_t i) {
    if (i == a || i == b) return true;
    auto it = img.offsets.find(i);
    if (it == img.offsets.end()) return true;
    for (uint64_t off : it->second) {
      const uint64_t end = off + disk::entry_bytes(block_length(i, kObj));
      if (img.region_of(off) == img.region_of(b_off) && off > b_off) return true;
      for (uint64_t f : random_flips) {
        if (f >= off && f < end) return true;
        if (img.region_of(f) == img.region_of(off) && f < off) {
          // A flip in an earlier entry's header (or an earlier payload's
          // length field) can end the region's log before this entry.
          for (const auto& [j, offs2] : img.offsets) {
            for (uint64_t o2 : offs2) {
              if (f >= o2 && f < o2 + sizeof(disk::EntryHeader)) return true;
            }
          }
        }
      }
    }
    return false;
  };

  Checker c;
  ASSERT_NO_FATAL_FAILURE(c.open(volume_));
  EXPECT_FALSE(c.store->local_stats().disk.recovered_from_checkpoint);
  EXPECT_GE(c.store->local_stats().disk.recovery_dropped, 1u);  // at least (a)
  uint64_t lost = 0;
  std::vector<uint64_t> intact;
  for (uint64_t i = life.start; i < life.start + kMaxBlocksPerLife; ++i) {
    GetResult g = c.get(i);
    if (i == a || i == b) {
      EXPECT_FALSE(g.hit) << "corrupted block " << i << " was served";
    }
    if (g.hit) {
      if (i < life.flushed && !may_be_lost(i)) intact.push_back(i);
    } else if (i < life.flushed && !may_be_lost(i)) {
      if (++lost <= 5) ADD_FAILURE() << "undamaged flushed block " << i << " lost";
    }
  }
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(c.wrong, 0u) << "blocks served with wrong bytes";
  ASSERT_GE(intact.size(), 2u);

  // (d) damage under an open store: the read verifies, misses as corrupt and
  // drops the entry.
  const uint64_t d = intact.front();
  ASSERT_NO_FATAL_FAILURE(flip_byte(
      volume_, img.offsets[d][0] + sizeof(disk::EntryHeader) + block_length(d, kObj) - 1, 0x80));
  GetResult g = c.get(d);
  EXPECT_FALSE(g.hit) << "block " << d << " was served after its payload was damaged";
  EXPECT_EQ(g.miss, MissReason::kCorrupt);
  EXPECT_EQ(c.get(d).miss, MissReason::kNotFound);
  // (e) a damaged header under an open store.
  const uint64_t e = intact.back();
  ASSERT_NO_FATAL_FAILURE(
      flip_byte(volume_, img.offsets[e][0] + offsetof(disk::EntryHeader, payload_crc), 0x01));
  g = c.get(e);
  EXPECT_FALSE(g.hit) << "block " << e << " was served after its header was damaged";
  EXPECT_EQ(g.miss, MissReason::kCorrupt);
  EXPECT_EQ(c.misses(MissReason::kCorrupt), 2u);
  EXPECT_EQ(c.store->local_stats().disk.read_corrupt, 2u);
  // Everything else is still served, with the right bytes.
  for (uint64_t i : intact) {
    if (i != d && i != e) {
      EXPECT_TRUE(c.get(i).hit) << i;
    }
  }
  EXPECT_EQ(c.wrong, 0u) << "blocks served with wrong bytes";
}

}  // namespace
}  // namespace kvtier::kv
