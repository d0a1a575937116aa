// Replays the committed corpus of the disk recovery fuzzer
// (fuzz/corpus/disk_recovery/) through the same harness, so every input that
// once found new behaviour, or a bug, runs in the ordinary unit tests without
// libFuzzer. A finding aborts the test binary with a message on stderr.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "kv/testing/disk_recovery_harness.h"

namespace kvtier::kv {
namespace {

namespace fs = std::filesystem;

fs::path corpus_dir() { return fs::path(KVTIER_SOURCE_DIR) / "fuzz/corpus/disk_recovery"; }

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(DiskRecoveryCorpus, EveryCommittedInputPasses) {
  const fs::path dir = corpus_dir();
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no inputs in " << dir;
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::vector<uint8_t> input = read_file(f);
    EXPECT_EQ(fuzzing::disk_recovery_fuzz_one(input.data(), input.size()), 0);
  }
}

TEST(DiskRecoveryCorpus, IntactImagesLoseNothing) {
  // Empty overlays on both base images, with and without a RAM tier and a
  // second open: the harness checks that every stored block is found.
  for (uint8_t flags : {0x00, 0x04, 0x14, 0x20, 0x24, 0xE4}) {
    SCOPED_TRACE(static_cast<int>(flags));
    const uint8_t input[4] = {flags, 0, 0, 0};
    EXPECT_EQ(fuzzing::disk_recovery_fuzz_one(input, sizeof(input)), 0);
  }
}

}  // namespace
}  // namespace kvtier::kv
