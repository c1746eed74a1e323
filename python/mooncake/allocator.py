"""mooncake.allocator: not available in Mooncake in Go.

Mooncake's module gives torch CUDA pluggable allocators (``NVLinkAllocator``,
``BarexAllocator``) backed by its ``nvlink_allocator.so`` (fabric memory for NVLink/MNNVL
transfers); its wheel carries the module only in CUDA builds. This build has no NVLink
transport, so importing the module raises ImportError saying so (SGLang imports it only for
``SGLANG_MOONCAKE_CUSTOM_MEM_POOL``; leave that unset).
"""

raise ImportError("mooncake.allocator (NVLinkAllocator, BarexAllocator: CUDA fabric-memory allocators for "
                  "NVLink transfers) needs a CUDA build with NVLink; Mooncake in Go has no NVLink transport")
