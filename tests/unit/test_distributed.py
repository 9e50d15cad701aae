"""training/distributed.py without a process group: what a rank does on its own."""

from __future__ import annotations

import pytest
import torch

from transformer_mt.training.distributed import rank_seed, threads_of_waiting_ranks


@pytest.fixture
def one_thread():
    """Each torchrun rank starts on one thread (OMP_NUM_THREADS=1); put torch's count back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_rank_0_validates_on_the_threads_of_the_ranks_waiting_on_its_machine(one_thread, monkeypatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with threads_of_waiting_ranks(torch.device("cpu")):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1


def test_the_threads_are_given_back_when_validation_fails(one_thread, monkeypatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(RuntimeError):
        with threads_of_waiting_ranks(torch.device("cpu")):
            raise RuntimeError("validation failed")
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("device, local", [
    ("cpu", None),  # one process, not started by torchrun: it has its threads already
    ("cpu", "1"),   # one process on each of several machines: nobody waits on this one
    ("cuda", "2"),  # GPU ranks: the CPU threads are not what validation runs on
])
def test_nothing_changes_where_no_rank_of_this_machine_waits(one_thread, monkeypatch, device, local) -> None:
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    with threads_of_waiting_ranks(torch.device(device)):
        assert torch.get_num_threads() == 1


def test_rank_0_keeps_the_seed_and_other_ranks_draw_other_streams() -> None:
    assert rank_seed(7, 0) == 7
    assert len({rank_seed(7, rank) for rank in range(4)}) == 4
