// eventually(): waits for a condition instead of sleeping for a guessed time.
// A test that sleeps "long enough" fails on a busy machine and wastes time on
// an idle one; this returns as soon as the condition holds, and gives up only
// after a bound far beyond any normal wait, so a false result means a hang.
#pragma once

#include <chrono>
#include <thread>

namespace kvtier::testing {

template <class Condition>
bool eventually(Condition done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace kvtier::testing
