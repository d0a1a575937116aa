"""`kvtier store serve` processes on loopback, for the benchmarks and the
proof (not part of the public API)."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time


def find_kvtier_bin(given=None):
    """The kvtier binary: `given`, $KVTIER_BIN, or kvtier on PATH."""
    for cand in (given, os.environ.get("KVTIER_BIN"), shutil.which("kvtier")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class StoreService:
    """One `kvtier store serve` on 127.0.0.1 (a free port, kept on restart)."""

    def __init__(self, kvtier_bin, ram_bytes, max_object="1.5MiB", folder=None,
                 volume_bytes=None, region_bytes="16MiB"):
        self.bin = kvtier_bin
        self.own_dir = folder is None
        self.dir = folder or tempfile.mkdtemp(prefix="kvtier-service-")
        self.config = {"listen": {"address": "127.0.0.1", "port": 0},
                       "metrics": {"address": "127.0.0.1", "port": 0},
                       "store": {"ram_bytes": ram_bytes, "max_object_bytes": max_object}}
        if volume_bytes:
            # A disk tier on an O_DIRECT volume file in the folder.
            self.config["store"]["volume"] = {"path": os.path.join(self.dir, "store.vol"),
                                              "size": volume_bytes}
            self.config["store"]["region_bytes"] = region_bytes
        self.log = os.path.join(self.dir, "store.log")
        self.port = 0
        self.metrics_port = 0
        self.proc = None
        self.start()

    def start(self, timeout_s=30):
        cfg = os.path.join(self.dir, "store.json")
        with open(cfg, "w") as f:
            json.dump(self.config, f)
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([self.bin, "store", "serve", "--config", cfg],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log) as f:
                found = re.findall(r"listening on 127\.0\.0\.1:(\d+), metrics on "
                                   r"http://127\.0\.0\.1:(\d+)", f.read())
            if found:
                # Restarts reuse the ports, so clients reconnect to the same address.
                self.port, self.metrics_port = (int(x) for x in found[-1])
                self.config["listen"]["port"] = self.port
                self.config["metrics"]["port"] = self.metrics_port
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("store service did not start: " + open(self.log).read()[-2000:])

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def uri(self, **options):
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"kvtier://{self.address}" + (f"?{query}" if query else "")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        """SIGTERM (a graceful stop); the folder stays, start() serves again."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        self.stop()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
