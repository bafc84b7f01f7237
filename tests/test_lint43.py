"""Round 43: pitfalls inside detection projects' library modules (solvers, backbones),
each on the real lines (cited with repository and commit) beside a twin that must stay
silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# ShihuaHuang95/DEIM @ bd70c7d528d9c8ca7481c4bfd386662782cb4596: train.py builds the solver
# from a registry and calls fit(); engine/misc/dist_utils.py 121-123 (save_on_master),
# engine/solver/_solver.py 154-162 (load_resume_state), engine/solver/det_solver.py 64-154
# (the stage switch reloads best_stg1.pth that rank 0 saved, no barrier; fixed in 47237d3).
DEIM_TRAIN = """\
import torch.distributed as dist

from solver import TASKS


def main(cfg):
    dist.init_process_group(backend="nccl")
    solver = TASKS[cfg["task"]](cfg)
    solver.fit()
"""

DIST_UTILS = """\
import torch
import torch.distributed as dist


def is_main_process():
    return dist.get_rank() == 0


def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)
"""

BASE_SOLVER = """\
import torch


class BaseSolver:
    def __init__(self, cfg):
        self.output_dir = cfg["output_dir"]

    def load_resume_state(self, path: str):
        state = torch.load(path, map_location='cpu')
        self.load_state_dict(state)
"""

DET_SOLVER = """\
import torch.distributed as dist

import dist_utils
from base_solver import BaseSolver


class DetSolver(BaseSolver):
    def fit(self):
        for epoch in range(self.last_epoch + 1, self.epoches):
            if epoch == self.stop_epoch:
                self.load_resume_state(str(self.output_dir / 'best_stg1.pth'))
            train_stats = self.train_one_epoch(epoch)
            if self.better(train_stats):
                dist_utils.save_on_master(self.state_dict(), self.output_dir / 'best_stg1.pth')
"""

SOLVER_INIT = """\
from det_solver import DetSolver

TASKS = {"detection": DetSolver}
"""


def _deim(tmp_path: Path, name: str, solver: str = DET_SOLVER) -> list[tuple[str, int, str]]:
    files = {
        "train.py": DEIM_TRAIN,
        "dist_utils.py": DIST_UTILS,
        "base_solver.py": BASE_SOLVER,
        "det_solver.py": solver,
        "solver/__init__.py": SOLVER_INIT,
    }
    return severities(lint_project(tmp_path / name, files), "DDP-CKPT-BARRIER")


def test_stage_switch_reload_of_a_rank0_save_through_two_helpers(tmp_path: Path) -> None:
    # said at the reload's call site, where the barrier goes (the torch calls sit in two
    # helpers of two other files)
    assert _deim(tmp_path, "bug") == [("det_solver.py", 11, "error")]


def test_reload_after_a_barrier_or_of_another_file_is_silent(tmp_path: Path) -> None:
    # the fix (47237d3): every rank waits for rank 0's file before the reload
    reload = "                self.load_resume_state("
    fixed = DET_SOLVER.replace(reload, "                dist.barrier()\n" + reload)
    assert _deim(tmp_path, "fixed", fixed) == []
    # another file under the same folder is no reload of the saved one
    other = DET_SOLVER.replace(
        "(self.output_dir / 'best_stg1.pth'))", "(self.output_dir / 'init.pth'))"
    )
    assert _deim(tmp_path, "other", other) == []
    # a bare path parameter at both sites is no sign of one file (many values share one name)
    bare = DET_SOLVER.replace("str(self.output_dir / 'best_stg1.pth')", "self.path").replace(
        "self.output_dir / 'best_stg1.pth')", "self.path)"
    )
    assert _deim(tmp_path, "bare", bare) == []
