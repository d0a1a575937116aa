#!/usr/bin/env python3
"""Runs clang's thread-safety analysis over the code that uses kvtier::Mutex.

Members marked KVTIER_GUARDED_BY(mu_) and functions marked KVTIER_REQUIRES(mu_)
(common/thread_annotations.h) are checked by clang's -Wthread-safety: an access
without the mutex held is an error here. The build itself uses g++, which
ignores the annotations, so this script compiles (syntax only, no objects) each
translation unit of the build (tests aside) that includes common/mutex.h or a
header that includes it, with clang++ and the build's own flags: the files
that implement the annotated classes, and the inline code of their headers.
(Files that reach mutex.h only through further headers merely use those
classes, and checking them would triple the time.)

Usage: scripts/check-thread-safety.py BUILD_DIR [--jobs N]
         (exit 1, with clang's messages, when any file breaks the rules)
       scripts/check-thread-safety.py --self-test
         (shows that an unguarded access and a missing REQUIRES are caught)
"""
import concurrent.futures
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
MUTEX_HEADER = "common/mutex.h"
# clang 14 supports C++20 coroutines but asio does not detect it with
# libstdc++: say so, so that files using asio's awaitables compile.
CLANG_FLAGS = ["-DASIO_HAS_CO_AWAIT=1", "-DASIO_HAS_STD_COROUTINE=1", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety-analysis",
               "-Werror=thread-safety-reference", "-Werror=thread-safety-attributes"]


def clang():
    for name in ("clang++", "clang++-14"):
        path = shutil.which(name)
        if path:
            return path
    return None


def includes(path):
    try:
        return INCLUDE.findall(path.read_text(errors="replace"))
    except OSError:
        return []


def uses_mutex(path, src_root):
    """True when `path` includes common/mutex.h, or a header under src/ that does."""
    for inc in includes(path):
        if inc == MUTEX_HEADER:
            return True
        header = src_root / inc
        if header.is_file() and MUTEX_HEADER in includes(header):
            return True
    return False


def is_test(path):
    name = path.name
    return name.endswith(("_test.cc", "_fuzz.cc")) or "testing" in path.parts


def clang_command(entry, compiler):
    """The build's compile command for `entry`, run by clang in syntax-only mode."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = [compiler]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    return out + CLANG_FLAGS


def check(build_dir, jobs):
    compiler = clang()
    if compiler is None:
        print("check-thread-safety: clang++ not found (scripts/setup.sh installs it)")
        return 1
    db_path = pathlib.Path(build_dir) / "compile_commands.json"
    if not db_path.is_file():
        print(f"check-thread-safety: {db_path} is missing; configure the build first")
        return 1
    entries = json.loads(db_path.read_text())
    src_root = pathlib.Path(__file__).resolve().parent.parent / "src"
    chosen = []
    for e in entries:
        f = pathlib.Path(e["file"])
        if not f.is_absolute():
            f = pathlib.Path(e["directory"]) / f
        try:
            f.resolve().relative_to(src_root)
        except ValueError:
            continue
        if not is_test(f) and uses_mutex(f.resolve(), src_root):
            chosen.append((f, e))
    if not chosen:
        print("check-thread-safety: no translation unit includes common/mutex.h")
        return 1

    def run(item):
        f, e = item
        r = subprocess.run(clang_command(e, compiler), cwd=e["directory"], capture_output=True,
                           text=True)
        return f, r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f, rc, err in pool.map(run, chosen):
            if rc != 0:
                failed += 1
                print(f"--- {f.relative_to(src_root)}\n{err}")
    if failed:
        print(f"check-thread-safety: {failed} of {len(chosen)} files break the locking rules")
        return 1
    print(f"check-thread-safety: {len(chosen)} files that use kvtier::Mutex pass clang's "
          "thread-safety analysis")
    return 0


SELF_TEST_CASES = {
    "unguarded read": "size_t bad() { return q_.size(); }",
    "missing REQUIRES at a call": "void bad() { locked_clear(); }",
    "wait predicate without REQUIRES": (
        "void bad() { MutexLock l(mu_); l.wait(cv_, [&] { return !q_.empty(); }); }"),
}
SELF_TEST_CLASS = """
#include "common/mutex.h"
#include <deque>
namespace kvtier {
class Queue {
 public:
  void push(int v) { MutexLock l(mu_); q_.push_back(v); cv_.notify_one(); }
  int pop() {
    MutexLock l(mu_);
    l.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return !q_.empty(); });
    int v = q_.front();
    q_.pop_front();
    return v;
  }
  void locked_clear() KVTIER_REQUIRES(mu_) { q_.clear(); }
  BAD
 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<int> q_ KVTIER_GUARDED_BY(mu_);
};
}  // namespace kvtier
"""


def self_test():
    compiler = clang()
    if compiler is None:
        print("check-thread-safety: clang++ not found")
        return 1
    src_root = pathlib.Path(__file__).resolve().parent.parent / "src"
    right = 0
    with tempfile.TemporaryDirectory() as tmp:
        def compiles(body):
            path = pathlib.Path(tmp) / "case.cc"
            path.write_text(SELF_TEST_CLASS.replace("BAD", body))
            r = subprocess.run([compiler, "-std=c++20", f"-I{src_root}", str(path)] + CLANG_FLAGS,
                               capture_output=True, text=True)
            return r.returncode == 0, r.stderr

        ok, err = compiles("")
        if not ok:
            print(f"the correct class was refused:\n{err}")
            return 1
        for name, body in SELF_TEST_CASES.items():
            ok, _ = compiles(body)
            if ok:
                print(f"not caught: {name}")
            else:
                right += 1
    print(f"{right} of {len(SELF_TEST_CASES)} cases right")
    return 0 if right == len(SELF_TEST_CASES) else 1


def main():
    if "--self-test" in sys.argv:
        return self_test()
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    jobs = 2
    if "--jobs" in sys.argv:
        jobs = int(sys.argv[sys.argv.index("--jobs") + 1])
        args = [a for a in args if a != str(jobs)]
    if len(args) != 1:
        print(__doc__)
        return 2
    return check(args[0], max(1, jobs))


if __name__ == "__main__":
    sys.exit(main())
