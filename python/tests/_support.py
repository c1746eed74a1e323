"""Helpers shared by the binding tests: child processes with readiness lines."""

import json
import os
import select
import socket
import subprocess
import sys
import time

import mooncake

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Where the mooncake package under test lives: the installed wheel's
# site-packages (make test) or the checkout's python/ (PYTHONPATH=python).
# Child interpreters get it as PYTHONPATH so they test the same package.
PACKAGE_PATH = os.path.dirname(os.path.dirname(os.path.abspath(mooncake.__file__)))


def mooncake_bin():
    """Path of the built mooncake binary (MOONCAKE_BIN, else bin/mooncake)."""
    return os.environ.get("MOONCAKE_BIN") or os.path.join(ROOT, "bin", "mooncake")


class Child(object):
    """A child process we talk to by lines on stdin/stdout; stderr goes to ours."""

    def __init__(self, argv, env=None, cwd=None):
        e = dict(os.environ)
        e.update(env or {})
        self.argv = argv
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=e, cwd=cwd,
                                  bufsize=0)
        self._buf = b""

    def readline(self, timeout=30.0):
        """Returns the next stdout line (str, no newline); fails at the deadline or on exit."""
        deadline = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no line from %s within %.0fs" % (self.argv[:3], timeout))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("%s exited (code %s) before writing a line" % (self.argv[:3], self.p.poll()))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def read_until(self, predicate, timeout=30.0):
        """Reads lines until predicate(line) is true; returns that line."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(max(0.01, deadline - time.monotonic()))
            if predicate(line):
                return line

    def call(self, obj, timeout=30.0):
        """Sends a JSON command line and returns the JSON reply line."""
        self.p.stdin.write((json.dumps(obj) + "\n").encode())
        self.p.stdin.flush()
        return json.loads(self.readline(timeout))

    def stop(self, timeout=10.0, signal_first=False):
        """Asks the child to end (closing stdin, or SIGTERM first when signal_first,
        then SIGTERM, then SIGKILL) and reaps it; returns the exit code."""
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            if signal_first:
                self.p.terminate()
            try:
                self.p.wait(timeout=timeout / 2)
            except subprocess.TimeoutExpired:
                self.p.terminate()
                try:
                    self.p.wait(timeout=timeout / 2)
                except subprocess.TimeoutExpired:
                    self.p.kill()
                    self.p.wait()
        for f in (self.p.stdout, self.p.stdin):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        return self.p.returncode


def python_child(script, *args, env=None):
    """Starts a Python helper script of this directory with the same interpreter."""
    e = {"PYTHONPATH": PACKAGE_PATH, "PYTHONUNBUFFERED": "1"}
    e.update(env or {})
    return Child([sys.executable, os.path.join(HERE, script)] + [str(a) for a in args], env=e)


def wait_for(predicate, timeout=30.0, interval=0.01):
    """Polls predicate until it returns a true value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met within %.0fs" % timeout)
        time.sleep(interval)


def start_master(*extra):
    """Starts `mooncake master` on free loopback ports (extra: more flags); returns (child, grpc address)."""
    argv = [mooncake_bin(), "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1"] + list(extra)
    c = Child(argv)
    try:
        line = c.read_until(lambda l: "grpc=" in l, timeout=60)
    except Exception:
        c.stop()
        raise
    addr = line.split("grpc=", 1)[1].split()[0]
    return c, addr


def start_storage_node(master, segment_size="256MiB"):
    """Starts `mooncake store` (a storage node) contributing memory to the master's pool."""
    argv = [mooncake_bin(), "store", "--master", master, "--host", "127.0.0.1", "--segment-size", segment_size]
    c = Child(argv)
    try:
        c.read_until(lambda l: "mounted" in l, timeout=60)
    except Exception:
        c.stop()
        raise
    return c


def start_metadata_server():
    """Starts `mooncake metadata-server` on a free loopback port; returns (child, URL)."""
    c = Child([mooncake_bin(), "metadata-server", "--host", "127.0.0.1", "--port", "0"])
    try:
        line = c.read_until(lambda l: "http://" in l, timeout=60)
    except Exception:
        c.stop()
        raise
    return c, line[line.index("http://"):].split()[0]


def free_port():
    """A loopback port nobody listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
