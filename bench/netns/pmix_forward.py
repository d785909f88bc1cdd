#!/usr/bin/env python3
"""Lets an Open MPI rank started inside a network namespace reach its launcher.

Open MPI's launcher (mpirun/orted) serves PMIx on 127.0.0.1 of the namespace it runs in; a
rank moved into another namespace sees another loopback. This listens on 127.0.0.1:PORT
inside NAMESPACE and forwards every connection to 127.0.0.1:PORT here. Prints "ready" once
listening; exits 120 s after the last connection was accepted, or when killed.

    pmix_forward.py NAMESPACE PORT
"""
import ctypes, os, socket, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
ns, port = sys.argv[1], int(sys.argv[2])
root = os.open('/proc/self/ns/net', os.O_RDONLY)
target = os.open('/var/run/netns/' + ns, os.O_RDONLY)
assert libc.setns(target, CLONE_NEWNET) == 0
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(('127.0.0.1', port))
lst.listen(64)
assert libc.setns(root, CLONE_NEWNET) == 0
print('ready', flush=True)
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
lst.settimeout(120)
while True:
    try: c, _ = lst.accept()
    except socket.timeout: break
    u = socket.create_connection(('127.0.0.1', port))
    for x, y in ((c, u), (u, c)):
        threading.Thread(target=pump, args=(x, y), daemon=True).start()
