// The tests' temporary directories: TempDir, a fresh directory under $TMPDIR
// (or /tmp) removed with everything in it when the object goes away, and
// make_direct_io_dir() for tests that need a real disk's O_DIRECT behaviour.
// Use these instead of writing mkdtemp again.
#pragma once

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvtier::testing {

class TempDir {
 public:
  // `tag` names the directory (kvtier_<tag>.XXXXXX) so a leftover one says
  // which test made it.
  explicit TempDir(const std::string& tag) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kvtier_" + tag + ".XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A new directory on a filesystem that takes O_DIRECT and is not RAM-backed
// (tmpfs would hide the device behaviour such a test exercises), tried in
// $KVTIER_TEST_DIR, $TMPDIR, /var/tmp, /tmp and the working directory.
// Empty, with `why` saying what each candidate lacked, when there is none.
// The caller removes it.
inline std::string make_direct_io_dir(const char* prefix, std::string* why) {
  std::vector<std::string> candidates;
  for (const char* env : {"KVTIER_TEST_DIR", "TMPDIR"}) {
    const char* v = std::getenv(env);
    if (v != nullptr && *v != '\0') candidates.emplace_back(v);
  }
  candidates.emplace_back("/var/tmp");
  candidates.emplace_back("/tmp");
  candidates.emplace_back(std::filesystem::current_path().string());
  for (const std::string& base : candidates) {
    struct statfs sfs {};
    if (statfs(base.c_str(), &sfs) != 0) continue;
    if (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC) {
      *why += base + " is RAM-backed; ";
      continue;
    }
    std::string tmpl = base + "/" + prefix + ".XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      *why += base + ": mkdtemp failed; ";
      continue;
    }
    const std::string probe = tmpl + "/probe";
    int fd = ::open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT, 0644);
    if (fd < 0) {
      *why += base + ": O_DIRECT open failed (" + std::strerror(errno) + "); ";
      std::error_code ec;
      std::filesystem::remove_all(tmpl, ec);
      continue;
    }
    ::close(fd);
    ::unlink(probe.c_str());
    return tmpl;
  }
  return {};
}

}  // namespace kvtier::testing
