// `kvtier blk ...`: a thin gRPC client of kvtier-blockd (src/blockd/
// blockd.proto). Each subcommand is one RPC; results print as a table, or
// with --json as the reply message in JSON. Errors print the daemon's
// message and exit 1.
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "blockd.grpc.pb.h"
#include "blockd/grpc_service.h"
#include "nvmf/dhchap.h"
#include "tools/commands.h"

namespace kvtier::tools {

namespace {

namespace v1 = kvtier::blockd::v1;

struct BlkCli {
  std::string server = std::string("unix:") + kvtier::blockd::kDefaultSocket;
  std::string tls_ca, tls_cert, tls_key;
  bool json = false;
  double timeout_s = 30;
  // Shared fields of the subcommands.
  std::string name, path, level, parent, device, file;
  std::vector<std::string> members;
  // export
  std::string nqn, volume, address = "127.0.0.1";
  uint32_t port = 4420;
  std::vector<std::string> allowed_hosts;
  bool allow_any_host = false;
  // HOSTNQN=FILE pairs: hosts that must authenticate, and the secrets the
  // export proves itself with to them; the group and hash they use.
  std::vector<std::string> host_keys, host_ctrl_keys;
  std::string dhgroup, hash;
  double size_mib = 0, offset_mib = 0, length_mib = 0;
  uint64_t offset = 0, length = 0;
  uint32_t strip_kib = 64, copies = 2, slot = 0;
  bool buffered = false;
  v1::Qos qos;
  uint64_t read_iops = 0, write_iops = 0, total_iops = 0;
  double read_mbps = 0, write_mbps = 0, total_mbps = 0, burst_s = 0.1;
};

// The daemon's address, for the hint printed when it cannot be reached.
std::string g_server;

std::string read_pem(const std::string& path, const char* flag) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "kvtier blk: %s '%s': cannot read\n", flag, path.c_str());
    std::exit(2);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A Unix socket is plain (the daemon checks who connects); TCP is mutual TLS
// only, as the daemon serves nothing else there.
std::unique_ptr<v1::BlockDaemon::Stub> stub(const BlkCli& c) {
  g_server = c.server;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetMaxSendMessageSize(8 << 20);
  if (c.server.rfind("unix:", 0) == 0) {
    return v1::BlockDaemon::NewStub(
        grpc::CreateCustomChannel(c.server, grpc::InsecureChannelCredentials(), args));
  }
  if (c.tls_ca.empty() || c.tls_cert.empty() || c.tls_key.empty()) {
    std::fprintf(stderr,
                 "kvtier blk: TCP management is mutual TLS only: give --tls-ca, --tls-cert and "
                 "--tls-key (or use the daemon's unix: socket)\n");
    std::exit(2);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = read_pem(c.tls_ca, "--tls-ca");
  o.pem_cert_chain = read_pem(c.tls_cert, "--tls-cert");
  o.pem_private_key = read_pem(c.tls_key, "--tls-key");
  return v1::BlockDaemon::NewStub(
      grpc::CreateCustomChannel(c.server, grpc::SslCredentials(o), args));
}

void set_deadline(grpc::ClientContext& ctx, const BlkCli& c) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000)));
}

const char* code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "invalid argument";
    case grpc::StatusCode::NOT_FOUND:
      return "not found";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "already exists";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "failed precondition";
    case grpc::StatusCode::UNAVAILABLE:
      return "unavailable";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "permission denied";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline exceeded";
    case grpc::StatusCode::DATA_LOSS:
      return "data loss";
    default:
      return "error";
  }
}

int fail(const grpc::Status& st) {
  std::fprintf(stderr, "kvtier blk: %s: %s\n", code_name(st.error_code()),
               st.error_message().c_str());
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::fprintf(stderr,
                 "kvtier blk: is kvtier-blockd running at %s, and may this user use it? (the "
                 "daemon serves root, its own user and its socket's owner and group)\n",
                 g_server.c_str());
  }
  return 1;
}

std::string to_json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

void print_volume(const v1::Volume& v) {
  std::cout << fmt::format("volume    {}\nkind      {}\nstate     {}\ncapacity  {} ({} bytes)\n",
                           v.name(), v.kind(), v.state(), human_bytes(v.capacity_bytes()),
                           v.capacity_bytes());
  if (!v.path().empty()) std::cout << "path      " << v.path() << "\n";
  if (!v.remote().empty()) {
    std::cout << fmt::format("remote    {} ({} reconnects)\n", v.remote(), v.reconnects());
  }
  if (!v.parent().empty()) {
    std::cout << fmt::format("parent    {} at offset {}\n", v.parent(), v.offset_bytes());
  }
  if (!v.uuid().empty()) std::cout << "uuid      " << v.uuid() << "\n";
  if (v.strip_bytes()) std::cout << "strip     " << human_bytes(v.strip_bytes()) << "\n";
  if (v.state() == "rebuilding") {
    std::cout << fmt::format("rebuild   {} of {} rows\n", v.rebuild_rows_done(), v.rows());
  }
  if (!v.used_by().empty()) std::cout << "used by   " << v.used_by() << "\n";
  const auto& q = v.qos();
  if (q.read_iops() || q.write_iops() || q.total_iops() || q.read_bps() || q.write_bps() ||
      q.total_bps()) {
    std::cout << fmt::format(
        "qos       read {} IOPS / {} B/s, write {} IOPS / {} B/s, total {} IOPS / {} B/s, burst "
        "{} s (0 = unlimited)\n",
        q.read_iops(), q.read_bps(), q.write_iops(), q.write_bps(), q.total_iops(), q.total_bps(),
        q.burst_seconds());
  }
  if (v.members_size() > 0) {
    std::cout << fmt::format("\n{:<5} {:<20} {:<11} {:>11} {:>12}\n", "slot", "device", "state",
                             "read errs", "write errs");
    for (const auto& m : v.members()) {
      std::cout << fmt::format("{:<5} {:<20} {:<11} {:>11} {:>12}\n", m.slot(), m.device(),
                               m.state(), m.read_errors(), m.write_errors());
    }
  }
  const auto& s = v.stats();
  std::cout << fmt::format(
      "\nreads {} ({}), writes {} ({}), errors {}\nread latency p50 {:.1f} us p99 {:.1f} us, "
      "write latency p50 {:.1f} us p99 {:.1f} us\n",
      s.reads(), human_bytes(s.bytes_read()), s.writes(), human_bytes(s.bytes_written()),
      s.errors(), s.read_p50_us(), s.read_p99_us(), s.write_p50_us(), s.write_p99_us());
}

// A DH-HMAC-CHAP secret from a file only its owner may read (the daemon
// keeps it; it is never put on a command line, where every user sees it).
std::string secret_from_file(const std::string& path) {
  auto s = nvmf::dhchap::read_secret_file(path);
  if (!s.ok()) {
    std::fprintf(stderr, "kvtier blk: %s\n", s.status().message().c_str());
    std::exit(2);
  }
  return nvmf::dhchap::format_secret(*s);
}

// "HOSTNQN=FILE" -> {HOSTNQN, secret}.
std::pair<std::string, std::string> host_secret(const std::string& arg) {
  const size_t eq = arg.rfind('=');
  if (eq == std::string::npos || eq == 0) {
    std::fprintf(stderr, "kvtier blk: '%s' is not HOSTNQN=FILE\n", arg.c_str());
    std::exit(2);
  }
  return {arg.substr(0, eq), secret_from_file(arg.substr(eq + 1))};
}

void print_export_row(const v1::Export& e) {
  std::string hosts = e.allow_any_host() ? "any" : "";
  for (const auto& h : e.allowed_hosts()) {
    const bool key = std::find(e.authenticated_hosts().begin(), e.authenticated_hosts().end(), h) !=
                     e.authenticated_hosts().end();
    hosts += (hosts.empty() ? "" : ",") + h + (key ? " (DH-HMAC-CHAP)" : "");
  }
  if (hosts.empty()) hosts = "none";
  std::cout << fmt::format("{:<36} {:<14} {:<22} {:<10} {:>6} {:>10} {:>10}  {}\n", e.nqn(),
                           e.volume(), fmt::format("{}:{}", e.address(), e.port()), e.state(),
                           e.connections(), human_bytes(e.stats().bytes_read()),
                           human_bytes(e.stats().bytes_written()), hosts);
}

void print_export_header() {
  std::cout << fmt::format("{:<36} {:<14} {:<22} {:<10} {:>6} {:>10} {:>10}  {}\n", "nqn", "volume",
                           "listen", "state", "conns", "read", "written", "allowed hosts");
}

int print_export(const BlkCli& c, const grpc::Status& st, const v1::Export& e) {
  if (!st.ok()) return fail(st);
  if (c.json) {
    std::cout << to_json(e) << std::endl;
  } else {
    print_export_header();
    print_export_row(e);
  }
  return 0;
}

int print_reply(const BlkCli& c, const grpc::Status& st, const v1::Volume& v) {
  if (!st.ok()) return fail(st);
  if (c.json) {
    std::cout << to_json(v) << std::endl;
  } else {
    print_volume(v);
  }
  return 0;
}

// One unary call to the daemon under the command's --timeout.
template <typename Method, typename Request, typename Reply>
grpc::Status call(const BlkCli& c, Method method, const Request& request, Reply* reply) {
  grpc::ClientContext ctx;
  set_deadline(ctx, c);
  return (stub(c).get()->*method)(&ctx, request, reply);
}

// Calls a method that answers with a volume (or an export), prints the
// answer or the failure, and exits with the command's status.
template <typename Method, typename Request>
[[noreturn]] void exit_with_volume(const BlkCli& c, Method method, const Request& request) {
  v1::Volume v;
  std::exit(print_reply(c, call(c, method, request, &v), v));
}
template <typename Method, typename Request>
[[noreturn]] void exit_with_export(const BlkCli& c, Method method, const Request& request) {
  v1::Export e;
  std::exit(print_export(c, call(c, method, request, &e), e));
}

uint64_t mib(double v) { return static_cast<uint64_t>(v * (1 << 20)); }

void add_common(CLI::App* cmd, BlkCli* c) {
  cmd->add_option("--server", c->server,
                  "kvtier-blockd address: unix:PATH, or host:port for TCP with mutual TLS")
      ->capture_default_str();
  cmd->add_option("--tls-ca", c->tls_ca, "TCP: CA (PEM) of the daemon's certificate");
  cmd->add_option("--tls-cert", c->tls_cert, "TCP: this client's certificate (PEM)");
  cmd->add_option("--tls-key", c->tls_key, "TCP: this client's private key (PEM)");
  cmd->add_flag("--json", c->json, "Print the reply as JSON instead of a table");
  cmd->add_option("--timeout", c->timeout_s, "Seconds to wait for the daemon")
      ->capture_default_str();
}

void add_export_commands(CLI::App* blk, const std::shared_ptr<BlkCli>& c);

// Volumes from a file, RAM or a remote NVMe/TCP namespace.
void add_create_volume_commands(CLI::App* blk, const std::shared_ptr<BlkCli>& c) {
  auto* cf = blk->add_subcommand("create-file", "Add a file or block device as a volume");
  cf->add_option("name", c->name, "Volume name")->required();
  cf->add_option("--path", c->path, "File or block device")->required();
  cf->add_option("--size-mib", c->size_mib, "Create or extend a regular file to this size");
  cf->add_flag("--buffered", c->buffered, "Open without O_DIRECT (e.g. on tmpfs)");
  add_common(cf, c.get());
  cf->callback([c] {
    v1::CreateFileRequest r;
    r.set_name(c->name);
    r.set_path(c->path);
    r.set_size_bytes(mib(c->size_mib));
    r.set_buffered(c->buffered);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::CreateFile, r);
  });

  auto* cm = blk->add_subcommand("create-mem", "Add a RAM volume (for tests; empty after restart)");
  cm->add_option("name", c->name, "Volume name")->required();
  cm->add_option("--size-mib", c->size_mib, "Size")->required();
  add_common(cm, c.get());
  cm->callback([c] {
    v1::CreateMemRequest r;
    r.set_name(c->name);
    r.set_size_bytes(mib(c->size_mib));
    exit_with_volume(*c, &v1::BlockDaemon::Stub::CreateMem, r);
  });

  struct RemoteArgs {
    std::string address = "127.0.0.1", nqn, hostnqn = "nqn.2024-01.io.kvtier:blockd";
    uint32_t port = 4420, nsid = 1, io_queues = 1;
    bool hdgst = false, ddgst = false;
    double reconnect_delay_s = 1, ctrl_loss_tmo_s = 600, fast_io_fail_tmo_s = 5;
    std::string dhchap_secret_file, dhchap_ctrl_secret_file;
  };
  auto ra = std::make_shared<RemoteArgs>();
  auto* crm = blk->add_subcommand(
      "create-remote",
      "Add a namespace of a remote NVMe/TCP target as a volume (kvtier's host: keep-alive, and "
      "on a lost connection the Linux host's reconnect semantics)");
  crm->add_option("name", c->name, "Volume name")->required();
  crm->add_option("--address", ra->address, "Target IPv4 address")->capture_default_str();
  add_ranged_option(crm, "--port", ra->port, "Target port", 1, 65535);
  crm->add_option("--nqn", ra->nqn, "Subsystem NQN")->required();
  crm->add_option("--hostnqn", ra->hostnqn, "Host NQN sent in Connect (the target's allow-list)")
      ->capture_default_str();
  crm->add_option("--nsid", ra->nsid, "Namespace ID")->capture_default_str();
  add_ranged_option(crm, "--io-queues", ra->io_queues, "I/O queues (TCP connections)", 1, 64);
  crm->add_flag("--hdgst", ra->hdgst, "Header digests (CRC32C)");
  crm->add_flag("--ddgst", ra->ddgst, "Data digests (CRC32C)");
  crm->add_option("--reconnect-delay", ra->reconnect_delay_s, "Seconds between reconnect attempts")
      ->capture_default_str();
  crm->add_option("--ctrl-loss-tmo", ra->ctrl_loss_tmo_s,
                  "Seconds to keep trying before the volume fails (negative: forever)")
      ->capture_default_str();
  crm->add_option("--fast-io-fail-tmo", ra->fast_io_fail_tmo_s,
                  "Seconds after a loss before I/O fails instead of waiting (negative: never)")
      ->capture_default_str();
  crm->add_option("--dhchap-secret-file", ra->dhchap_secret_file,
                  "File (mode 0600) with this host's DH-HMAC-CHAP secret, for a target that asks");
  crm->add_option("--dhchap-ctrl-secret-file", ra->dhchap_ctrl_secret_file,
                  "File (mode 0600) with the target's secret: it must prove it holds it");
  add_common(crm, c.get());
  crm->callback([c, ra] {
    auto ms = [](double s) { return static_cast<int64_t>(s * 1000); };
    v1::CreateRemoteRequest r;
    r.set_name(c->name);
    r.set_address(ra->address);
    r.set_port(ra->port);
    r.set_nqn(ra->nqn);
    r.set_hostnqn(ra->hostnqn);
    r.set_nsid(ra->nsid);
    r.set_io_queues(ra->io_queues);
    r.set_hdgst(ra->hdgst);
    r.set_ddgst(ra->ddgst);
    r.set_reconnect_delay_ms(std::max<int64_t>(1, ms(ra->reconnect_delay_s)));
    // 0 means "default" on the wire, so an explicit 0 s is sent as 1 ms.
    r.set_ctrl_loss_tmo_ms(ms(ra->ctrl_loss_tmo_s) == 0 ? 1 : ms(ra->ctrl_loss_tmo_s));
    r.set_fast_io_fail_tmo_ms(ms(ra->fast_io_fail_tmo_s) == 0 ? 1 : ms(ra->fast_io_fail_tmo_s));
    if (!ra->dhchap_secret_file.empty()) {
      r.set_dhchap_secret(secret_from_file(ra->dhchap_secret_file));
    }
    if (!ra->dhchap_ctrl_secret_file.empty()) {
      r.set_dhchap_ctrl_secret(secret_from_file(ra->dhchap_ctrl_secret_file));
    }
    exit_with_volume(*c, &v1::BlockDaemon::Stub::CreateRemote, r);
  });
}

// RAID arrays and partitions built from volumes, and their members.
void add_array_commands(CLI::App* blk, const std::shared_ptr<BlkCli>& c) {
  auto* ca = blk->add_subcommand("create-array", "Build a RAID array from unused volumes");
  ca->add_option("name", c->name, "Array name")->required();
  ca->add_option("--level", c->level, "raid0, raid1, raid5, raid6 or raid10")->required();
  ca->add_option("--member", c->members, "Member volume, in slot order (repeat)")->required();
  ca->add_option("--strip-kib", c->strip_kib, "Strip size")->capture_default_str();
  ca->add_option("--copies", c->copies, "raid10: members per mirror group")->capture_default_str();
  add_common(ca, c.get());
  ca->callback([c] {
    v1::CreateArrayRequest r;
    r.set_name(c->name);
    r.set_level(c->level);
    for (const auto& m : c->members) r.add_members(m);
    r.set_strip_bytes(static_cast<uint64_t>(c->strip_kib) * 1024);
    r.set_copies(c->copies);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::CreateArray, r);
  });

  auto* cp = blk->add_subcommand("create-partition", "Carve a byte range of a volume");
  cp->add_option("name", c->name, "Partition name")->required();
  cp->add_option("--parent", c->parent, "Volume to carve")->required();
  cp->add_option("--offset-mib", c->offset_mib, "Start")->capture_default_str();
  cp->add_option("--length-mib", c->length_mib, "Length")->required();
  add_common(cp, c.get());
  cp->callback([c] {
    v1::CreatePartitionRequest r;
    r.set_name(c->name);
    r.set_parent(c->parent);
    r.set_offset_bytes(mib(c->offset_mib));
    r.set_length_bytes(mib(c->length_mib));
    exit_with_volume(*c, &v1::BlockDaemon::Stub::CreatePartition, r);
  });

  auto* del = blk->add_subcommand("delete", "Remove a volume nothing is built on");
  del->add_option("name", c->name, "Volume name")->required();
  add_common(del, c.get());
  del->callback([c] {
    v1::VolumeRef r;
    r.set_name(c->name);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::Delete, r);
  });

  auto* rep =
      blk->add_subcommand("replace", "Put an unused volume in a failed member's slot and rebuild");
  rep->add_option("array", c->name, "Array name")->required();
  rep->add_option("--slot", c->slot, "Member slot")->required();
  rep->add_option("--device", c->device, "Replacement volume")->required();
  add_common(rep, c.get());
  rep->callback([c] {
    v1::ReplaceMemberRequest r;
    r.set_array(c->name);
    r.set_slot(c->slot);
    r.set_device(c->device);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::ReplaceMember, r);
  });

  auto* fm = blk->add_subcommand("fail-member", "Take a member out of its array");
  fm->add_option("array", c->name, "Array name")->required();
  fm->add_option("--slot", c->slot, "Member slot")->required();
  add_common(fm, c.get());
  fm->callback([c] {
    v1::FailMemberRequest r;
    r.set_array(c->name);
    r.set_slot(c->slot);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::FailMember, r);
  });
}

// Limits, state and listings of volumes.
void add_inspect_commands(CLI::App* blk, const std::shared_ptr<BlkCli>& c) {
  auto* qos = blk->add_subcommand("qos", "Set a volume's limits (0 or absent = unlimited)");
  qos->add_option("name", c->name, "Volume name")->required();
  qos->add_option("--read-iops", c->read_iops, "Read IOPS");
  qos->add_option("--write-iops", c->write_iops, "Write IOPS");
  qos->add_option("--total-iops", c->total_iops, "Reads and writes together");
  qos->add_option("--read-mbps", c->read_mbps, "Read MB/s (10^6 bytes)");
  qos->add_option("--write-mbps", c->write_mbps, "Write MB/s");
  qos->add_option("--total-mbps", c->total_mbps, "Reads and writes together, MB/s");
  qos->add_option("--burst", c->burst_s, "Burst, in seconds of each rate")->capture_default_str();
  add_common(qos, c.get());
  qos->callback([c] {
    v1::SetQosRequest r;
    r.set_name(c->name);
    auto* q = r.mutable_qos();
    q->set_read_iops(c->read_iops);
    q->set_write_iops(c->write_iops);
    q->set_total_iops(c->total_iops);
    q->set_read_bps(static_cast<uint64_t>(c->read_mbps * 1e6));
    q->set_write_bps(static_cast<uint64_t>(c->write_mbps * 1e6));
    q->set_total_bps(static_cast<uint64_t>(c->total_mbps * 1e6));
    q->set_burst_seconds(c->burst_s);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::SetQos, r);
  });

  auto* show = blk->add_subcommand("show", "State, members and statistics of one volume");
  show->add_option("name", c->name, "Volume name")->required();
  add_common(show, c.get());
  show->callback([c] {
    v1::VolumeRef r;
    r.set_name(c->name);
    exit_with_volume(*c, &v1::BlockDaemon::Stub::Show, r);
  });

  auto* list = blk->add_subcommand("list", "Every volume, in creation order");
  add_common(list, c.get());
  list->callback([c] {
    v1::ListReply rep;
    auto st = call(*c, &v1::BlockDaemon::Stub::List, v1::ListRequest(), &rep);
    if (!st.ok()) std::exit(fail(st));
    if (c->json) {
      std::cout << to_json(rep) << std::endl;
    } else {
      std::cout << fmt::format("{:<16} {:<10} {:<12} {:>12} {:<16}\n", "name", "kind", "state",
                               "capacity", "used by");
      for (const auto& v : rep.volumes()) {
        std::cout << fmt::format("{:<16} {:<10} {:<12} {:>12} {:<16}\n", v.name(), v.kind(),
                                 v.state(), human_bytes(v.capacity_bytes()), v.used_by());
      }
    }
    std::exit(0);
  });
}

// Bytes in and out of a volume, for checks by hand.
void add_data_commands(CLI::App* blk, const std::shared_ptr<BlkCli>& c) {
  auto* wr = blk->add_subcommand("write", "Write a file's bytes to a volume (at most 4 MiB)");
  wr->add_option("name", c->name, "Volume name")->required();
  wr->add_option("--offset", c->offset, "Byte offset (block aligned)")->capture_default_str();
  wr->add_option("--file", c->file, "Bytes to write (a multiple of the block size)")->required();
  add_common(wr, c.get());
  wr->callback([c] {
    std::ifstream in(c->file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "kvtier blk: cannot read %s\n", c->file.c_str());
      std::exit(1);
    }
    std::stringstream ss;
    ss << in.rdbuf();
    v1::WriteRequest r;
    r.set_name(c->name);
    r.set_offset(c->offset);
    r.set_data(ss.str());
    v1::WriteReply rep;
    auto st = call(*c, &v1::BlockDaemon::Stub::Write, r, &rep);
    if (!st.ok()) std::exit(fail(st));
    if (c->json)
      std::cout << fmt::format("{{\"written_bytes\": {}}}", r.data().size()) << std::endl;
    std::exit(0);
  });

  auto* rd = blk->add_subcommand("read", "Read bytes of a volume into a file (at most 4 MiB)");
  rd->add_option("name", c->name, "Volume name")->required();
  rd->add_option("--offset", c->offset, "Byte offset (block aligned)")->capture_default_str();
  rd->add_option("--length", c->length, "Bytes (block multiple)")->required();
  rd->add_option("--file", c->file, "Output file")->required();
  add_common(rd, c.get());
  rd->callback([c] {
    v1::ReadRequest r;
    r.set_name(c->name);
    r.set_offset(c->offset);
    r.set_length(c->length);
    v1::ReadReply rep;
    auto st = call(*c, &v1::BlockDaemon::Stub::Read, r, &rep);
    if (!st.ok()) std::exit(fail(st));
    std::ofstream out(c->file, std::ios::binary);
    out << rep.data();
    std::exit(out ? 0 : 1);
  });
}

void add_blk_commands(CLI::App& root) {
  auto* blk = root.add_subcommand(
      "blk",
      "Manage kvtier-blockd (volumes, RAID arrays, partitions, QoS, NVMe/TCP exports) over its "
      "gRPC API");
  blk->require_subcommand(1);
  auto c = std::make_shared<BlkCli>();
  add_create_volume_commands(blk, c);
  add_array_commands(blk, c);
  add_inspect_commands(blk, c);
  add_data_commands(blk, c);
  add_export_commands(blk, c);
}

void add_export_commands(CLI::App* blk, const std::shared_ptr<BlkCli>& c) {
  auto* ex = blk->add_subcommand(
      "export", "Serve volumes over NVMe/TCP (one subsystem per export, namespace 1)");
  ex->require_subcommand(1);

  auto* cr = ex->add_subcommand(
      "create", "Export a volume; only the listed host NQNs may connect (deny by default)");
  cr->add_option("nqn", c->nqn, "Subsystem NQN, e.g. nqn.2024-01.io.kvtier:vol0")->required();
  cr->add_option("--volume", c->volume, "Volume to serve (nothing may be built on it)")->required();
  cr->add_option("--address", c->address, "Listen address (loopback unless you say otherwise)")
      ->capture_default_str();
  add_ranged_option(cr, "--port", c->port, "Listen port", 1, 65535);
  cr->add_option("--allow-host", c->allowed_hosts, "Host NQN allowed to connect (repeat)");
  cr->add_flag("--allow-any-host", c->allow_any_host, "Let any host NQN connect");
  cr->add_option(
      "--host-key", c->host_keys,
      "HOSTNQN=FILE: that host must authenticate (DH-HMAC-CHAP) with the secret in\n"
      "FILE (mode 0600; `kvtier nvmf gen-dhchap-key` makes one) on every queue (repeat)");
  cr->add_option("--host-ctrl-key", c->host_ctrl_keys,
                 "HOSTNQN=FILE: the secret the export proves itself with to that host (repeat)");
  cr->add_option("--dhgroup", c->dhgroup,
                 "DH group required of authenticating hosts (null, ffdhe2048 ... ffdhe8192)")
      ->default_str("ffdhe2048");
  cr->add_option("--hash", c->hash, "Hash used when the host offers it (sha256, sha384, sha512)")
      ->default_str("sha256");
  add_common(cr, c.get());
  cr->callback([c] {
    v1::CreateExportRequest r;
    r.set_nqn(c->nqn);
    r.set_volume(c->volume);
    r.set_address(c->address);
    r.set_port(c->port);
    for (const auto& h : c->allowed_hosts) r.add_allowed_hosts(h);
    r.set_allow_any_host(c->allow_any_host);
    for (const auto& arg : c->host_keys) {
      auto [host, secret] = host_secret(arg);
      v1::ExportHostKey* k = r.add_host_keys();
      k->set_hostnqn(host);
      k->set_dhchap_secret(secret);
      k->set_hash(c->hash);
      k->set_dhgroup(c->dhgroup);
    }
    for (const auto& arg : c->host_ctrl_keys) {
      auto [host, secret] = host_secret(arg);
      auto it = std::find_if(r.mutable_host_keys()->begin(), r.mutable_host_keys()->end(),
                             [&](const v1::ExportHostKey& k) { return k.hostnqn() == host; });
      if (it == r.mutable_host_keys()->end()) {
        std::fprintf(stderr, "kvtier blk: --host-ctrl-key %s needs a --host-key for it\n",
                     host.c_str());
        std::exit(2);
      }
      it->set_dhchap_ctrl_secret(secret);
    }
    if (c->allowed_hosts.empty() && !c->allow_any_host) {
      std::fprintf(stderr, "kvtier blk: note: no --allow-host given, so no host can connect yet\n");
    }
    exit_with_export(*c, &v1::BlockDaemon::Stub::CreateExport, r);
  });

  auto* del = ex->add_subcommand("delete", "Stop an export and close its connections");
  del->add_option("nqn", c->nqn, "Subsystem NQN")->required();
  add_common(del, c.get());
  del->callback([c] {
    v1::ExportRef r;
    r.set_nqn(c->nqn);
    exit_with_export(*c, &v1::BlockDaemon::Stub::DeleteExport, r);
  });

  auto* ls = ex->add_subcommand("list", "Every export with its state and traffic");
  add_common(ls, c.get());
  ls->callback([c] {
    v1::ExportList rep;
    auto st = call(*c, &v1::BlockDaemon::Stub::ListExports, v1::ListRequest(), &rep);
    if (!st.ok()) std::exit(fail(st));
    if (c->json) {
      std::cout << to_json(rep) << std::endl;
    } else {
      print_export_header();
      for (const auto& e : rep.exports()) print_export_row(e);
    }
    std::exit(0);
  });
}

const RegisterCommands kRegisterBlk{60, add_blk_commands};

}  // namespace

}  // namespace kvtier::tools
