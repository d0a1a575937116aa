// Helper program of the NVMe/TCP integration tests: the same foreground
// target as `kvtier nvmf serve`, linked against the nvmf layer only so the
// tests do not wait for the whole CLI to build.
#include <cstdio>

#include "nvmf/serve.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CONFIG.json\n", argv[0]);
    return 2;
  }
  return kvtier::nvmf::serve_until_signal(argv[1]);
}
