"""A simulated NVML node, for tests and demos on machines without a GPU. Everything it reports is FAKE.

Three layers, the lowest one simulated:
- the node (:class:`FakeNvml`): a profile from ``ddptop/telemetry/fake/profiles/`` (``docs/fake-nodes.md``), its
  readings, and faults injected by tests; made of ``node_state`` (the profile, what tests changed, the clock,
  handles), ``node_topology`` (PCIe, NUMA, affinity, NVLink) and ``node_readings`` (what moves as it runs), with
  ``pci`` (bus numbers, the sysfs tree);
- the C library (``driver``): ``nvml.h``'s functions as ctypes callbacks that fill the real structs;
- the binding: the installed ``pynvml`` module file, unchanged, loaded a second time over the fake library
  (``driver.library.binding``; the ``pynvml`` module itself is never touched). A ``FakeNvml`` is handed to
  ddptop where the ``pynvml`` module would be; an attribute read on it returns that binding's own function
  or constant, so every call crosses pynvml's real code and a C boundary.

NICs are not NVML's business, so the node also writes the sysfs tree such a machine has
(``DDPTOP_SYSFS_ROOT``), which the topology reader walks exactly as it walks ``/sys``.

Readings change smoothly with a clock (``clock``, default ``time.monotonic``); counters (energy, PCIe and
NVLink bytes) are exact integrals of the rates they report, so tests can check derived rates and joules.
Faults are injected per instance: ``fail`` (C function → NVML error code), ``missing`` (C functions the
"driver" lacks: FUNCTION_NOT_FOUND), ``absent`` (functions the "binding" lacks: AttributeError),
``lose_gpu(i)`` (GPU_IS_LOST from then on), ``deny_gpu(i)`` (NO_PERMISSION on its handle),
``library_missing`` (nvmlInit fails), ``xid(i, code)``, ``ecc_error(i)``. Interference:
``throttle(i, bits)`` (clock event reasons held active, the SM clock pulled down), ``attach_process(i, pid,
bytes, mig=None)`` (any PID: a rank's, or a stranger's; on a MIG GPU inside instance ``mig``, listed on that
instance's handle and, with its GPU instance id, on the GPU's), ``pcie_link(i, gen, width)`` (a link trained
down).
"""

from __future__ import annotations

import atexit
import shutil
from typing import Any

import pynvml

from ddptop.telemetry.fake.driver import library as fake_library
from ddptop.telemetry.fake.driver.abi import NvmlReturn
from ddptop.telemetry.fake.node_readings import NodeReadings
from ddptop.telemetry.fake.node_topology import NodeTopology
from ddptop.telemetry.fake.nodes import known_nodes
from ddptop.telemetry.fake.pci import add_pci_device, new_sysfs

IS_FAKE = True


def __getattr__(name: str) -> Any:
    if name == "NODES":  # the shipped profiles, read when asked
        return tuple(known_nodes())
    raise AttributeError(name)


class FakeNvml(NodeReadings, NodeTopology):
    """The node ddptop holds where the ``pynvml`` module would be: the binding's functions and constants, and
    the answers the C library asks of it (its state, connections and readings are in the classes it is made of).
    """

    IS_FAKE = True

    @property
    def FAKE_NODE(self) -> str:  # noqa: N802 - read by name, like NVML constants
        return self.profile.name

    # -- the binding: pynvml's own functions, answered by this node ----------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self.absent:
            raise AttributeError(name)  # as an older nvidia-ml-py lacks it
        binding = fake_library.activate(self)
        value = getattr(binding, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            self.calls[name] = self.calls.get(name, 0) + 1
        return value

    # -- what the C library asks --------------------------------------------------------------------------------
    def refusal(self, function: str) -> int:
        """A return code that answers ``function`` before it runs: an injected fault or a missing function."""
        if self.library_missing and function in ("nvmlInitWithFlags", "nvmlInit_v2"):
            return pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
        if function in self.lacks:
            return pynvml.NVML_ERROR_FUNCTION_NOT_FOUND  # what pynvml raises when dlsym finds nothing
        return self.fail.get(function, 0)

    def init(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def name(self, index: int, mig: int | None) -> str:
        gpu = self.check(index)
        if mig is not None:
            return f"{gpu.name} MIG {self.mig_instance(index, mig).profile} (FAKE)"
        return f"{gpu.name} (FAKE)"

    def uuid(self, index: int, mig: int | None) -> str:
        gpu = self.check(index)
        if mig is None:
            return gpu.uuid
        return f"MIG-{gpu.uuid[4:-4]}{mig:04x}"

    def mig_mode(self, index: int) -> int:
        gpu = self.check(index)
        if not gpu.mig_capable:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig else pynvml.NVML_DEVICE_MIG_DISABLE

    def max_mig_devices(self, index: int) -> int:
        gpu = self.check(index)
        if not gpu.mig_capable:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 7

    def mig_handle(self, index: int, mig: int) -> int:
        gpu = self.check(index)
        if not gpu.mig:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= mig < len(gpu.mig):
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_FOUND)  # an empty slot of the 7
        return self._handle_of(index, mig)

    # -- the sysfs tree of this node (NICs and PCIe paths) ----------------------------------------------------
    @property
    def DDPTOP_SYSFS_ROOT(self) -> str:  # noqa: N802 - read by name, like NVML constants
        with self._lock:
            if self._sysfs is None:
                self._sysfs = self._write_sysfs()
                atexit.register(shutil.rmtree, self._sysfs, True)
            return self._sysfs

    def _write_sysfs(self) -> str:
        """devices/pciDDDD:BB/<root port>/<switch up>/<switch down>/[<child switch up>/...]<endpoint>,
        bus/pci/devices and class/infiniband links, numa_node files: the parts of /sys the topology reader
        looks at."""
        root = new_sysfs("ddptop-fake-sysfs-")
        for (kind, name), (switch, _bdf, path) in self._pci.endpoints.items():
            add_pci_device(root, path, self.profile.numa_of(switch), name if kind == "nic" else None)
        return root
