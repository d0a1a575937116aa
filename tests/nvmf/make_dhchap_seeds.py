#!/usr/bin/env python3
# Writes the seed inputs of the DH-HMAC-CHAP fuzzer (src/nvmf/dhchap_fuzz.cc)
# into the folder given: python3 make_dhchap_seeds.py fuzz/corpus/dhchap
# Each input is a mode byte (0 decoder, 1 controller, 2/3 host without/with a
# controller key) and, for modes 1-3, messages as a 2-byte length and bytes.
import os, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def negotiate(tid=0):
    b = bytearray(72); struct.pack_into('<H', b, 4, tid); b[7] = 1; b[8] = 1; b[10] = 3; b[11] = 6
    b[12:15] = bytes([1, 2, 3]); b[42:48] = bytes(range(6)); return bytes(b)
def challenge(tid=0, hashid=1, group=0):
    hl = {1: 32, 2: 48, 3: 64}[hashid]; dhv = {0: 0, 1: 256}[group]
    b = bytearray(16 + hl + dhv); b[0] = 1; b[1] = 1; struct.pack_into('<H', b, 4, tid); b[6] = hl
    b[8] = hashid; b[9] = group; struct.pack_into('<HI', b, 10, dhv, 7)
    b[16:16 + hl] = bytes(range(hl))
    if dhv: b[16 + hl + dhv - 1] = 2
    return bytes(b)
def reply(tid=0, hl=32, cvalid=0):
    b = bytearray(16 + 2 * hl); b[0] = 1; b[1] = 2; struct.pack_into('<H', b, 4, tid); b[6] = hl
    b[8] = cvalid; struct.pack_into('<I', b, 12, 5); return bytes(b)
def success1(tid=0, hl=32, rvalid=0):
    b = bytearray(16 + hl); b[0] = 1; b[1] = 3; struct.pack_into('<H', b, 4, tid); b[6] = hl; b[8] = rvalid
    return bytes(b)
def success2(tid=0):
    b = bytearray(16); b[0] = 1; b[1] = 4; struct.pack_into('<H', b, 4, tid); return bytes(b)
def failure(tid=0, ident=0xF1, reason=1):
    return bytes([0, ident, 0, 0]) + struct.pack('<H', tid) + bytes([1, reason])
def msgs(*ms):
    return b''.join(struct.pack('<H', len(m)) + m for m in ms)
seeds = {
    'decode-negotiate': b'\x00' + negotiate(),
    'decode-challenge-ffdhe2048': b'\x00' + challenge(3, 2, 1),
    'decode-reply': b'\x00' + reply(1, 48, 1),
    'decode-success1': b'\x00' + success1(1, 64, 1),
    'decode-failure2': b'\x00' + failure(1, 0xF0, 6),
    'controller-negotiate-reply': b'\x01' + msgs(negotiate(4), reply(4, 48)),
    'controller-bidirectional': b'\x01' + msgs(negotiate(4), reply(4, 48, 1), success2(4)),
    'controller-out-of-order': b'\x01' + msgs(success2(0), negotiate(1)),
    'host-challenge-success1': b'\x02' + msgs(challenge(9), success1(9)),
    'host-failure1': b'\x02' + msgs(failure(9)),
    'host-ctrl-key-success1': b'\x03' + msgs(challenge(9, 3), success1(9, 64, 1)),
    'host-ffdhe2048': b'\x03' + msgs(challenge(9, 1, 1), success1(9, 32, 1)),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
