"""mooncake.spdk_tgt_create: not available in Mooncake in Go.

Mooncake's module deploys SPDK NVMe-oF targets on storage hosts over SSH. This store has no NVMe-oF tier (NVMe SSDs exported over RDMA by
SPDK), so importing the module raises ImportError saying so (docs/python.md lists it as
not applicable).
"""

raise ImportError("mooncake.spdk_tgt_create deploys SPDK NVMe-oF targets on storage hosts over SSH; Mooncake in Go has no NVMe-oF (SPDK) tier: "
                  "use the disk tier (mooncake store --root-fs-dir, or setup(enable_ssd_offload=True)) instead")
