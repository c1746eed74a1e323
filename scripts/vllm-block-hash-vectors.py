#!/usr/bin/python3
"""Writes internal/kvevents/testdata/vllm_block_hashes.json: block hashes
computed by vLLM's own prefix-cache hashing functions, for the Go port in
internal/kvevents (vllmhash.go) to be checked against.

Usage: scripts/vllm-block-hash-vectors.py KV_CACHE_UTILS_PY HASHING_PY SOURCE > out.json

KV_CACHE_UTILS_PY is vllm/v1/core/kv_cache_utils.py and HASHING_PY
vllm/utils/hashing.py of a vLLM checkout, SOURCE names it (repository
and commit) in the output's provenance. vLLM itself is not imported (it
needs torch and CUDA): the functions that compute block hashes are taken
from those files by name and run with Debian's python3, python3-cbor2 and
python3-xxhash.
"""
import ast
from importlib.metadata import version
import hashlib
import json
import os
import pickle
import sys
from types import SimpleNamespace
from typing import Any, NewType

import cbor2
import xxhash

UTILS_FUNCS = ["init_none_hash", "need_extra_keys", "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys",
               "_gen_prompt_embeds_extra_hash_keys", "generate_block_hash_extra_keys", "hash_block_tokens",
               "get_request_block_hasher"]
HASH_FUNCS = ["sha256", "sha256_cbor", "_xxhash_digest", "xxhash", "xxhash_cbor"]


def load(path, names, ns):
    tree = ast.parse(open(path).read(), path)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in found}
    if missing:
        sys.exit(f"{path}: functions not found: {sorted(missing)}")
    for n in found:
        n.decorator_list = []
    exec(compile(ast.Module(body=found, type_ignores=[]), path, "exec"), ns)


def main():
    utils_path, hashing_path, source = sys.argv[1], sys.argv[2], sys.argv[3]
    hns = {"hashlib": hashlib, "pickle": pickle, "cbor2": cbor2, "_xxhash": xxhash, "Any": Any}
    load(hashing_path, HASH_FUNCS, hns)
    from collections.abc import Callable, Sequence
    uns = {"os": os, "hashlib": hashlib, "Any": Any, "Callable": Callable, "Sequence": Sequence,
           "BlockHash": NewType("BlockHash", bytes), "NONE_HASH": None, "_CBOR_HASH_FUNCTIONS": frozenset(),
           "logger": SimpleNamespace(warning=lambda *a, **k: None), "Request": object,
           "tensor_data": None}
    load(utils_path, UTILS_FUNCS, uns)

    texts = {
        "plain": dict(),
        "lora": dict(lora_name="sql-adapter"),
        "salt": dict(cache_salt="tenant-a"),
        "mm": dict(mm=[("img-7f3a", 3, 10), ("audio-01", 21, 4)]),
        "all": dict(lora_name="sql-adapter", cache_salt="tenant-a", mm=[("img-7f3a", 3, 10), ("audio-01", 21, 4)]),
    }
    tokens = [1, 0, 255, 256, 65535, 65536, 150000, 2**31 - 1, 42, 7, 128000, 128001, 9, 8, 6, 5,
              300, 301, 302, 303, 2**31, 2**40, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26]
    cases = []
    for algo in ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"]:
        fn = hns[algo]
        for seed in ["0", "1337"]:
            os.environ["PYTHONHASHSEED"] = seed
            uns["init_none_hash"](fn)
            for bs in [4, 16]:
                for name, spec in texts.items():
                    mm = [SimpleNamespace(identifier=i, mm_position=SimpleNamespace(offset=o, length=l))
                          for i, o, l in spec.get("mm", [])]
                    req = SimpleNamespace(
                        block_hashes=[], num_tokens=len(tokens), all_token_ids=tokens, mm_features=mm,
                        lora_request=SimpleNamespace(lora_name=spec["lora_name"]) if "lora_name" in spec else None,
                        cache_salt=spec.get("cache_salt"), prompt_embeds=None)
                    hashes = uns["get_request_block_hasher"](bs, fn)(req)
                    extra, idx = [], 0
                    for b in range(len(hashes)):
                        k, idx = uns["generate_block_hash_extra_keys"](req, b * bs, (b + 1) * bs, idx)
                        extra.append(None if k is None else [list(x) if isinstance(x, tuple) else x for x in k])
                    cases.append({
                        "algo": algo, "python_hash_seed": seed, "block_size": bs, "name": name,
                        "lora_name": spec.get("lora_name", ""), "cache_salt": spec.get("cache_salt", ""),
                        "mm": [{"identifier": i, "offset": o, "length": l} for i, o, l in spec.get("mm", [])],
                        "none_hash": uns["NONE_HASH"].hex(),
                        "extra_keys": extra,
                        "block_hashes": [h.hex() for h in hashes],
                        "int_hashes": [str(int.from_bytes(h, "big") & ((1 << 64) - 1)) for h in hashes],
                    })
    json.dump({"provenance": f"scripts/vllm-block-hash-vectors.py: the hashing functions of {source}, run by "
                             f"Debian python3 {sys.version.split()[0]}, cbor2 {version('cbor2')}, xxhash {xxhash.VERSION}",
               "tokens": tokens, "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
