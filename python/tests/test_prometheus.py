"""The metrics exposition of `kvtier store serve` and `kvtier-blockd`, scraped
by a real Prometheus server (Debian's `prometheus`) and read back through its
HTTP API: the format is proven against the real parser."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request

import numpy as np
import pytest

import kvtier
from conftest import make_namespace, wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
    except OSError:
        return []
    return body["data"]["result"] if body.get("status") == "success" else []


@pytest.fixture
def blockd(scratch):
    cfg = os.path.join(scratch, "blockd.json")
    with open(cfg, "w") as f:
        json.dump({"format": "kvtier-blockd-config", "version": 3,
                   "volumes": [{"name": "m0", "kind": "mem", "size_bytes": 16 << 20}],
                   "exports": []}, f)
    # The management socket in a short folder (sun_path holds 108 bytes).
    sock_dir = tempfile.mkdtemp(prefix="kvtier-blockd-")
    p = subprocess.Popen([os.environ["KVTIER_BLOCKD_BIN"], "--config", cfg, "--socket",
                          os.path.join(sock_dir, "blockd.sock")], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()  # "listening grpc N metrics M"
    assert line.startswith("listening"), line
    yield int(line.split()[-1])
    p.terminate()
    p.wait(timeout=30)
    shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="prometheus is not installed")
def test_prometheus_scrapes_store_and_blockd(server, blockd, scratch):
    # Some traffic, so that counters with labels exist.
    ns = make_namespace()
    keys = ns.block_keys(range(32))
    with kvtier.open(server.uri()) as store:
        store.batch_put(ns, keys, [np.zeros(4096, np.uint8)] * 2)
        store.batch_get_into(ns, ns.block_keys(range(100, 132)), [np.zeros(4096, np.uint8)] * 2)

    port = free_port()
    cfg = os.path.join(scratch, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: kvtier-store
    static_configs: [{{targets: ["127.0.0.1:{server.metrics_port}"]}}]
  - job_name: kvtier-blockd
    static_configs: [{{targets: ["127.0.0.1:{blockd}"]}}]
""")
    log = open(os.path.join(scratch, "prometheus.log"), "w")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}",
                             f"--storage.tsdb.path={scratch}/tsdb",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        # Both targets up: Prometheus parsed both expositions without error.
        def both_up():
            r = query(port, "up")
            return {x["metric"]["job"]: x["value"][1] for x in r} == {
                "kvtier-store": "1", "kvtier-blockd": "1"}

        assert wait_for(both_up, timeout_s=90, interval_s=0.5), open(log.name).read()[-3000:]
        assert wait_for(lambda: query(port, 'kvtier_store_misses_total{reason="not_found"}'),
                        timeout_s=30, interval_s=0.5)
        series = query(port, '{__name__=~"kvtier_.+", job="kvtier-store"}')
        names = {s["metric"]["__name__"] for s in series}
        assert "kvtier_store_puts_total" in names, names
        assert len(names) >= 10, names
        misses = query(port, 'kvtier_store_misses_total{reason="not_found"}')
        assert float(misses[0]["value"][1]) >= 2
        blk = query(port, 'kvtier_blockd_volume_up{volume="m0"}')
        assert blk and blk[0]["value"][1] == "1"
        # Prometheus recorded no scrape that failed to parse.
        failed = query(port, "scrape_samples_scraped == 0")
        assert failed == []
    finally:
        prom.terminate()
        prom.wait(timeout=30)
