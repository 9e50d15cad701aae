"""Multi-process training with PyTorch DDP, started by `torchrun`.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; we read them, join the process group
(gloo on CPU, nccl on GPU) and pick the device. No process management of our own."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from transformer_mt.device import resolve_device


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(device_name: str = "auto") -> tuple[DistributedContext, torch.device]:
    """Join the process group when launched by torchrun; otherwise a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(device_name)
    if world_size == 1:
        return DistributedContext(), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistributedContext(rank, local_rank, world_size), device


def barrier(ctx: DistributedContext) -> None:
    """Wait for every rank (rank 0 prepares files the others then read)."""
    if ctx.world_size > 1:
        dist.barrier()


def cleanup(ctx: DistributedContext) -> None:
    if ctx.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
