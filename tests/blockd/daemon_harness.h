// A kvtier-blockd process for tests: started with its own config, Unix
// socket and volume folder, driven by the real `kvtier blk` CLI.
#pragma once

#include <arpa/inet.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef KVTIER_BLOCKD_BIN
#error "KVTIER_BLOCKD_BIN must name kvtier-blockd"
#endif
#ifndef KVTIER_CLI_BIN
#error "KVTIER_CLI_BIN must name kvtier"
#endif
#ifndef KVTIER_BLOCKD_TEST_DIR
#error "KVTIER_BLOCKD_TEST_DIR must name a scratch folder on a real filesystem"
#endif

namespace kvtier::testing {

namespace fs = std::filesystem;

struct Daemon {
  pid_t pid = -1;
  bool started = false;
  int grpc_port = 0;  // TCP (mutual TLS) only when asked for
  int metrics_port = 0;
  std::string socket;
};

// Short, so that it fits sun_path wherever the build folder is.
inline std::string socket_path_for(const fs::path& config) {
  static int n = 0;
  (void)config;
  return (fs::temp_directory_path() /
          ("kvtier-blockd-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock"))
      .string();
}

// The daemon's volume folder is the config's folder (0755, as the daemon
// requires of a --volume-dir).
inline Daemon try_start_daemon(const fs::path& config, const std::vector<std::string>& extra = {},
                               std::string socket = "") {
  if (socket.empty()) socket = socket_path_for(config);
  fs::permissions(config.parent_path(), fs::perms(0755));
  int pipefd[2];
  EXPECT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    close(pipefd[0]);
    std::vector<std::string> args = {KVTIER_BLOCKD_BIN,
                                     "--config",
                                     config.string(),
                                     "--socket",
                                     socket,
                                     "--volume-dir",
                                     config.parent_path().string(),
                                     "--metrics-port",
                                     "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(KVTIER_BLOCKD_BIN, argv.data());
    _exit(127);
  }
  close(pipefd[1]);
  FILE* out = fdopen(pipefd[0], "r");
  char line[256] = {};
  Daemon d;
  d.pid = pid;
  d.socket = socket;
  if (fgets(line, sizeof(line), out) != nullptr) {
    d.started =
        std::sscanf(line, "listening grpc %d metrics %d", &d.grpc_port, &d.metrics_port) == 2;
  }
  fclose(out);
  return d;
}

inline Daemon start_daemon(const fs::path& config, const std::vector<std::string>& extra = {}) {
  Daemon d = try_start_daemon(config, extra);
  EXPECT_TRUE(d.started) << "kvtier-blockd did not start";
  return d;
}

inline int stop_daemon(Daemon& d, int sig) {
  if (d.pid <= 0) return -1;
  kill(d.pid, sig);
  int status = 0;
  waitpid(d.pid, &status, 0);
  d.pid = -1;
  return status;
}

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `kvtier ARGS` and collects its exit code, stdout and stderr.
inline CliResult cli_raw(const std::string& args) {
  static int n = 0;
  const fs::path err = fs::path(KVTIER_BLOCKD_TEST_DIR) /
                       ("cli-err-" + std::to_string(getpid()) + "-" + std::to_string(n++));
  const std::string cmd = std::string(KVTIER_CLI_BIN) + " " + args + " 2>" + err.string();
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, k);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  fs::remove(err);
  return r;
}

// `kvtier blk ARGS` against the daemon's Unix socket.
inline CliResult cli(const Daemon& d, const std::string& args) {
  return cli_raw("blk " + args + " --server unix:" + d.socket);
}

inline std::string http_get(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  ssize_t k;
  while ((k = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(k));
  close(fd);
  return resp;
}

// A TCP port nothing listens on right now (the kernel's pick for port 0).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace kvtier::testing
