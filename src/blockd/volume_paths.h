// VolumePaths: where kvtier-blockd may put or open a file volume, and the
// one way it opens one. kvtier-blockd usually runs as root and its Read and
// Write calls expose whatever a volume's file holds, so a path from a caller
// is never opened as given: it must lie beneath a configured volume directory
// (--volume-dir) or be a configured device (--device), and it is opened one
// component at a time with O_NOFOLLOW from the directory down, so that no
// symbolic link (in the last component or any before it), no "..", no hard
// link to a file elsewhere and no special file is ever opened. Everything
// else is refused with a message that says which rule it broke.
//
// Exports follow the same spirit: an export on an address other than
// loopback, or one that lets any host connect, is refused unless the daemon
// was started with the switch that allows it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::blockd {

struct VolumePolicy {
  // Directories in which file volumes may be created and opened (searched
  // beneath, never above). Resolved once, at start, by the operator's config.
  std::vector<std::string> volume_dirs;
  // Block devices (or pre-made files) that may be opened as volumes, by
  // exactly this path.
  std::vector<std::string> devices;
  // Addresses other than loopback that exports may listen on.
  std::vector<std::string> export_addresses;
  // Exports may set allow_any_host (every host NQN may connect).
  bool allow_any_host_exports = false;
};

struct OpenedVolumeFile {
  int fd = -1;  // owned by the caller
  bool is_device = false;
};

class VolumePaths {
 public:
  // Checks the configured directories (absolute, existing, directories, not
  // writable by group or others, so that nobody else can plant links there)
  // and resolves them and the devices to canonical paths.
  static Result<VolumePaths> create(VolumePolicy policy);

  // Opens `path` read-write for a volume; `create_size` > 0 creates a file
  // beneath a volume directory (mode 0600) if it is missing. The file must
  // be a regular file with one link (beneath a directory) or a block device
  // or regular file (a configured device).
  Result<OpenedVolumeFile> open(const std::string& path, uint64_t create_size, bool direct) const;

  // Whether an export on `address` with `allow_any_host` is permitted.
  Status check_export(const std::string& address, bool allow_any_host) const;

  const VolumePolicy& policy() const { return policy_; }

 private:
  explicit VolumePaths(VolumePolicy p) : policy_(std::move(p)) {}
  VolumePolicy policy_;
};

// "/a//b/./c" -> {"a","b","c"}; an error for relative paths and "..".
Result<std::vector<std::string>> split_absolute_path(const std::string& path);
bool is_loopback_address(const std::string& address);

}  // namespace kvtier::blockd
