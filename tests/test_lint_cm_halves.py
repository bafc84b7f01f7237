"""A main-process-first section written as a context manager: the ranks that are not the
main one wait in `__enter__`, the main one joins them in `__exit__`.  The two barriers are
one collective reached once by every rank, not two rank-gated ones (blind batch Z's correct
avalanche project got two false DDP-RANK-DIVERGENCE errors for it)."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# ContinualAI/avalanche (current commit in round 13's blind batch Z),
# avalanche/distributed/distributed_helper.py: _MainProcessFirstContext's two halves, cut to
# the lines that decide; the entry enters the section around a download.
HELPER = """\
import torch
import torch.distributed as dist


class DistributedHelper:
    is_main_process = dist.get_rank() == 0

    @staticmethod
    def barrier():
        if dist.is_initialized():
            torch.distributed.barrier()


class _MainProcessFirstContext:
    def __enter__(self):
        if not DistributedHelper.is_main_process:
            # Wait for the main process
            DistributedHelper.barrier()

    def __exit__(self, exc_type, exc_val, exc_tb):
        if DistributedHelper.is_main_process:
            # Let other process enter the section
            DistributedHelper.barrier()
"""

TRAIN = """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helper import _MainProcessFirstContext


def main(model, download):
    dist.init_process_group("nccl")
    with _MainProcessFirstContext():
        data = download()
    model = DDP(model)
    return data


if __name__ == "__main__":
    main(None, None)
"""


def test_the_two_halves_of_a_main_process_first_context_pair_up(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": TRAIN, "helper.py": HELPER})
    assert severities(ok, "DDP-RANK-DIVERGENCE") == []
    # the twin: __exit__ forgets the main rank's barrier, so the others wait forever
    half = HELPER.index("        if DistributedHelper.is_main_process:\n            # Let")
    broken = HELPER[:half] + "        pass\n"
    bad = lint_project(tmp_path / "bad", {"train.py": TRAIN, "helper.py": broken})
    assert [(f, sev) for f, _, sev in severities(bad, "DDP-RANK-DIVERGENCE")] == [("helper.py", "error")]
