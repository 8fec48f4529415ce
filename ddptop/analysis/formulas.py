"""Formulas that turn measured step times into explanations. Pure functions on plain numbers; no I/O.

- Communication volume: a ring allreduce of K bytes sends and receives 2(N-1)/N * K bytes per rank ("Problem 2 -
  Data Parallelism in Pytorch", after Gibiansky's "Bringing HPC Techniques to Deep Learning"), which is
  also nccl-tests' bus bandwidth factor for allreduce (``ddptop.protocol.bandwidth``).
- Scaling: a row's throughput, speedup, efficiency, relative cost and SU, each written once for a number and for
  an array of replicates alike; Amdahl's serial fraction fitted over all N, and the Karp-Flatt metric at each N.
- Cost: the price of a million examples at a measured throughput; data moved per training epoch.

Whether two runs differ by more than their own noise is ``ddptop.analysis.uncertainty`` (a block bootstrap:
step times are not independent, so tests that treat them as such call noise a change).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ddptop.protocol.bandwidth import busbw_factor

GIB = 2**30


def ring_factor(world_size: int) -> float:
    """Bytes a rank moves in a ring allreduce per byte of the reduced buffer: 2(N-1)/N."""
    return busbw_factor("allreduce", world_size)


def allreduce_bytes(grad_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) to allreduce ``grad_bytes`` of gradients once."""
    return grad_bytes * ring_factor(world_size)


def epoch_transfer(grad_bytes: float, params: int, epoch_examples: int, global_batch: int, world_size: int) -> dict:
    """Data moved per epoch: every gradient value once per step (steps x parameters, the count of
    "Benchmarking Distributed Training and Inference on NVIDIA's A6000 GPUs") and the ring-allreduce bytes per rank."""
    steps = math.ceil(epoch_examples / global_batch)
    return {
        "epoch_examples": epoch_examples,
        "steps_per_epoch": steps,
        "grad_values_per_epoch": steps * params,
        "grad_bytes_per_epoch": steps * grad_bytes,
        "ring_bytes_per_rank_per_epoch": steps * allreduce_bytes(grad_bytes, world_size),
    }


def comm_estimate_from_t1(sec_iter: float, ref_sec_iter: float, batch_per_rank: int, ref_batch_per_rank: int) -> float:
    """Communication estimated as t(N) - compute, where compute is the single-device time scaled to this
    rank's share of the work (t1/N for strong scaling, t1 for weak), as "Problem 2 - Data Parallelism in
    Pytorch" splits its epoch times. It assumes compute scales perfectly."""
    compute = ref_sec_iter * batch_per_rank / ref_batch_per_rank
    return sec_iter - compute


# -- scaling model ------------------------------------------------------------------------------------------


def karp_flatt(speedup: float, world_size: int) -> float | None:
    """The experimentally determined serial fraction e = (1/S - 1/N) / (1 - 1/N); undefined at N=1."""
    if world_size <= 1 or speedup <= 0:
        return None
    return karp_flatt_of(speedup, world_size)


# The scaling table's figures, each written once, for a number or a numpy array of bootstrap replicates alike
# (``analysis.figures.derive`` applies them to both): N is the row's world size (or thread count), t its step
# time, B its global batch; "ref" the table's reference row.


def throughput(global_batch: Any, sec_iter: Any) -> Any:
    """Examples per second over all ranks: B / t."""
    return global_batch / sec_iter


def speedup(ref_world_size: int, throughput_n: Any, ref_throughput: Any) -> Any:
    """Against the reference row, counted as its N ranks: N_ref x (B/t) / (B_ref/t_ref). Weak scaling's N t1/tN
    and strong scaling's t1/tN alike, as the work per step is in the throughput."""
    return ref_world_size * throughput_n / ref_throughput


def efficiency(speedup_n: Any, world_size: int) -> Any:
    """S / N."""
    return speedup_n / world_size


def relative_cost(world_size: int, speedup_n: Any) -> Any:
    """N / S: the device-time one example costs against the reference's (seed 000's relative SU, GPUs alone)."""
    return world_size / speedup_n


def service_units_per_example(cores: float, gpus: int, core_weight: float, gpu_weight: float, sec_iter: Any,
                              global_batch: int) -> Any:
    """Service units an example costs: (weight x cores + weight x GPUs) x t / B (the HPC centre's charge)."""
    return (core_weight * cores + gpu_weight * gpus) * sec_iter / global_batch


def ratio(value: Any, reference: Any) -> Any:
    """A figure over its reference row's (relative SU)."""
    return value / reference


def karp_flatt_of(speedup_n: Any, world_size: int) -> Any:
    """(1/S - 1/N) / (1 - 1/N), for N > 1."""
    return (1 / speedup_n - 1 / world_size) / (1 - 1 / world_size)


def amdahl_speedup(serial_fraction: float, world_size: float) -> float:
    return 1 / (serial_fraction + (1 - serial_fraction) / world_size)


def amdahl_fit(points: Sequence[tuple[int, float]]) -> dict | None:
    """Least-squares serial fraction f of Amdahl's law over (N, speedup) points with N > 1.

    1/S = f + (1-f)/N is linear in f: 1/S - 1/N = f (1 - 1/N), so f has a closed form. Returns f, the
    speedup it predicts as N grows without bound (1/f), and the fit's root-mean-square error in speedup.
    """
    usable = [(n, s) for n, s in points if n > 1 and s > 0]
    if not usable:
        return None
    numerator = sum((1 / s - 1 / n) * (1 - 1 / n) for n, s in usable)
    denominator = sum((1 - 1 / n) ** 2 for n, _ in usable)
    fraction = numerator / denominator
    bounded = min(max(fraction, 0.0), 1.0)  # negative means superlinear: no serial part to speak of
    residuals = [amdahl_speedup(bounded, n) - s for n, s in usable]
    rmse = math.sqrt(sum(r * r for r in residuals) / len(residuals))
    return {
        "serial_fraction": bounded,
        "raw_serial_fraction": fraction,
        "max_speedup": (1 / bounded) if bounded > 0 else None,
        "rmse_speedup": rmse,
        "points": len(usable),
    }


def amdahl_applies(raw_serial_fraction: float) -> bool:
    """Whether a fitted serial fraction is one Amdahl's law can have: above 1 the step grew with N (a cost
    that scales with the ranks, not a fixed serial part), below 0 the speedup was superlinear."""
    return 0.0 <= raw_serial_fraction <= 1.0


def cost_per_million(device_count: int, examples_per_sec: float, price_per_device_hour: float) -> float | None:
    """Price of training on a million examples at this throughput with ``device_count`` devices."""
    if examples_per_sec <= 0:
        return None
    hours = 1e6 / examples_per_sec / 3600
    return hours * device_count * price_per_device_hour
