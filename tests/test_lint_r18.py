"""Round 18 (misses of blind batch AM, tuned after its score): two readings on the real lines
(cited with repository and commit) beside twins that must stay silent: a manual gradient
all_reduce called under the same rank test in two places of one step is no "main process
first" pairing (DDP-RANK-DIVERGENCE at both); `torch.save(model, path)` of the DDP wrapper
object itself (DDP-SAVE-WRAPPER)."""

from __future__ import annotations

from ddptui.lint import lint_source

# jamesmcclain/geospatial-time-series @ 4b5bdb2d2e7dd18a0e8f974c1955809ea5e44405 (as handed
# in blind batch AM1), pretrain/pretrain.py 60-64, 119-131, 198-201, 246-276, 293-310; fixed
# in PR #36 (the rank-gated all_reduce removed, `model.module` saved).
GEO = """\
import torch
import torch.distributed as dist


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.reduce_op.SUM)
        param.grad.data /= size


if __name__ == "__main__":
    args = parse_args()
    if args.sm_current_host is not None and args.sm_hosts is not None:
        rank = sorted(args.sm_hosts, reverse=False).index(args.sm_current_host)
        world_size = len(args.sm_hosts)
    else:
        rank = 0
        world_size = 1
    if world_size > 1:
        dist.init_process_group(backend=args.sm_backend, rank=rank, world_size=world_size)
    device = torch.device("cuda")
    model = torch.nn.Linear(8, 8).to(device)
    autoencoder = torch.nn.Linear(8, 8).to(device)
    if world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
        autoencoder = torch.nn.parallel.DistributedDataParallel(autoencoder)
    opt1 = torch.optim.Adam(model.parameters())
    opt2 = torch.optim.Adam(list(model.parameters()) + list(autoencoder.parameters()))
    for epoch in range(0, args.epochs):
        for left, right in dataloader:
            loss1 = model(left).sum()
            loss1.backward()
            if rank > 1:
                average_gradients(model)
            opt1.step()
            opt1.zero_grad()
            loss2 = autoencoder(model(left)).sum()
            loss2.backward()
            if rank > 1:
                average_gradients(autoencoder)
                average_gradients(model)
            opt2.step()
            opt2.zero_grad()
        if args.checkpoint_dir is not None and rank == 0:
            torch.save(autoencoder, "ae.pth")
            torch.save(model, "model.pth")
"""


def _lines(text: str, fid: str) -> list[int]:
    return sorted(f.line for f in lint_source(text, "pretrain.py") if f.id == fid)


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    return [i + 1 for i, t in enumerate(text.splitlines()) if needle in t][nth]


def test_one_rank_test_in_two_places_is_no_pairing() -> None:
    got = _lines(GEO, "DDP-RANK-DIVERGENCE")
    first = _line_of(GEO, "if rank > 1", 0) + 1  # the call under the first test
    second = _line_of(GEO, "if rank > 1", 1) + 1
    assert first in got and second in got, got


def test_complementary_rank_tests_still_pair_up() -> None:
    # twin: the "main process first" shape, the same collective under `rank != 0` before and
    # `rank == 0` after: each rank reaches it once; silent
    text = """\
import torch.distributed as dist


def prepare(rank):
    if rank != 0:
        dist.barrier()
    download()
    if rank == 0:
        dist.barrier()
"""
    assert _lines(text, "DDP-RANK-DIVERGENCE") == []


def test_saving_the_wrapper_object_is_saving_the_wrapper() -> None:
    got = _lines(GEO, "DDP-SAVE-WRAPPER")
    assert got == [_line_of(GEO, "torch.save(autoencoder"), _line_of(GEO, "torch.save(model")], got
    msg = next(f.summary for f in lint_source(GEO, "pretrain.py") if f.id == "DDP-SAVE-WRAPPER")
    assert "pickles the DDP wrapper itself" in msg and "process group" in msg


def test_saving_the_module_inside_is_silent() -> None:
    fixed = GEO.replace("torch.save(model,", "torch.save(model.module,").replace(
        "torch.save(autoencoder,", "torch.save(autoencoder.module,"
    )
    assert _lines(fixed, "DDP-SAVE-WRAPPER") == []


def test_saving_a_plain_model_is_silent() -> None:
    plain = GEO.replace("model = torch.nn.parallel.DistributedDataParallel(model)", "pass").replace(
        "autoencoder = torch.nn.parallel.DistributedDataParallel(autoencoder)", "pass"
    )
    assert _lines(plain, "DDP-SAVE-WRAPPER") == []


# ORNL/HydraGNN @ 0f6290d286c88bbb1aff79befe0d46eb8dcce4d5 (as handed in blind batch AM1),
# hydragnn/utils/model.py 27-31, hydragnn/train/train_validate_test.py 36-57, 91-99, 140-160,
# examples/qm9/qm9.py 80-95 (in one file here); fixed in PR #136 (the model stays wrapped).
HYDRA = """\
import torch
import torch.distributed as dist


def is_model_distributed(model):
    return isinstance(model, torch.nn.parallel.distributed.DistributedDataParallel)


def get_model_or_module(model):
    if is_model_distributed(model):
        return model.module
    else:
        return model


def train(loader, model, opt, verbosity, profiler=None):
    model.train()
    for data in loader:
        opt.zero_grad()
        pred = model(data)
        loss = model.loss(pred, data.y)
        loss.backward()
        opt.step()


def test(loader, model, verbosity):
    model.eval()
    with torch.no_grad():
        return [model(data) for data in loader]


def train_validate_test(model, optimizer, train_loader, val_loader, test_loader, num_epoch, verbosity=0):
    model = get_model_or_module(model)
    for epoch in range(0, num_epoch):
        train_rmse = train(train_loader, model, optimizer, verbosity)
        test_rmse = test(test_loader, model, verbosity)


def main(config, dataset):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = create_model(config).to(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_loader, val_loader, test_loader = dataset
    train_validate_test(model, optimizer, train_loader, val_loader, test_loader, 10)
"""


def test_a_function_that_unwraps_the_model_and_trains_it() -> None:
    got = [f for f in lint_source(HYDRA, "train_validate_test.py") if f.id == "DDP-NOT-APPLIED"]
    assert [f.line for f in got] == [_line_of(HYDRA, "model = get_model_or_module(model)")], got
    assert "train(train_loader, model, optimizer" in got[0].summary
    assert got[0].severity == "error"


def test_an_unwrapped_model_only_evaluated_is_silent() -> None:
    text = HYDRA.replace(
        "        train_rmse = train(train_loader, model, optimizer, verbosity)\n", ""
    )
    assert _lines(text, "DDP-NOT-APPLIED") == []


def test_a_plain_model_passed_in_is_silent() -> None:
    text = HYDRA.replace(
        "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])\n",
        "",
    )
    assert _lines(text, "DDP-NOT-APPLIED") == []


def test_a_module_taken_out_after_training_is_silent() -> None:
    # twin: the function trains the wrapper first and takes the module out afterwards
    # (to save or export it): the training went through DDP
    text = HYDRA.replace("    model = get_model_or_module(model)\n", "").replace(
        "        test_rmse = test(test_loader, model, verbosity)\n",
        "        test_rmse = test(test_loader, model, verbosity)\n    model = get_model_or_module(model)\n",
    )
    assert "model = get_model_or_module(model)" in text
    assert _lines(text, "DDP-NOT-APPLIED") == []


def test_the_fix_keeps_the_wrapper_and_is_silent() -> None:
    text = HYDRA.replace("    model = get_model_or_module(model)\n", "")
    assert _lines(text, "DDP-NOT-APPLIED") == []


# ecmwf/WeatherGenerator @ a398ffa6754c5062bb4e71fbb1794728fc918173 (as handed in blind batch
# AN1), src/weathergen/train/trainer.py 128-136, 193-196, 210-240, 279-282 (one file here);
# the device fixed to the local rank in 2f8ab495.
WEATHER = """\
import torch
from torch.distributed.fsdp import fully_shard


class Trainer:
    def init_inference(self, cf, run_id_trained, epoch):
        self.model = Model(cf).create()
        self.model = self.model.to(self.devices[0])
        self.model.load(run_id_trained, epoch)

    def init_training(self, cf, run_id_contd=None):
        device_type = torch.accelerator.current_accelerator()
        device = torch.device(f"{device_type}:{cf.rank}")
        with torch.device("meta"):
            self.model = Model(cf).create()
        if cf.with_ddp and not cf.with_fsdp:
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model, broadcast_buffers=True, find_unused_parameters=True
            )
        if cf.with_ddp and cf.with_fsdp:
            for module in self.model.embeds.modules():
                fully_shard(module)
            for module in self.model.ae_local_blocks.modules():
                fully_shard(module)
        if run_id_contd is None:
            self.model.to_empty(device="cuda")
            self.model.reset_parameters()

    def train_step(self, batch):
        loss = self.model(batch).sum()
        loss.backward()


def main(cf):
    cf.rank = int(os.environ["RANK"])
    torch.distributed.init_process_group("nccl", rank=cf.rank)
    t = Trainer()
    t.init_training(cf)
    t.train_step(None)
"""


def _attrs(text: str) -> list[tuple[int, str]]:
    return sorted(
        (f.line, f.summary.split("`")[1])
        for f in lint_source(text, "trainer.py")
        if f.id == "DDP-WRAPPER-ATTR"
    )


def test_reads_under_a_test_that_contradicts_the_wraps_are_not_the_wrappers() -> None:
    got = _attrs(WEATHER)
    # the FSDP branch's reads (`cf.with_fsdp` against the wrap's `not cf.with_fsdp`) and the
    # inference method's own plain model are silent; the read after the wrap on every path
    # (`reset_parameters`, which the wrapper lacks) stays
    assert got == [
        (_line_of(WEATHER, "self.model.reset_parameters()"), "self.model.reset_parameters")
    ], got


def test_reads_under_the_same_test_as_the_wrap_still_read_the_wrapper() -> None:
    # twin: the sharding branch tests what the wrap tests: its reads see the wrapper
    text = WEATHER.replace(
        "if cf.with_ddp and cf.with_fsdp:\n            for",
        "if cf.with_ddp and not cf.with_fsdp:\n            for",
    )
    assert _line_of(text, "self.model.embeds.modules()") in [line for line, _ in _attrs(text)]


def test_a_method_that_wraps_nothing_reads_its_own_plain_model() -> None:
    # twin: the inference method without its own assignment reads the attribute the training
    # set-up wrapped: said
    text = WEATHER.replace(
        "        self.model = Model(cf).create()\n        self.model = self.model.to",
        "        x = self.model.to",
        1,
    )
    assert _line_of(text, "self.model.load(") in [line for line, _ in _attrs(text)]


def test_a_device_string_of_an_accelerator_type_and_the_global_rank() -> None:
    got = [f for f in lint_source(WEATHER, "trainer.py") if f.id == "DDP-HARDCODED-DEVICE"]
    assert _line_of(WEATHER, 'f"{device_type}:{cf.rank}"') in [f.line for f in got], got
    local = WEATHER.replace('f"{device_type}:{cf.rank}"', 'f"{device_type}:{cf.local_rank}"')
    assert not [
        f
        for f in lint_source(local, "trainer.py")
        if f.id == "DDP-HARDCODED-DEVICE" and "device_type" in f.summary
    ]
