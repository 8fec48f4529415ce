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
    # same datasheet, H100 NVL (per GPU): FP32 60; TF32 835 and BF16/FP16 1,671 with sparsity
    ("H100 NVL", "H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
     "NVIDIA H100 datasheet (NVL)"),
    # NVIDIA H200 datasheet, SXM: the H100 SXM's compute figures (FP32 67, TF32 989 / BF16 1,979 with sparsity)
    ("H200", "H200 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, "NVIDIA H200 datasheet"),
    # same datasheet, H200 NVL: FP32 60; TF32 835 and BF16/FP16 1,671 with sparsity (the longer key wins over
    # "H200", whose SXM figures are higher)
    ("H200 NVL", "H200 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
     "NVIDIA H200 datasheet (NVL)"),
    # NVIDIA HGX B200 datasheet, per GPU: FP32 75; TF32 2.2 PFLOP/s and BF16/FP16 4.5 PFLOP/s with sparsity
    ("B200", "B200", {"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0}, "NVIDIA HGX B200 datasheet"),
    # NVIDIA A10 datasheet: FP32 31.2; TF32 62.5 (125 sparse); BF16/FP16 125 (250 sparse)
    ("A10", "A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, "NVIDIA A10 datasheet"),
    # NVIDIA L4 datasheet: FP32 30.3; TF32 60 (120 sparse); BF16/FP16 121 (242 sparse)
    ("L4", "L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}, "NVIDIA L4 datasheet"),
    # NVIDIA L40 datasheet: FP32 90.5; TF32 90.5 (181 sparse); BF16/FP16 181.05 (362.1 sparse)
    ("L40", "L40", {"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05}, "NVIDIA L40 datasheet"),
    # NVIDIA L40S datasheet: FP32 91.6; TF32 183 (366 sparse); BF16/FP16 362.05 (733 sparse)
    ("L40S", "L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}, "NVIDIA L40S datasheet"),
    # NVIDIA T4 datasheet: FP32 8.1; mixed precision (FP16/FP32) 65; no TF32, no bf16
    ("T4", "T4", {"fp32": 8.1, "fp16": 65.0}, "NVIDIA T4 datasheet"),
    # NVIDIA Ampere GA102 whitepaper, RTX A6000: FP32 38.7; TF32 77.4; BF16 and FP16 with FP32 accumulate
    # 154.8 (twice each with sparsity)
    ("RTX A6000", "RTX A6000", {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8},
     "NVIDIA Ampere GA102 whitepaper (RTX A6000)"),
    # same whitepaper, GeForce RTX 3090: FP32 35.6; TF32 35.6; BF16 and FP16 with FP32 accumulate 71 (GeForce
    # runs FP32-accumulate tensor math at half the FP16-accumulate rate; training accumulates in FP32)
    ("RTX 3090", "RTX 3090", {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0},
     "NVIDIA Ampere GA102 whitepaper (GeForce RTX 3090)"),
    # NVIDIA Ada Lovelace whitepaper, GeForce RTX 4090: FP32 82.6; TF32 82.6; BF16 and FP16 with FP32
    # accumulate 165.2 (330.3 with sparsity)
    ("RTX 4090", "RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
     "NVIDIA Ada Lovelace whitepaper (GeForce RTX 4090)"),
    # Not here: the A10G (AWS's variant of the A10; no vendor datasheet gives its tensor throughput, and the
    # A10's figures do not apply), so it gets the measured ceiling only.
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
