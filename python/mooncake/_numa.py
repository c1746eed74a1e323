"""NUMA binding of the calling thread without libnuma (``mooncake.store.bind_to_numa_node``).

The node's CPUs come from ``/sys/devices/system/node/node<N>/cpulist``; the thread is bound to
them with ``sched_setaffinity`` and the node becomes the preferred one for the thread's future
allocations with ``set_mempolicy(MPOL_PREFERRED)`` (what libnuma's ``numa_run_on_node`` and
``numa_set_preferred`` do). As in Mooncake, nothing raises: a system without NUMA, a node out
of range or a refused call is a warning.
"""

import ctypes
import logging
import os
import platform

log = logging.getLogger("mooncake")

_NODE_DIR = "/sys/devices/system/node"
_MPOL_PREFERRED = 1
# set_mempolicy / get_mempolicy system call numbers
_SYSCALLS = {"x86_64": (238, 239), "aarch64": (237, 236)}


def nodes():
    """The NUMA nodes of this system (sorted ints); [] without NUMA."""
    try:
        names = os.listdir(_NODE_DIR)
    except OSError:
        return []
    return sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())


def parse_cpulist(text):
    """ "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def node_cpus(node):
    with open(os.path.join(_NODE_DIR, "node%d" % node, "cpulist")) as f:
        return parse_cpulist(f.read())


def _syscall(which):
    nums = _SYSCALLS.get(platform.machine())
    if nums is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall, nums[which]


def preferred_node():
    """The calling thread's preferred node when its policy is MPOL_PREFERRED, else None."""
    sc = _syscall(1)
    if sc is None:
        return None
    fn, num = sc
    mode = ctypes.c_int(0)
    mask = (ctypes.c_ulong * 16)()
    if fn(ctypes.c_long(num), ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64), None, ctypes.c_ulong(0)) != 0:
        return None
    if mode.value != _MPOL_PREFERRED:
        return None
    for i in range(16 * 64):
        if mask[i // 64] >> (i % 64) & 1:
            return i
    return None


def bind(node):
    have = nodes()
    if not have:
        log.warning("mooncake: bind_to_numa_node: NUMA is not available on this system; binding skipped")
        return
    if node not in have:
        log.warning("mooncake: bind_to_numa_node: invalid NUMA node %d; valid: %s", node, have)
        return
    try:
        os.sched_setaffinity(0, node_cpus(node))
    except OSError as exc:
        log.warning("mooncake: bind_to_numa_node: running on node %d failed: %s", node, exc)
    sc = _syscall(0)
    if sc is None:
        log.warning("mooncake: bind_to_numa_node: no set_mempolicy call known for %s; memory preference skipped",
                    platform.machine())
        return
    fn, num = sc
    mask = (ctypes.c_ulong * (node // 64 + 1))()
    mask[node // 64] = 1 << (node % 64)
    if fn(ctypes.c_long(num), ctypes.c_int(_MPOL_PREFERRED), mask, ctypes.c_ulong((node // 64 + 1) * 64 + 1)) != 0:
        log.warning("mooncake: bind_to_numa_node: set_mempolicy(node %d) failed: %s", node,
                    os.strerror(ctypes.get_errno()))
