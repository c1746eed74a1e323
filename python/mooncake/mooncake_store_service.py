#!/usr/bin/env python3
"""mooncake_store_service: a store client with a REST API (Mooncake's module of that name).

    python3 -m mooncake.mooncake_store_service --config mooncake.json --port 8080
    python3 -m mooncake.mooncake_store_service -Dmaster_server_address=127.0.0.1:50051 --port 8080

The service sets up one MooncakeDistributedStore from a Mooncake config file
(``--config``) or the ``MOONCAKE_*`` environment, with ``-Dkey=value`` overrides,
retrying for ``--max-wait-time`` seconds while the master is not up, and then
answers on ``--port`` (all interfaces):

    PUT    /api/put              {"key": k, "value": text}     -> {"status": "success"}
    GET    /api/get/{key}        -> the value (application/octet-stream), 404 when missing
    GET    /api/exist/{key}      -> {"exists": bool}
    DELETE /api/remove/{key}     -> {"status": "success"}
    DELETE /api/remove_all       -> {"status": "success removed N keys"}
    POST   /api/mount, /api/unmount, /api/mount_shm, /api/unmount_shm,
           /api/reconfigure {"mode": "decode"|"prefill", ...}, /api/unmount_local_disk

Errors are ``{"error": message}`` with 400 (bad request), 404 or 500. The
segment-mounting routes call the store's mount methods (mount_segment of a
/dev/shm file, allocate_and_mount_segment, unmount_segment; only
/api/unmount_local_disk answers 500: draining the disk tier is not supported). The HTTP server is
aiohttp when it is installed (as in Mooncake), otherwise the standard library's.
"""

import argparse
import asyncio
import json
import logging
import signal
import threading
import time

try:
    from aiohttp import web
except ImportError:  # no aiohttp: the standard library server below
    web = None

from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore

# The most a caller may ask /api/unmount_local_disk to wait (seconds).
_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600


class _Response(object):
    """What a handler returns when aiohttp is absent (aiohttp.web.Response's fields)."""

    def __init__(self, status=200, text=None, body=None, content_type=None):
        self.status = status
        self.text = text
        self.body = body
        self.content_type = content_type


def _response(status, payload=None, body=None):
    """A JSON response (payload) or a raw one (body)."""
    make = web.Response if web is not None else _Response
    if body is not None:
        return make(status=status, body=body, content_type="application/octet-stream")
    return make(status=status, text=json.dumps(payload), content_type="application/json")


def _error(status, message, **extra):
    payload = {"error": message}
    payload.update(extra)
    return _response(status, payload)


def _ok(**extra):
    payload = {"status": "success"}
    payload.update(extra)
    return _response(200, payload)


def _timed_handler(operation_name, handler):
    """handler, logging how long each call took."""
    async def timed(request):
        t0 = time.perf_counter()
        try:
            return await handler(request)
        finally:
            logging.info("%s operation completed in %.2f ms", operation_name, (time.perf_counter() - t0) * 1e3)
    return timed


def _shm_name_to_path(name):
    """/dev/shm/<name> for a plain shared-memory object name (one leading / allowed), else None."""
    if not isinstance(name, str):
        return None
    base = name[1:] if name.startswith("/") else name
    if base in ("", ".", "..") or "/" in base:
        return None
    return "/dev/shm/" + base


def _unblock_shutdown_signals():
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _install_shutdown_signal_handlers(loop, shutdown_event):
    """SIGINT and SIGTERM set shutdown_event."""
    def on_signal(signum):
        logging.info("Received signal %s, shutting down", signum)
        shutdown_event.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
        except (NotImplementedError, RuntimeError):
            signal.signal(sig, lambda signum, _frame: loop.call_soon_threadsafe(on_signal, signum))


class MooncakeStoreService(object):
    """A MooncakeDistributedStore behind a REST API.

    config_path names a Mooncake JSON config (else the MOONCAKE_* environment is
    read); cli_config overrides its fields by name.
    """

    def __init__(self, config_path=None, cli_config=None):
        self.store = None
        self.config = None
        self._setup_logging()
        self.current_mode = "prefill"      # /api/reconfigure: "prefill" or "decode"
        self.mounted_segment_ids = []      # segments mounted for decode mode
        self.last_mount_info = {}          # the decode mount's parameters
        self._state_lock = asyncio.Lock()  # serializes mode and mount changes
        try:
            self.config = MooncakeConfig.from_file(config_path) if config_path else MooncakeConfig.load_from_env()
            for key, value in (cli_config or {}).items():
                if hasattr(self.config, key):
                    setattr(self.config, key, value)
            logging.info("Mooncake configuration loaded")
        except Exception as e:
            logging.error("Configuration load failed: %s", e)
            raise

    def _setup_logging(self):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")

    def _setup_args(self):
        c = self.config
        return {
            "local_hostname": c.local_hostname,
            "metadata_server": c.metadata_server,
            "global_segment_size": c.global_segment_size,
            "local_buffer_size": c.local_buffer_size,
            "protocol": c.protocol,
            "rdma_devices": c.device_name,
            "master_server_addr": c.master_server_address,
            "enable_ssd_offload": c.enable_ssd_offload,
            "ssd_offload_path": c.ssd_offload_path,
            "tenant_id": c.tenant_id,
            "enable_client_http_server": getattr(c, "enable_client_http_server", False),
            "client_http_port": getattr(c, "client_http_port", 9300),
        }

    async def start_store_service(self, max_wait_time=60, shutdown_event=None):
        """Sets the store up, retrying once a second for max_wait_time seconds; a set
        shutdown_event cancels. True when the store is up."""
        start = time.perf_counter()
        attempt = 0

        def cancelled():
            return shutdown_event is not None and shutdown_event.is_set()

        if shutdown_event is not None:
            await asyncio.sleep(0)  # let a signal queued before us be seen
        while True:
            if cancelled():
                logging.info("Store startup cancelled by shutdown request")
                return False
            elapsed = time.perf_counter() - start
            if elapsed >= max_wait_time:
                logging.error("Store startup failed: exceeded max wait time of %ss after %d attempts",
                              max_wait_time, attempt)
                return False
            attempt += 1
            try:
                logging.info("Attempting to start store service (attempt %d, elapsed: %.1fs/%ss)", attempt,
                             elapsed, max_wait_time)
                self.store = MooncakeDistributedStore()
                rc = self.store.setup(self._setup_args())
                if shutdown_event is not None:
                    await asyncio.sleep(0)  # setup blocked the loop: look for a shutdown that came meanwhile
                    if cancelled():
                        logging.info("Store startup cancelled by shutdown request")
                        await self.stop()
                        return False
                if rc != 0:
                    raise RuntimeError("Store initialization failed")
                logging.info("Store service started successfully on %s", self.config.local_hostname)
                return True
            except Exception as e:
                left = max_wait_time - (time.perf_counter() - start)
                pause = max(0.0, min(1.0, left))
                logging.warning("Store startup failed (attempt %d): %s. Retrying in %.1fs... (remaining time: %.1fs)",
                                attempt, e, pause, left)
                if pause <= 0:
                    continue
                if shutdown_event is None:
                    await asyncio.sleep(pause)
                    continue
                try:
                    await asyncio.wait_for(shutdown_event.wait(), timeout=pause)
                    logging.info("Store startup cancelled by shutdown request")
                    return False
                except asyncio.TimeoutError:
                    pass

    def _routes(self):
        return [
            ("POST", "/api/reconfigure", "RECONFIGURE", self.handle_reconfigure),
            ("POST", "/api/mount_shm", "MOUNT_SHM", self.handle_mount_shm),
            ("POST", "/api/unmount_shm", "UNMOUNT_SHM", self.handle_unmount_shm),
            ("POST", "/api/mount", "MOUNT", self.handle_mount),
            ("POST", "/api/unmount", "UNMOUNT", self.handle_unmount),
            ("POST", "/api/unmount_local_disk", "UNMOUNT_LOCAL_DISK", self.handle_unmount_local_disk),
            ("PUT", "/api/put", "PUT", self.handle_put),
            ("GET", "/api/get/{key}", "GET", self.handle_get),
            ("GET", "/api/exist/{key}", "EXIST", self.handle_exist),
            ("DELETE", "/api/remove/{key}", "REMOVE", self.handle_remove),
            ("DELETE", "/api/remove_all", "REMOVE_ALL", self.handle_remove_all),
        ]

    async def start_http_service(self, port=8080):
        """Serves the REST API on port (all interfaces). True once listening."""
        if web is not None and hasattr(web, "Application"):
            app = web.Application(client_max_size=100 << 20)
            app.add_routes([web.route(m, p, _timed_handler(name, h)) for m, p, name, h in self._routes()])
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "0.0.0.0", port).start()
        else:
            self._http = _StdlibServer(asyncio.get_running_loop(),
                                       [(m, p, _timed_handler(name, h)) for m, p, name, h in self._routes()])
            self._http.start(port)
        logging.info("REST API started on port %s", port)
        return True

    # --- handlers ----------------------------------------------------------

    async def handle_reconfigure(self, request):
        try:
            data = await request.json()
            mode = str(data.get("mode", "")).lower()
            if mode == "decode":
                return await self._to_decode(data)
            if mode == "prefill":
                async with self._state_lock:
                    if self.mounted_segment_ids:
                        rc = self.store.unmount_segment(self.mounted_segment_ids)
                        if rc != 0:
                            return _error(500, "Unmount failed, ret=%s" % rc)
                        self.mounted_segment_ids.clear()
                    self.current_mode = "prefill"
                    self.last_mount_info.clear()
                return _ok(mode=self.current_mode)
            return _error(400, "Invalid mode. Use 'decode' or 'prefill'")
        except Exception as e:
            logging.error("RECONFIGURE error: %s", e)
            return _error(500, str(e))

    async def _to_decode(self, data):
        """Mounts the new decode segment, then retires the previous ones (make before break)."""
        path, size = data.get("path"), data.get("size")
        offset = data.get("offset", 0)
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        if not path or size is None:
            return _error(400, "Missing path or size for decode mode")
        async with self._state_lock:
            previous = list(self.mounted_segment_ids)
            result = self.store.mount_segment(path, size, offset, protocol, location)
            rc = result["ret"]
            if rc != 0:
                if previous:
                    logging.warning("Reconfigure decode: mount of %s failed (ret=%s); keeping previous segments",
                                    path, rc)
                    return _error(500, "Mount failed, ret=%s; keeping previous decode segments" % rc,
                                  mode=self.current_mode)
                self.current_mode = "prefill"
                self.mounted_segment_ids.clear()
                self.last_mount_info.clear()
                return _error(500, "Mount failed, ret=%s; rolled back to prefill" % rc, mode=self.current_mode)
            # one id at a time: a batch unmount reports only its first error
            still_mounted = [sid for sid in previous if self.store.unmount_segment([sid]) != 0]
            if still_mounted:
                logging.warning("Reconfigure decode: could not unmount previous segments %s; still tracked",
                                still_mounted)
            self.mounted_segment_ids = list(result["segment_ids"]) + still_mounted
            self.current_mode = "decode"
            self.last_mount_info = {"path": path, "offset": offset, "size": size, "protocol": protocol,
                                    "location": location}
        return _ok(mode=self.current_mode, segment_ids=self.mounted_segment_ids)

    async def handle_mount_shm(self, request):
        try:
            data = await request.json()
            path = _shm_name_to_path(data.get("name"))
            size = data.get("size")
            if not path or size is None:
                return _error(400, "Missing or invalid name or size")
            result = self.store.mount_segment(path, size, data.get("offset", 0),
                                              data.get("protocol", self.config.protocol), data.get("location", ""))
            if result["ret"] != 0:
                return _error(500, "Mount failed, ret=%s" % result["ret"])
            return _ok(segment_ids=list(result["segment_ids"]))
        except Exception as e:
            logging.error("MOUNT_SHM error: %s", e)
            return _error(500, str(e))

    @staticmethod
    def _segment_ids(data):
        ids = data.get("segment_ids", [])
        return [ids] if isinstance(ids, str) else ids

    async def handle_unmount_shm(self, request):
        try:
            data = await request.json()
            ids = self._segment_ids(data)
            if not ids:
                return _error(400, "Missing segment_ids")
            grace = data.get("grace_period_seconds", 0)
            failed = []
            async with self._state_lock:
                for sid in ids:
                    if self.store.unmount_segment([sid], grace) != 0:
                        failed.append(sid)
                    elif sid in self.mounted_segment_ids:
                        self.mounted_segment_ids.remove(sid)
                if not self.mounted_segment_ids:
                    self.current_mode = "prefill"
            if failed:
                return _error(500, "Unmount failed for one or more segments", failed_segment_ids=failed)
            return _ok()
        except Exception as e:
            logging.error("UNMOUNT_SHM error: %s", e)
            return _error(500, str(e))

    async def handle_mount(self, request):
        try:
            data = await request.json()
            size = data.get("size")
            if type(size) is not int or size <= 0:
                return _error(400, "Invalid size, must be a positive integer")
            result = self.store.allocate_and_mount_segment(size, data.get("protocol", self.config.protocol),
                                                           data.get("location", ""))
            if result["ret"] != 0:
                return _error(500, "Allocate and mount failed, ret=%s" % result["ret"])
            return _ok(segment_ids=list(result["segment_ids"]), allocated_size=result["allocated_size"])
        except Exception as e:
            logging.error("MOUNT error: %s", e)
            return _error(500, str(e))

    async def handle_unmount(self, request):
        try:
            data = await request.json()
            ids = self._segment_ids(data)
            if not ids:
                return _error(400, "Missing segment_ids")
            rc = self.store.unmount_and_free_segment(ids, data.get("grace_period_seconds", 0))
            if rc != 0:
                return _error(500, "Unmount and free failed, ret=%s" % rc)
            return _ok()
        except Exception as e:
            logging.error("UNMOUNT error: %s", e)
            return _error(500, str(e))

    async def handle_unmount_local_disk(self, request):
        """Withdraws this store's disk tier (a preStop hook), then waits grace_period_seconds."""
        try:
            data = await request.json()
        except Exception:
            return _error(400, "Malformed JSON body")
        if not isinstance(data, dict):
            return _error(400, "Request body must be a JSON object")
        grace = data.get("grace_period_seconds", 0)
        if type(grace) is not int or not (0 <= grace <= _MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS):
            return _error(400, "Invalid grace_period_seconds, must be a non-negative integer no greater than %d"
                          % _MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS)
        try:
            rc = await asyncio.to_thread(self.store.unmount_local_disk_segment, grace)
            if rc != 0:
                return _error(500, "Unmount local disk failed, ret=%s" % rc)
            return _ok()
        except Exception as e:
            logging.error("UNMOUNT_LOCAL_DISK error: %s", e)
            return _error(500, str(e))

    async def handle_put(self, request):
        try:
            data = await request.json()
            key = data.get("key")
            if not key:
                return _error(400, "Missing key or value")
            value = data.get("value")
            if not isinstance(value, str):
                raise ValueError("value must be a string, got %s" % type(value).__name__)
            if self.store.put(key, value.encode()) != 0:
                return _error(500, "PUT operation failed")
            return _ok()
        except Exception as e:
            logging.error("PUT error: %s", e)
            return _error(500, str(e))

    def _missing(self, key):
        """A 404/500 response when key is absent or cannot be checked, else None."""
        n = self.store.is_exist(key)
        if n == 0:
            return _error(404, "Key not found")
        if n < 0:
            return _error(500, "Exist check failed")
        return None

    async def handle_get(self, request):
        try:
            key = request.match_info["key"]
            bad = self._missing(key)
            if bad is not None:
                return bad
            value = self.store.get(key)
            if value is None:
                return _error(500, "GET operation failed")
            if value == b"":
                # an empty value and a key removed since the check look the same
                bad = self._missing(key)
                if bad is not None:
                    return bad
            return _response(200, body=value)
        except Exception as e:
            logging.error("GET error: %s", e)
            return _error(500, str(e))

    async def handle_exist(self, request):
        try:
            n = self.store.is_exist(request.match_info["key"])
            if n < 0:
                return _error(500, "Exist check failed")
            return _response(200, {"exists": n > 0})
        except Exception as e:
            logging.error("EXIST error: %s", e)
            return _error(500, str(e))

    async def handle_remove(self, request):
        try:
            if self.store.remove(request.match_info["key"]) != 0:
                return _error(500, "Remove operation failed")
            return _ok()
        except Exception as e:
            logging.error("REMOVE error: %s", e)
            return _error(500, str(e))

    async def handle_remove_all(self, request):
        try:
            n = self.store.remove_all()
            if n < 0:
                return _error(500, "RemoveAll operation failed")
            return _response(200, {"status": "success removed %d keys" % n})
        except Exception as e:
            logging.error("REMOVE_ALL error: %s", e)
            return _error(500, str(e))

    async def stop(self):
        """Closes the store (once) and the standard-library server if any."""
        http = getattr(self, "_http", None)
        if http is not None:
            http.close()
            self._http = None
        store, self.store = self.store, None
        if store is None:
            return
        rc = store.close()
        if rc != 0:
            logging.warning("Mooncake service close returned %s", rc)
        else:
            logging.info("Mooncake service stopped")


class _StdlibRequest(object):
    def __init__(self, body, match_info):
        self._body = body
        self.match_info = match_info

    async def json(self):
        return json.loads(self._body.decode("utf-8") if self._body else "null")


class _StdlibServer(object):
    """The REST routes on http.server threads, each handler run on the service's loop."""

    def __init__(self, loop, routes):
        self.loop = loop
        self.routes = [(m, p.split("/"), h) for m, p, h in routes]
        self.server = None

    def _match(self, method, path):
        parts = path.split("?", 1)[0].split("/")
        for m, pattern, handler in self.routes:
            if m != method or len(pattern) != len(parts):
                continue
            info = {}
            for want, got in zip(pattern, parts):
                if want.startswith("{") and want.endswith("}"):
                    if not got:
                        break
                    from urllib.parse import unquote
                    info[want[1:-1]] = unquote(got)
                elif want != got:
                    break
            else:
                return handler, info
        return None, None

    def start(self, port):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                handler, info = outer._match(self.command, self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if handler is None:
                    resp = _Response(404, json.dumps({"error": "Not Found"}), None, "application/json")
                else:
                    fut = asyncio.run_coroutine_threadsafe(handler(_StdlibRequest(body, info)), outer.loop)
                    resp = fut.result()
                data = resp.body if resp.body is not None else (resp.text or "").encode()
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.content_type or "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = _serve

            def log_message(self, fmt, *args):
                logging.debug("store service: " + fmt, *args)

        self.server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="mooncake-store-service", daemon=True).start()

    def close(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def parse_arguments():
    p = argparse.ArgumentParser(description="Mooncake Store Service with REST API")
    p.add_argument("--config", type=str, help="Path to Mooncake config file", required=False)
    p.add_argument("-D", "--define", action="append", default=[],
                   help="Override configuration with key=value pairs (e.g., -Dlocal_hostname=example.com)")
    p.add_argument("--port", type=int, default=8080, help="HTTP API port (default: 8080)")
    p.add_argument("--max-wait-time", type=float, default=60,
                   help="Maximum total wait time in seconds (default: 60)")
    return p.parse_args()


async def main():
    args = parse_arguments()
    overrides = {}
    for item in args.define:
        key, sep, value = item.partition("=")
        if sep:
            overrides[key] = value
        else:
            logging.warning("Ignoring invalid CLI config: %s", item)
    service = MooncakeStoreService(args.config, overrides)
    shutdown_event = asyncio.Event()
    _install_shutdown_signal_handlers(asyncio.get_running_loop(), shutdown_event)
    _unblock_shutdown_signals()
    try:
        if not await service.start_store_service(max_wait_time=args.max_wait_time, shutdown_event=shutdown_event):
            if shutdown_event.is_set():
                return
            raise RuntimeError("Failed to start store service")
        await asyncio.sleep(0)
        if shutdown_event.is_set():
            return
        if not await service.start_http_service(args.port):
            raise RuntimeError("Failed to start HTTP service")
        logging.info("Mooncake Store Service is running")
        print("mooncake store service ready on port %d" % args.port, flush=True)
        await shutdown_event.wait()
    except KeyboardInterrupt:
        logging.info("Received keyboard interrupt, shutting down")
    finally:
        await service.stop()


def sync_main():
    """Entry point (Mooncake's ``mc_store_rest_server``)."""
    return asyncio.run(main())


if __name__ == "__main__":
    sync_main()
