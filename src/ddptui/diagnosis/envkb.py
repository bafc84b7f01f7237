"""The env audit's knowledge: which variables must match, which are deprecated,
and the cause text of each finding. Core layer, stdlib only."""

from __future__ import annotations

from ddptui.diagnosis.model import Severity

GIB = 1024**3
REDACTED_PREFIX = "<redacted:"
SOURCE_WORDS = {"login": "login env", "config": "config env", "node": "node env"}
# NCCL_* that may legitimately differ per node: interface selectors and debug output.
NCCL_PER_NODE = frozenset(
    {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}
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

# Each finding id's default severity and cause: the knowledge, kept as data.
KB: dict[str, tuple[Severity, str]] = {
    "ENV-MASTER-MISMATCH": (
        "error",
        "Every rank must reach the one store at MASTER_ADDR:"
        "MASTER_PORT. torchrun overwrites both for its workers, but manual env:// launches and "
        "wrappers passing $MASTER_ADDR/$MASTER_PORT to torchrun use this value.",
    ),
    "ENV-MASTER-LOOPBACK": (
        "error",
        "On more than one node a loopback MASTER_ADDR makes each "
        "node look for the store on itself (PING-LOOPBACK); workers time out waiting for rank 0.",
    ),
    "ENV-DUPRANK": (
        "error",
        "NODE_RANK/GROUP_RANK must be unique per node (0..nnodes-1, config "
        "order), RANK a permutation of 0..WORLD_SIZE-1; a duplicate claims a rank twice ('rank N "
        "of M ranks has already checked in') and the store waits forever.",
    ),
    "ENV-WORLDSIZE": (
        "error",
        "Every process must agree on WORLD_SIZE, else NCCL reports "
        "'mismatch in rank count' / 'mismatch in info from procs' or the store waits forever.",
    ),
    "ENV-IFNAME-NOMATCH": (
        "error",
        "NCCL fails at bootstrap: 'Bootstrap : no socket interface "
        "found' (BOOT-NOIF; 2.27 prints '... is neither AF_INET(2) nor AF_INET6(10)'). A typo, a "
        "name that differs between nodes (eth0 vs ens5), or a container without the host NIC.",
    ),
    "ENV-IFNAME-DOWN": (
        "error",
        "NCCL binds to the first matching interface that has an "
        "address without checking that it is up; with no address at all it fails as BOOT-NOIF.",
    ),
    "ENV-IFNAME-LOOPBACK": (
        "error",
        "NCCL advertises 127.0.0.1 to its peers; ranks on other "
        "nodes then connect to themselves and bootstrap times out.",
    ),
    "ENV-IFNAME-NOROUTE": (
        "warning",
        "NCCL advertises an address on a network the other nodes "
        "may not reach (BOOT-WRONGIF); bootstrap then hangs or is refused.",
    ),
    "ENV-IFNAME-IGNORED": (
        "warning",
        "NCCL reads NCCL_SOCKET_IFNAME only when it is longer than "
        "one character and otherwise picks an interface itself (ib*, then not docker/lo/virbr).",
    ),
    "ENV-GLOO-SYNTAX": (
        "error",
        "Gloo matches each comma-separated name exactly (no '^', no "
        "prefixes) and needs an address on it, else 'Unable to find address for: <iface>'.",
    ),
    "ENV-GLOO-COUNT": (
        "warning",
        "PyTorch requires every process to list the same number of "
        "Gloo interfaces (one Gloo device each); unset counts as one.",
    ),
    "ENV-NCCL-DIFF": (
        "warning",
        "NCCL settings should be identical on every rank; a mismatch "
        "changes behaviour between peers.",
    ),
    "ENV-DEPRECATED": (
        "warning",
        "PyTorch still reads the old name but warns 'Environment "
        "variable NCCL_... is deprecated; use TORCH_NCCL_... instead'; the TORCH_ name wins.",
    ),
    "BOOT-COMMID": (
        "warning",
        "PyTorch passes NCCL's unique id through its store and never "
        "needs NCCL_COMM_ID; a leftover value makes NCCL look for an interface in that subnet or "
        "fail with 'No usable listening interface found' / 'Invalid NCCL_COMM_ID'.",
    ),
    "ENV-ORDINAL": (
        "error",
        "Each local rank calls torch.cuda.set_device(LOCAL_RANK); a rank "
        "beyond the visible devices fails with 'CUDA error: invalid device ordinal'.",
    ),
    "SHM-SIZE": (
        "warning",
        "NCCL keeps intra-node buffers in /dev/shm; a small one (docker's "
        "default is 64 MB) fails with 'failed to extend /dev/shm/nccl-...' or SIGBUS.",
    ),
    "ENV-PET-OVERRIDE": (
        "warning",
        "torchrun reads PET_<FLAG> as the default of --<flag>: any "
        "torchrun started on this node without that flag uses it.",
    ),
}
