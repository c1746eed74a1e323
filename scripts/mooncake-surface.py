#!/usr/bin/env python3
"""Lists Mooncake's whole Python surface and our status for each entry (docs/python.md).

usage: scripts/mooncake-surface.py MOONCAKE_GIT_DIR [REV] [--update docs/python.md]
       (e.g. /work/.mirror/kvcache-ai+Mooncake/repo HEAD; needs `make python`)

Reads Mooncake's pybind11 sources (the classes, methods, attributes, enum values, functions
and constants they register) and the public top-level names (and public methods of public
classes) of its pure Python modules (mooncake-wheel/mooncake/*.py, the modules the wheel bundles
from elsewhere, and the public modules of mooncake-reshard), checks each against this
repository's python/mooncake package (import and getattr), applies the notes in NOTES, and
prints the markdown table that docs/python.md carries between its "surface table" markers
(--update FILE writes it there). Run it again after Mooncake or python/mooncake changes.
"""

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys

# pybind11 sources: (our module, Mooncake path)
PYBIND = [
    ("mooncake.store", "mooncake-integration/store/store_py.cpp"),
    ("mooncake.store", "mooncake-integration/store/buffer_pool.cpp"),
    ("mooncake.store", "mooncake-integration/store/engram_store_py.cpp"),
    ("mooncake.engine", "mooncake-integration/transfer_engine/transfer_engine_py.cpp"),
    ("mooncake.engine", "mooncake-integration/transfer_engine/shared_segment_py.cpp"),
    ("mooncake.engine", "mooncake-transfer-engine/src/transport/rpc_communicator/rpc_interface.cpp"),
    ("mooncake.ep (_ep)", "mooncake-ep/src/ep_py.cpp"),
    ("mooncake.pg", "mooncake-pg/torch/src/pg_py.cpp"),
    ("mooncake.tent", "mooncake-transfer-engine/tent/src/python/pybind.cpp"),
]
WHEEL = "mooncake-wheel/mooncake/"
# Pure Python modules the wheel bundles from elsewhere in Mooncake's tree: (our module, Mooncake path)
BUNDLED = [
    ("mooncake.async_store", "mooncake-integration/store/async_store.py"),
    ("mooncake.shared_segment", "mooncake-integration/shared_segment.py"),
    ("mooncake.allocator", "mooncake-integration/allocator.py"),
]
# The reshard package Mooncake's wheel stages from mooncake-reshard: its public modules (no path
# part starting with "_"), each listed under the same module name here.
RESHARD = "mooncake-reshard/python/"
# Entries of the wheel's C extensions that are not pybind11 (mooncake/_fast_copy.c)
C_EXT = [("mooncake._fast_copy", "concat_arrays_into", "function")]
# Modules that are wholly missing here: one row per class, its members in the row.
COLLAPSE = r"mooncake\.(ep|pg|tent)$"

# Status notes, first match wins: (module regex, name regex, status). Names are "Class.member"
# or "function". Entries with no note are "done" when our package has them, else "missing".
GPU = "n/a without a GPU"
NOTES = [
    (r"mooncake\.(ep|pg)", r".*", "%s: no module (CUDA expert-parallel and process-group extensions; "
                                  "import fails, as with a Mooncake wheel built without them)" % GPU),
    (r"mooncake\.tent", r"TransferEngine",
     "partial: TENT's calls over this engine (segments by name, batches of async requests, notifications); "
     "cancel_transfer raises NotImplementedError, permissions are not enforced, no GPU or file segments"),
    (r"mooncake\.(mooncake_ep_buffer|mooncake_elastic_buffer)", r".*",
     "%s: no module (CUDA expert-parallel buffers)" % GPU),
    (r"mooncake\.store", r"MooncakeDistributedStore\.(get_tensor_into_cuda|batch_get_tensor_into_cuda)",
     "done with a GPU (any client, not only a dummy one: read and checked in host memory, then copied into the "
     "CUDA tensor); -600 without one, as Mooncake without CUDA"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.unmount_local_disk_segment",
     "partial: -1012 (draining the disk tier is not supported; its copies stay readable until close)"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.(batch_put_session_\w+|batch_get_session_\w+|"
                         r"batch_put_from_multi_buffer_ranges|batch_get_into_multi_buffer_ranges)",
     "partial: sessions are kept by the Python object (a put session stages the value in process memory "
     "and puts it at the end; a get session reads each value once at its start); Mooncake's codes"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.(mount_segment|allocate_and_mount_segment)",
     "done: the memory becomes one more segment of this client (one id; Mooncake may split per "
     "transport limit)"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.setup",
     "done: SSD offload maps onto the disk tier (offload on evict only); tenants, client HTTP server "
     "and a shared engine accepted with a warning"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.get_offload_rpc_read_count",
     "done: values this client read from disk tiers"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.(upsert\w*)", "done (PRESERVE does not keep a soft pin)"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.(\w*parallelism\w*)",
     "done: Mooncake's write routes (a single TP axis stores the shard given; TP among other axes and writer "
     "partitions store their chunk of the whole tensor), keys and shard headers, full and resharded reads; the "
     "manifest objects beside the shards are this package's format"),
    (r"mooncake\.store", r"MooncakeDistributedStore\.(_get_pyclient_capsule)|_get_pyclient_from_wrapper",
     "done: a capsule named mooncake.PyClient.shared_ptr that EngramStore accepts (None before setup)"),
    (r"mooncake\.store", r"EngramStore\.lookup",
     "done: the rows by ranged reads straight into the output (a dummy client reads whole tables)"),
    (r"mooncake\.store", r"ReplicateConfig\.(nof_replica_num|dfs_replica_num|preferred_nof_segments|data_type|"
                         r"group_ids|host_id)",
     "partial: kept, not honoured (a warning when set): no NVMe-oF / DFS tiers, no groups"),
    (r"mooncake\.store", r"MooncakeDistributedNoFRegister(\..*)?", "%s: NVMe-oF is not available; "
                                                                   "real_register returns -1" % GPU),
    (r"mooncake\.store", r"bind_to_numa_node",
     "done without libnuma: sched_setaffinity to the node's CPUs and set_mempolicy(MPOL_PREFERRED)"),
    (r"mooncake\.store", r"DiskDescriptor(\..*)?", "done: returned for disk-tier copies "
                                                   "(file_path is the copy's URL)"),
    (r"mooncake\.engine", r"TransferEngine\.(transfer_write_on_cuda|transfer_read_on_cuda|"
                          r"batch_transfer_write_on_cuda|batch_transfer_read_on_cuda)",
     "done with a GPU: waits for the stream's earlier work, moves the bytes, returns when they are in place "
     "(RuntimeError on failure); -1 without one"),
    (r"mooncake\.engine", r"TransferEngine\.warmup_efa_segment", "%s: returns -1" % GPU),
    (r"mooncake\.engine", r"TransferEngine\.(get_engine|get_engine_ptr)",
     "partial: an opaque handle; a store cannot share it"),
    (r"mooncake\.engine", r"SharedSegment(\.(create|supported))?",
     "done for host memory (mmap=True: a memfd the owner rank maps and peers on the same host map through "
     "/proc); the device paths (mmap=False, host_register=True) raise RuntimeError, as a build without them"),
    (r"mooncake\.allocator", r".*", "%s: CUDA fabric-memory allocators for NVLink; importing the module raises "
                                    "ImportError saying so (Mooncake's wheel has it only in CUDA builds)" % GPU),
    (r"mooncake\.engine", r"SUPPORT_CUDA", "done: True when the CUDA driver library and a device are present (checked without initialising CUDA), else False"),
    (r"mooncake\.engine", r"SUPPORT_\w+", "done: False (no HIP, EFA, MNNVL, MUSA, NVLink here)"),
    (r"mooncake\.engine", r"(RpcInterface|CoroRPCInterface|ReceivedData|ReceivedTensor|create_rpc_client|"
                          r"create_rpc_server)(\..*)?",
     "done over this package's RPC transport (mc_rpc_*), not coro_rpc: both ends must be this package"),
    (r"mooncake\.engine", r"(TransferEngine\.)?InnerTransferEngine", "partial: what get_engine() returns"),
    (r"mooncake\.structured_object_store", r"(MooncakeBundleTransfer(\..*)?|tensor_object_buffer|raw_destination)",
     "done: Mooncake's manifest, chunk, metadata and codec layout; the store's zero-copy calls where it has "
     "them, plain put/get/remove otherwise"),
    (r"mooncake\.mooncake_store_service", r"MooncakeStoreService\.handle_unmount_local_disk",
     "partial: 500 (draining the disk tier is not supported)"),
    (r"mooncake\.mooncake_connector_v1", r"MooncakeConnector(Scheduler|Worker)?(\..*)?",
     "partial: vLLM's own MooncakeConnector (it moves KV with this package's TransferEngine) when vLLM is "
     "installed; without vLLM, constructing one raises ImportError (importing Mooncake's module fails)"),
    (r"mooncake\.(mooncake_ssd_register|mooncake_ssd_unregister|spdk_tgt_create)", r".*",
     "n/a without NVMe-oF: SPDK targets and NVMe-oF SSDs; importing the module raises ImportError saying so"),
    (r"mooncake\.transfer_engine_topology_dump", r"dump_te_topology|dump_tent_topology|main",
     "partial: no NICs to discover; prints the engine's segment (name, port, buffers)"),
]


def git_show(gitdir, rev, path):
    try:
        return subprocess.run(["git", "--git-dir", gitdir, "show", "%s:%s" % (rev, path)], check=True,
                              capture_output=True, text=True).stdout
    except subprocess.CalledProcessError:
        return None


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


_EVENT = re.compile(
    r'py::(?P<kind>class_|enum_)<[^;]*?>\s*(?P<var>\w+\s*)?\(\s*(?P<scope>[\w.]+)\s*,\s*"(?P<cls>\w+)"'
    r'|\.(?P<def>def|def_static|def_readwrite|def_readonly|def_property|def_property_readonly|'
    r'def_readonly_static|def_property_readonly_static)\(\s*"(?P<member>\w+)"'
    r'|\.value\(\s*"(?P<value>\w+)"'
    r'|\bm\.def\(\s*"(?P<mfunc>\w+)"'
    r'|\bm\.attr\(\s*"(?P<mattr>\w+)"\s*\)\s*='
    r'|\.def\(\s*py::init')


def pybind_entries(src):
    """(name, kind) in source order: Class, Class.member, Enum.VALUE, function, CONSTANT."""
    out, cls = [], None
    for m in _EVENT.finditer(strip_comments(src)):
        if m.group("cls"):
            cls = m.group("cls")
            if m.group("scope") not in ("m", "module", "mod"):
                pass  # nested in another class: still listed by its own name
            out.append((cls, "enum" if m.group("kind") == "enum_" else "class"))
        elif m.group("member") and cls:
            if m.group("member") not in ("__init__",):
                out.append(("%s.%s" % (cls, m.group("member")), m.group("def")))
        elif m.group("value") and cls:
            out.append(("%s.%s" % (cls, m.group("value")), "enum value"))
        elif m.group("mfunc"):
            out.append((m.group("mfunc"), "function"))
        elif m.group("mattr"):
            out.append((m.group("mattr"), "constant"))
    seen, uniq = set(), []
    for e in out:
        if e[0] not in seen:
            seen.add(e[0])
            uniq.append(e)
    return uniq


def python_entries(src):
    """Public top-level classes, functions and constants, and public methods of public classes."""
    out = []
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return out
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            out.append((node.name, "class"))
            for b in node.body:
                if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and not b.name.startswith("_"):
                    out.append(("%s.%s" % (node.name, b.name), "method"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            out.append((node.name, "function"))
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id.isupper() and not t.id.startswith("_"):
                    out.append((t.id, "constant"))
    return out


def ours(module, name):
    """Whether our package has module.name (dotted through classes; a class member may be an
    attribute its instances get in __init__)."""
    try:
        obj = importlib.import_module(module)
    except Exception:
        return False
    parts = name.split(".")
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if i == 0 or not isinstance(obj, type):
            return False
        try:
            if hasattr(obj(), part):
                return True
        except Exception:
            pass
        try:
            return re.search(r"self\.%s\s*=" % re.escape(part), inspect.getsource(obj)) is not None
        except (OSError, TypeError):
            return False
    return True


def collapsed_present(module, cls, members):
    mod = module.split(" ")[0]
    return ours(mod, cls) and all(ours(mod, "%s.%s" % (cls, m)) for m in members)


def status(module, name, present):
    for mre, nre, text in NOTES:
        if re.fullmatch(mre, module) and re.fullmatch(nre, name):
            if text.startswith("done") and not present:
                return "missing (note says done: check)"
            return text
    return "done" if present else "missing"


BEGIN = "<!-- surface table: generated by scripts/mooncake-surface.py; do not edit by hand -->"
END = "<!-- end of surface table -->"


def main():
    args = sys.argv[1:]
    update = None
    if "--update" in args:
        i = args.index("--update")
        update = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    if update:
        import contextlib
        import io
        buf = io.StringIO()
        sys.argv = [sys.argv[0]] + args
        with contextlib.redirect_stdout(buf):
            main()
        text = open(update).read()
        a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
        with open(update, "w") as f:
            f.write(text[:a] + "\n" + buf.getvalue() + text[b:])
        return
    gitdir, rev = args[0], (args[1] if len(args) > 1 else "HEAD")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "python"))
    rows = []
    for module, path in PYBIND:
        src = git_show(gitdir, rev, path)
        if src is None:
            continue
        for name, kind in pybind_entries(src):
            rows.append((module, name, kind))
    names = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "--name-only", rev, WHEEL], check=True,
                           capture_output=True, text=True).stdout.split()
    for path in sorted(names):
        if not path.endswith(".py") or path.endswith("__init__.py"):
            continue
        module = "mooncake." + os.path.basename(path)[:-3]
        for name, kind in python_entries(git_show(gitdir, rev, path) or ""):
            rows.append((module, name, kind))
    for module, path in BUNDLED:
        for name, kind in python_entries(git_show(gitdir, rev, path) or ""):
            rows.append((module, name, kind))
    names = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "-r", "--name-only", rev, RESHARD + "mooncake/reshard/"],
                           check=True, capture_output=True, text=True).stdout.split()
    for path in sorted(names):
        module = path[len(RESHARD):-len(".py")].replace("/", ".")
        module = module[:-len(".__init__")] if module.endswith(".__init__") else module
        if not path.endswith(".py") or any(part.startswith("_") for part in module.split(".")):
            continue
        for name, kind in python_entries(git_show(gitdir, rev, path) or ""):
            rows.append((module, name, kind))
    rows.extend(C_EXT)
    print("| module | name | kind | status |")
    print("|---|---|---|---|")
    grouped = {}  # (module, class) -> members, for the modules listed one row per class
    for module, name, kind in rows:
        mod = module.split(" ")[0]
        if re.match(COLLAPSE, mod):
            cls, _, member = name.partition(".")
            grouped.setdefault((module, cls), [kind, []])
            if member:
                grouped[(module, cls)][1].append(member)
            continue
        present = ours(mod, name)
        print("| `%s` | `%s` | %s | %s |" % (module, name, kind, status(mod, name, present)))
    for (module, cls), (kind, members) in grouped.items():
        name = "`%s`" % cls + (" (%s)" % ", ".join("`%s`" % m for m in members) if members else "")
        print("| `%s` | %s | %s | %s |" % (module, name, kind, status(module.split(" ")[0], cls,
                                                                       collapsed_present(module, cls, members))))
    by_status = {}
    for module, name, kind in rows:
        mod = module.split(" ")[0]
        if re.match(COLLAPSE, mod):
            cls = name.partition(".")[0]
            st = status(mod, cls, collapsed_present(module, cls, grouped.get((module, cls), [None, []])[1]))
        else:
            st = status(mod, name, ours(mod, name))
        word = re.match(r"[a-z]+(/[a-z]+)?", st).group(0)
        by_status[word] = by_status.get(word, 0) + 1
    sys.stderr.write("by status: %s\n" % ", ".join("%s %d" % kv for kv in sorted(by_status.items())))
    counts = {}
    for module, name, kind in rows:
        counts[module] = counts.get(module, 0) + 1
    sys.stderr.write("%d entries: %s\n" % (len(rows), ", ".join("%s %d" % kv for kv in counts.items())))


if __name__ == "__main__":
    main()
