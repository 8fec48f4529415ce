"""Datasheet peaks: the dense tensor/vector throughput a GPU is sold at, per dtype, keyed by NVML's name.

Every figure is the vendor's *dense* number at the boost clock: never the "with sparsity" figure that
datasheets print first for tensor cores (it is exactly twice the dense one). A GPU missing here gets no
datasheet MFU (``None`` with the name); the measured ceiling still applies. A figure is TFLOP/s.

The dtype is what the step's matmuls run in: ``fp32`` (TF32 off), ``tf32`` (fp32 tensors with TF32 tensor
cores, torch's ``allow_tf32``), ``bf16`` and ``fp16`` (autocast; fp32 accumulate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    name: str  # the model, as matched
    tflops: dict[str, float]  # dtype -> dense TFLOP/s
    source: str


# (model as it stands in NVML's name, model, {dtype: dense TFLOP/s}, source). The longest match wins.
_TABLE: tuple[tuple[str, str, dict[str, float], str], ...] = (
    # NVIDIA Tesla V100 datasheet (2020): SXM2 FP32 15.7, Tensor 125 (fp16 mixed precision); no TF32, no bf16
    ("V100-SXM2", "V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, "NVIDIA V100 datasheet (SXM2)"),
    # same datasheet: PCIe FP32 14, Tensor 112
    ("V100-PCIE", "V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, "NVIDIA V100 datasheet (PCIe)"),
    # NVIDIA A100 datasheet: FP32 19.5; TF32 156 (312 with sparsity); BF16/FP16 312 (624 with sparsity);
    # the same for SXM4 and PCIe, 40 GB and 80 GB
    ("A100", "A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, "NVIDIA A100 datasheet"),
    # NVIDIA H100 datasheet, SXM: FP32 67; TF32 494.7 dense (989 with sparsity); BF16/FP16 989.4 dense
    # (1,979 with sparsity). NVML names the SXM part "NVIDIA H100 80GB HBM3".
    ("H100 80GB HBM3", "H100 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "NVIDIA H100 datasheet (SXM)"),
    ("H100 SXM", "H100 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "NVIDIA H100 datasheet (SXM)"),
    # same datasheet, PCIe: FP32 51; TF32 378 dense (756 with sparsity); BF16/FP16 756 dense (1,513 sparse)
    ("H100 PCIe", "H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
     "NVIDIA H100 datasheet (PCIe)"),
    # NVIDIA H200 datasheet, SXM: the H100 SXM's compute figures (FP32 67, TF32 989 / BF16 1,979 with sparsity)
    ("H200", "H200 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, "NVIDIA H200 datasheet"),
    # NVIDIA A10 datasheet: FP32 31.2; TF32 62.5 (125 sparse); BF16/FP16 125 (250 sparse)
    ("A10", "A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, "NVIDIA A10 datasheet"),
    # NVIDIA L4 datasheet: FP32 30.3; TF32 60 (120 sparse); BF16/FP16 121 (242 sparse)
    ("L4", "L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}, "NVIDIA L4 datasheet"),
    # NVIDIA L40S datasheet: FP32 91.6; TF32 183 (366 sparse); BF16/FP16 362.05 (733 sparse)
    ("L40S", "L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}, "NVIDIA L40S datasheet"),
    # NVIDIA T4 datasheet: FP32 8.1; mixed precision (FP16/FP32) 65; no TF32, no bf16
    ("T4", "T4", {"fp32": 8.1, "fp16": 65.0}, "NVIDIA T4 datasheet"),
)


def datasheet_peak(gpu_name: str | None) -> Peak | None:
    """The datasheet entry for a GPU named as NVML names it ("NVIDIA A100-SXM4-80GB"), or None."""
    if not gpu_name:
        return None
    name = gpu_name.upper()
    # a model number stands alone: "A10" is not "A100", "L4" is not "L40S"
    found = [row for row in _TABLE if re.search(rf"(?<![A-Z0-9]){re.escape(row[0].upper())}(?![A-Z0-9])", name)]
    if not found:
        return None
    key, model, tflops, source = max(found, key=lambda row: len(row[0]))
    return Peak(model, dict(tflops), source)


def peak_flops(gpu_name: str | None, dtype: str) -> tuple[float | None, str]:
    """(dense FLOP/s for that dtype, or None) and a few words on where it comes from or why there is none."""
    peak = datasheet_peak(gpu_name)
    if peak is None:
        return None, f"no datasheet figure for {gpu_name or 'this device'}"
    if dtype not in peak.tflops:
        return None, f"{peak.name} has no {dtype} tensor throughput on its datasheet"
    return peak.tflops[dtype] * 1e12, f"{peak.name} {dtype} dense {peak.tflops[dtype]:g} TFLOP/s ({peak.source})"
