"""CUDA device errors in logs.  ENV-ORDINAL says what threads established most for 'invalid device ordinal' on
several nodes: the global rank used as the GPU index (three corpus excerpts: a training
script's set_device(rank), a connector's tensor-parallel rank, a trainer's device id)."""

from __future__ import annotations

import pytest
from corpus_excerpts import excerpt, lead


@pytest.mark.parametrize(
    "eid",
    [
        "i-global-rank-device-vmamba-115",  # "set_device(rank)" -> "rank % torch.cuda.device_count()"
        "k2-globalrank-device-lmcache-1988",  # tp_rank as the device index (LMCache PR #2015)
        "m2-device-ordinal-multinode-ultralytics-20915",  # 2 machines x 2 GPUs, "a wrong gpu id"
    ],
)
def test_an_invalid_ordinal_names_the_global_rank_and_the_local_fix(eid: str) -> None:
    d = excerpt(eid)
    assert lead(d) == "ENV-ORDINAL" and d.first is not None
    assert "GLOBAL rank" in d.first.cause and "LOCAL_RANK" in d.first.fix


def test_a_contained_peer_memory_fault_is_a_ranks_cuda_error() -> None:
    # NVIDIA/nvidia-resiliency-ext@d8686d9 tests/attribution: rank 171's watchdog ends on
    # cudaErrorContained ("Invalid access of peer GPU memory over nvlink or a hardware error"),
    # behind srun --label's "171: "
    d = excerpt("aa4-nvrx-watchdog-peer-gpu-memory-nvlink-error")
    assert lead(d) == "RANK-CUDA-ERROR" and d.first is not None
    assert "NVLink" in d.first.cause and d.first.rank == 171
