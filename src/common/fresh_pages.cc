#include "common/fresh_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace kvtier {

namespace {

struct Mapping {
  uintptr_t begin = 0, end = 0;
  std::string perms, path, flags;
  unsigned long inode = 0;
};

// The mapping of /proc/self/smaps that contains `addr`, with its VmFlags.
bool find_mapping(uintptr_t addr, Mapping* out) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_target = false;
  while (std::getline(smaps, line)) {
    // A mapping's header: "begin-end perms offset dev inode [path]".
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    const bool header = dash != std::string::npos && space != std::string::npos && dash < space &&
                        line.find(':') > space;
    if (header) {
      if (in_target) return false;  // its VmFlags line was missing
      Mapping m;
      std::istringstream in(line);
      std::string range, offset, dev;
      in >> range >> m.perms >> offset >> dev >> m.inode;
      std::getline(in >> std::ws, m.path);
      m.begin = std::stoull(range.substr(0, dash), nullptr, 16);
      m.end = std::stoull(range.substr(dash + 1), nullptr, 16);
      in_target = m.begin <= addr && addr < m.end;
      if (in_target) *out = m;
      continue;
    }
    if (in_target && line.rfind("VmFlags:", 0) == 0) {
      out->flags = " " + line.substr(8) + " ";
      return true;
    }
  }
  return false;
}

bool has_flag(const std::string& flags, const char* f) {
  return flags.find(std::string(" ") + f + " ") != std::string::npos;
}

}  // namespace

bool replace_with_fresh_pages(std::byte* addr, size_t len) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (len == 0 || a % page != 0 || len % page != 0) return false;
  Mapping m;
  if (!find_mapping(a, &m) || a + len > m.end) return false;
  // Private and anonymous: no file or other process sees these pages.
  const bool anonymous =
      m.inode == 0 && (m.path.empty() || m.path == "[heap]" || m.path.rfind("[anon:", 0) == 0);
  if (m.perms != "rw-p" || !anonymous) return false;
  // Locked (mlock, or memory registered for a device's DMA), shared, or
  // special mappings keep their pages.
  for (const char* f : {"lo", "sh", "io", "pf", "dc"}) {
    if (has_flag(m.flags, f)) return false;
  }
  void* p =
      ::mmap(addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  return p == addr;
}

}  // namespace kvtier
