#!/usr/bin/env python3
"""Writes the seed inputs of fuzz/corpus/<target>/: a few valid inputs per fuzzer, in the
layouts that each fuzz_<target>.cpp describes. Run from anywhere; rewrites the seeds."""

import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- store protocol: (selector byte, frame)* ---------------------------------------------
def b(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<I", len(s)) + s


def i64(n):
    return struct.pack("<q", n)


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(b(k) for k in ks)


VERSION = 2  # store/protocol.hpp kVersion


def frame(t, payload):
    return struct.pack("<IBBHI", 0x53444E54, VERSION, t, 0, len(payload)) + payload


(HELLO, SET, GET, ADD, CAS, WAIT, CHECK, DELETE, NUM_KEYS, ON_DISCONNECT, MULTI_GET,
 MULTI_GET_OR_STOP) = range(1, 13)


def on(conn, f):
    return bytes([conn]) + f


hello = frame(HELLO, i64(VERSION) + b(""))
write("fuzz_store_protocol", "set_get",
      on(0, hello) + on(0, frame(SET, b("a") + b("1"))) + on(0, frame(GET, b("a") + i64(-1))))
write("fuzz_store_protocol", "wait_then_set",
      on(0, hello) + on(1, hello) + on(1, frame(WAIT, i64(1000) + keys("x", "y"))) +
      on(0, frame(SET, b("x") + b("v"))) + on(0, frame(SET, b("y") + b("w"))) +
      on(1, frame(CHECK, keys("x", "y", "z"))))
write("fuzz_store_protocol", "counters",
      on(2, frame(HELLO, i64(VERSION) + b("token"))) + on(2, frame(ADD, b("n") + i64(5))) +
      on(2, frame(ADD, b("n") + i64(-7))) + on(2, frame(CAS, b("n") + b("-2") + b("x"))) +
      on(2, frame(NUM_KEYS, b(""))) + on(2, frame(DELETE, b("n"))))
write("fuzz_store_protocol", "get_timeout",
      on(0, hello) + on(0, frame(GET, b("missing") + i64(10))) + on(0x40, frame(NUM_KEYS, b("m"))) +
      on(0, frame(ON_DISCONNECT, b("dead/0") + b("1"))) + on(0x80, b""))
# Two ranks wait for keys or the lost-rank key; the third registers it and disconnects.
write("fuzz_store_protocol", "or_stop",
      on(0, hello) + on(1, hello) + on(2, hello) +
      on(0, frame(ON_DISCONNECT, b("lost") + b("rank 0"))) +
      on(1, frame(MULTI_GET_OR_STOP, i64(1000) + b("lost") + keys("a", "b"))) +
      on(2, frame(MULTI_GET_OR_STOP, i64(-1) + b("lost") + keys("b", "lost"))) +
      on(0, frame(SET, b("a") + b("1"))) + on(0x80, b"") +
      on(1, frame(MULTI_GET, i64(0) + keys("a"))) +
      on(1, frame(MULTI_GET_OR_STOP, i64(0) + b("") + keys("a"))))

# ---- handshake: (who byte) then a HELLO, or then an address record ------------------------
def tcp_hello(frm, to, world, purpose, token):
    token = token.encode()
    return struct.pack("<IHHiiiI", 0x484E4454, 1, purpose, frm, to, world, len(token)) + token


# who = 0x80 | (self << 3) | (world - 2): token "s3cret"
def who(self, world, token):
    return bytes([(0x80 if token else 0) | (self << 3) | (world - 2)])


write("fuzz_handshake", "hello_control", who(1, 4, False) + tcp_hello(0, 1, 4, 0, ""))
write("fuzz_handshake", "hello_token", who(2, 4, True) + tcp_hello(1, 2, 4, 3, "s3cret"))
write("fuzz_handshake", "hello_wrong", who(1, 2, True) + tcp_hello(0, 1, 2, 1, "s3creT"))
write("fuzz_handshake", "record",
      who(0, 2, False) + b"tandem-addr-1\n127.0.0.1\n41234\nhost\nhost/boot/4026531840\n4242\n0\n2")

# ---- frames: (link byte) then requests then what the peer wrote ---------------------------
def tcp_frame(tag, payload, flags=0):
    return struct.pack("<IIQ", tag, flags, len(payload)) + payload


def request(mode, tag, size):
    return bytes([mode]) + struct.pack("<II", tag, size)


payload = bytes(range(64))
# tcp, one stream, small sizes, one recv of 64 bytes with tag 7.
write("fuzz_frame", "tcp_recv", bytes([0, 0, 0, 0]) + request(0, 7, 64) + tcp_frame(7, payload))
# tcp, two requests: a recv, then a recv_reduce of f32 sum (mode 1: dtype f32, op sum).
write("fuzz_frame", "tcp_two",
      bytes([0, 0, 0, 1]) + request(0, 7, 16) + request(1, 8, 32) +
      tcp_frame(7, payload[:16]) + tcp_frame(8, payload[:32]))
# tcp, two streams: stream 0 gets the first 40 bytes (length prefix).
write("fuzz_frame", "tcp_streams",
      bytes([0, 1, 0, 0]) + request(0, 9, 24) + struct.pack("<H", 40) + tcp_frame(9, payload[:24]))


def slot(tag, chunk, msg, data):
    return struct.pack("<IIQ", tag, chunk, msg) + data.ljust(40, b"\0")


# shm, one recv of 24 bytes (inline), no header edits.
write("fuzz_frame", "shm_inline",
      bytes([1, 0]) + request(0, 5, 24) + bytes([0]) + slot(5, 24, 24, payload[:24]))
# shm, a recv of 600 bytes: three chunks of the 256-byte slots (their data stays zero).
write("fuzz_frame", "shm_chunks",
      bytes([1, 0]) + request(0, 6, 600) + bytes([0]) +
      slot(6, 256, 600, b"") + slot(6, 256, 600, b"") + slot(6, 88, 600, b""))
# shm, with the peer changing the channel count in its header (byte 12).
write("fuzz_frame", "shm_header_edit",
      bytes([1, 0]) + request(0, 5, 8) + bytes([1]) + struct.pack("<H", 12) + bytes([1]) +
      slot(5, 8, 8, payload[:8]))

# ---- config: YAML, then "--" and overrides ------------------------------------------------
with open(os.path.join(HERE, "..", "examples", "fashion_mnist", "config.yaml"), "rb") as f:
    write("fuzz_config", "default", f.read())
write("fuzz_config", "small",
      b"training:\n  epochs: 2\n  batch_size: 64\n  lr: 0.1\n  lr_scaling: sqrt\n"
      b"ddp:\n  bucket_cap_mb: 4\n  comm_hook: bf16_compress\n"
      b"checkpoint:\n  dir: /tmp/ck\n  every_steps: 10\n")
write("fuzz_config", "overrides",
      b"data:\n  limit_train: 1000\n--\ntraining.epochs=3\nlog.progress=lines\n"
      b"training.batch_size_per_rank=16\ntraining.batch_size=0\n")
write("fuzz_config", "empty", b"")

# ---- idx: plain and gzip ------------------------------------------------------------------
def idx(type_code, dims, data):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


labels = idx(0x08, [6], bytes([0, 1, 2, 9, 4, 5]))
images = idx(0x08, [2, 3, 3], bytes(range(18)))
floats = idx(0x0D, [2, 2], struct.pack(">4f", 1.0, -2.5, 0.0, 3.25))
write("fuzz_idx", "labels", labels)
write("fuzz_idx", "images", images)
write("fuzz_idx", "floats", floats)
write("fuzz_idx", "labels_gz", gzip.compress(labels, mtime=0))
write("fuzz_idx", "images_gz", gzip.compress(images, mtime=0))
write("fuzz_idx", "two_members_gz", gzip.compress(images[:10], mtime=0) +
      gzip.compress(images[10:], mtime=0))
