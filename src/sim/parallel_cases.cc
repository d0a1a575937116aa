#include "sim/parallel_cases.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace kvtier::sim {

std::vector<Result<bench::CaseResult>> run_cases_in_parallel(
    size_t count, unsigned threads, const std::function<Result<bench::CaseResult>(size_t)>& run,
    const std::function<void(size_t done, size_t count)>& progress) {
  std::vector<Result<bench::CaseResult>> results(count, Status::internal("not run"));
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress_mu;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) {
      try {
        results[i] = run(i);
      } catch (const std::exception& e) {
        results[i] = Status::internal(std::string("run failed: ") + e.what());
      }
      const size_t n = done.fetch_add(1) + 1;
      if (progress) {
        std::lock_guard lock(progress_mu);
        progress(n, count);
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t n_threads = std::clamp<size_t>(threads, 1, std::max<size_t>(count, 1));
  for (size_t t = 0; t < n_threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace kvtier::sim
