"""Round 22 (logs39): a rank's own Python exception is a cause, LOGS-APP-EXCEPTION, not an
honest unknown. Built on the corpus's real excerpts whose threads established that the code
raised (a library refusing its arguments, an AttributeError at checkpoint save, a launcher's
missing variable, deleted data files); twins keep the distributed stack's failures told
through Python (NVSHMEM, CUBLAS, Habana's graph compiler) honest unknowns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from corpus_excerpts import excerpt, ids

from ddptui.diagnosis.kb import kb_entry
from ddptui.logs.appexc import app_exception
from ddptui.logs.diagnose import diagnose_lines

ZERO3 = "at3-llamatuner-zero3-device-map-incompatible"
CKPT = "at3-alcf-megatron-ds-checkpoint-save-attributeerror"
PDSH = "o1-pdsh-keyerror-habana-deepspeed-8"
DELETED = "k3-rankcrash-filesdeleted-pytorch-42107"
# the stack's own failures, reported through a Python exception
NVSHMEM = "i-nvshmem-gitcode-b4216010"
CUBLAS = "at3-nanotron-climllama-cublas-fail-flashattn-cp2"
GAUDI = "o1-gaudi-denv-optimum-habana-1779"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (ZERO3, "ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True`"),
        (CKPT, "AttributeError: 'GPTModel' object has no attribute"),
        (PDSH, "KeyError: 'PDSH_SSH_ARGS_APPEND'"),
        (DELETED, "FileNotFoundError: [Errno 2] No such file or directory: '/data/coco/train2017"),
    ],
)
def test_a_ranks_own_exception_is_the_cause_with_its_message(name: str, said: str) -> None:
    d = excerpt(name)
    assert d.first is not None and d.first.id == "LOGS-APP-EXCEPTION", (name, ids(d))
    assert d.first.severity == "error"
    assert said in d.first.cause, d.first.cause
    assert "not the distributed stack" in kb_entry(d.first.id).title
    assert "LOGS-UNRECOGNIZED" not in ids(d)  # the same lines are not told twice


def test_the_frame_of_the_code_that_raised_is_named() -> None:
    d = excerpt(CKPT)
    assert d.first is not None
    assert "gpt_model.py:203 in universal_checkpoint_info" in d.first.summary
    assert "gpt_model.py:203 in universal_checkpoint_info" in d.first.fix


@pytest.mark.parametrize("name", [NVSHMEM, CUBLAS, GAUDI])
def test_the_stacks_failure_told_through_python_stays_an_honest_unknown(name: str) -> None:
    d = excerpt(name)
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", (name, ids(d))


@pytest.mark.parametrize(
    "line",
    [
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
        "OSError: [Errno 28] No space left on device",
        "ImportError: libcudart.so.12: cannot open shared object file",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "ValueError: Error initializing torch.distributed using env:// rendezvous: "
        "environment variable MASTER_ADDR expected",
        "RuntimeError:",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ],
)
def test_no_failure_of_the_stack_or_the_environment_reads_as_the_codes(line: str) -> None:
    assert app_exception(line) is None, line


@pytest.mark.parametrize(
    "line",
    [
        "[rank0]: ValueError: Unsupported nproc_per_node value: ",
        "x3202c0s31b0n0: AssertionError: Micro batch size per gpu: 0 has to be greater than 0",
        "3: KeyError: 'image'",
        "omegaconf.errors.ConfigAttributeError: Key 'lr' is not in struct",
        "RuntimeError: Tensors must be contiguous",
    ],
)
def test_the_codes_own_exceptions_behind_any_launcher_prefix(line: str) -> None:
    said = app_exception(line)
    assert said is not None, line
    assert said[1] in line


def test_a_healthy_log_that_prints_a_caught_exception_stays_silent() -> None:
    # a retried download's ValueError the run got past is a warning-level line in a log
    # whose run went on; nothing here is a failure line
    lines = [
        "W1122 10:00:00.000000 1234 torch/distributed/run.py:793] Setting OMP_NUM_THREADS "
        "environment variable for each process to be 1 in default",
        "INFO:root:step 100 loss 2.31",
        "WARNING:root:skipping sample 17 after ValueError: bad sample",
        "[W1122 10:00:01.000000 1234 train.py:33] caught KeyError: label, sample skipped",
        "INFO:root:step 200 loss 2.05",
    ]
    d = diagnose_lines(lines)
    assert not any(f.severity == "error" for f in d.findings), ids(d)


def test_diagnose_exits_1_and_prints_the_exception(tmp_path: Path) -> None:
    log = tmp_path / "rank1.log"
    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/proj/train.py", line 88, in <module>\n'
        "[rank1]:     batch = next(it)\n"
        '[rank1]:   File "/work/proj/data.py", line 41, in __getitem__\n'
        "[rank1]:     label = row['label']\n"
        "[rank1]: KeyError: 'label'\n"
        "[rank0]:[E1122 10:30:00.000000 77 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600010 milliseconds before timing out.\n",
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, "-m", "ddptui", "diagnose", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "LOGS-APP-EXCEPTION" in run.stdout, run.stdout
    assert "KeyError: 'label'" in run.stdout
    assert "data.py:41 in __getitem__" in run.stdout
    # rank 0's timeout is its consequence: no rule says the others were elsewhere
    assert "LOGS-NOT-IN-COLLECTIVE" not in run.stdout, run.stdout


# --- blind batch AV3 (tests/fixtures/corpus/round22av.yaml), tuned after its score ------

DMABUF = "av3-ibv-reg-dmabuf-mr-not-supported-old-ib-driver"
BF16 = "av3-nccl-no-bfloat16-before-2-10-a100"
DRIVER_API = "av3-nccl-cuda-driver-too-old-enhanced-compat-capture-info"


def test_dma_buf_registration_the_ib_stack_does_not_support() -> None:
    d = excerpt(DMABUF)
    assert d.first is not None and d.first.id == "IB-DMABUF-UNSUPPORTED", ids(d)
    assert "NCCL_DMABUF_ENABLE=0" in d.first.fix
    # its twin, the registration that ran out of memory, keeps its own cause
    nomem = "misc/ibvwrap.cc:183 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Cannot allocate memory"
    d = diagnose_lines([nomem])
    assert d.first is not None and d.first.id == "IB-DMABUF-NOMEM", ids(d)


def test_bfloat16_refused_by_an_nccl_older_than_2_10() -> None:
    d = excerpt(BF16)
    assert d.first is not None and d.first.id == "NCCL-NO-BF16", ids(d)
    assert "2.10" in d.first.cause and "torch.cuda.nccl.version()" in d.first.fix
    # another dtype the process group refuses is not this
    other = "RuntimeError: Input tensor data type is not supported for NCCL process group: ComplexFloat"
    assert "NCCL-NO-BF16" not in ids(diagnose_lines([other]))


def test_an_api_the_installed_driver_lacks_is_a_driver_too_old() -> None:
    d = excerpt(DRIVER_API)
    assert d.first is not None and d.first.id == "CUDA-DRIVER-OLD", ids(d)
    assert "cudaErrorCallRequiresNewerDriver" in d.first.cause


# --- blind batch AW3 (tests/fixtures/corpus/round22aw.yaml), tuned after its score ------

WRAPPER_ATTR = (
    "aw3-ddp-wrapper-custom-method-needs-module",
    "aw3-d3rlpy-ddp-wrapped-parameter-property",
    "aw3-accelerate-save-hook-attr-on-ddp-wrapper",
    "aw3-yolov5-autoanchor-reads-attr-of-ddp-wrapper",
)


@pytest.mark.parametrize("name", WRAPPER_ATTR)
def test_a_model_attribute_read_through_the_ddp_wrapper(name: str) -> None:
    d = excerpt(name)
    assert d.first is not None and d.first.id == "DDP-WRAPPER-NO-ATTR", ids(d)
    assert ".module." in d.first.fix and "DistributedDataParallel" in d.first.cause


def test_another_objects_missing_attribute_is_not_the_wrapper() -> None:
    d = diagnose_lines(["AttributeError: 'GPTModel' object has no attribute 'tp_patterns'"])
    assert d.first is not None and d.first.id == "LOGS-APP-EXCEPTION", ids(d)


def test_gather_on_an_nccl_group_that_has_none() -> None:
    d = excerpt("aw3-nccl-pg-gather-unsupported-torchrun-dgx")
    assert d.first is not None and d.first.id == "C10D-NCCL-NO-GATHER", ids(d)
    assert "all_gather" in d.first.fix
    d = diagnose_lines(["RuntimeError: ProcessGroupNCCL does not support scatter"])
    assert d.first is not None and d.first.id == "C10D-NCCL-NO-GATHER" and "scatter" in d.first.cause


# --- blind batch AX3 (tests/fixtures/corpus/round22ax.yaml), tuned after its score ------


@pytest.mark.parametrize(
    "name", ["ax3-aiatrack-ddp-broadcast-buffers-inplace", "ax3-basicsr-ddp-broadcast-buffers-inplace"]
)
def test_an_in_place_change_autograd_trips_on_is_read_with_ddps_buffer_broadcast(name: str) -> None:
    d = excerpt(name)
    assert d.first is not None and d.first.id == "DDP-INPLACE-VERSION", ids(d)
    assert "broadcast_buffers=False" in d.first.fix


def test_cuda_in_a_forked_child() -> None:
    for name in ("ax3-scdiffeq-notebook-devices-overwritten-forked-ddp", "x1-device-cuda-fork-gpt-neox-tests-readme"):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "CUDA-FORKED", (name, ids(d))
        assert "spawn" in d.first.fix


def test_the_launchers_local_rank_flag_pasted_with_a_typographic_dash() -> None:
    # a page's renderer turned "--local_rank" into an en dash; argparse's "error:" capitalised
    d = excerpt("ax3-bnb-dataset-launch-local-rank-unrecognized")
    assert d.first is not None and d.first.id == "LAUNCH-LOCAL-RANK-ARG", ids(d)
    # a dash before another option is not the launcher's flag
    other = diagnose_lines(["Error: unrecognized arguments: \u2013batch_size=19"])
    assert "LAUNCH-LOCAL-RANK-ARG" not in ids(other)


# --- blind batch AY3 (tests/fixtures/corpus/round22ay.yaml), tuned after its score ------


@pytest.mark.parametrize(
    ("name", "want", "said"),
    [
        ("ay3-animateanyone-ddp-no-trainable-params", "DDP-NO-GRAD-PARAMS", "accelerator.prepare"),
        ("ay3-accelerate-prepare-parameterless-module-ddp", "DDP-NO-GRAD-PARAMS", "requires_grad"),
        ("ay3-pyg-heterogat-ddp-uninitialized-lazy-params", "DDP-LAZY-PARAMS", "dummy forward"),
        ("ay3-vanillanet-single-gpu-model-module", "DDP-MODULE-WITHOUT-WRAPPER", 'hasattr(model, "module")'),
        ("ay3-pixart-sigma-plain-python-model-module", "DDP-MODULE-WITHOUT-WRAPPER", "torchrun"),
        ("ay3-icefall-ddp-spawn-pickle-local-worker-init-fn", "SPAWN-PICKLE", "top level"),
        ("ay3-lightning-ddp-spawn-pickle-local-model-class", "SPAWN-PICKLE", "top level"),
        ("u1-other-lightning-docs-pickle-spawn", "SPAWN-PICKLE", "top level"),
    ],
)
def test_torchs_own_refusals_around_the_ddp_wrap(name: str, want: str, said: str) -> None:
    d = excerpt(name)
    assert d.first is not None and d.first.id == want, (name, ids(d))
    assert said in d.first.fix


def test_the_wrapper_missing_module_is_not_a_bare_model() -> None:
    # the wrapper's own missing attribute is the other mistake (DDP-WRAPPER-NO-ATTR)
    d = diagnose_lines(["AttributeError: 'DistributedDataParallel' object has no attribute 'module_list'"])
    assert d.first is not None and d.first.id == "DDP-WRAPPER-NO-ATTR", ids(d)
    d = diagnose_lines(["AttributeError: 'DataParallel' object has no attribute 'module'"])
    assert "DDP-MODULE-WITHOUT-WRAPPER" not in ids(d)
