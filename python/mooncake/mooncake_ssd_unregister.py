"""mooncake.mooncake_ssd_unregister: not available in Mooncake in Go.

Mooncake's module unregisters NVMe-oF SSDs served by SPDK targets from the master. This store has no NVMe-oF tier (NVMe SSDs exported over RDMA by
SPDK), so importing the module raises ImportError saying so (docs/python.md lists it as
not applicable).
"""

raise ImportError("mooncake.mooncake_ssd_unregister unregisters NVMe-oF SSDs served by SPDK targets from the master; Mooncake in Go has no NVMe-oF (SPDK) tier: "
                  "use the disk tier (mooncake store --root-fs-dir, or setup(enable_ssd_offload=True)) instead")
