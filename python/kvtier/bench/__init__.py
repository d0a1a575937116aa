"""Benchmarks of the kvtier Python package.

``python3 -m kvtier.bench`` (also ``kvtier bench python``) measures the Python
binding against the C++ client in the same run: batch_get_into of 1.5 MiB
blocks into numpy buffers (in-process, over TCP, over the same-host direct
channel) and match_prefix of 8,192 keys.
"""
