"""Round 41: warnings on correct projects of blind batches V1..AD2 read as false, each on
the real lines (cited with repository and commit) beside a twin that must still fire."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# a minimal DDP entry that builds the project's dataset (the shape of vits2's train_ms.py)
TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from data_utils import TextAudioSpeakerLoader


def run(rank, hps):
    dist.init_process_group(backend="nccl", rank=rank)
    torch.cuda.set_device(rank)
    train_dataset = TextAudioSpeakerLoader(hps.data.training_files, hps.data)
    sampler = DistributedSampler(train_dataset)
    loader = DataLoader(train_dataset, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(8, 8).cuda(rank), device_ids=[rank])
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for batch in loader:
            model(batch).sum().backward()
"""

# p0p4k/vits2_pytorch @ 1f4f3790568180f8dec4419d5cad5d0877b034bb, data_utils.py 210-350:
# `__getitem__` -> `get_audio_text_speaker_pair` -> `get_audio`, which caches the clip's
# spectrogram next to its wav (`torch.save(spec, spec_filename)`, line 329).
DATA = """\
import os

import torch


class TextAudioSpeakerLoader(torch.utils.data.Dataset):
    def __init__(self, audiopaths_sid_text, hparams):
        self.audiopaths_sid_text = audiopaths_sid_text
        self.sampling_rate = hparams.sampling_rate

    def get_audio_text_speaker_pair(self, audiopath_sid_text):
        audiopath, sid, text = audiopath_sid_text
        spec, wav = self.get_audio(audiopath)
        return (text, spec, wav, sid)

    def get_audio(self, filename):
        audio = torch.load(filename)
        spec_filename = filename.replace(".wav", ".spec.pt")
        if os.path.exists(spec_filename):
            spec = torch.load(spec_filename)
        else:
            spec = torch.stft(audio, 1024)
            spec = torch.squeeze(spec, 0)
            torch.save(spec, spec_filename)
        return spec, audio

    def __getitem__(self, index):
        return self.get_audio_text_speaker_pair(self.audiopaths_sid_text[index])

    def __len__(self):
        return len(self.audiopaths_sid_text)
"""


def test_item_cache_written_under_getitem_is_per_rank(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": TRAIN, "data_utils.py": DATA})
    assert severities(ok, "DDP-ALL-RANKS-IO") == [], ok
    # twin: the dataset writes its index in `__init__`, which every rank runs
    twin = DATA.replace(
        "        self.sampling_rate = hparams.sampling_rate\n",
        "        self.sampling_rate = hparams.sampling_rate\n"
        "        torch.save(audiopaths_sid_text, 'index.pt')\n",
    )
    kept = lint_project(tmp_path / "kept", {"train.py": TRAIN, "data_utils.py": twin})
    assert severities(kept, "DDP-ALL-RANKS-IO"), kept
    # twin: a method `__getitem__` never reaches (an export helper) keeps the finding
    export = DATA.replace(
        "    def __len__(self):\n",
        "    def export(self):\n        torch.save(self.audiopaths_sid_text, 'index.pt')\n\n"
        "    def __len__(self):\n",
    )
    entry = TRAIN + "    train_dataset.export()\n"
    kept = lint_project(tmp_path / "export", {"train.py": entry, "data_utils.py": export})
    assert severities(kept, "DDP-ALL-RANKS-IO"), kept


# allenzren/open-pi-zero @ 8342889779d1d88baf01b6bfaf7c21efa1179ad0, scripts/run.py 29-31:
# line-buffered stdout and stderr, reopened from their descriptors on every rank.
STDOUT = """\
import sys

sys.stdout = open(sys.stdout.fileno(), mode="w", buffering=1)
sys.stderr = open(sys.stderr.fileno(), mode="w", buffering=1)
"""


def test_reopened_descriptor_is_not_a_shared_file(tmp_path: Path) -> None:
    entry = TRAIN.replace("from data_utils import TextAudioSpeakerLoader\n", STDOUT)
    entry = entry.replace(
        "    train_dataset = TextAudioSpeakerLoader(hps.data.training_files, hps.data)\n",
        "    train_dataset = torch.arange(8)\n",
    )
    ok = lint_project(tmp_path / "ok", {"train.py": entry})
    assert severities(ok, "DDP-ALL-RANKS-IO") == [], ok
    # twin: a log file by name, opened on every rank
    twin = entry.replace("open(sys.stdout.fileno(),", "open('stdout.log',")
    kept = lint_project(tmp_path / "kept", {"train.py": twin})
    assert severities(kept, "DDP-ALL-RANKS-IO"), kept


# wenet-e2e/wenet @ 015469960db73eb19c49a48c020d5ac9db69bae5, wenet/utils/executor.py 60-66
# (`if wenet_join(group_join, info_dict): break` in the training loop) and
# wenet/utils/train_utils.py 640-666 (`wenet_join`: a monitored_barrier on a side group,
# `except RuntimeError: return True`, the uneven-workload join), 83-86 (`info_dict =
# batch_forward(model, batch_dict, ...)`: the dict carries this rank's loss).
JOIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader


def wenet_join(group_join, info_dict):
    if info_dict["batch_idx"] == 0:
        return False
    try:
        dist.monitored_barrier(group=group_join, timeout=group_join.options._timeout)
    except RuntimeError as e:
        print("Detected uneven workload distribution: {}".format(e))
        return True
    return False


def train(rank, dataset, group_join):
    dist.init_process_group(backend="nccl", rank=rank)
    torch.cuda.set_device(rank)
    model = DDP(torch.nn.Linear(8, 8).cuda(rank), device_ids=[rank])
    info_dict = {}
    for batch_idx, batch_dict in enumerate(DataLoader(dataset)):
        info_dict["batch_idx"] = batch_idx
        if wenet_join(group_join, info_dict):
            break
        info_dict = batch_forward(model, batch_dict, info_dict)
        info_dict["loss"].backward()


def batch_forward(model, batch, info_dict):
    info_dict["loss"] = model(batch).sum()
    return info_dict
"""


def test_break_on_a_join_a_collective_decides(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": JOIN})
    assert severities(ok, "DDP-RANK-DIVERGENCE") == [], ok
    # twin: the helper answers from this rank's own data, with no barrier deciding it
    twin = JOIN.replace(
        "    try:\n"
        "        dist.monitored_barrier(group=group_join, timeout=group_join.options._timeout)\n"
        "    except RuntimeError as e:\n"
        '        print("Detected uneven workload distribution: {}".format(e))\n'
        "        return True\n",
        '    if info_dict["loss"] > 100:\n        return True\n',
    )
    assert twin != JOIN
    kept = lint_project(tmp_path / "kept", {"train.py": twin})
    assert severities(kept, "DDP-RANK-DIVERGENCE"), kept
