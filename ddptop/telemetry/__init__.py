"""Telemetry read by the ddptop process itself (NVML, /sys, psutil). Never imports torch."""
