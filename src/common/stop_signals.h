// StopSignals: a server's SIGINT and SIGTERM, taken by a thread that waits for
// them instead of by a handler, so that a stop always runs the caller's
// graceful shutdown (connections closed, state saved, threads joined).
//
// Construct it before starting any thread: the signals are blocked in the
// constructing thread and every thread started later inherits that mask.
// With `ignore_sigpipe`, SIGPIPE is ignored too: a peer that goes away must
// fail a write, not end the process.
#pragma once

#include <csignal>

namespace kvtier {

class StopSignals {
 public:
  explicit StopSignals(bool ignore_sigpipe);
  // Blocks until SIGINT or SIGTERM arrives; returns which.
  int wait() const;

 private:
  sigset_t set_;
};

}  // namespace kvtier
