"""mooncake.http_metadata_server: Mooncake's HTTP metadata server, on the standard library.

``KVBootstrapServer(port, host="0.0.0.0")`` keeps transfer-engine metadata in
memory behind ``/metadata?key=K`` with Mooncake's contract: ``GET`` returns the
value (404 when missing), ``PUT`` stores the body (a second ``rpc_meta`` key is
refused with 400), ``DELETE`` removes it (404 when missing); a missing or blank
key is 400, other methods 405. Keys are trimmed. ``run()`` serves in a
background thread, ``close()`` stops it, ``poll()`` reports ``KVPoll.Success``
while it runs. ``python3 -m mooncake.http_metadata_server --port 8080`` runs
one in the foreground (``mooncake metadata-server`` is the Go equivalent).

Mooncake's version is built on aiohttp; this one needs nothing beyond the
standard library. ``_handle_metadata(request)`` is a coroutine taking any
object with ``method``, ``query`` (a dict) and an async ``read()``, and
returning a :class:`Response` (``status``, ``content_type``, ``body``, ``text``).
"""

import argparse
import asyncio
import enum
import http.server
import logging
import signal
import sys
import threading
import urllib.parse

__all__ = ["KVBootstrapServer", "KVPoll", "Response", "main"]

log = logging.getLogger("mooncake.http_metadata_server")


class KVPoll(enum.Enum):
    """Status of the server (Mooncake's values)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class Response(object):
    """An HTTP answer: status, content type and body (bytes)."""

    def __init__(self, status, body=b"", content_type="application/json"):
        self.status = status
        self.content_type = content_type
        self.body = body if isinstance(body, bytes) else str(body).encode("utf-8")

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")


class _Request(object):
    """What the HTTP handler passes to _handle_metadata."""

    def __init__(self, method, query, body):
        self.method = method
        self.query = query
        self._body = body

    async def read(self):
        return self._body


class KVBootstrapServer(object):
    """An in-memory HTTP metadata store."""

    def __init__(self, port, host="0.0.0.0"):
        self.port = port
        self.host = host
        self.store = {}
        self._lock = threading.Lock()
        self._httpd = None
        self.thread = None

    async def _handle_metadata(self, request):
        key = (request.query.get("key") or "").strip()
        if not key:
            return Response(400, "metadata key is required")
        if request.method == "GET":
            with self._lock:
                value = self.store.get(key)
            if value is None:
                return Response(404, "metadata not found")
            return Response(200, value)
        if request.method == "PUT":
            data = await request.read()
            with self._lock:
                if "rpc_meta" in key and key in self.store:
                    return Response(400, "Duplicate rpc_meta key not allowed")
                self.store[key] = bytes(data)
            return Response(200, "metadata updated")
        if request.method == "DELETE":
            with self._lock:
                if key not in self.store:
                    return Response(404, "metadata not found")
                del self.store[key]
            return Response(200, "metadata deleted")
        return Response(405, "Method not allowed")

    def _handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                url = urllib.parse.urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n > 0 else b""
                if url.path != "/metadata":
                    resp = Response(404, "not found")
                else:
                    query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
                    resp = asyncio.run(server._handle_metadata(_Request(self.command, query, body)))
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.content_type)
                self.send_header("Content-Length", str(len(resp.body)))
                self.end_headers()
                self.wfile.write(resp.body)

            do_GET = do_PUT = do_DELETE = do_POST = _serve

            def log_message(self, fmt, *args):
                log.debug("%s " + fmt, self.address_string(), *args)

        return Handler

    def run(self):
        """Starts serving in a background thread; returns the thread. ``port`` 0 picks a free port."""
        self._httpd = http.server.ThreadingHTTPServer((self.host, self.port), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.thread = threading.Thread(target=self._httpd.serve_forever, name="mooncake-http-metadata", daemon=True)
        self.thread.start()
        log.info("HTTP metadata server on %s:%d", self.host, self.port)
        return self.thread

    def close(self):
        """Stops the server."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=2)

    def poll(self):
        """KVPoll.Success while serving, else KVPoll.Failed."""
        if self.thread is None or not self.thread.is_alive():
            return KVPoll.Failed
        return KVPoll.Success


def parse_args(argv=None):
    """The command line (Mooncake's): --port (8080), --host (0.0.0.0), --log-level (INFO)."""
    p = argparse.ArgumentParser(description="HTTP metadata server for Mooncake",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--port", type=int, default=8080, help="Port to listen on")
    p.add_argument("--host", default="0.0.0.0", help="Host to bind to")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="Logging level")
    return p.parse_args(argv)


def main(argv=None):
    """Entry point (Mooncake's ``mooncake_http_metadata_server``): --port, --host, --log-level."""
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level))
    server = KVBootstrapServer(port=args.port, host=args.host)
    server.run()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
