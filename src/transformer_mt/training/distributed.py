"""Multi-process training with PyTorch DDP, started by `torchrun`.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; we read them, join the process group
(gloo on CPU, nccl on GPU) and pick the device. No process management of our own."""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist

from transformer_mt.common.device import resolve_device


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
    end_with_launcher()
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        import_before_the_group()
        join_group("nccl" if device.type == "cuda" else "gloo")
    return DistributedContext(rank, local_rank, world_size), device


GROUPS_JOINED = itertools.count()  # process groups this process has joined: every rank counts alike


def join_group(backend: str) -> None:
    """init_process_group on keys of torchrun's store that no earlier group of this process
    used. torch names a group's keys by a count that destroy_process_group resets, so a second
    fit in one process (say, training then fine-tuning in one script) would find the first
    group's keys in the store: a rank arriving first reads the old addresses and gloo refuses
    the connection. Ranks other than 0 wait while rank 0 validates: an hour, not NCCL's 10 minutes."""
    timeout = timedelta(hours=1)
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
    store.set_timeout(timeout)
    keys = dist.PrefixStore(f"transformer_mt_group{next(GROUPS_JOINED)}", store)
    dist.init_process_group(backend, store=keys, rank=rank, world_size=world_size, timeout=timeout)


def import_before_the_group() -> None:
    """Import torch.distributed.nn.functional before the process group exists. DDP imports it
    on first use, and its functions take `group=group.WORLD` as a default argument, evaluated at
    import: imported after init_process_group, they hold the default group forever, so
    destroy_process_group cannot free it and gloo's worker threads outlive it into interpreter
    shutdown. A worker thread still releasing its last collective's tensors then needs the GIL
    while Python finalizes, and the process aborts ("terminate called without an active
    exception" from a torchrun worker that had finished). Imported first, the
    defaults are None and destroy_process_group frees the group, joining its threads."""
    import torch.distributed.nn.functional  # noqa: F401


def end_with_launcher() -> None:
    """Ask Linux to send this worker SIGTERM when its parent (the torchrun agent) dies,
    so that a launcher killed with SIGKILL does not leave workers training on their own
    (which a later resume would then run beside). Elsewhere nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def barrier(ctx: DistributedContext) -> None:
    """Wait for every rank (rank 0 prepares files the others then read)."""
    if ctx.world_size > 1:
        dist.barrier()


def cleanup(ctx: DistributedContext) -> None:
    if ctx.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], world_size: int) -> list[float]:
    """Element-wise sum over every rank (float64, on the CPU with gloo or on the GPU with
    nccl); a single process gets its values back."""
    if world_size == 1:
        return list(values)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def gather_objects(obj: object, world_size: int) -> list[object]:
    """`obj` of every rank, in rank order (every rank must call it)."""
    if world_size == 1:
        return [obj]
    gathered: list[object] = [None] * world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: object, world_size: int) -> object:
    """Rank 0's `obj` on every rank (every rank must call it)."""
    if world_size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextmanager
def threads_of_waiting_ranks(device: torch.device) -> Iterator[None]:
    """While rank 0 validates alone, the other processes of its machine wait for its result
    in a broadcast: on a CPU, lend it their threads meanwhile. torchrun starts every process on
    one thread (OMP_NUM_THREADS=1) and sets LOCAL_WORLD_SIZE, so without this a 2-process run on
    2 cores would decode its validation set on one core. Nothing changes in one process."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local == 1 or device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(threads * local)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank`'s dropout and other random draws: `seed` itself on rank 0
    (so one process trains as before), a different stream on every other rank (the same
    seed everywhere would give every rank the same dropout masks)."""
    return seed + 1_000_003 * rank
