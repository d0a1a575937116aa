"""Fixtures of the Python tests: a scratch folder on a filesystem that takes
O_DIRECT (the build tree), and `kvtier store serve` processes."""

import json
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest

import kvtier


def _scratch_root():
    root = os.environ.get("KVTIER_TEST_TMP")
    if root:
        os.makedirs(root, exist_ok=True)
    return root


@pytest.fixture
def scratch():
    with tempfile.TemporaryDirectory(dir=_scratch_root(), prefix="pytest-") as d:
        yield d


def make_namespace(model="test-model", block_tokens=16, **kw):
    return kvtier.Namespace(model, "r1", "tok", "bf16", "NHD", block_tokens=block_tokens, **kw)


class StoreServer:
    """One `kvtier store serve` process on loopback; restartable on its port."""

    def __init__(self, folder, ram="64MiB", volume_bytes=None):
        self.folder = folder
        self.port = 0
        self.metrics_port = 0
        self.proc = None
        self.config = {
            "listen": {"address": "127.0.0.1", "port": 0},
            "metrics": {"address": "127.0.0.1", "port": 0},
            "store": {"ram_bytes": ram, "max_object_bytes": "1.5MiB"},
        }
        if volume_bytes:
            self.config["store"]["volume"] = {
                "path": os.path.join(folder, "server.vol"),
                "size": volume_bytes,
            }
        self.log_path = os.path.join(folder, "server.log")

    def start(self, timeout_s=30):
        cfg = os.path.join(self.folder, "server.json")
        with open(cfg, "w") as f:
            json.dump(self.config, f)
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [os.environ["KVTIER_BIN"], "store", "serve", "--config", cfg],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        pattern = re.compile(r"listening on 127\.0\.0\.1:(\d+), metrics on http://127\.0\.0\.1:(\d+)")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("store server exited: " + open(self.log_path).read())
            with open(self.log_path) as f:
                found = pattern.findall(f.read())
            if found:
                self.port, self.metrics_port = (int(x) for x in found[-1])
                # Restarts reuse the port, so clients reconnect to the same address.
                self.config["listen"]["port"] = self.port
                self.config["metrics"]["port"] = self.metrics_port
                return self
            time.sleep(0.02)
        raise RuntimeError("store server did not start: " + open(self.log_path).read())

    def uri(self, **options):
        q = "&".join(f"{k}={v}" for k, v in options.items())
        return f"kvtier://127.0.0.1:{self.port}" + (f"?{q}" if q else "")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def server(scratch):
    s = StoreServer(scratch).start()
    yield s
    s.stop()


def wait_for(predicate, timeout_s=30.0, interval_s=0.01):
    """Polls a condition; never a fixed sleep standing in for one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
