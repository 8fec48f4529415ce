"""The simulated GPU nodes, for a machine without a GPU (``DDPTOP_FAKE_NVML=<profile>``, docs/fake-nodes.md).

``nvml`` is the node (``FakeNvml``: a profile's GPUs, links and counters moving in time; made of ``node_state``,
``node_topology`` and ``node_readings``, with ``pci`` numbering its PCIe tree), ``driver`` the C library
beneath the real ``pynvml`` binding (so the binding's own code runs), ``nodes`` the profiles in
``profiles/*.toml`` and how one is chosen, ``recorded`` a node from a driver report, ``invalid`` what both
readers raise.
"""

__all__ = ["choose", "driver", "invalid", "node_readings", "node_state", "node_topology", "nodes", "nvml", "pci", "recorded",
           "replay"]
