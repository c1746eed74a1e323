"""A stand-in for vLLM's example Mooncake P/D proxy, written for our tests.

It follows the request flow that proxy documents
(examples/online_serving/disaggregated_serving/mooncake_connector/
mooncake_connector_proxy.py in vllm-project/vllm), with the standard
library only so that it runs on any CI machine:

  * one uuid4 per client request, sent to both halves as X-Request-Id, with
    "Authorization: Bearer <OPENAI_API_KEY or None>";
  * prefill (fired, not awaited): the body with kv_transfer_params
    {"do_remote_decode": true, "do_remote_prefill": false}, "stream": false,
    "max_tokens": 1, "max_completion_tokens": 1 when present, no
    "stream_options";
  * decode (at the same time): the client's body with kv_transfer_params
    {"do_remote_decode": false, "do_remote_prefill": true,
     "bootstrap_server_host": <prefill URL host>,
     "bootstrap_server_port": <prefill bootstrap port, default 8998>};
  * decode's bytes go back to the client as they arrive.

Usage: vllm_flow_proxy.py --port N --prefill URL [BOOTSTRAP_PORT] --decode URL
It prints "ready <port>" on stdout once it listens.
"""

import argparse
import http.client
import http.server
import itertools
import json
import os
import sys
import threading
import urllib.parse
import uuid


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--prefill", nargs="+", action="append", default=[])
    ap.add_argument("--decode", nargs=1, action="append", default=[])
    a = ap.parse_args()
    prefill = []
    for p in a.prefill:
        port = None
        if len(p) >= 2 and p[1].lower() != "none":
            port = int(p[1])
        u = urllib.parse.urlparse(p[0])
        prefill.append({"url": u, "host": u.hostname, "bootstrap_port": port or 8998})
    decode = [{"url": urllib.parse.urlparse(d[0])} for d in a.decode]
    return a, prefill, decode


ARGS, PREFILL, DECODE = parse_args()
NEXT_P = itertools.cycle(range(len(PREFILL)))
NEXT_D = itertools.cycle(range(len(DECODE)))
LOCK = threading.Lock()


def headers_for(request_id):
    return {
        "Content-Type": "application/json",
        "Authorization": "Bearer %s" % os.environ.get("OPENAI_API_KEY"),
        "X-Request-Id": request_id,
    }


def post(url, path, body, hdrs):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
    return conn, conn.getresponse()


def send_prefill(info, path, req, request_id):
    body = dict(req)
    body["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False}
    body["stream"] = False
    body["max_tokens"] = 1
    if "max_completion_tokens" in body:
        body["max_completion_tokens"] = 1
    body.pop("stream_options", None)
    try:
        conn, resp = post(info["url"], path, body, headers_for(request_id))
        resp.read()
        conn.close()
        if resp.status >= 400:
            print("prefill answered %d" % resp.status, file=sys.stderr)
    except OSError as e:
        print("prefill failed: %s" % e, file=sys.stderr)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path != "/healthcheck":
            self.send_error(404)
            return
        b = json.dumps({"status": "ok", "prefill_instances": len(PREFILL),
                        "decode_instances": len(DECODE)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_POST(self):
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_error(404)
            return
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        request_id = str(uuid.uuid4())
        with LOCK:
            p = PREFILL[next(NEXT_P)]
            d = DECODE[next(NEXT_D)]
        threading.Thread(target=send_prefill, args=(p, self.path, req, request_id), daemon=True).start()
        body = dict(req)
        body["kv_transfer_params"] = {
            "do_remote_decode": False,
            "do_remote_prefill": True,
            "bootstrap_server_host": p["host"],
            "bootstrap_server_port": p["bootstrap_port"],
        }
        conn, resp = post(d["url"], self.path, body, headers_for(request_id))
        # vLLM's proxy raises on a decode error (its client sees a 500).
        self.send_response(resp.status if resp.status < 400 else 500)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            self.wfile.write(chunk)
            self.wfile.flush()
        conn.close()


def main():
    srv = http.server.ThreadingHTTPServer((ARGS.host, ARGS.port), Handler)
    srv.daemon_threads = True
    print("ready %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
