// What validation feeds the simulator from a testbed run: rates of the
// reads themselves, and each store consult's lookup apart.
#include "sim/validation.h"

#include <gtest/gtest.h>

namespace kvtier::sim {
namespace {

TEST(SimValidation, LookupsAreChargedApartFromTheRamReadsRate) {
  bench::CaseResult r;
  r.store_lookups = 100;           // consults, hits and misses
  r.store_load_wall_s = 10;        // lookups and reads
  r.store_read_wall_s = 6;         // of which reads
  r.store_disk_load_wall_s = 2;    // of which disk reads
  r.store_load_bytes = 8'000'000;  // all loaded bytes
  r.store_disk_load_bytes = 1'000'000;
  r.store_wall_s = 12;  // and 2 s of saves
  r.store_save_bytes = 4'000'000;
  const auto m = measured_store_rates(r, /*charge_scale=*/3);
  // RAM: 7 MB over the 4 s of RAM reads, not over the 8 s with lookups.
  EXPECT_DOUBLE_EQ(m.ram_load_bytes_per_s, 7e6 / 4);
  EXPECT_DOUBLE_EQ(m.disk_load_bytes_per_s, 1e6 / 2);
  EXPECT_DOUBLE_EQ(m.save_bytes_per_s, 4e6 / 2);
  // 4 s of lookups over 100 consults, in deployment seconds (x the scale).
  EXPECT_DOUBLE_EQ(m.lookup_s, 4.0 / 100 * 3);

  // A run that measured no lookup time (or no consult) charges none.
  r.store_read_wall_s = r.store_load_wall_s;
  EXPECT_EQ(measured_store_rates(r, 3).lookup_s, 0);
  r.store_lookups = 0;
  EXPECT_EQ(measured_store_rates(r, 3).lookup_s, 0);
}

}  // namespace
}  // namespace kvtier::sim
