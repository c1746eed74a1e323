"""mooncake.vllm_v1_proxy_server: the disaggregated-prefill proxy Mooncake ships for vLLM v1.

An OpenAI-compatible front (``POST /v1/completions``, ``POST /v1/chat/completions``,
``GET /healthcheck``) that sends each request first to a prefill instance, as a one-token,
non-streamed request with ``kv_transfer_params = {"do_remote_decode": True, ...}``, then
forwards the request to a decode instance with the ``kv_transfer_params`` the prefill
answered, and streams the decode instance's answer back. Instances are taken round-robin.
``X-Request-Id`` carries one id to both; ``Authorization: Bearer $OPENAI_API_KEY`` is sent.

Run it as Mooncake's::

    python -m mooncake.vllm_v1_proxy_server --port 8000 \\
        --prefiller-hosts 10.0.0.1 --prefiller-ports 8100 --decoder-hosts 10.0.0.2 --decoder-ports 8200

It needs fastapi, httpx and uvicorn (as Mooncake's does). A prefill failure is answered with
its HTTP status (Mooncake's re-raises: a 500). This project's Go proxy (``mooncake proxy``)
does the same job with load-aware and KV-aware policies.
"""

import argparse
import itertools
import logging
import os
import sys
import uuid
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

logger = logging.getLogger(__name__)

__all__ = ["app", "lifespan", "parse_args", "get_next_client", "send_request_to_service",
           "stream_service_response", "handle_completions", "handle_chat_completions", "healthcheck", "main"]

global_args = None  # set by main() / parse_args() before the app starts


def _clients(instances):
    out = []
    for i, (host, port) in enumerate(instances):
        client = httpx.AsyncClient(timeout=None, base_url="http://%s:%d/v1" % (host, int(port)),
                                   limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
        out.append({"client": client, "host": host, "port": int(port), "id": i})
    return out


@asynccontextmanager
async def lifespan(app):
    """Opens one HTTP client per prefill and decode instance for the app's lifetime."""
    args = global_args if global_args is not None else parse_args([])
    app.state.prefill_clients = _clients(args.prefiller_instances)
    app.state.decode_clients = _clients(args.decoder_instances)
    app.state.prefill_iterator = itertools.cycle(range(len(app.state.prefill_clients)))
    app.state.decode_iterator = itertools.cycle(range(len(app.state.decode_clients)))
    logger.info("proxy: %d prefill and %d decode instances", len(app.state.prefill_clients),
                len(app.state.decode_clients))
    try:
        yield
    finally:
        for info in app.state.prefill_clients + app.state.decode_clients:
            await info["client"].aclose()


app = FastAPI()
app.router.lifespan_context = lifespan  # also where FastAPI() has no lifespan= (before 0.93)


def parse_args(argv=None):
    """Mooncake's flags (``--port``, ``--host``, ``--prefiller-hosts/ports``,
    ``--decoder-hosts/ports``); also sets the module's ``global_args``."""
    global global_args
    p = argparse.ArgumentParser(description="vLLM v1 disaggregated prefill proxy")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--prefiller-hosts", "--prefiller-host", type=str, nargs="+", default=["localhost"])
    p.add_argument("--prefiller-ports", "--prefiller-port", type=int, nargs="+", default=[8100])
    p.add_argument("--decoder-hosts", "--decoder-host", type=str, nargs="+", default=["localhost"])
    p.add_argument("--decoder-ports", "--decoder-port", type=int, nargs="+", default=[8200])
    args = p.parse_args(argv)
    if len(args.prefiller_hosts) != len(args.prefiller_ports):
        raise ValueError("Number of prefiller hosts must match number of prefiller ports")
    if len(args.decoder_hosts) != len(args.decoder_ports):
        raise ValueError("Number of decoder hosts must match number of decoder ports")
    args.prefiller_instances = list(zip(args.prefiller_hosts, args.prefiller_ports))
    args.decoder_instances = list(zip(args.decoder_hosts, args.decoder_ports))
    global_args = args
    return args


def get_next_client(app, service_type):
    """The next client of ``"prefill"`` or ``"decode"``, round-robin."""
    if service_type == "prefill":
        return app.state.prefill_clients[next(app.state.prefill_iterator)]
    if service_type == "decode":
        return app.state.decode_clients[next(app.state.decode_iterator)]
    raise ValueError("Unknown service type: %s" % service_type)


def _headers(request_id):
    return {"Authorization": "Bearer %s" % os.environ.get("OPENAI_API_KEY"), "X-Request-Id": request_id}


async def send_request_to_service(client_info, endpoint, req_data, request_id):
    """The prefill half: the request as one non-streamed token asking for a remote decode."""
    body = dict(req_data)
    body["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                  "remote_block_ids": None, "remote_host": None, "remote_port": None}
    body["stream"] = False
    body["max_tokens"] = 1
    if "max_completion_tokens" in body:
        body["max_completion_tokens"] = 1
    body.pop("stream_options", None)
    response = await client_info["client"].post(endpoint, json=body, headers=_headers(request_id))
    response.raise_for_status()
    await response.aread()
    return response


async def stream_service_response(client_info, endpoint, req_data, request_id):
    """The decode half: the decode instance's answer, chunk by chunk."""
    async with client_info["client"].stream("POST", endpoint, json=req_data,
                                            headers=_headers(request_id)) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            yield chunk


async def _handle_completions(api, request):
    req_data = await request.json()
    request_id = str(uuid.uuid4())
    prefill = get_next_client(request.app, "prefill")
    try:
        response = await send_request_to_service(prefill, api, req_data, request_id)
    except httpx.HTTPStatusError as exc:
        logger.error("proxy: prefill %s:%s answered %d for %s", prefill["host"], prefill["port"],
                     exc.response.status_code, api)
        return JSONResponse({"error": "prefill instance answered %d" % exc.response.status_code},
                            status_code=exc.response.status_code)
    except httpx.HTTPError as exc:
        logger.error("proxy: prefill %s:%s failed for %s: %s", prefill["host"], prefill["port"], api, exc)
        return JSONResponse({"error": "prefill instance unreachable: %s" % exc}, status_code=502)
    params = response.json().get("kv_transfer_params") or {}
    await response.aclose()
    if params:
        req_data["kv_transfer_params"] = params
    decode = get_next_client(request.app, "decode")
    logger.debug("proxy: %s via prefill %s and decode %s", request_id, prefill["id"], decode["id"])
    return StreamingResponse(stream_service_response(decode, api, req_data, request_id),
                             media_type="application/json")


@app.post("/v1/completions")
async def handle_completions(request: Request):
    return await _handle_completions("/completions", request)


@app.post("/v1/chat/completions")
async def handle_chat_completions(request: Request):
    return await _handle_completions("/chat/completions", request)


@app.get("/healthcheck")
async def healthcheck():
    """Liveness and the number of instances of each kind."""
    return {"status": "ok", "prefill_instances": len(app.state.prefill_clients),
            "decode_instances": len(app.state.decode_clients)}


def main(argv=None):
    import uvicorn

    args = parse_args(argv)
    uvicorn.run(app, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
