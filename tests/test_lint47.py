"""Round 47: `mp.spawn(..., args=(cfg))` (parentheses around one value make no tuple) as
DDP-SPAWN-ARGS, each on the real lines (cited with repository and commit) beside twins
that must stay silent; and no info for a torch loss that holds no tensors."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_source

# guochengqian/PointNeXt @ 15c829024ad270a7e39674a835e058d6de28c2df,
# examples/segmentation/main.py 41-72 and 474-528 (fixed in 7b8fe73: `args=(cfg,)`).
POINTNEXT = """\
import torch, torch.nn as nn
from torch import distributed as dist, multiprocessing as mp
from openpoints.utils import EasyConfig, dist_utils
from openpoints.models import build_model_from_cfg


def main(gpu, cfg):
    if cfg.distributed:
        if cfg.mp:
            cfg.rank = gpu
        dist.init_process_group(backend=cfg.dist_backend,
                                init_method=cfg.dist_url,
                                world_size=cfg.world_size,
                                rank=cfg.rank)
        dist.barrier()
    model = build_model_from_cfg(cfg.model).to(cfg.rank)
    if cfg.distributed:
        torch.cuda.set_device(gpu)
        model = nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[cfg.rank], output_device=cfg.rank)


if __name__ == "__main__":
    cfg = EasyConfig()
    cfg.load(args.cfg, recursive=True)
    cfg.rank, cfg.world_size, cfg.distributed, cfg.mp = dist_utils.get_dist_info(cfg)
    if cfg.mp:
        print('using mp spawn for distributed training')
        mp.spawn(main, nprocs=cfg.world_size, args=(cfg))
    else:
        main(0, cfg)
"""
SPAWN_LINE = (
    POINTNEXT.splitlines().index("        mp.spawn(main, nprocs=cfg.world_size, args=(cfg))") + 1
)


def _spawn(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.severity) for f in lint_source(text, "main.py") if f.id == "DDP-SPAWN-ARGS"]


def test_parenthesised_single_value_is_an_error_at_the_spawn() -> None:
    assert _spawn(POINTNEXT) == [(SPAWN_LINE, "error")]


def test_the_fix_and_a_name_holding_a_tuple_stay_silent() -> None:
    fixed = POINTNEXT.replace("args=(cfg))", "args=(cfg,))")
    assert _spawn(fixed) == []
    bare = POINTNEXT.replace("args=(cfg))", "args=cfg)")  # no parentheses: said elsewhere
    assert _spawn(bare) == []
    held = POINTNEXT.replace(
        "    if cfg.mp:\n        print", "    spawn_args = (cfg, 1)\n    if cfg.mp:\n        print"
    ).replace("args=(cfg))", "args=(spawn_args))")
    assert _spawn(held) == []


def test_a_parenthesised_call_and_a_function_of_more_arguments_stay_silent() -> None:
    # a call may return the tuple; `main(gpu, cfg, extra)` with a value of unknown kind
    call = POINTNEXT.replace("args=(cfg))", "args=(make_args(cfg)))")
    assert _spawn(call) == []
    more = POINTNEXT.replace("def main(gpu, cfg):", "def main(gpu, cfg, extra):").replace(
        "    cfg = EasyConfig()\n", "    cfg = load()\n"
    )
    assert _spawn(more) == []


def test_positional_args_and_start_processes_are_read_too() -> None:
    positional = POINTNEXT.replace(
        "mp.spawn(main, nprocs=cfg.world_size, args=(cfg))", "mp.spawn(main, (cfg), cfg.world_size)"
    )
    assert _spawn(positional) == [(SPAWN_LINE, "error")]
    start = POINTNEXT.replace("mp.spawn(main,", "mp.start_processes(main,")
    assert _spawn(start) == [(SPAWN_LINE, "error")]


def test_a_loss_without_tensors_gives_no_info() -> None:
    # pytorch/examples-style DDP script (tests/fixtures/lint/ok_mp_spawn.py): an unmoved
    # nn.MSELoss() does no harm, so nothing is said; a weighted one is still a warning.
    text = (Path(__file__).parent / "fixtures" / "lint" / "ok_mp_spawn.py").read_text()
    assert [f for f in lint_source(text, "ok_mp_spawn.py") if f.id == "DDP-LOSS-DEVICE"] == []
    weighted = text.replace("nn.MSELoss()", "nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0]))")
    found = [f for f in lint_source(weighted, "w.py") if f.id == "DDP-LOSS-DEVICE"]
    assert [f.severity for f in found] == ["warning"]
