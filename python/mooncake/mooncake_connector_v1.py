"""mooncake.mooncake_connector_v1: the vLLM v1 KV connector module Mooncake ships.

Use, as with Mooncake's::

    --kv-transfer-config '{"kv_connector": "MooncakeConnector", "kv_role": "kv_producer",
                           "kv_connector_module_path": "mooncake.mooncake_connector_v1"}'

The connector classes (``MooncakeConnector``, ``MooncakeConnectorScheduler``,
``MooncakeConnectorWorker``) are vLLM's own MooncakeConnector
(``vllm.distributed.kv_transfer.kv_connector.v1.mooncake_connector``, the maintained
version of the code Mooncake copied), which moves KV blocks with
``mooncake.engine.TransferEngine``, i.e. this package's Go engine. Without vLLM installed
they cannot be built: constructing one raises ``ImportError`` naming what is missing
(importing Mooncake's module fails the same way). The rest of the module works without vLLM:
the constants (read from the environment as Mooncake does), ``MooncakeAgentMetadata``,
``RecvReqMeta``, ``SendBlockMeta``, ``MooncakeConnectorMetadata``,
``group_concurrent_contiguous``, ``get_mooncake_side_channel_port`` and ``zmq_ctx``.
"""

import contextlib
import logging
from dataclasses import dataclass, field
from os import getenv
from typing import Any, Optional

log = logging.getLogger("mooncake")

TRANS_DONE = b"trans_done"
TRANS_ERROR = b"trans_error"
VLLM_MOONCAKE_SIDE_CHANNEL_PORT = int(getenv("VLLM_MOONCAKE_SIDE_CHANNEL_PORT", 6557))
VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT = int(getenv("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", 120))
VLLM_MOONCAKE_SENDER_WORKERS = int(getenv("VLLM_MOONCAKE_SENDER_WORKERS", 10))
VLLM_MOONCAKE_PROTOCOL = getenv("VLLM_MOONCAKE_PROTOCOL", "rdma")  # RDMA names run over TCP here

try:  # vLLM's connector and base classes, when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1 import mooncake_connector as _vllm_mc
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata as _MetadataBase
    _VLLM_ERROR = None
except Exception as exc:  # ImportError, or a vLLM too old to have the connector
    _vllm_mc = None
    _MetadataBase = object
    _VLLM_ERROR = exc

try:
    import msgspec as _msgspec
except ImportError:
    _msgspec = None

if _msgspec is not None:
    class MooncakeAgentMetadata(_msgspec.Struct, omit_defaults=True, dict=True):
        """What a decode worker sends a prefill worker: where to write which blocks."""

        remote_hostname: str
        remote_port: int
        request_ids: list
        kv_caches_base_addr: list
        block_ids: list
else:
    @dataclass
    class MooncakeAgentMetadata(object):
        """What a decode worker sends a prefill worker: where to write which blocks."""

        remote_hostname: str
        remote_port: int
        request_ids: list
        kv_caches_base_addr: list
        block_ids: list


@dataclass
class RecvReqMeta:
    local_block_ids: list
    remote_host: str
    remote_port: int
    remote_request_id: Optional[str] = None


@dataclass
class SendBlockMeta:
    local_block_ids: list
    ready: Any
    expire_time: float = float("inf")


class MooncakeConnectorMetadata(_MetadataBase):
    """The scheduler's per-step metadata: requests to receive and to send."""

    def __init__(self):
        self.reqs_to_recv = {}
        self.reqs_to_send = {}

    def add_new_req(self, request_id, local_block_ids, kv_transfer_params, load_remote_cache=True):
        if load_remote_cache:
            self.reqs_to_recv[request_id] = RecvReqMeta(
                local_block_ids=local_block_ids, remote_host=kv_transfer_params["remote_host"],
                remote_port=kv_transfer_params["remote_port"],
                remote_request_id=kv_transfer_params.get("remote_request_id"))
        else:
            self.reqs_to_send[request_id] = local_block_ids


def group_concurrent_contiguous(src_indices, dst_indices):
    """Splits paired block index lists into runs where both advance by one:
    ([[src run], ...], [[dst run], ...])."""
    src, dst = list(src_indices), list(dst_indices)
    if len(src) != len(dst):
        raise ValueError("src_indices and dst_indices differ in length")
    if not src:
        return [], []
    src_groups, dst_groups = [[src[0]]], [[dst[0]]]
    for i in range(1, len(src)):
        if src[i] == src[i - 1] + 1 and dst[i] == dst[i - 1] + 1:
            src_groups[-1].append(src[i])
            dst_groups[-1].append(dst[i])
        else:
            src_groups.append([src[i]])
            dst_groups.append([dst[i]])
    return src_groups, dst_groups


def get_mooncake_side_channel_port(vllm_config):
    """The side channel port of a data-parallel rank: base + dp_rank * tp_size."""
    p = vllm_config.parallel_config
    return VLLM_MOONCAKE_SIDE_CHANNEL_PORT + p.data_parallel_rank * p.tensor_parallel_size


@contextlib.contextmanager
def zmq_ctx(socket_type, addr):
    """A ZMQ ROUTER (bound) or REQ (connected) socket on addr (``tcp://h:p``), closed on exit."""
    import zmq

    if socket_type not in (zmq.ROUTER, zmq.REQ):
        raise ValueError("Unexpected socket type: %s" % socket_type)
    ctx = zmq.Context()
    try:
        sock = ctx.socket(socket_type)
        if socket_type == zmq.ROUTER:
            sock.bind(addr)
        else:
            sock.connect(addr)
        yield sock
    finally:
        ctx.destroy(linger=0)


def _needs_vllm(name):
    def fail(*args, **kwargs):
        raise ImportError("mooncake.mooncake_connector_v1.%s needs vLLM with its MooncakeConnector "
                          "(vllm.distributed.kv_transfer.kv_connector.v1.mooncake_connector): %s"
                          % (name, _VLLM_ERROR))
    return fail


def _placeholder(name, methods):
    attrs = {"__init__": _needs_vllm(name), "__doc__": "vLLM's %s (needs vLLM installed)." % name}
    for m in methods:
        attrs[m] = _needs_vllm("%s.%s" % (name, m))
    return type(name, (object,), attrs)


if _vllm_mc is not None:
    MooncakeConnector = _vllm_mc.MooncakeConnector
    MooncakeConnectorScheduler = _vllm_mc.MooncakeConnectorScheduler
    MooncakeConnectorWorker = _vllm_mc.MooncakeConnectorWorker
else:
    MooncakeConnector = _placeholder("MooncakeConnector", [
        "get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta", "request_finished",
        "request_finished_all_groups", "register_kv_caches", "get_finished", "start_load_kv",
        "wait_for_layer_load", "save_kv_layer", "wait_for_save"])
    MooncakeConnectorScheduler = _placeholder("MooncakeConnectorScheduler", [
        "get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta", "request_finished"])
    MooncakeConnectorWorker = _placeholder("MooncakeConnectorWorker", [
        "shutdown", "send_kv_to_decode", "register_kv_caches", "fetch_finished_recving_reqs",
        "fetch_finished_sending_reqs", "get_finished", "receive_kv", "group_kv_pull", "record_send_reqs",
        "start_load_kv"])

__all__ = ["TRANS_DONE", "TRANS_ERROR", "VLLM_MOONCAKE_SIDE_CHANNEL_PORT", "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT",
           "VLLM_MOONCAKE_SENDER_WORKERS", "VLLM_MOONCAKE_PROTOCOL", "MooncakeAgentMetadata", "RecvReqMeta",
           "SendBlockMeta", "MooncakeConnectorMetadata", "MooncakeConnector", "MooncakeConnectorScheduler",
           "MooncakeConnectorWorker", "zmq_ctx", "group_concurrent_contiguous", "get_mooncake_side_channel_port"]
