#!/usr/bin/env python3
"""Tests of check_shape.py's rules on hand-made results (no benchmark run)."""
import json
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_shape.py")
RECOMPUTE = 1.0e9


def case(rps, disk_rate=None, hit=0.5):
    c = {"available": True, "throughput_rps": rps, "store_hit_share": hit, "verify_failures": 0}
    if disk_rate is not None:
        c["store_disk_load_bytes_per_s"] = disk_rate
    return c


def run(long_cases, strict=False, policy="load"):
    r = {"limits": {"recompute_kv_bytes_per_s": RECOMPUTE},
         "service": {"load_policy": policy},
         "protocols": {"long-reuse": long_cases}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(r, f)
    args = [sys.executable, CHECK, f.name] + (["--strict"] if strict else [])
    p = subprocess.run(args, capture_output=True, text=True)
    os.unlink(f.name)
    return p.returncode, p.stdout + p.stderr


failures = []
checks = 0


def expect(name, got_rc, want_rc, out):
    global checks
    checks += 1
    if got_rc != want_rc:
        failures.append(f"{name}: exit {got_rc}, wanted {want_rc}\n{out}")


# D below C with a disk slower than recompute: reported, not enforced (a blended
# RAM + disk rate above recompute must not switch the rule on).
slow = {"B": case(0.5, hit=0), "C": case(0.7, hit=0.2), "D": case(0.55, 0.8 * RECOMPUTE)}
slow["D"]["store_load_bytes_per_s"] = 1.1 * RECOMPUTE
rc, out = run(slow)
expect("slow disk, not enforced", rc, 0, out)
rc, out = run(slow, strict=True)
expect("slow disk, strict", rc, 1, out)

# The same throughputs with a disk clearly faster than recompute: enforced.
fast = dict(slow, D=case(0.55, 2.0 * RECOMPUTE))
rc, out = run(fast)
expect("fast disk, D below C", rc, 1, out)

# Fast disk and D clearly above B and C: passes.
good = {"B": case(0.5, hit=0), "C": case(0.7, hit=0.2), "D": case(1.0, 2.0 * RECOMPUTE)}
rc, out = run(good)
expect("fast disk, D above C", rc, 0, out)

# D's store serving no more than C's means an unused disk tier: always a failure.
unused = dict(good, D=case(1.0, 2.0 * RECOMPUTE, hit=0.2))
rc, out = run(unused)
expect("disk tier unused", rc, 1, out)

# F below D without a faster path: reported; with a path 1.3x faster: enforced.
f_same = dict(good, F=case(0.9, 2.0 * RECOMPUTE))
rc, out = run(f_same)
expect("F below D, same path speed", rc, 0, out)
f_faster = dict(good, F=case(0.9, 2.8 * RECOMPUTE))
rc, out = run(f_faster)
expect("F below D with a faster path", rc, 1, out)
# F not above C is enforced like D's rules.
f_slow = dict(good, F=case(0.6, 2.0 * RECOMPUTE))
rc, out = run(f_slow)
expect("F not above C", rc, 1, out)

race_good_base = dict(good, D=case(1.0, 0.8 * RECOMPUTE))
# F's own disk rate below DISK_MARGIN x recompute (a busy machine): its
# throughput rules are reported, even under --strict; its count rules are not.
f_busy = dict(good, F=case(0.6, 1.0 * RECOMPUTE))
rc, out = run(f_busy, strict=True)
expect("F slowed by a busy machine, strict", rc, 0, out)
f_no_disk = dict(good, F=case(0.9))
rc, out = run(f_no_disk)
expect("F loads nothing from its disk", rc, 1, out)
# Under the race a slow F may serve fewer blocks than C (a run under a CPU hog
# did): its hit share is reported, not held to C's.
f_fewer_hits = dict(race_good_base, F=case(0.9, 0.3 * RECOMPUTE, hit=0.1))
rc, out = run(f_fewer_hits, policy="race")
expect("F serving fewer blocks than C under the race", rc, 0, out)

# Under the race a disk at 0.8x recompute still saves time: the rules apply.
rc, out = run(slow, policy="race")
expect("slow disk under the race, D below C", rc, 1, out)
race_good = dict(good, D=case(1.0, 0.8 * RECOMPUTE))
rc, out = run(race_good, policy="race")
expect("slow disk under the race, D above C", rc, 0, out)
# Below half the recompute rate even the race is not held to them.
very_slow = dict(slow, D=case(0.55, 0.3 * RECOMPUTE))
rc, out = run(very_slow, policy="race")
expect("very slow disk under the race, not enforced", rc, 0, out)

# Under the race F's faster measured rate is not a faster path: reported only.
rc, out = run(dict(race_good, F=case(0.9, 2.8 * RECOMPUTE)), policy="race")
expect("F below D under the race", rc, 0, out)

for f in failures:
    print("FAIL: " + f)
print(f"{checks - len(failures)} of {checks} checks passed")
sys.exit(1 if failures else 0)
