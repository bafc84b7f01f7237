"""The env audit's rule parameters: which variables must match, which are deprecated,
which differ per node by nature. The text of its findings is in kb/checklist.yaml (and,
for ids that name a log line too, signatures.yaml). Core layer, stdlib only."""

from __future__ import annotations

GIB = 1024**3
REDACTED_PREFIX = "<redacted:"
SOURCE_WORDS = {"login": "login env", "config": "config env", "node": "node env"}
# NCCL_* that may legitimately differ per node: interface selectors, debug output, and
# NCCL_HOSTID (NCCL groups ranks into hosts by it: one value per machine by design).
NCCL_PER_NODE = frozenset(
    {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}
    | {"NCCL_HOSTID"}
)
# A mismatch in these breaks the job: protocol/algorithm/buffer mismatches give
# "Message truncated"; transport and RoCE settings must agree between peers.
# NCCL_P2P_DISABLE only governs GPUs inside one node, so a difference is a warning.
NCCL_MUST_MATCH = frozenset(
    {
        "NCCL_PROTO",
        "NCCL_ALGO",
        "NCCL_IB_DISABLE",
        "NCCL_NET",
        "NCCL_NET_PLUGIN",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_TC",
        "NCCL_IB_SL",
        "NCCL_BUFFSIZE",
    }
)
# Old names PyTorch still reads (ProcessGroupNCCL.hpp); "TORCH_" + old is preferred and wins.
DEPRECATED = (
    "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING",
    "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
)
TORCH_SHOULD_MATCH = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT")
PET_VARS = (
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NPROC_PER_NODE",
)
# Values that differ per node by nature; env_diff callers may pass this as `ignore`.
EXPECTED_TO_DIFFER = frozenset(
    {
        "HOSTNAME",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "XDG_SESSION_ID",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "NODE_RANK",
        "GROUP_RANK",
        "RANK",
        "LOCAL_RANK",
        "CUDA_VISIBLE_DEVICES",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "NCCL_IB_HCA",
    }
)
