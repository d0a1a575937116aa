#include "bench/fio_runner.h"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvtier::bench {

Result<FioResult> run_fio(const FioJob& job) {
  FioResult out;
  // --randrepeat=0: fio's default replays the same random offsets every run,
  // which a host cache then serves from RAM; kvtier never rereads a pattern.
  out.command = fmt::format(
      "fio --name=kvtier-limit --filename={} --direct=1 --ioengine=io_uring --randrepeat=0 --rw={} "
      "--bs={} "
      "--iodepth={} --size={} --runtime={} --time_based{} --output-format=json",
      job.filename, job.rw, job.block_bytes, job.iodepth, job.size_bytes, job.seconds,
      job.end_fsync ? " --end_fsync=1" : "");
  FILE* p = popen((out.command + " 2>&1").c_str(), "r");
  if (p == nullptr) return Status::unavailable("cannot start fio");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) {
    if (text.find("not found") != std::string::npos || WEXITSTATUS(rc) == 127) {
      return Status::unavailable(
          "fio is not installed (run scripts/setup.sh, or apt-get install fio)");
    }
    return Status::io_error(
        fmt::format("fio failed (exit {}): {}", WEXITSTATUS(rc), text.substr(0, 500)));
  }
  // fio may print warnings before the JSON object.
  size_t start = text.find('{');
  if (start == std::string::npos)
    return Status::io_error("fio printed no JSON: " + text.substr(0, 300));
  auto j = nlohmann::json::parse(text.substr(start), nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) {
    return Status::io_error("cannot parse fio's JSON output");
  }
  const auto& jb = j["jobs"][0];
  const char* side = job.rw.find("write") != std::string::npos ? "write" : "read";
  out.bytes_per_second = jb[side]["bw_bytes"].get<double>();
  out.iops = jb[side]["iops"].get<double>();
  return out;
}

}  // namespace kvtier::bench
