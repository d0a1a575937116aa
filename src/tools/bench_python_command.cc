// `kvtier bench python`: runs the Python package's benchmark (python3 -m
// kvtier.bench) with this build's package and this kvtier binary, so that it
// works from the build tree as well as after `pip install ./python`.
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

int run_python_bench(const std::vector<std::string>& passthrough) {
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
  std::vector<std::string> args = {python, "-m", "kvtier.bench"};
  args.insert(args.end(), passthrough.begin(), passthrough.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(python, argv.data());
  std::fprintf(stderr, "kvtier bench python: cannot run %s: %s\n", python, std::strerror(errno));
  return 1;
}

void add_python_bench_command(CLI::App& app) {
  auto* bench = bench_group(app);
  auto* py = bench->add_subcommand(
      "python",
      "The Python package against the C++ client in the same run: batch_get_into of 1.5 MiB "
      "blocks into numpy buffers (in-process, TCP, direct channel; bar >= 0.9x) and "
      "match_prefix of 8,192 keys (p99, bar <= 1.2x). Runs `python3 -m kvtier.bench`; every "
      "option after `python` is passed to it (--json, --seconds, --help, ...)");
  py->allow_extras();
  py->prefix_command();
  py->set_help_flag();  // --help goes to the Python side, which lists the options
  py->callback([py] { std::exit(run_python_bench(py->remaining())); });
}

const RegisterCommands kRegisterPythonBench{115, add_python_bench_command};

}  // namespace

}  // namespace kvtier::tools
