// `kvtier nvmf serve`: export block devices over NVMe/TCP (docs/nvme-tcp.md).
// `kvtier nvmf read|write|connect`: manual use of kvtier's NVMe/TCP host.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "common/buffer.h"
#include "nvmf/dhchap.h"
#include "nvmf/host_device.h"
#include "nvmf/serve.h"
#include "tools/commands.h"

namespace kvtier::tools {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

// Options shared by every host subcommand.
void add_host_options(CLI::App* c, nvmf::HostOptions& o) {
  c->add_option("--address", o.address, "Target IPv4 address")->capture_default_str();
  c->add_option("--port", o.port, "Target TCP port")->capture_default_str();
  c->add_option("--nqn", o.subnqn, "Subsystem NQN to connect to")->required();
  c->add_option("--hostnqn", o.hostnqn, "Host NQN sent in Connect (must be on the allow-list)")
      ->capture_default_str();
  add_ranged_option(c, "--nsid", o.nsid, "Namespace ID", 1u, 0xFFFFFFFEu);
  add_ranged_option(c, "--io-queues", o.io_queues, "I/O queues (TCP connections)", 1u, 64u);
  c->add_flag("--hdgst", o.hdgst, "Ask for header digests (CRC32C)");
  c->add_flag("--ddgst", o.ddgst, "Ask for data digests (CRC32C)");
  // Secrets come from files only the user may read, never from the command
  // line (which every local user can see in /proc).
  const auto secret_from = [](std::string* into) {
    return [into](const std::string& path) {
      auto s = nvmf::dhchap::read_secret_file(path);
      if (!s.ok()) throw CLI::ValidationError(s.status().message());
      *into = nvmf::dhchap::format_secret(*s);
    };
  };
  c->add_option_function<std::string>(
      "--dhchap-secret-file", secret_from(&o.dhchap_secret),
      "File (mode 0600) holding this host's DH-HMAC-CHAP secret (DHHC-1:...): used when the\n"
      "controller asks for authentication");
  c->add_option_function<std::string>(
      "--dhchap-ctrl-secret-file", secret_from(&o.dhchap_ctrl_secret),
      "File (mode 0600) holding the controller's secret: the controller must prove it holds\n"
      "it (bidirectional authentication), or it is refused");
}

// Prints a new DH-HMAC-CHAP secret, as `nvme gen-dhchap-key` does.
int run_gen_key(int transform, int key_bytes) {
  auto s = nvmf::dhchap::generate_secret(uint8_t(transform), size_t(key_bytes));
  if (!s.ok()) {
    std::cerr << "kvtier nvmf: " << s.status().to_string() << "\n";
    return 1;
  }
  std::cout << nvmf::dhchap::format_secret(*s) << "\n";
  return 0;
}

int fail(const Status& st) {
  std::cerr << "kvtier nvmf: " << st.to_string() << "\n";
  return 1;
}

// Reads [offset, offset+length) of the namespace to a file or stdout ("-").
int run_read(const nvmf::HostOptions& o, uint64_t offset, uint64_t length, const std::string& out) {
  auto dev = nvmf::NvmeTcpDevice::connect(o);
  if (!dev.ok()) return fail(dev.status());
  const uint32_t bs = (*dev)->block_size();
  if (offset % bs || length % bs) {
    return fail(Status::invalid_argument("--offset and --length must be multiples of the " +
                                         std::to_string(bs) + "-byte block size"));
  }
  if (length == 0) length = (*dev)->capacity() - std::min(offset, (*dev)->capacity());
  std::ofstream file;
  if (out != "-") {
    file.open(out, std::ios::binary | std::ios::trunc);
    if (!file) return fail(Status::io_error("cannot open " + out + " for writing"));
  }
  std::ostream& os = out == "-" ? std::cout : file;
  AlignedBuffer buf(1 << 20);
  for (uint64_t done = 0; done < length;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), length - done);
    Status st = (*dev)->read_sync(offset + done, buf.subview(0, n));
    if (!st.ok()) return fail(st);
    os.write(reinterpret_cast<const char*>(buf.data()), std::streamsize(n));
    if (!os) return fail(Status::io_error("cannot write " + out));
    done += n;
  }
  os.flush();
  return 0;
}

// Writes a file or stdin ("-") to the namespace at `offset`; a last partial
// block is padded with zeros.
int run_write(const nvmf::HostOptions& o, uint64_t offset, const std::string& in) {
  auto dev = nvmf::NvmeTcpDevice::connect(o);
  if (!dev.ok()) return fail(dev.status());
  const uint32_t bs = (*dev)->block_size();
  if (offset % bs) {
    return fail(Status::invalid_argument("--offset must be a multiple of the " +
                                         std::to_string(bs) + "-byte block size"));
  }
  std::ifstream file;
  if (in != "-") {
    file.open(in, std::ios::binary);
    if (!file) return fail(Status::io_error("cannot open " + in));
  }
  std::istream& is = in == "-" ? std::cin : file;
  AlignedBuffer buf(1 << 20);
  uint64_t done = 0;
  for (;;) {
    is.read(reinterpret_cast<char*>(buf.data()), std::streamsize(buf.size()));
    const uint64_t got = uint64_t(is.gcount());
    if (got == 0) break;
    const uint64_t n = (got + bs - 1) / bs * bs;
    std::memset(buf.data() + got, 0, n - got);
    if (offset + done + n > (*dev)->capacity()) {
      return fail(Status::invalid_argument("input does not fit in the namespace after --offset"));
    }
    Status st = (*dev)->write_sync(offset + done, buf.subview(0, n));
    if (!st.ok()) return fail(st);
    done += n;
  }
  Status st = (*dev)->flush_sync();
  if (!st.ok()) return fail(st);
  std::cerr << "wrote " << done << " bytes at offset " << offset << "\n";
  return 0;
}

// Connects, prints what it learned, and stays connected (keep-alive running).
int run_connect(const nvmf::HostOptions& o, double seconds) {
  auto dev = nvmf::NvmeTcpDevice::connect(o);
  if (!dev.ok()) return fail(dev.status());
  std::cout << "connected: " << (*dev)->name() << "\n"
            << "namespace " << o.nsid << ": " << (*dev)->capacity() << " bytes, block size "
            << (*dev)->block_size() << "\n"
            << "io queues: " << o.io_queues << "\n";
  std::cout.flush();
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_interrupted && (seconds <= 0 || std::chrono::steady_clock::now() < end)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cout << "disconnected (" << (*dev)->reconnects() << " reconnects)\n";
  return 0;
}

// Prints the discovery log of a target, one block per record.
int run_discover(const nvmf::HostOptions& o) {
  auto log = nvmf::NvmeTcpDevice::discover(o);
  if (!log.ok()) return fail(log.status());
  std::cout << "Discovery Log Number of Records " << log->entries.size() << ", Generation counter "
            << log->generation << "\n";
  for (size_t i = 0; i < log->entries.size(); ++i) {
    const auto& e = log->entries[i];
    std::cout << "=====Discovery Log Entry " << i << "======\n"
              << "trtype:  " << (e.trtype == 3 ? "tcp" : std::to_string(e.trtype)) << "\n"
              << "adrfam:  " << (e.adrfam == 1 ? "ipv4" : std::to_string(e.adrfam)) << "\n"
              << "subtype: "
              << (e.subtype == 2   ? "nvme subsystem"
                  : e.subtype == 3 ? "discovery subsystem"
                                   : std::to_string(e.subtype))
              << "\n"
              << "portid:  " << e.portid << "\n"
              << "trsvcid: " << e.trsvcid << "\n"
              << "subnqn:  " << e.subnqn << "\n"
              << "traddr:  " << e.traddr << "\n";
  }
  return 0;
}

void add_nvmf(CLI::App& root) {
  auto* nvmf = root.add_subcommand("nvmf", "NVMe over TCP: export volumes to any NVMe/TCP host");
  nvmf->require_subcommand(1);
  auto* serve = nvmf->add_subcommand(
      "serve",
      "Run an NVMe/TCP target (discovery + NVM subsystems) until SIGINT/SIGTERM.\n"
      "Listens on 127.0.0.1:4420 unless the config says otherwise; hosts not listed in a\n"
      "subsystem's allowed_hosts are refused unless it sets allow_any_host.");
  auto config = std::make_shared<std::string>();
  serve
      ->add_option(
          "--config", *config,
          "JSON file: {\"listen\":{\"address\":..,\"port\":..},\"subsystems\":[{\"nqn\":..,"
          "\"allowed_hosts\":[..],\"host_keys\":[{\"hostnqn\":..,\"dhchap_key_file\":P,"
          "\"dhchap_ctrl_key_file\":P,\"hash\":\"sha256\",\"dhgroup\":\"ffdhe2048\"}],"
          "\"namespaces\":[{\"mem_mib\":N}|{\"file\":P,\"size_mib\":N}]}]}\n"
          "(docs/nvme-tcp.md lists every key)")
      ->required()
      ->check(CLI::ExistingFile);
  serve->callback([config] { std::exit(nvmf::serve_until_signal(*config)); });

  auto* gk = nvmf->add_subcommand(
      "gen-dhchap-key",
      "Print a new random DH-HMAC-CHAP secret (DHHC-1:..., the form nvme-cli and the Linux\n"
      "kernel take). Store it in a file of mode 0600 for --dhchap-secret-file or a target's\n"
      "host_keys; give the same secret to the host and the target");
  auto transform = std::make_shared<int>(1);
  auto key_bytes = std::make_shared<int>(32);
  gk->add_option("--hmac", *transform,
                 "Hash that binds the key to an NQN: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  gk->add_option("--key-bytes", *key_bytes, "Key length: 32, 48 or 64")
      ->check(CLI::IsMember({32, 48, 64}))
      ->capture_default_str();
  gk->callback([=] { std::exit(run_gen_key(*transform, *key_bytes)); });

  auto opt = std::make_shared<nvmf::HostOptions>();
  auto offset = std::make_shared<uint64_t>(0);
  auto length = std::make_shared<uint64_t>(0);
  auto path = std::make_shared<std::string>("-");
  auto seconds = std::make_shared<double>(0);

  auto* dc = nvmf->add_subcommand(
      "discover",
      "Print the discovery log of a target (the subsystems this host NQN may connect to)");
  dc->add_option("--address", opt->address, "Target IPv4 address")->capture_default_str();
  dc->add_option("--port", opt->port, "Target TCP port")->capture_default_str();
  dc->add_option("--hostnqn", opt->hostnqn, "Host NQN (the log lists what it is allowed)")
      ->capture_default_str();
  dc->callback([=] { std::exit(run_discover(*opt)); });

  auto* rd = nvmf->add_subcommand(
      "read", "Read a byte range of a remote namespace through kvtier's NVMe/TCP host");
  add_host_options(rd, *opt);
  rd->add_option("--offset", *offset, "First byte (a multiple of the block size)");
  rd->add_option("--length", *length, "Bytes to read (multiple of the block size; 0: to the end)");
  rd->add_option("--out", *path, "File to write, or - for stdout")->capture_default_str();
  rd->callback([=] { std::exit(run_read(*opt, *offset, *length, *path)); });

  auto* wr = nvmf->add_subcommand(
      "write", "Write a file or stdin to a remote namespace through kvtier's NVMe/TCP host");
  add_host_options(wr, *opt);
  wr->add_option("--offset", *offset, "First byte (a multiple of the block size)");
  wr->add_option("--in", *path, "File to send, or - for stdin (last block zero-padded)")
      ->capture_default_str();
  wr->callback([=] { std::exit(run_write(*opt, *offset, *path)); });

  auto* cn = nvmf->add_subcommand(
      "connect",
      "Connect to a subsystem, print the namespace size, block size and queue count, and stay\n"
      "connected (keep-alive, reconnect) until Ctrl-C or --seconds");
  add_host_options(cn, *opt);
  cn->add_option("--seconds", *seconds, "Stay connected this long (0: until Ctrl-C)")
      ->capture_default_str();
  cn->callback([=] { std::exit(run_connect(*opt, *seconds)); });
}

RegisterCommands reg(60, add_nvmf);

}  // namespace
}  // namespace kvtier::tools
