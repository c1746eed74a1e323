"""mooncake.vllm_v1_proxy_server against real HTTP servers standing in for vLLM instances."""

import json
import socket
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import httpx
    import uvicorn

    from mooncake import vllm_v1_proxy_server as proxy
except ImportError as exc:  # fastapi/httpx/uvicorn are optional, as in Mooncake
    proxy = None
    _SKIP = str(exc)


class _Instance(object):
    """An HTTP server answering /v1/completions and /v1/chat/completions like a vLLM instance."""

    def __init__(self, role, fail_status=0):
        self.role, self.fail_status, self.requests = role, fail_status, []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                if outer.fail_status:
                    self.send_response(outer.fail_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if outer.role == "prefill":
                    out = json.dumps({"kv_transfer_params": {"remote_host": "10.0.0.1", "remote_port": 7,
                                                             "do_remote_prefill": True}}).encode()
                else:
                    out = b"".join(b"data: token%d\n\n" % i for i in range(3))
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@unittest.skipIf(proxy is None, "fastapi/httpx/uvicorn missing" if proxy is None else "")
class ProxyTest(unittest.TestCase):
    def start(self, prefills, decodes):
        proxy.parse_args(["--prefiller-hosts"] + ["127.0.0.1"] * len(prefills) +
                         ["--prefiller-ports"] + [str(p.port) for p in prefills] +
                         ["--decoder-hosts"] + ["127.0.0.1"] * len(decodes) +
                         ["--decoder-ports"] + [str(d.port) for d in decodes])
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(proxy.app, log_level="error", lifespan="on"))
        t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while not server.started:
            self.assertLess(time.monotonic(), deadline, "proxy did not start")
            time.sleep(0.01)

        def stop():
            server.should_exit = True
            t.join(10)
            sock.close()
            for i in prefills + decodes:
                i.close()

        self.addCleanup(stop)

    def test_prefill_then_decode_round_robin(self):
        prefills = [_Instance("prefill"), _Instance("prefill")]
        decode = _Instance("decode")
        self.start(prefills, [decode])
        health = httpx.get(self.url + "/healthcheck", timeout=10).json()
        self.assertEqual(health, {"status": "ok", "prefill_instances": 2, "decode_instances": 1})
        for path in ("/v1/completions", "/v1/chat/completions"):
            r = httpx.post(self.url + path, json={"prompt": "hi", "max_tokens": 5, "stream": True,
                                                  "stream_options": {"include_usage": True}}, timeout=10)
            self.assertEqual(r.status_code, 200)
            self.assertEqual(r.content, b"data: token0\n\ndata: token1\n\ndata: token2\n\n")
        self.assertEqual([len(p.requests) for p in prefills], [1, 1])  # round-robin
        ppath, pheaders, pbody = prefills[0].requests[0]
        self.assertEqual(ppath, "/v1/completions")
        self.assertEqual((pbody["max_tokens"], pbody["stream"]), (1, False))
        self.assertNotIn("stream_options", pbody)
        self.assertTrue(pbody["kv_transfer_params"]["do_remote_decode"])
        dpath, dheaders, dbody = decode.requests[1]
        self.assertEqual(dpath, "/v1/chat/completions")
        self.assertEqual(dbody["max_tokens"], 5)
        self.assertEqual(dbody["kv_transfer_params"]["remote_host"], "10.0.0.1")
        self.assertEqual(dheaders["X-Request-Id"], prefills[1].requests[0][1]["X-Request-Id"])

    def test_prefill_failure_is_answered_with_its_status(self):
        prefill, decode = _Instance("prefill", fail_status=503), _Instance("decode")
        self.start([prefill], [decode])
        r = httpx.post(self.url + "/v1/completions", json={"prompt": "hi"}, timeout=10)
        self.assertEqual(r.status_code, 503)
        self.assertEqual(decode.requests, [])


if __name__ == "__main__":
    unittest.main()
