"""The C library beneath the real ``pynvml`` binding, simulated: one ctypes callback per NVML function.

``library`` loads the binding over the simulated library (``binding``, ``activate``) and imports the modules
of calls, which is what registers them; ``abi`` is what every call shares (the registry, handles, writes into
the caller's memory). The calls, by what they answer: ``identity`` (versions, handles, name, UUID, PCI
identity), ``topology`` (PCIe links, NUMA and affinity, the PCIe tree, NVLink), ``readings`` (clocks,
utilisation, memory, power, temperature, field values, processes, ECC, Xid events), ``mig_gpm`` (MIG
instances, GPU performance metrics).
"""
