// What kvtier-blockd will open as a volume, and who may manage it: links,
// "..", hard links, special files, folders others can write, export
// addresses and peer credentials. Real files in a scratch folder.
#include "blockd/volume_paths.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "blockd/grpc_service.h"

namespace kvtier::blockd {
namespace {

namespace fs = std::filesystem;

class VolumePathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("kvtier-volpaths-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "vols" / "sub");
    fs::create_directories(root_ / "outside");
    fs::permissions(root_ / "vols", fs::perms(0755));
    secret_ = root_ / "outside" / "secret";
    std::ofstream(secret_) << "do not read";
    fs::permissions(secret_, fs::perms(0600));
    VolumePolicy p;
    p.volume_dirs = {(root_ / "vols").string()};
    auto v = VolumePaths::create(p);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    paths_ = std::make_unique<VolumePaths>(std::move(*v));
  }
  void TearDown() override { fs::remove_all(root_); }

  Status try_open(const fs::path& p, uint64_t create = 0) {
    auto f = paths_->open(p.string(), create, /*direct=*/false);
    if (!f.ok()) return f.status();
    ::close(f->fd);
    return Status::ok_status();
  }
  std::string secret_text() {
    std::ifstream in(secret_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path root_, secret_;
  std::unique_ptr<VolumePaths> paths_;
};

TEST_F(VolumePathsTest, FilesBeneathAVolumeDirAreCreatedOwnerOnly) {
  ASSERT_TRUE(try_open(root_ / "vols" / "a.img", 1 << 20).ok());
  ASSERT_TRUE(try_open(root_ / "vols" / "sub" / "b.img", 1 << 20).ok());
  struct stat sb {};
  ASSERT_EQ(::stat((root_ / "vols" / "a.img").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  // Reopened without create.
  EXPECT_TRUE(try_open(root_ / "vols" / "a.img").ok());
  // "." and repeated slashes are only spelling.
  EXPECT_TRUE(try_open(root_.string() + "/vols//./a.img").ok());
}

TEST_F(VolumePathsTest, LinksDotDotHardLinksAndOutsidePathsAreRefused) {
  fs::create_symlink(secret_, root_ / "vols" / "link.img");
  fs::create_directory_symlink(root_ / "outside", root_ / "vols" / "linkdir");
  fs::create_hard_link(secret_, root_ / "vols" / "hard.img");
  ASSERT_EQ(::mkfifo((root_ / "vols" / "fifo").c_str(), 0600), 0);

  struct Case {
    fs::path path;
    uint64_t create;
    StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {root_ / "vols" / "link.img", 0, StatusCode::kPermissionDenied, "symbolic link"},
      {root_ / "vols" / "link.img", 1 << 20, StatusCode::kPermissionDenied, "symbolic link"},
      {root_ / "vols" / "linkdir" / "secret", 0, StatusCode::kPermissionDenied, "symbolic link"},
      {root_ / "vols" / "linkdir" / "new.img", 1 << 20, StatusCode::kPermissionDenied,
       "symbolic link"},
      {root_ / "vols" / ".." / "outside" / "secret", 0, StatusCode::kPermissionDenied, "'..'"},
      {root_ / "vols" / "hard.img", 0, StatusCode::kPermissionDenied, "hard links"},
      {root_ / "vols" / "fifo", 0, StatusCode::kPermissionDenied, "not a regular file"},
      {secret_, 0, StatusCode::kPermissionDenied, "not beneath a volume directory"},
      {"/etc/shadow", 0, StatusCode::kPermissionDenied, "not beneath a volume directory"},
      {"relative.img", 1 << 20, StatusCode::kInvalidArgument, "absolute"},
      {root_ / "vols", 0, StatusCode::kPermissionDenied, "not beneath"},
  };
  for (const auto& c : cases) {
    const Status st = try_open(c.path, c.create);
    EXPECT_EQ(st.code(), c.code) << c.path << ": " << st.to_string();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.path << ": " << st.to_string();
  }
  // Nothing was created through a link, and the secret is as it was.
  EXPECT_FALSE(fs::exists(root_ / "outside" / "new.img"));
  EXPECT_EQ(secret_text(), "do not read");
}

TEST_F(VolumePathsTest, FoldersOthersCanWriteAreRefusedAtStart) {
  fs::create_directories(root_ / "open");
  fs::permissions(root_ / "open", fs::perms(0777));
  VolumePolicy p;
  p.volume_dirs = {(root_ / "open").string()};
  auto v = VolumePaths::create(p);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("writable by group or others"), std::string::npos);
  p.volume_dirs = {(root_ / "missing").string()};
  EXPECT_FALSE(VolumePaths::create(p).ok());
}

TEST_F(VolumePathsTest, NoVolumeDirMeansNoFileVolumes) {
  auto v = VolumePaths::create(VolumePolicy{});
  ASSERT_TRUE(v.ok());
  auto f = v->open((root_ / "vols" / "x.img").string(), 1 << 20, false);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("--volume-dir"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "vols" / "x.img"));
}

TEST_F(VolumePathsTest, ConfiguredDevicesOpenByTheirExactPathOnly) {
  const fs::path dev = root_ / "outside" / "dev.img";
  std::ofstream(dev) << std::string(8192, 'x');
  VolumePolicy p;
  p.devices = {dev.string()};
  auto v = VolumePaths::create(p);
  ASSERT_TRUE(v.ok());
  auto f = v->open(dev.string(), 0, false);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ::close(f->fd);
  EXPECT_FALSE(v->open(secret_.string(), 0, false).ok());
}

TEST(ExportPolicyTest, NonLoopbackAndAnyHostNeedSwitches) {
  auto v = VolumePaths::create(VolumePolicy{});
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->check_export("127.0.0.1", false).ok());
  EXPECT_TRUE(v->check_export("::1", false).ok());
  EXPECT_EQ(v->check_export("0.0.0.0", false).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(v->check_export("10.1.2.3", false).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(v->check_export("127.0.0.1", true).code(), StatusCode::kPermissionDenied);
  VolumePolicy p;
  p.export_addresses = {"10.1.2.3"};
  p.allow_any_host_exports = true;
  auto w = VolumePaths::create(p);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->check_export("10.1.2.3", true).ok());
  EXPECT_FALSE(w->check_export("10.1.2.4", false).ok());
}

TEST(PeerCredentialsTest, OnlyRootTheDaemonTheOwnerAndTheGroup) {
  const int64_t daemon = 1000;
  EXPECT_TRUE(peer_may_manage({0, 0, {}}, daemon, -1, -1));
  EXPECT_TRUE(peer_may_manage({1000, 1000, {}}, daemon, -1, -1));
  EXPECT_FALSE(peer_may_manage({1001, 1001, {}}, daemon, -1, -1));
  EXPECT_TRUE(peer_may_manage({1001, 1001, {}}, daemon, 1001, -1));
  EXPECT_FALSE(peer_may_manage({1002, 1002, {}}, daemon, 1001, -1));
  EXPECT_TRUE(peer_may_manage({1002, 50, {}}, daemon, -1, 50));
  EXPECT_TRUE(peer_may_manage({1002, 1002, {7, 50}}, daemon, -1, 50));
  EXPECT_FALSE(peer_may_manage({1002, 1002, {7}}, daemon, -1, 50));
  EXPECT_FALSE(peer_may_manage({-1, -1, {}}, daemon, -1, -1));  // credentials unknown
}

}  // namespace
}  // namespace kvtier::blockd
