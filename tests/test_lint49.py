"""Round 49 (AG2's misses of DDP-WRAPPER-ATTR, DDP-ALL-RANKS-IO, DDP-LOAD-INTO-WRAPPER):
each reading on the real lines (repository and commit cited) beside a twin that must
stay silent."""

from __future__ import annotations

from ddptui.lint import lint_source
from ddptui.lint.model import LintFinding


def _lines(text: str, fid: str) -> list[int]:
    return sorted(f.line for f in lint_source(text, "train.py") if f.id == fid)


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


# PlayVoice/whisper-vits-svc @ 9383ec8abea85b101a8b824be3a07581c9bad5d9,
# vits_extend/train.py 26-122 and vits_extend/validation.py 6-21 (fixed in 79f3b35:
# `generator.module.infer`): `.to(device)` on the wrapper gives the wrapper back.
WVSVC = """\
import torch
from torch.nn.parallel import DistributedDataParallel
from vits.models import SynthesizerTrn


def validate(hp, args, generator, valloader, device):
    generator.eval()
    for ppg, ppg_l, pit, spk, audio in valloader:
        fake_audio = generator.infer(
            ppg, pit, spk, ppg_l)[:, :, :audio.size(2)]


def train(rank, args, hp):
    device = torch.device('cuda:{:d}'.format(rank))
    model_g = SynthesizerTrn(hp.data.filter_length // 2 + 1, hp).to(device)
    if args.num_gpus > 1:
        model_g = DistributedDataParallel(model_g, device_ids=[rank]).to(device)
    for epoch in range(2000):
        if rank == 0:
            with torch.no_grad():
                validate(hp, args, model_g, valloader, device)
"""


def test_wrapper_moved_with_to_is_still_the_wrapper() -> None:
    assert _lines(WVSVC, "DDP-WRAPPER-ATTR") == [_line(WVSVC, "fake_audio = generator.infer(")]


def test_the_plain_model_passed_stays_silent() -> None:
    twin = WVSVC.replace(
        "model_g = DistributedDataParallel(model_g, device_ids=[rank]).to(device)",
        "ddp_g = DistributedDataParallel(model_g, device_ids=[rank]).to(device)",
    )
    assert _lines(twin, "DDP-WRAPPER-ATTR") == []


# IAHispano/Applio @ 8e02e1c70db6d1a80dc407d5d2003265c4d749aa, rvc/train/train.py
# 434-436, 504-526, 579, 798 and 937-942 (fixed by PR 806: `net_g.module.infer`): the
# save's `hasattr(net_g, "module")` lies below the read and tells nothing there.
APPLIO = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from rvc.lib.algorithm.synthesizers import Synthesizer


def run(rank, n_gpus, config, device, reference):
    net_g = Synthesizer(config.data.filter_length // 2 + 1).to(device)
    if n_gpus > 1 and device.type == "cuda":
        net_g = DDP(net_g, device_ids=[rank])
    for epoch in range(1, 100):
        train_and_evaluate(rank, epoch, [net_g, None], reference)


def train_and_evaluate(rank, epoch, nets, reference):
    net_g, net_d = nets
    net_g.train()
    if rank == 0:
        with torch.no_grad():
            o, *_ = net_g.infer(*reference)
        ckpt = (
            net_g.module.state_dict()
            if hasattr(net_g, "module")
            else net_g.state_dict()
        )
        torch.save(ckpt, "G.pth")
"""


def test_read_above_the_functions_wrapper_test_is_said() -> None:
    assert _lines(APPLIO, "DDP-WRAPPER-ATTR") == [_line(APPLIO, "net_g.infer(*reference)")]


def test_a_wrapper_test_above_the_read_still_silences_it() -> None:
    twin = APPLIO.replace(
        "    net_g.train()\n",
        '    net_g.train()\n    print("ddp", hasattr(net_g, "module"))\n',
    )
    assert _lines(twin, "DDP-WRAPPER-ATTR") == []


# NVIDIA/DeepLearningExamples @ 8c7d66feb27294dc1137e7af1090c945e121e097,
# PyTorch/Recommendation/DLRM/dlrm/scripts/utils.py 183-195 and main.py 387-393 (fixed in
# 8bfbf82, "Initialize the logger on the root rank only").
DLRM = """\
import dllogger
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def init_logging(log_path):
    json_backend = dllogger.JSONStreamBackend(verbosity=dllogger.Verbosity.VERBOSE,
                                              filename=log_path)
    stdout_backend = dllogger.StdOutBackend(verbosity=dllogger.Verbosity.VERBOSE)
    dllogger.init(backends=[json_backend, stdout_backend])


def main(FLAGS, model):
    torch.manual_seed(FLAGS.seed)

    init_logging(log_path=FLAGS.log_path)

    dist.init_process_group(backend="nccl")
    model = DDP(model.cuda())
"""
# The same project's HiFiGAN (PyTorch/SpeechSynthesis/HiFiGAN/hifigan/logging.py 32-48 at
# the same commit): rank 0 alone, `local_rank` there being the global rank.
HIFIGAN_LOGGER = """\
def init_logging(log_path):
    local_rank = 0 if not dist.is_initialized() else dist.get_rank()
    if local_rank == 0:
        dllogger.init(backends=[
            dllogger.JSONStreamBackend(dllogger.Verbosity.DEFAULT, log_path, append=True),
        ])
    else:
        dllogger.init(backends=[])
"""


def _io(text: str) -> list[LintFinding]:
    return [f for f in lint_source(text, "main.py") if f.id == "DDP-ALL-RANKS-IO"]


def test_dllogger_json_file_on_every_rank_is_said_at_the_call() -> None:
    found = _io(DLRM)
    assert len(found) == 1
    lines = {found[0].line, *(w.line for w in found[0].also)}
    assert _line(DLRM, "init_logging(log_path=FLAGS.log_path)") in lines


def test_dllogger_on_rank_zero_named_local_rank_stays_silent() -> None:
    head, _, rest = DLRM.partition("def init_logging(log_path):\n")
    body_end = rest.index("\n\n\n")
    twin = head + HIFIGAN_LOGGER + rest[body_end:]
    assert _io(twin) == []


# bshall/acoustic-model @ 4b999383d4fd1e4c9e73abc6ffb1c1eb66a30257, acoustic/utils.py
# 50-88 and train.py (fixed in c2677bd, which changed the save): the finding names the
# save of the plain weights as its second place.
ACOUSTIC = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from acoustic import AcousticModel


def save_checkpoint(checkpoint_dir, acoustic, step):
    state = {
        "acoustic-model": acoustic.module.state_dict(),
        "step": step,
    }
    checkpoint_path = checkpoint_dir / f"model-{step}.pt"
    torch.save(state, checkpoint_path)


def load_checkpoint(load_path, acoustic, rank):
    checkpoint = torch.load(load_path, map_location={"cuda:0": f"cuda:{rank}"})
    acoustic.load_state_dict(checkpoint["acoustic-model"])
    return checkpoint.get("step", 0)


def train(rank, args):
    dist.init_process_group(backend="nccl", rank=rank, world_size=args.world_size)
    acoustic = AcousticModel().to(rank)
    acoustic = DDP(acoustic, device_ids=[rank])
    if args.resume is not None:
        step = load_checkpoint(args.resume, acoustic, rank)
    for step in range(10):
        if rank == 0:
            save_checkpoint(args.checkpoint_dir, acoustic, step)
"""


def test_load_into_wrapper_names_the_plain_save() -> None:
    found = [f for f in lint_source(ACOUSTIC, "utils.py") if f.id == "DDP-LOAD-INTO-WRAPPER"]
    assert [f.line for f in found] == [_line(ACOUSTIC, "acoustic.load_state_dict(")]
    assert _line(ACOUSTIC, '"acoustic-model": acoustic.module') in {w.line for w in found[0].also}


def test_load_into_wrapper_of_wrapper_saves_stays_silent() -> None:
    twin = ACOUSTIC.replace("acoustic.module.state_dict()", "acoustic.state_dict()")
    assert [f for f in lint_source(twin, "utils.py") if f.id == "DDP-LOAD-INTO-WRAPPER"] == []
