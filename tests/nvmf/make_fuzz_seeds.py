#!/usr/bin/env python3
# Writes the seed inputs of the NVMe/TCP receive-path fuzzer (one queue's host
# byte stream each) into the folder given: python3 make_fuzz_seeds.py fuzz/corpus/nvmf_pdu
import struct, sys, os
out = sys.argv[1]
def crc32c(b):
    crc = 0xFFFFFFFF
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
def icreq(hd=False, dd=False):
    b = bytearray(128); b[0]=0; b[2]=128; struct.pack_into('<I', b, 4, 128); b[11] = (1 if hd else 0) | (2 if dd else 0)
    return bytes(b)
def capsule(sqe, data=b'', hd=False, dd=False):
    hb = 72 + (4 if hd else 0)
    ddg = dd and len(data) > 0
    flags = (1 if hd else 0) | (2 if ddg else 0)
    plen = hb + len(data) + (4 if ddg else 0)
    h = bytearray(72); h[0]=4; h[1]=flags; h[2]=72; h[3]= hb if data else 0
    struct.pack_into('<I', h, 4, plen); h[8:72] = sqe
    r = bytes(h)
    if hd: r += struct.pack('<I', crc32c(h))
    r += data
    if ddg: r += struct.pack('<I', crc32c(data))
    return r
def sqe(opc, cid, nsid=0, cdw=None, sgl_type=0x5A, sgl_len=0, fctype=None, extra=None):
    b = bytearray(64); b[0]=opc; b[1]=0x40; struct.pack_into('<H', b, 2, cid); struct.pack_into('<I', b, 4, nsid)
    if fctype is not None: b[4] = fctype
    struct.pack_into('<I', b, 32, sgl_len); b[39] = sgl_type
    for i, v in (cdw or {}).items(): struct.pack_into('<I', b, 4*i, v)
    for off, v in (extra or []): b[off:off+len(v)] = v
    return bytes(b)
def connect_data(subnqn, hostnqn, cntlid=0xFFFF):
    d = bytearray(1024); struct.pack_into('<H', d, 16, cntlid)
    d[256:256+len(subnqn)] = subnqn.encode(); d[512:512+len(hostnqn)] = hostnqn.encode(); return bytes(d)
def connect(qid, sub, host, cntlid=0xFFFF, hd=False, dd=False, cattr=0):
    s = sqe(0x7F, 1, fctype=1, sgl_type=0x01, sgl_len=1024,
            extra=[(42, struct.pack('<HHB', qid, 31, cattr)), (48, struct.pack('<I', 5000))])
    return capsule(s, connect_data(sub, host, cntlid), hd, dd)
def h2c(cid, ttag, off, data, hd=False, dd=False):
    hb = 24 + (4 if hd else 0)
    h = bytearray(24); h[0]=6; h[1]=(1 if hd else 0)|(2 if dd else 0)|4; h[2]=24; h[3]=hb
    struct.pack_into('<I', h, 4, hb+len(data)+(4 if dd else 0)); struct.pack_into('<HHII', h, 8, cid, ttag, off, len(data))
    r = bytes(h) + (struct.pack('<I', crc32c(h)) if hd else b'') + data
    if dd: r += struct.pack('<I', crc32c(data))
    return r
SUB='nqn.2024-01.io.kvtier:fuzz'; HOST='nqn.2024-01.io.kvtier:fuzz-host'; DISC='nqn.2014-08.org.nvmexpress.discovery'
prop_set_en = capsule(sqe(0x7F, 2, fctype=0, sgl_type=0x5A, extra=[(44, struct.pack('<IQ', 0x14, 0x460001))]))
prop_get_cap = capsule(sqe(0x7F, 3, fctype=4, sgl_type=0x5A, extra=[(40, b'\x01'), (44, struct.pack('<I', 0))]))
ident = lambda cid, cns, nsid=0: capsule(sqe(0x06, cid, nsid, {10: cns}, sgl_len=4096))
seeds = {
 'icreq_only': icreq(),
 'admin_enable_identify': icreq() + connect(0, SUB, HOST) + prop_get_cap + prop_set_en + ident(4, 1) + ident(5, 2) + ident(6, 0, 1) + ident(7, 3, 2)
   + capsule(sqe(0x09, 8, cdw={10: 7, 11: 0x00030003})) + capsule(sqe(0x0A, 9, cdw={10: 0x0F})) + capsule(sqe(0x18, 10)) + capsule(sqe(0x0C, 31))
   + capsule(sqe(0x02, 11, 0xFFFFFFFF, {10: 0x007F0002}, sgl_len=512)),
 'admin_digests': icreq(True, True) + connect(0, SUB, HOST, hd=True, dd=True) + capsule(sqe(0x06, 4, 0, {10: 1}, sgl_len=4096), hd=True, dd=True),
 'discovery_log': icreq() + connect(0, DISC, HOST) + prop_set_en + capsule(sqe(0x02, 4, 0, {10: 0x00FF0070}, sgl_len=1024)) + capsule(sqe(0x02, 5, 0, {10: 0x01FF0070, 12: 1024}, sgl_len=2048)),
 'denied_host': icreq() + connect(0, SUB, 'nqn.2024-01.io.kvtier:other'),
 'io_incapsule_write_read': icreq() + connect(1, SUB, HOST, cntlid=1)
   + capsule(sqe(0x01, 2, 1, {10: 0, 11: 0, 12: 7}, sgl_type=0x01, sgl_len=4096), bytes(range(256))*16)
   + capsule(sqe(0x02, 3, 1, {10: 0, 11: 0, 12: 7}, sgl_len=4096)) + capsule(sqe(0x00, 4, 1)),
 'io_r2t_write': icreq() + connect(1, SUB, HOST, cntlid=1)
   + capsule(sqe(0x01, 2, 2, {10: 3, 12: 7}, sgl_len=32768)) + h2c(2, 0, 0, b'\xab'*16384) + h2c(2, 0, 16384, b'\xcd'*16384)
   + capsule(sqe(0x02, 3, 2, {10: 3, 12: 7}, sgl_len=32768)),
 'io_r2t_digests_sqflow': icreq(True, True) + connect(1, SUB, HOST, cntlid=1, hd=True, dd=True, cattr=4)
   + capsule(sqe(0x01, 2, 2, {10: 1, 12: 1}, sgl_len=8192), hd=True) + h2c(2, 0, 0, b'\x11'*8192, True, True)
   + capsule(sqe(0x02, 3, 2, {10: 1, 12: 1}, sgl_len=8192), hd=True),
 'io_dsm_wz_oob': icreq() + connect(1, SUB, HOST, cntlid=1)
   + capsule(sqe(0x09, 2, 1, {10: 0, 11: 4}, sgl_type=0x01, sgl_len=16), struct.pack('<IIQ', 0, 8, 16))
   + capsule(sqe(0x08, 3, 1, {10: 100, 12: 15})) + capsule(sqe(0x02, 4, 1, {10: 2047, 12: 7}, sgl_len=4096)),
}
os.makedirs(out, exist_ok=True)
for k, v in seeds.items():
    open(os.path.join(out, k), 'wb').write(v)
print(len(seeds), 'seeds')
