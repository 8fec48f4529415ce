"""The reference loop: one configuration run both ways, by ddptop (one rank) and by a plain torch DDP loop in
the torch probe, with the same threads and GPU."""

from __future__ import annotations

import os
from typing import Any

from ddptop.doctor.commands import ask_torch
from ddptop.doctor.nvml_view import NvmlView
from ddptop.telemetry.allocation import usable_cpu_count

# the configuration both sides run: (model, image size, classes, batch, warm-up steps, measured steps)
LOOP_CPU = ("resnet18", 32, 10, 8, 5, 30)
LOOP_GPU = ("resnet18", 224, 1000, 32, 20, 100)


def loop_configuration(on_gpu: bool) -> dict[str, Any]:
    model, size, classes, batch, warmup, steps = LOOP_GPU if on_gpu else LOOP_CPU
    return {"model": model, "image_size": size, "num_classes": classes, "batch_size": batch, "warmup": warmup,
            "steps": steps, "threads": usable_cpu_count(), "device": "cuda" if on_gpu else "cpu", "world_size": 1}


def loop_run_arguments(config: dict[str, Any]) -> list[str]:
    """ddptop's run of the loop's configuration: one rank, one launch, exactly these steps, nothing else
    measured (the plain loop it is compared with is one process too)."""
    return ["--models", config["model"], "--image-size", str(config["image_size"]), "--num-classes",
            str(config["num_classes"]), "--batch-sizes", str(config["batch_size"]), "--world-sizes", "1",
            "--warmup", str(config["warmup"]), "--iters", str(config["steps"]), "--threads-per-rank",
            str(config["threads"]), "--device", config["device"], "--no-baseline", "--comm-iters", "0",
            "--no-collectives", "--launches", "1"]


def reference_loop(config: dict[str, Any], view: NvmlView) -> tuple[dict | None, str]:
    """The plain loop's step times, in a torch subprocess given the environment ddptop's rank gets: the same
    threads, and on a GPU node the GPU ddptop's rank 0 uses (NVML's first usable one)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(config["threads"]))
    if config["device"] == "cuda":
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        env["CUDA_VISIBLE_DEVICES"] = view.inventory.usable_gpus[0].uuid
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return ask_torch(["loop", "--model", config["model"], "--image-size", str(config["image_size"]),
                      "--num-classes", str(config["num_classes"]), "--batch-size", str(config["batch_size"]),
                      "--warmup", str(config["warmup"]), "--steps", str(config["steps"]),
                      "--threads", str(config["threads"])], env)
