#include "common/stop_signals.h"

#include <pthread.h>

namespace kvtier {

StopSignals::StopSignals(bool ignore_sigpipe) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  if (ignore_sigpipe) signal(SIGPIPE, SIG_IGN);
}

int StopSignals::wait() const {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig;
}

}  // namespace kvtier
