// Clang's thread-safety annotations (-Wthread-safety), as macros that are
// empty for other compilers. They turn "guarded by mu_" comments into facts
// the compiler checks: a member marked KVTIER_GUARDED_BY(mu_) read or written
// without mu_ held, or a function marked KVTIER_REQUIRES(mu_) called without
// it, is a compile error in the thread-safety check
// (scripts/check-thread-safety.sh, ctest `thread_safety`).
//
// They need a mutex type the compiler knows to be a capability: kvtier::Mutex
// (common/mutex.h), not std::mutex, which libstdc++ does not annotate.
#pragma once

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION(x)
#endif

#define KVTIER_CAPABILITY(name) KVTIER_THREAD_ANNOTATION(capability(name))
#define KVTIER_SCOPED_CAPABILITY KVTIER_THREAD_ANNOTATION(scoped_lockable)
#define KVTIER_GUARDED_BY(mu) KVTIER_THREAD_ANNOTATION(guarded_by(mu))
#define KVTIER_PT_GUARDED_BY(mu) KVTIER_THREAD_ANNOTATION(pt_guarded_by(mu))
#define KVTIER_REQUIRES(...) KVTIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define KVTIER_EXCLUDES(...) KVTIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define KVTIER_ACQUIRE(...) KVTIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define KVTIER_RELEASE(...) KVTIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define KVTIER_TRY_ACQUIRE(...) KVTIER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define KVTIER_RETURN_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(lock_returned(x))
#define KVTIER_NO_THREAD_SAFETY_ANALYSIS KVTIER_THREAD_ANNOTATION(no_thread_safety_analysis)
