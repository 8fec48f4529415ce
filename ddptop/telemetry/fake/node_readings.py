"""What a simulated node's GPUs read as they run: clocks, utilisation, memory, power and energy, temperature,
clock event reasons, field values (byte counters), compute processes, ECC errors, GPM metrics and Xid events.
Readings move smoothly with the node's clock (constant when ``steady``); counters are exact integrals of the
rates they report."""

from __future__ import annotations

import math

import pynvml

from ddptop.telemetry.fake.driver.abi import NvmlReturn
from ddptop.telemetry.fake.node_state import MIB, NodeState

RESERVED_BYTES = 400 << 20  # memory the driver keeps for itself: in v1's "used", apart in v2
MIG_CONTEXT_BYTES = 12 << 20  # what an idle MIG instance shows in use (nvidia-smi: about 12 MiB of 4864)


class NodeReadings(NodeState):
    """The answers to the calls that read a GPU as it runs (``driver.readings``, ``driver.mig_gpm``'s GPM)."""

    def power_limit_mw(self, index: int) -> int:
        return self.check(index).power_limit_w * 1000

    def max_clock(self, index: int, clock: int) -> int:
        gpu = self.check(index)
        return gpu.sm_clock_max_mhz if clock in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS) \
            else gpu.memory_clock_mhz

    def clock_mhz(self, index: int, clock: int) -> int:
        gpu = self.check(index)
        if clock not in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return gpu.memory_clock_mhz
        if index in self.throttled:
            return round(gpu.sm_clock_max_mhz * self.throttled[index][1])
        return round(gpu.sm_clock_max_mhz * (0.857 + 0.143 * self._wave(index, 13.0, 0.5)))

    def utilization(self, index: int, mig: int | None) -> tuple[int, int]:
        gpu = self.check(index)
        if gpu.mig or mig is not None:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)  # NVML has no utilisation in MIG mode
        busy = 90 if self.steady else round(55 + 40 * self._wave(index, 7.0))
        return busy, round(busy * 0.45)

    def memory(self, index: int, mig: int | None) -> tuple[int, int, int]:
        """(total, reserved by the driver, used by processes) in bytes."""
        gpu = self.check(index)
        if mig is not None:  # an instance's own slice: what its processes hold, over what its context keeps
            mine = sum(b or 0 for _, b, on in self.processes_on.get(index, ()) if on == mig)
            total = self.mig_instance(index, mig).memory_mib * MIB
            return total, 0, min(MIG_CONTEXT_BYTES + mine, total)
        total = gpu.memory_mib * MIB
        used = 600 * MIB + sum(b or 0 for _, b, _ in self.processes_on.get(index, ()))
        if not self.processes_on.get(index) and not self.steady:
            used += int(0.55 * total * self._wave(index, 11.0, 1.0))
        return total, RESERVED_BYTES, min(used, total - RESERVED_BYTES)

    def _power_w(self, index: int) -> float:
        return 150.0 + 20.0 * index if self.steady else 120.0 + 150.0 * self._wave(index, 7.0)

    def power_mw(self, index: int) -> int:
        self.check(index)
        return int(self._power_w(index) * 1000)

    def energy_mj(self, index: int) -> int:
        self.check(index)
        t = self._elapsed()
        if self.steady:
            return int(self._power_w(index) * t * 1000)
        # integral of 120 + 150 * (0.5 + 0.5 sin(w t + p)) dt
        w, p = 2 * math.pi / 7.0, index * 0.7
        joules = 195.0 * t - 75.0 / w * (math.cos(w * t + p) - math.cos(p))
        return int(joules * 1000)

    def temperature(self, index: int) -> int:
        self.check(index)
        return round(38 + 30 * self._wave(index, 23.0, 2.0))

    def clock_event_reasons(self, index: int) -> int:
        self.check(index)
        if index in self.throttled:
            return self.throttled[index][0]
        if not self.steady and self._wave(index, 7.0) > 0.9:
            return pynvml.nvmlClocksEventReasonSwPowerCap
        return pynvml.nvmlClocksEventReasonNone

    def field(self, index: int, field: int) -> int | None:
        """A field value, or None when this GPU/driver does not support it."""
        self.check(index)
        if field == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return self.energy_mj(index)
        if field in self.unsupported_fields:
            return None
        t = self._elapsed()
        rates = {  # bytes/s (NVLink counters are in KiB, as NVML's are)
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: 2.0e9 + 1.0e8 * index,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: 3.0e9 + 1.0e8 * index,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 40.0e9 + 1.0e9 * index,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 41.0e9 + 1.0e9 * index,
        }
        if field not in rates:
            return None
        nvlink = field in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        if nvlink and self.profile.gpus[index].nvlink_slots == 0:
            return None
        value = rates[field] * t / (1024 if nvlink else 1)
        return int(value) % (1 << self.profile.counter_bits)

    def processes(self, index: int, mig: int | None = None) -> list[tuple[int, int | None, int, int]]:
        """(pid, used bytes or None, GPU instance, compute instance) of each compute process: on a MIG
        instance's handle its own, on the GPU's every one (each with its instance's ids, as NVML gives)."""
        gpu = self.check(index)
        no_instance = 0xFFFFFFFF
        listed = []
        for pid, used, on in self.processes_on.get(index, ()):
            if mig is not None and on != mig:
                continue
            instance = gpu.mig[on] if on is not None and on < len(gpu.mig) else None
            listed.append((pid, used, instance.gpu_instance if instance else no_instance,
                           instance.compute_instance if instance else no_instance))
        return listed

    def ecc_errors(self, index: int) -> int:
        self.check(index)
        return self.ecc.get(index, 0)

    def gpm_supported(self, index: int) -> bool:
        return self.check(index).gpm

    # GPM metric -> (steady value, mean of the wave, swing): percent of time or of capacity
    GPM_METRICS = {2: (82.0, 70.0, 20.0), 3: (41.0, 35.0, 10.0), 5: (33.0, 28.0, 15.0), 10: (57.0, 50.0, 20.0)}

    def gpm_metric(self, index: int, metric: int, start: float, end: float) -> float | None:
        """A GPM metric over [start, end] (seconds of this node's clock): SM active (2), SM occupancy (3),
        any tensor pipe active (5), DRAM bandwidth used (10); None for the others."""
        self.check(index)
        if metric not in self.GPM_METRICS or end <= start:
            return None
        steady, mean, swing = self.GPM_METRICS[metric]
        if self.steady:
            return steady
        period, phase = 9.0, index * 0.7 + metric  # mean over the window of mean + swing sin(w t + phase)
        w = 2 * math.pi / period
        integral = (math.cos(w * start + phase) - math.cos(w * end + phase)) / w
        return mean + swing * integral / (end - start)

    def next_xid(self, registered: set[int], timeout_ms: int) -> tuple[int, int]:
        with self._lock:
            for position, (gpu, code) in enumerate(self._xids):
                if gpu in registered:
                    del self._xids[position]
                    return gpu, code
        raise NvmlReturn(pynvml.NVML_ERROR_TIMEOUT)
