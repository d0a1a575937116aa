// `kvtier bench python` and `kvtier bench engine`: run the Python package's
// benchmarks (python3 -m kvtier.bench, python3 -m kvtier.bench.engine) with
// this build's package and this kvtier binary, so that they work from the
// build tree as well as after `pip install ./python`.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tools/commands.h"

namespace kvtier::tools {

namespace {

namespace fs = std::filesystem;

// build/src/tools/kvtier -> build/python, when this is a build tree.
std::string build_tree_package_dir(const fs::path& self) {
  fs::path dir = self.parent_path().parent_path().parent_path() / "python";
  return fs::exists(dir / "kvtier" / "__init__.py") ? dir.string() : std::string();
}

int run_python_module(const char* command, const std::string& module,
                      const std::vector<std::string>& passthrough) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    setenv("KVTIER_BIN", self.c_str(), 0);
    const std::string pkg = build_tree_package_dir(self);
    if (!pkg.empty()) {
      const char* old = std::getenv("PYTHONPATH");
      std::string path = pkg + (old && *old ? std::string(":") + old : std::string());
      setenv("PYTHONPATH", path.c_str(), 1);
    }
  }
  // Debian's interpreter: the one the package is built for.
  const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::vector<std::string> args = {python, "-m", module};
  args.insert(args.end(), passthrough.begin(), passthrough.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(python, argv.data());
  std::fprintf(stderr, "%s: cannot run %s: %s\n", command, python, std::strerror(errno));
  return 1;
}

// A `kvtier bench NAME` that hands every option after NAME to a Python module.
void add_module_command(CLI::App& app, const char* name, const char* module,
                        const char* description) {
  auto* sub = bench_group(app)->add_subcommand(name, description);
  sub->allow_extras();
  sub->prefix_command();
  sub->set_help_flag();  // --help goes to the Python side, which lists the options
  const std::string command = std::string("kvtier bench ") + name;
  sub->callback([sub, command, module] {
    std::exit(run_python_module(command.c_str(), module, sub->remaining()));
  });
}

void add_python_bench_command(CLI::App& app) {
  add_module_command(
      app, "python", "kvtier.bench",
      "The Python package against the C++ client in the same run: batch_get_into of 1.5 MiB "
      "blocks into numpy buffers (in-process, TCP, direct channel; bar >= 0.9x) and "
      "match_prefix of 8,192 keys (p99, bar <= 1.2x). Runs `python3 -m kvtier.bench`; every "
      "option after `python` is passed to it (--json, --seconds, --help, ...)");
  add_module_command(
      app, "engine", "kvtier.bench.engine",
      "Agent sessions through kvtier's real PyTorch engine on this CPU: A recompute, B the "
      "engine's prefix cache, C shared RAM, D RAM + disk tier; wall-clock TTFT p50/p90/p99, "
      "throughput, load rate vs recompute rate (bar: D's TTFT p50 <= 0.25x A's). Runs `python3 "
      "-m kvtier.bench.engine`; every option after `engine` is passed to it (--json, --report "
      "DIR, --trace agent:DIR, --help, ...)");
}

const RegisterCommands kRegisterPythonBench{115, add_python_bench_command};

}  // namespace

}  // namespace kvtier::tools
