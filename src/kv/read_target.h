// ReadTarget: the meeting point of a waiting reader and an asynchronous I/O
// completion. The completion copies the verified payload into the caller's
// buffer only if the reader is still waiting; once the reader has given up
// (timeout), the buffer is never touched again, so a slow or hung device can
// turn a read into a miss without a use-after-free.
//
// A direct read (the device writes the caller's buffer itself) can be given
// up too when it is revocable: the device reads into pages pinned before
// the read began, so at the deadline the waiter maps fresh pages over the
// caller's range (common/fresh_pages.h) and returns; the late transfer
// lands in the old pages. A direct read that is not revocable waits for the
// device, as it must.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"

namespace kvtier::kv {

class ReadTarget {
 public:
  // `allow_direct` false: out() is memory another process can see (a
  // client's shared-memory area), so the device never reads into it: the
  // payload is staged and only copied there once verified.
  explicit ReadTarget(MutableByteView out, bool allow_direct = true)
      : out_(out), allow_direct_(allow_direct) {}

  // Keep a staged payload after copying it out (wait_until), until this
  // target is destroyed: the store promotes from it later, and it is the
  // buffer the bytes were verified in. Call before the read is issued.
  void keep_staging() {
    MutexLock lock(mu_);
    keep_staging_ = true;
  }
  // The staged, verified payload kept by keep_staging() after wait_until()
  // returned OK; empty for a direct read or a failed one.
  ByteView staged_payload() {
    MutexLock lock(mu_);
    return release_ && status_.ok() ? pending_payload_ : ByteView();
  }

  // The caller's buffer (where a direct read lands).
  MutableByteView out() const { return out_; }
  bool allow_direct() const { return allow_direct_; }

  // Marks the read as direct, before the device is given out(). `overdue`
  // counts direct reads past their deadline whose device has not answered:
  // the waiter raises it at the deadline and lowers it when the device
  // answers. `revoke`, when given, takes the caller's pages back from the
  // device at the deadline (false: it could not, then the waiter waits).
  void begin_direct(std::shared_ptr<std::atomic<int64_t>> overdue,
                    std::function<bool()> revoke = nullptr) {
    MutexLock lock(mu_);
    direct_ = true;
    overdue_ = std::move(overdue);
    revoke_ = std::move(revoke);
  }

  // Called by the completion of a direct read before it touches out() (to
  // verify it or copy a tail in): true if the buffer is still the read's,
  // false once the waiter took it back (then leave it alone and call
  // device_done()).
  bool claim_direct() {
    MutexLock lock(mu_);
    lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return !revoking_; });
    if (revoked_) return false;
    claimed_ = true;
    return true;
  }

  // A revoked direct read's device has answered (its overdue count drops).
  void device_done() {
    MutexLock lock(mu_);
    if (overdue_) overdue_->fetch_sub(1, std::memory_order_acq_rel);
    overdue_ = nullptr;
  }

  // Completion of a direct read after claim_direct(): the payload is already
  // in out() (and was verified there when `st` is OK).
  void complete_direct(Status st, uint32_t payload_crc) {
    MutexLock lock(mu_);
    if (done_) return;
    payload_crc_ = payload_crc;
    status_ = std::move(st);
    done_ = true;
    cv_.notify_all();
  }

  // Completion side. `payload` is copied into the caller's buffer when `st`
  // is OK and the waiter is still there.
  void complete(Status st, ByteView payload, uint32_t payload_crc = 0) {
    MutexLock lock(mu_);
    if (abandoned_ || done_) return;
    if (st.ok()) std::memcpy(out_.data(), payload.data(), payload.size());
    payload_crc_ = payload_crc;
    status_ = std::move(st);
    done_ = true;
    cv_.notify_all();
  }

  // Waiter side. Returns the completion's status, or kTimeout at the
  // deadline, after which complete() will not write the buffer.
  // Completion side, sharing the copy with the waiter: the payload stays in
  // the completion's buffer until the waiting thread copies it out and calls
  // `release`; the device thread only verifies. Two cores then share the
  // per-block work (checksum on one, copy on the other). If the waiter has
  // already given up, `release` runs at once.
  void complete_deferred(Status st, ByteView payload, uint32_t payload_crc,
                         std::function<void()> release) {
    {
      MutexLock lock(mu_);
      if (!abandoned_ && !done_) {
        status_ = std::move(st);
        payload_crc_ = payload_crc;
        pending_payload_ = payload;
        release_ = std::move(release);
        done_ = true;
        cv_.notify_all();
        return;
      }
    }
    release();
  }

  ~ReadTarget() {
    if (release_) release_();
  }

  // The verified payload's CRC32C, valid after wait_until() returned OK.
  uint32_t payload_crc() const { return payload_crc_; }

  Status wait_until(uint64_t deadline_ns) {
    MutexLock lock(mu_);
    while (!done_) {
      uint64_t now = now_ns();
      if (now >= deadline_ns) {
        if (direct_) {
          if (overdue_) overdue_->fetch_add(1, std::memory_order_acq_rel);
          if (revoke_ && !claimed_) {
            // Take the pages back; the completion waits meanwhile (claim_direct).
            // A copy, called unlocked (a deadline's rare path).
            revoking_ = true;
            const std::function<bool()> revoke = revoke_;
            lock.unlock();
            const bool revoked = revoke();
            lock.lock();
            revoking_ = false;
            revoked_ = revoked;
            cv_.notify_all();
            // The overdue count stays up until the device answers (device_done).
            if (revoked) return Status::timeout("disk read did not complete in time");
          }
          // The device still owns out(): wait for it, then report the timeout.
          lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return done_; });
          if (overdue_) overdue_->fetch_sub(1, std::memory_order_acq_rel);
          overdue_ = nullptr;
          return Status::timeout("disk read did not complete in time");
        }
        abandoned_ = true;
        return Status::timeout("disk read did not complete in time");
      }
      lock.wait_for(cv_, std::chrono::nanoseconds(deadline_ns - now));
    }
    if (release_) {
      // Deferred completion: copy out here, then hand the buffer back.
      if (status_.ok()) std::memcpy(out_.data(), pending_payload_.data(), pending_payload_.size());
      if (!keep_staging_ || !status_.ok()) {
        auto release = std::move(release_);
        release_ = nullptr;
        release();
      }  // else the destructor hands the buffer back
    }
    return status_;
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  MutableByteView out_;
  bool allow_direct_ = true;
  bool keep_staging_ KVTIER_GUARDED_BY(mu_) = false;
  bool done_ KVTIER_GUARDED_BY(mu_) = false;
  bool abandoned_ KVTIER_GUARDED_BY(mu_) = false;
  bool direct_ KVTIER_GUARDED_BY(mu_) = false;           // the device writes out_ itself
  std::function<bool()> revoke_ KVTIER_GUARDED_BY(mu_);  // takes out_ back (direct)
  bool revoking_ KVTIER_GUARDED_BY(mu_) = false;         // revoke_ is running
  bool revoked_ KVTIER_GUARDED_BY(mu_) = false;          // out_ is the caller's again
  bool claimed_ KVTIER_GUARDED_BY(mu_) = false;          // the completion is using out_
  // Direct reads past their deadline (the tier's count).
  std::shared_ptr<std::atomic<int64_t>> overdue_ KVTIER_GUARDED_BY(mu_);
  Status status_ KVTIER_GUARDED_BY(mu_);
  uint32_t payload_crc_ = 0;  // written before done_, read after
  // Deferred completion: where the payload waits, and what frees that buffer.
  ByteView pending_payload_ KVTIER_GUARDED_BY(mu_);
  std::function<void()> release_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::kv
