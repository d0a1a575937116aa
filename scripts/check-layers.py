#!/usr/bin/env python3
"""Fails when an #include under src/ points up or sideways in the layer order.

kvtier is built in layers (docs/architecture.md): a module may include only
itself and the modules before it in LAYERS. Inside a module, its rooms (the
folders under src/<module>/) are ordered the same way: a room may include only
itself, the rooms before it, and the module's own top-level files. Tests,
fuzzers and testing/ folders may include any room of their own module (a
test of the cluster room stands up a real server), but never a later module.

Usage: scripts/check-layers.py [SRC_DIR]   (exit 1 and one line per violation)
       scripts/check-layers.py --self-test (shows that each kind of violation is caught)
"""
import pathlib
import tempfile
import re
import sys

# Module order: the same list CMakeLists.txt adds the modules in.
# The simulator (sim) runs the testbed's study runner (bench) with modeled
# tiers, so it comes after it.
LAYERS = ["common", "blk", "nvmf", "kv", "net", "api", "blockd", "engine", "serve", "bench",
          "sim", "tools"]
# Room order inside a module; a module without an entry has no rooms.
# "" is the module's top level (its shared interface), below every room.
ROOMS = {
    "net": ["", "wire", "shm", "client", "cluster", "server"],
    "blk": ["", "dev", "stack", "raid"],
}
# Include roots that are not modules: the public C++ headers, allowed everywhere.
OPEN_ROOTS = {"kvtier"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(module, parts):
    """The room of a path below src/<module>/ (parts excludes the module)."""
    if module not in ROOMS or len(parts) < 2:
        return ""
    return parts[0]


def is_test(path):
    name = path.name
    return (name.endswith("_test.cc") or name.endswith("_fuzz.cc") or "testing" in path.parts
            or name.endswith("_test.c"))


def check(src):
    problems = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc", ".c") or not path.is_file():
            continue
        rel = path.relative_to(src).parts
        module = rel[0]
        if module not in LAYERS:
            continue
        my_layer = LAYERS.index(module)
        my_room = room_of(module, rel[1:])
        test = is_test(path)
        for m in INCLUDE.finditer(path.read_text(errors="replace")):
            target = m.group(1)
            tparts = target.split("/")
            root = tparts[0]
            if root in OPEN_ROOTS or root not in LAYERS:
                continue  # a public header, or a generated or system header
            line = path.read_text(errors="replace").count("\n", 0, m.start()) + 1
            where = f"src/{'/'.join(rel)}:{line}"
            t_layer = LAYERS.index(root)
            if t_layer > my_layer:
                problems.append(f"{where}: {module} includes {target}, a later layer ({root})")
                continue
            if t_layer < my_layer or test or module not in ROOMS:
                continue
            rooms = ROOMS[module]
            t_room = room_of(module, tparts[1:])
            if t_room == "testing":
                problems.append(f"{where}: non-test code includes {target}")
                continue
            if my_room not in rooms or t_room not in rooms:
                problems.append(f"{where}: room not in the room order of {module}: "
                                f"{my_room or t_room}")
                continue
            if rooms.index(t_room) > rooms.index(my_room):
                problems.append(f"{where}: {module}/{my_room or '(top)'} includes {target}, "
                                f"a later room ({t_room})")
    return problems


def self_test():
    """Builds small trees with one violation each and checks it is reported."""
    cases = {
        "later layer": ("kv/a.cc", '#include "net/server/b.h"'),
        "later room": ("net/client/a.cc", '#include "net/server/b.h"'),
        "testing helper in code": ("net/server/a.cc", '#include "net/testing/t.h"'),
        "unknown room": ("net/attic/a.cc", '#include "net/wire/b.h"'),
    }
    allowed = {
        "earlier room": ("net/server/a.cc", '#include "net/wire/b.h"'),
        "earlier layer": ("net/wire/a.cc", '#include "kv/store.h"'),
        "test across rooms": ("net/cluster/a_test.cc", '#include "net/server/b.h"'),
    }
    failed = 0
    for expect, table in ((True, cases), (False, allowed)):
        for what, (file, line) in table.items():
            with tempfile.TemporaryDirectory() as d:
                f = pathlib.Path(d) / file
                f.parent.mkdir(parents=True)
                f.write_text(line + "\n")
                found = bool(check(pathlib.Path(d)))
                if found != expect:
                    print(f"self-test: {what}: {'missed' if expect else 'wrongly reported'}")
                    failed += 1
    print(f"check-layers self-test: {len(cases) + len(allowed) - failed} of "
          f"{len(cases) + len(allowed)} cases right")
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                       pathlib.Path(__file__).resolve().parent.parent / "src")
    problems = check(src)
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} include(s) against the layer order", file=sys.stderr)
        return 1
    print("check-layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
