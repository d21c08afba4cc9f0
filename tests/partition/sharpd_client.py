"""A client of sharpd's local socket, as a process of a job speaks to it
(sharpd/sharpd.c: hello, job_begin, group_create, group_destroy, job_end),
for the partition runner (nemesis.py).  Frames: protocol/ctl.h (magic
0x5348, version 1, type 1 = message, a 32-bit length, then JSON).  What
sharpd sends on its own between a request and its answer (group_revoked,
job_killed) goes to the `note` callback."""
import json
import socket
import struct
import time

MAGIC, VERSION, FRAME_MSG = 0x5348, 1, 1


class Lost(Exception):
    """the connection is gone or did not answer in time"""


class SharpdClient:
    def __init__(self, path, note=None, timeout=30.0):
        self.path, self.note, self.timeout = path, note, timeout
        self.sock, self.next_id, self.buf = None, 0, b""

    def connect(self):
        self.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise Lost("connect: %s" % e)
        self.sock, self.buf = s, b""
        return self.call({"type": "hello"})

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def _read_frame(self, deadline):
        while True:
            if len(self.buf) >= 8:
                magic, ver, ftype, n = struct.unpack(">HBBI", self.buf[:8])
                if magic != MAGIC or ver != VERSION or n > 4 << 20:
                    raise Lost("bad frame from sharpd")
                if len(self.buf) >= 8 + n:
                    body, self.buf = self.buf[8:8 + n], self.buf[8 + n:]
                    if ftype == FRAME_MSG:
                        return json.loads(body)
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise Lost("no answer in %.0f s" % self.timeout)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise Lost("no answer in %.0f s" % self.timeout)
            except OSError as e:
                raise Lost("recv: %s" % e)
            if not chunk:
                raise Lost("sharpd closed the connection")
            self.buf += chunk

    def call(self, msg):
        """send msg, return its answer (what came before it: to note)"""
        if self.sock is None:
            raise Lost("not connected")
        self.next_id += 1
        msg = dict(msg, id=self.next_id)
        body = json.dumps(msg).encode()
        try:
            self.sock.sendall(struct.pack(">HBBI", MAGIC, VERSION, FRAME_MSG,
                                          len(body)) + body)
        except OSError as e:
            raise Lost("send: %s" % e)
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read_frame(deadline)
            if m.get("id") == self.next_id and m.get("type", "").endswith(
                    "_ack"):
                return m
            if self.note is not None:
                self.note(m)

    def poll_notes(self):
        """what sharpd sent on its own since the last call"""
        if self.sock is None:
            return
        self.sock.setblocking(False)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise Lost("sharpd closed the connection")
                self.buf += chunk
        except BlockingIOError:
            pass
        except OSError as e:
            raise Lost("recv: %s" % e)
        finally:
            if self.sock is not None:
                self.sock.setblocking(True)
        while len(self.buf) >= 8:
            n = struct.unpack(">HBBI", self.buf[:8])[3]
            if len(self.buf) < 8 + n:
                break
            m = self._read_frame(time.monotonic() + 1)
            if self.note is not None:
                self.note(m)
