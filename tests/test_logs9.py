"""Round logs9 (issue 15): versions, desync, timeouts and RDMA registration, each read
from the printing program's own message and checked on the real excerpt quoted from a
public thread (tests/fixtures/corpus/) it came from, and on the neighbours it must leave
alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

# ------------------------------------------------------------------- version skew


def test_ray_refusing_a_process_of_other_versions_is_named() -> None:
    """Ray's check_version_info message (ray#1263: cloudpickle differs between two nodes;
    Logic-RL#30: the driver runs Ray 2.42/Python 3.9 against a 2.12/3.11 cluster) was an
    honest unknown; it is Ray's own refusal of a node's environment."""
    for name in ("h-version-skew-ray-1263", "h-version-skew-ray-logic-rl-30"):
        d = excerpt(name)
        assert lead(d) == "RAY-VERSION-MISMATCH", (name, ids(d))
        assert "ray stop" in d.first.fix


def test_an_older_libnccl_rejecting_torchs_config_is_the_library_mismatch() -> None:
    """vllm#1726: NCCL 2.14.3 loaded under a torch built for a newer NCCL reads the
    config's "not set" marker (INT_MIN) as a bad value.  A user's own bad value (another
    number) is not that."""
    d = excerpt("h-nccl-lib-mismatch-vllm-1726")
    assert lead(d) == "NCCL-LIB-MISMATCH", ids(d)
    own = diagnose_lines(["node1:2345:2400 [0] init.cc:1854 NCCL WARN Invalid config blocking attribute value 2"], "own")
    assert "NCCL-LIB-MISMATCH" not in ids(own)


# ------------------------------------------------------------------- desync


def test_horovods_stall_and_mismatch_messages_are_a_desync() -> None:
    """horovod#100 (two ranks naming their tensors differently) was called clean: its
    stall inspector's warning is horovod's desync message.  Its controller's own checks
    (controller.cc, format strings filled) say the same of one collective."""
    d = excerpt("g-desync-tensornames-horovod-100")
    assert lead(d) == "DESYNC-MISMATCH", ids(d)
    for line in (
        "[2021-02-02 21:19:07.345988: W /tmp/pip-install-dxtho7yu/horovod_0bde588442554cf4b80c76441efc4e03/horovod/common/stall_inspector.cc:105] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 10 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. ",
        "horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [10], but another rank sent a tensor of shape [12].",
        "Mismatched data types: One rank had type float32, but another rank had type int64.",
        "Mismatched MPI operations: One rank did an ALLREDUCE, but another rank did an ALLGATHER.",
    ):
        assert lead(diagnose_lines([line], "h")) == "DESYNC-MISMATCH", line


# ------------------------------------------------------------------- timeouts


def test_horovods_gloo_rendezvous_timeout_says_which_knob() -> None:
    """horovod#2015 (50+ machines, the rendezvous outlasts the 30 s default) was an honest
    unknown.  gloo's own stores' wait (torch's gloo, no horovod) stays GLOO-STORE-WAIT."""
    d = excerpt("g-timeout-gloo-rendezvous-scale-horovod-2015")
    assert lead(d) == "HOROVOD-GLOO-TIMEOUT", ids(d)
    assert "--gloo-timeout-seconds" in d.first.fix
    g = diagnose_lines(["RuntimeError: [../third_party/gloo/gloo/rendezvous/prefix_store.cc:53] [../third_party/gloo/gloo/rendezvous/file_store.cc:151] Wait timeout for key(s): rank_1"], "g")
    assert "HOROVOD-GLOO-TIMEOUT" not in ids(g)


def test_a_stack_through_main_process_first_names_the_main_processs_work() -> None:
    """transformers#17106: the ranks failed inside main_process_first() while the main
    process tokenised for longer than the 30-minute timeout; torchrun's summary alone
    was an honest unknown.  A specific failure inside the block (NCCL cannot connect)
    keeps its lead."""
    d = excerpt("h-timeout-transformers-17106")
    assert lead(d) == "LOGS-MAIN-FIRST-WAIT", ids(d)
    assert "ddp_timeout" in d.first.fix
    lines = [*CORPUS["h-timeout-transformers-17106"].lines[:6],
             "node1:2345:2400 [0] socket.cc:619 NCCL WARN socketPollConnect: connect to 10.0.0.2<43517> returned Connection refused, exceeded error retry count after 34 attempts"]
    other = diagnose_lines(lines, "x")
    assert lead(other) != "LOGS-MAIN-FIRST-WAIT", ids(other)
    # the main process's own exception inside the block (no signature knows it) leads
    own = diagnose_lines([*CORPUS["h-timeout-transformers-17106"].lines[:6],
                          "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.json'"], "e")
    assert lead(own) == "LOGS-APP-EXCEPTION" and "FileNotFoundError" in own.first.cause, ids(own)
    for frame in ('    with training_args.main_process_first(local=False, desc="grouping texts"):',
                  "    with accelerator.local_main_process_first():"):
        assert "LOGS-MAIN-FIRST-WAIT" in ids(diagnose_lines([frame, *CORPUS["h-timeout-transformers-17106"].lines[-8:]], "f"))


def test_a_timeout_set_far_below_the_default_is_said_beside_the_lead() -> None:
    """yolov5#4400 (a 60 s process-group timeout while rank 0 validated), horovod#1374
    (horovod's 30 s gloo timeout against a compiling first step) and Automodel#1038 (60 s
    against a slow checkpoint consolidation): the stated timeout is told as a warning; the
    lead stays what the waiting side shows.  30 minutes, or instructlab#520's 1 ms (a test
    of the knob), are not."""
    for name, secs in (
        ("h-timeout-short-pg-timeout-yolov5-4400", "60"),
        ("g-timeout-gloo-first-iteration-horovod-1374", "30"),
        ("c-consolidation-barrier-timeout-automodel-1038", "60"),
    ):
        d = excerpt(name)
        short = [f for f in d.findings if f.id == "LOGS-TIMEOUT-SHORT"]
        assert short and short[0].severity == "warning", (name, ids(d))
        assert f"is {secs} s" in short[0].cause
        assert lead(d) == "LOGS-NOT-IN-COLLECTIVE", (name, ids(d))
    for name in ("b-desync-timelimit-anemoi-core-1064", "timeout-instructlab-520"):
        assert "LOGS-TIMEOUT-SHORT" not in ids(excerpt(name)), name


# ------------------------------------------------------------------- RDMA registration


def test_dmabuf_registration_out_of_memory_is_not_the_memlock_limit() -> None:
    """vllm#19613: ibv_reg_dmabuf_mr failing with ENOMEM came from an oversized
    NCCL_BUFFSIZE (GPU memory exported to the NIC, which ulimit -l does not govern); it was
    answered IB-MEMLOCK.  Host-memory registration (ibv_reg_mr) stays IB-MEMLOCK."""
    d = excerpt("h-ib-buffsize-vllm-19613")
    assert lead(d) == "IB-DMABUF-NOMEM", ids(d)
    assert "NCCL_BUFFSIZE" in d.first.fix
    host = diagnose_lines(["misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory"], "h")
    assert lead(host) == "IB-MEMLOCK"


# ------------------------------------------------------------------- devices


def test_nccl_invalid_usage_inside_barrier_is_the_guessed_device() -> None:
    """Lightning#8139 (gpus=[1,2,3]: barrier() set NCCL up on the GPU it guessed from the
    rank) was answered with the peers' broken pipe.  With NCCL's "Duplicate GPU detected"
    line (Megatron on nccl#1241) that line's ENV-DUPGPU stays the cause; a barrier that
    fails on a connection (no invalid usage) is not this."""
    d = excerpt("g-device-barrier-guess-lightning-8139")
    assert lead(d) == "ENV-GUESS-DEVICE", ids(d)
    assert "inside barrier()" in d.first.summary and "device_ids=[local_rank]" in d.first.fix
    dup = excerpt("d-dupgpu-megatron-nodes-nccl-1241")
    assert lead(dup) == "ENV-DUPGPU" and "ENV-GUESS-DEVICE" not in ids(dup)
    lines = [
        line for line in CORPUS["g-device-barrier-guess-lightning-8139"].lines
        if "nvalid" not in line and "invalid usage" not in line
    ]
    assert "ENV-GUESS-DEVICE" not in ids(diagnose_lines(lines, "conn"))


# ------------------------------------------------------------------- never clean


def test_nccls_own_error_string_in_any_wrapper_is_never_clean() -> None:
    """horovod#108 (an NCCL package built for CUDA 9 on a CUDA 8 system) was called clean:
    its only failure line is horovod's "ncclCommInitRank failed: unhandled cuda error"
    inside TensorFlow's UnknownError.  NCCL's error string makes it a failure; no line
    names which CUDA, so it is an honest unknown that quotes the line."""
    d = excerpt("g-version-nccl-cuda9-on-cuda8-horovod-108")
    assert lead(d) == "LOGS-UNRECOGNIZED" and d.first.severity == "error", ids(d)
    assert "ncclCommInitRank failed: unhandled cuda error" in d.first.cause


def test_horovodruns_start_timeout_names_its_knob_and_the_connectivity() -> None:
    """horovodrun's own start timeout (horovod.runner.common.util.timeout's message), as
    pasted in ray#15300 (Ray's worker prefix, the line wrapped by the terminal) and in
    horovod#1089, where the thread found a connectivity problem, not the timeout."""
    for lines in (
        ["(pid=23323, ip=172.31.19.90) Exception: Timed out waiting for tasks to start. Please check connectivity between servers. You may need to increase the --start-timeout parameter if",
         " you have too many servers. Timeout after 30 seconds."],
        ["    raise Exception(self._message.format(activity=activity))",
         "Exception: Timed out waiting for tasks to start. Please check connectivity between servers. You may need to increase the --start-timeout parameter if you have too many servers."],
    ):
        d = diagnose_lines(lines, "h")
        assert lead(d) == "HOROVOD-START-TIMEOUT", ids(d)
        assert "tasks to start" in d.first.cause and "--network-interface" in d.first.fix


def test_a_cuda_driver_library_of_another_version_than_the_kernel_driver() -> None:
    """CUDA's error 803 as torch prints it (atorch#2, a container on a node whose driver
    it does not match) and as Caffe's check prints it (nvidia-docker#1256): the driver
    library and the kernel module differ, not a driver that is merely old."""
    for line in (
        "/opt/conda/lib/python3.8/site-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / cuda driver combination (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)",
        "CUDA: Check failed: e == cudaSuccess (803 vs. 0) : system has unsupported display driver / cuda driver combination",
    ):
        d = diagnose_lines([line], "c")
        assert lead(d) == "CUDA-DRIVER-MISMATCH", ids(d)
        assert "/proc/driver/nvidia/version" in d.first.fix
    old = diagnose_lines(["RuntimeError: The NVIDIA driver on your system is too old (found version 10010)."], "o")
    assert lead(old) == "CUDA-DRIVER-OLD"


# ------------------------------------------------------------------- DDP's own check


def test_ddps_parameter_check_tells_zeros_received_from_a_different_model() -> None:
    """DDP's _verify_params_across_processes (torch's reducer.cpp formats).  "inconsistent
    0 params" means the first allgather delivered nothing: accelerate#3510's paste,
    F5-TTS#1008's (solved by the NCCL/IB settings), pytorch#68735's A100 P2P.  A nonzero
    count or a shape that differs is a model that really differs (the message as a real
    run printed it: hidden size 64 on rank 0, 96 on rank 1)."""
    for line in (
        "[rank1]: RuntimeError: DDP expects same model across all ranks, but Rank 1 has 240 params, while rank 0 has inconsistent 0 params",
        "**RuntimeError: DDP expects same model across all ranks, but Rank 2 has 363 params, while rank 0 has inconsistent 0 params.**",
    ):
        d = diagnose_lines([line], "z")
        assert lead(d) == "DDP-VERIFY-ZEROS", ids(d)
        assert "NCCL_P2P_DISABLE=1" in d.first.fix and "received 0 for rank 0" in d.first.cause
    for line in (
        "RuntimeError: [1]: params[0] in this process with sizes [96, 32] appears not to match sizes of the same param in process 0.",
        "RuntimeError: DDP expects same model across all ranks, but Rank 1 has 70 params, while rank 0 has inconsistent 68 params.",
    ):
        assert lead(diagnose_lines([line], "m")) == "DDP-MODEL-DIFFERS", line


def test_a_cpu_tensor_in_an_nccl_only_group_in_torch_2s_words() -> None:
    """torch 2.x's ProcessGroup::getBackend refusal, as pasted from a verl/sglang run
    (broadcast of a CPU tensor over an NCCL group): the older "Tensors must be CUDA and
    dense" entry's cause.  Another accelerator's device type (npu, xpu) is not it."""
    d = diagnose_lines([
        '    work = group.broadcast([tensor], opts)',
        "RuntimeError: No backend type associated with device type cpu",
    ], "v")
    assert lead(d) == "C10D-NCCL-CPU-TENSOR", ids(d)
    npu = diagnose_lines(["RuntimeError: No backend type associated with device type npu"], "n")
    assert "C10D-NCCL-CPU-TENSOR" not in ids(npu)


def test_horovods_shutdown_is_a_wrapper_the_first_exception_leads() -> None:
    """horovod's shutdown message (horovod#534, horovod#2097 with mpirun's tag prefix):
    alone it says the job stopped and what to read; with the rank's own failure before it
    (a NCCL error, here NCCL's own CUDA line) that failure leads."""
    alone = diagnose_lines([
        "Fri Sep 25 16:52:53 2020[0]<stderr>:2020-09-25 16:52:53.640992: W tensorflow/core/framework/op_kernel.cc:1651] OP_REQUIRES failed at mpi_ops.cc:402 : Unknown: Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the shutdown was caused by an exception, you should see the exception in the log before the first shutdown message.",
    ], "a")
    assert lead(alone) == "HOROVOD-SHUTDOWN", ids(alone)
    first = diagnose_lines([
        "node1:2345:2400 [0] misc/cudawrap.cc:182 NCCL WARN Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'",
        "AbortedError (see above for traceback): Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the shutdown was caused by an exception, you should see the exception in the log before the first shutdown message.",
    ], "f")
    assert lead(first) == "CUDA-DRIVER-OLD", ids(first)


def test_invalid_device_function_is_code_not_built_for_the_gpu() -> None:
    """CUDA error 98 (8 before CUDA 10.1), "invalid device function": the kernel has no
    code for this GPU's architecture.  NCCL's "Cuda failure '%s'" format filled with it
    (the WARN nccl#932's title quotes: NCCL under horovod on GTX 1080 Ti) and relion#149's
    pasted line (a build for another sm_XX): CUDA-NO-KERNEL's cause in CUDA's other words."""
    for line in (
        "node1:1234:1300 [0] enqueue.cc:215 NCCL WARN Cuda failure 'invalid device function'",
        "KERNEL_ERROR: invalid device function in /sw/relion/2.0beta-git/src/gpu_utils/cuda_ml_optimiser.cu at line 273 (error-code 8)",
    ):
        assert lead(diagnose_lines([line], "k")) == "CUDA-NO-KERNEL", line


def test_ptx_from_a_newer_toolchain_than_the_driver_is_the_old_driver() -> None:
    """CUDA error 222 (the driver cannot JIT PTX from a newer CUDA): cuda_memtest#31's
    line (CUDA 11.3 build, 460 driver) and chatglm.cpp#12's (solved by a driver upgrade)."""
    for line in (
        "[05/23/2021 18:30:06][computer][0]:ERROR: CUDA error: the provided PTX was compiled with an unsupported toolchain., line 148, file /var/tmp/pamac-build-user/cuda_memtest/src/cuda_memtest/cuda_memtest.cu",
        "CUDA error 222 at xxxxxx/chatglm.cpp/third_party/ggml/src/ggml-cuda.cu:1835: the provided PTX was compiled with an unsupported toolchain.",
    ):
        assert lead(diagnose_lines([line], "p")) == "CUDA-DRIVER-OLD", line
