"""The runs the GPU suite makes, in one place: what ``tests/gpu/test_gpu_suite.py`` starts on a GPU node, and
what ``tests/gpu/test_readers.py`` checks here against ddptop's own parser and plan (every flag known, every
plan valid on a node of one and of eight GPUs).

Each keeps its launches short: one launch per configuration (``--launches 1``), at most 2-3 s of measured
steps per configuration, no plots, and no communication analysis or collective benchmark where the test
does not read them. World sizes: the default plan's (1, 2, 4, ... up to the visible GPUs); the others at one
world size each (the GPT run and the tune at the node's largest, the capped batch sweep at 1).
"""

from __future__ import annotations

import os
from typing import Any

# a hung rank ends its configuration after a minute, not the default five (the suite's budget is five in all)
HANG_TIMEOUT_S = 60
SHORT = ("--launches", "1", "--max-time-per-config", "2", "--no-plots", "--hang-timeout", str(HANG_TIMEOUT_S))

# The default plan (resnet50, batch 32, 224 px, NCCL, the no-DDP baseline at N=1, world sizes from the
# visible GPUs), driven under Textual's Pilot: one launch per world size, 3 s of measured steps per
# configuration, the compute/communication phases (5 steps each) and a short allreduce sweep at N >= 2.
DEFAULT_PLAN: dict[str, Any] = dict(launches=1, max_time_per_config=3.0, comm_iters=5, collectives=["allreduce"],
                                    coll_max_bytes="64MiB", coll_iters=5, hang_timeout=float(HANG_TIMEOUT_S))
TELEMETRY_INTERVAL = 0.5  # beside nvidia-smi -lms 500

# The GPT kernel: gpt-tiny at its full context (256 tokens: the attention is ~13% of the FLOPs there, so a
# count without the fused kernel's term is 1.8% short), bf16 autocast, ZeRO-1 and FSDP2 beside DDP.
GPT_MODEL, GPT_SEQ_LEN, GPT_BATCH = "gpt-tiny", 256, 8


def gpt_run(world_size: int) -> list[str]:
    return ["--models", GPT_MODEL, "--seq-len", str(GPT_SEQ_LEN), "--batch-sizes", str(GPT_BATCH), "--amp", "bf16",
            "--strategies", "zero1,fsdp2", "--world-sizes", str(world_size), "--no-baseline", "--comm-iters", "0",
            "--no-collectives", *SHORT]


# A batch sweep of resnet50 from 32 under a 4000 MiB allocator cap, in fp16 autocast and channels_last: batch
# 32 holds about 3 GiB in fp32 on the H100 (less in fp16), batch 128 over 5.6 GiB in fp32 ran out of a 6000 MiB
# cap there; here some batch from 64 to 256 runs out, and the larger are not run.
CAP_MB = 4000
CAPPED_SWEEP = ["--models", "resnet50", "--batch-sizes", "32", "--batch-sweep", "--memory-cap-mb", str(CAP_MB),
                "--amp", "fp16", "--channels-last", "--world-sizes", "1", "--no-baseline", "--comm-iters", "0",
                "--no-collectives", *SHORT]

# ddptop tune of a small MLP (quick to compile; about 3.4 MB of gradients, so several DDP buckets at a 1 MB
# cap) at the node's largest world size: bf16 only through the amp_bf16 variant, and torch.compile.
TUNE = ["--models", "tests.tiny_models:wide_mlp", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "64",
        "--variants", "amp_bf16,compile", "--bucket-cap-mb", "1", *SHORT]

# A workload of the protocol (tests/workloads.py: a dict batch, a loss of its own, FLOPs counted by hand) and a
# Hugging Face decoder built from a config (a small Llama, nothing downloaded), bf16 autocast, DDP and FSDP2 at
# the node's largest world size.
HF_DECODER = ("hf:llama:hidden_size=256:num_hidden_layers=2:num_attention_heads=4:num_key_value_heads=4:"
              "intermediate_size=512:vocab_size=4096")
WORKLOAD = "tests.workloads:dict_workload"
WORKLOAD_SEQ_LEN, WORKLOAD_BATCH = 128, 8


def workloads_run(world_size: int) -> list[str]:
    return ["--models", f"{WORKLOAD},{HF_DECODER}", "--seq-len", str(WORKLOAD_SEQ_LEN), "--batch-sizes",
            str(WORKLOAD_BATCH), "--amp", "bf16", "--strategies", "fsdp2", "--world-sizes", str(world_size),
            "--no-baseline", "--comm-iters", "0", "--no-collectives", *SHORT]


# Threads and devices: resnet18 at 64 px, batch 32, on the CPU at 1, 2, 4, 8, 16 threads (those that fit the
# node's usable cores) and on one GPU, in one run: the thread curve and the CPU against the GPU in service units.
THREAD_COUNTS = (1, 2, 4, 8, 16)


def threads_devices_run(cores: int) -> list[str]:
    counts = ",".join(str(t) for t in THREAD_COUNTS if t <= cores)
    return ["--models", "resnet18", "--image-size", "64", "--batch-sizes", "32", "--threads", counts, "--devices",
            "cpu,cuda", "--world-sizes", "1", "--no-baseline", "--comm-iters", "0", "--no-collectives", "--no-trace",
            *SHORT]


# A user's training script, unchanged (examples/train.py: an MLP under DDP over nccl on the rank's GPU, a
# DataLoader with two workers a rank, SGD), run by ddptop's probe at N = 1: ddptop's flags, then the script after
# --, its path absolute (the ranks start in the directory ddptop was started in).
TRAIN_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "examples", "train.py")
SCRIPT_WARMUP, SCRIPT_ITERS, SCRIPT_BATCH, SCRIPT_TRACE_STEPS = 3, 30, 64, 3


def script_run() -> list[str]:
    return ["--world-sizes", "1", "--warmup", str(SCRIPT_WARMUP), "--iters", str(SCRIPT_ITERS),
            "--trace-steps", str(SCRIPT_TRACE_STEPS), *SHORT, "--",
            TRAIN_SCRIPT, "--workers", "2", "--batch-size", str(SCRIPT_BATCH), "--hidden", "1024"]
