"""Round 14: which line a finding names when a pitfall spans several lines, and two
shapes blind batch J missed. The code is the real projects' (only the lines needed, each
cited with its repository and commit); each pitfall is beside its fixed twin."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project

from ddptui.lint.model import LintFinding


def _at(found: list[LintFinding], fid: str) -> list[tuple[str, int]]:
    return [(Path(f.file).name, f.line) for f in found if f.id == fid]


# ryul99/pytorch-project-template @ eb012d95092397159e4af11eecd0cd658c856fec,
# model/model.py: the wrapper's state_dict() taken into a name, moved to the CPU key by
# key, saved three lines later. `.module` belongs on the `.state_dict()` line.
RYUL99 = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Model:
    def __init__(self, hp, net_arch, rank=0):
        self.hp = hp
        self.rank = rank
        self.net = net_arch.to(rank)
        if hp.model.num_gpus > 1:
            self.net = DDP(self.net, device_ids=[self.rank])

    def save_network(self, save_path):
        if self.rank == 0:
            state_dict = self.net.state_dict()
            for key, param in state_dict.items():
                state_dict[key] = param.cpu()
            torch.save(state_dict, save_path)


def main(hp, net, rank):
    dist.init_process_group("nccl", rank=rank, world_size=hp.model.num_gpus)
    torch.cuda.set_device(rank)
    torch.manual_seed(hp.seed)
    model = Model(hp, net, rank)
    model.save_network("x.pt")
"""


def test_save_wrapper_names_the_state_dict_line_not_the_save(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": RYUL99})
    assert _at(found, "DDP-SAVE-WRAPPER") == [("train.py", 16)]
    fixed = RYUL99.replace("self.net.state_dict()", "self.net.module.state_dict()")
    assert _at(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-SAVE-WRAPPER") == []


# tczhangzhi/pytorch-distributed @ ac8358bcb49b8f3c52299c0a12604c0974eb79b8,
# distributed.py: every rank calls `save_checkpoint(...)` at the end of each epoch; the
# helper is two lines. The fix guards the call, so the finding names the call.
TCZHANG = """\
import torch
import torch.distributed as dist
import shutil


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(backend='nccl', init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    torch.cuda.set_device(gpu)
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(build(args).cuda(gpu), device_ids=[gpu])
    for epoch in range(args.start_epoch, args.epochs):
        args.sampler.set_epoch(epoch)
        train(args.loader, model)
        save_checkpoint(
            {
                'epoch': epoch + 1,
                'state_dict': model.module.state_dict(),
            }, False)


def save_checkpoint(state, is_best, filename='checkpoint.pth.tar'):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, 'model_best.pth.tar')
"""


def test_all_ranks_io_in_a_small_helper_is_said_at_its_one_unguarded_call(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": TCZHANG})
    assert ("train.py", 16) in _at(found, "DDP-ALL-RANKS-IO"), found
    assert ("train.py", 24) not in _at(found, "DDP-ALL-RANKS-IO")
    fixed = TCZHANG.replace("        save_checkpoint(\n", "        if args.rank == 0: save_checkpoint(\n")
    assert _at(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-ALL-RANKS-IO") == []
    # a helper called unguarded from two places is fixed once, inside: said there
    call = "        train(args.loader, model)\n"
    twice = TCZHANG.replace(call, call + "        save_checkpoint({}, False)\n")
    found_twice = lint_project(tmp_path / "two", {"train.py": twice})
    assert ("train.py", 25) in _at(found_twice, "DDP-ALL-RANKS-IO")


# lucidrains/stylegan2-pytorch @ d0bab1360d59ed7a5930c4ba82f8781753ee0ccb,
# stylegan2_pytorch/stylegan2_pytorch.py: two gradient-accumulation loops (D, then G) call
# backward through the shared `loss_backwards` helper. `no_sync` goes in each loop
# (a3ba351a), so each loop is named, and the summary names the helper's backward.
STYLEGAN2 = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def loss_backwards(fp16, loss, optimizer, loss_id, **kwargs):
    if fp16:
        with amp.scale_loss(loss, optimizer, loss_id) as scaled_loss:
            scaled_loss.backward(**kwargs)
    else:
        loss.backward(**kwargs)


class Trainer:
    def __init__(self, rank, accumulate):
        self.rank = rank
        self.gradient_accumulate_every = accumulate
        self.fp16 = False
        self.D = DDP(torch.nn.Linear(8, 1).cuda(rank), device_ids=[rank])
        self.G = DDP(torch.nn.Linear(8, 8).cuda(rank), device_ids=[rank])
        self.D_opt = torch.optim.Adam(self.D.parameters())
        self.G_opt = torch.optim.Adam(self.G.parameters())

    def train(self, loader):
        self.D_opt.zero_grad()
        for i in range(self.gradient_accumulate_every):
            disc_loss = self.D(next(loader).cuda(self.rank)).mean()
            loss_backwards(self.fp16, disc_loss, self.D_opt, 1)
        self.D_opt.step()
        self.G_opt.zero_grad()
        for i in range(self.gradient_accumulate_every):
            gen_loss = self.D(self.G(next(loader).cuda(self.rank))).mean()
            loss_backwards(self.fp16, gen_loss, self.G_opt, 2)
        self.G_opt.step()


def main():
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    Trainer(rank, 4).train(iter([torch.randn(4, 8)] * 100))
"""


def test_no_sync_names_each_accumulation_loop_around_a_shared_backward(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": STYLEGAN2})
    assert sorted(_at(found, "DDP-NO-SYNC")) == [("train.py", 27), ("train.py", 32)]
    (first,) = [f for f in found if f.id == "DDP-NO-SYNC" and f.line == 27]
    assert "train.py:12" in first.summary


# facebookresearch/fairseq @ 72d3408481c5a60c39cb12e1770774b88543c9ab (issue #4302, fix
# #4351): the local rank is a config dataclass field whose argparse alias is
# `--local_rank`, default 0; distributed/utils.py reads SLURM_LOCALID (srun only) and
# calls torch.cuda.set_device(cfg.device_id). Under torchrun every process takes GPU 0.
FAIRSEQ_CONFIG = """\
from dataclasses import dataclass, field


@dataclass
class DistributedTrainingConfig:
    distributed_world_size: int = field(default=1, metadata={"help": "total number of GPUs"})
    device_id: int = field(
        default=0,
        metadata={
            "help": "which GPU to use (usually configured automatically)",
            "argparse_alias": "--local_rank",
        },
    )
"""
FAIRSEQ_TRAIN = """\
import os
import torch
import torch.distributed as dist
from configs import DistributedTrainingConfig


def infer_init_method(cfg):
    if "SLURM_STEP_NODELIST" in os.environ:
        cfg.device_id = int(os.environ.get("SLURM_LOCALID"))


def distributed_init(cfg):
    dist.init_process_group(backend="nccl", init_method="env://")
    torch.manual_seed(1)
    if torch.cuda.is_available():
        torch.cuda.set_device(cfg.device_id)
    model = torch.nn.parallel.DistributedDataParallel(build(cfg), device_ids=[cfg.device_id])
    return model


def main():
    cfg = DistributedTrainingConfig()
    infer_init_method(cfg)
    distributed_init(cfg)
"""


def test_local_rank_flag_as_a_config_field_alias_defaulting_to_zero(tmp_path: Path) -> None:
    files = {"train.py": FAIRSEQ_TRAIN, "configs.py": FAIRSEQ_CONFIG}
    found = lint_project(tmp_path / "bad", files)
    assert ("configs.py", 8) in _at(found, "DDP-HARDCODED-DEVICE"), found
    fixed = FAIRSEQ_CONFIG.replace(
        "default=0,", 'default=int(os.environ.get("LOCAL_RANK", 0)),'
    ).replace("from dataclasses", "import os\nfrom dataclasses")
    ok = lint_project(tmp_path / "ok", {**files, "configs.py": fixed})
    assert not [f for f in _at(ok, "DDP-HARDCODED-DEVICE") if f[0] == "configs.py"]


# ORNL/HydraGNN @ dbcd05a9739a7dd9ac799b6ae1361401247fe608,
# hydragnn/utils/distributed/distributed.py: init_process_group(backend=backend) in a port
# retry loop; the GPU is only named as "cuda:" + str(localrank) (torch.xpu.set_device on
# Intel GPUs is no CUDA pick); torch.cuda.synchronize() in the tracer. Fix 1ab06e97 calls
# torch.cuda.set_device(local_rank) before the init.
HYDRAGNN = """\
import os
import torch
import torch.distributed as dist


def get_device_name(localrank):
    if torch.cuda.is_available():
        device_name = "cuda:" + str(localrank)
    elif hasattr(torch, "xpu") and torch.xpu.is_available():
        device_name = "xpu"
        torch.xpu.set_device(localrank)
    return device_name


def setup_ddp(backend="nccl"):
    world_rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    localrank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    for attempt in range(8):
        try:
            if not dist.is_initialized():
                dist.init_process_group(
                    backend=backend,
                    init_method="env://",
                )
            break
        except Exception as exc:
            if "EADDRINUSE" in str(exc):
                continue
            raise
    torch.manual_seed(0)
    device = get_device_name(localrank)
    model = build().to(device)
    torch.cuda.synchronize()
    return model
"""


def test_nccl_group_whose_gpu_is_only_named_by_a_device_string(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": HYDRAGNN})
    assert _at(found, "DDP-INIT-BEFORE-SET-DEVICE") == [("train.py", 21)]
    fixed = HYDRAGNN.replace(
        "    for attempt in range(8):\n",
        "    torch.cuda.set_device(localrank)\n    for attempt in range(8):\n",
    )
    assert _at(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-INIT-BEFORE-SET-DEVICE") == []


# fishaudio/Bert-VITS2 @ 1788fb5a6154590bf374c5f0e6c3f106d99a313c, train_ms.py: the
# global rank handed to `.cuda(rank)` at the end of a multi-line constructor call: the
# finding names the `.cuda(rank)` line, where the rank is given.
BERT_VITS2 = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def run():
    dist.init_process_group(backend="nccl", init_method="env://")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    net_g = SynthesizerTrn(
        100,
        513,
        n_speakers=4,
    ).cuda(rank)
    net_g = DDP(net_g, device_ids=[int(os.environ["LOCAL_RANK"])])
"""


def test_global_rank_device_names_the_line_of_the_rank_argument(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": BERT_VITS2})
    assert _at(found, "DDP-HARDCODED-DEVICE") == [("train.py", 15)]


# LAION-AI/CLAP @ 0dc2b92d1933d871c2bceaba7d8d3ecbefb3c7e4, src/training/main.py: no
# seed before `model, model_cfg = create_model(...)`; the fix seeds at the start of main.
# The finding names where the model is first made (the seed goes before it), not the
# DDP wrap 8 lines below.
CLAP = """\
import torch
import torch.distributed as dist


def main(args):
    dist.init_process_group(backend="nccl", init_method="env://")
    device = torch.device("cuda", args.local_rank)
    model, model_cfg = create_model(
        args.amodel,
        args.tmodel,
        device=device,
    )
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device], find_unused_parameters=True
    )
"""


def test_seed_finding_names_the_models_first_binding(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": CLAP})
    assert _at(found, "DDP-SEED") == [("train.py", 8)]
    fixed = CLAP.replace("    device = ", "    torch.manual_seed(args.seed)\n    device = ")
    assert _at(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-SEED") == []


# Azure-Samples/azure-ml-federated-learning @ 1071a4958821db028acc083d0c9978d2df5fd004,
# examples/components/PNEUMONIA/traininsilo/run.py: the per-process device is picked from
# device_id, then overwritten with "cuda:0" if available (fix 94009ce7 drops the line).
PNEUMONIA = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class PTLearner:
    def __init__(self, device_id=None, distributed=False):
        self._distributed = distributed
        self.model_ = PneumoniaNetwork()
        self.device_ = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        self.model_.to(self.device_)
        if self._distributed:
            self.model_ = DDP(self.model_, device_ids=[device_id])


def main():
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    PTLearner(device_id=int(os.environ["LOCAL_RANK"]), distributed=True)
"""


def test_cuda0_if_available_else_cpu_is_a_hardcoded_device(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": PNEUMONIA})
    assert _at(found, "DDP-HARDCODED-DEVICE") == [("train.py", 11)]
    fixed = PNEUMONIA.replace('"cuda:0" if', 'f"cuda:{device_id}" if')
    assert _at(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-HARDCODED-DEVICE") == []


# Nota-NetsPresso/netspresso-trainer @ 49cffbb1f6c84bbe3c958b6f0ff77a44201b341b (issue
# #235, fix 4a5dd31a): trainer_common wraps the model in DDP and hands it to
# build_pipeline, which picks the class from the TASK_PIPELINE registry dict; the class
# passes it to `super().__init__`, where `self.model = model.float()`. train_step reads
# `self.model.backbone` and `.head` on the wrapper. The save method's
# `hasattr(self.model, 'module')` does not unwrap those reads.
NETSPRESSO = {
    "train.py": """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from pipelines import TASK_PIPELINE


def build_pipeline(conf, task, model):
    task_pipeline = TASK_PIPELINE[task]
    return task_pipeline(conf, task, model)


def train_common(conf, task, devices):
    dist.init_process_group("nccl")
    torch.cuda.set_device(devices)
    torch.manual_seed(conf.seed)
    model = build_model(conf.model).to(device=devices)
    if conf.distributed:
        model = DDP(model, device_ids=[devices])
    trainer = build_pipeline(conf, task, model)
    trainer.train()
""",
    "pipelines/__init__.py": """\
from .base import BasePipeline
from .detection import TwoStageDetectionPipeline

TASK_PIPELINE = {"detection-two-stage": TwoStageDetectionPipeline}
""",
    "pipelines/base.py": """\
class BasePipeline:
    def __init__(self, conf, task, model):
        self.conf = conf
        self.model = model.float()

    def save_checkpoint(self, path):
        model = self.model.module if hasattr(self.model, 'module') else self.model
        torch.save(model.state_dict(), path)
""",
    "pipelines/detection.py": """\
from .base import BasePipeline


class TwoStageDetectionPipeline(BasePipeline):
    def __init__(self, conf, task, model):
        super(TwoStageDetectionPipeline, self).__init__(conf, task, model)

    def train_step(self, images):
        self.model.train()
        backbone = self.model.backbone
        head = self.model.head
        return head(backbone(images))
""",
}


def test_wrapper_attr_through_a_registry_of_classes_and_super_init(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", NETSPRESSO)
    assert sorted(_at(found, "DDP-WRAPPER-ATTR")) == [("detection.py", 10), ("detection.py", 11)]
    fixed = dict(NETSPRESSO)
    fixed["pipelines/detection.py"] = NETSPRESSO["pipelines/detection.py"].replace(
        "self.model.backbone", "self.model.module.backbone"
    ).replace("self.model.head", "self.model.module.head")
    assert _at(lint_project(tmp_path / "ok", fixed), "DDP-WRAPPER-ATTR") == []
