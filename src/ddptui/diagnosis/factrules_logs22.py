"""Rules over a log's facts added in round logs22 (issue 15, blind batch O: causes that
recur across the corpus and whose lines carry them), read from the printing programs' own
lines (factrules.yaml hints).

watchdog_in_capture: torch's ProcessGroupNCCL watchdog died ("Process group watchdog
thread terminated with exception: ...") and the log holds the HIP/CUDA runtime's refusal
to touch a stream under graph capture ("operation not permitted when stream is
capturing", "operation not permitted on an event last recorded in a capturing stream",
hipErrorCapturedEvent): the watchdog's event query ran during a graph capture
(C10D-WATCHDOG-CAPTURE).  Either line alone is something else (a user's op in a capture;
a watchdog that died of another error).

pyxis_enroot_failed: pyxis (Slurm's SPANK container plugin) says it could not run enroot
("pyxis: couldn't ...", "spank: required plugin spank_pyxis.so: job_epilog() failed"), or
enroot's own hook failed ("[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return
code 1", nvidia-container-cli's "ldcache error") (SLURM-PYXIS-ENROOT); enroot's reason
(hints.enroot_said) is shown beside it.

gdr_off_everywhere: NCCL's topo.cc states "NET/IB : GPU Direct RDMA Disabled for HCA N
'mlx5_x'" and no HCA Enabled: NCCL's IB transport found no peer-memory module
(NCCL-GDR-NOPEERMEM).  NET/Socket's own "Disabled" lines (sockets never do GDR) are not
read.  An NCCL the log states at 2.22.3 or older is named: it does not check
/sys/module/nvidia_peermem (2.23.4 does).

sigkill_model_sync: a rank SIGKILLed while the log says rank 0's model state was being
copied to every rank, no other killer named (HOST-OOM-KILL, logs8's sigkill_beside).

ofi_libfabric_mismatch: glibc's loader "version `FABRIC_1.7' not found (required by
.../libnccl-net.so)" or "version `EFA_1.2' not found (required by .../libfabric.so.1)":
NCCL's OFI plugin or its libfabric was built against another libfabric/EFA release than
the one loaded (NCCL-OFI-LIBFABRIC; awsome-distributed-ai#292, #284); or the plugin could
not register memory with that libfabric ("NET/OFI Unable to register memory (type = 2)
... RC: -22": an EFA installer older than 1.29.1 under NCCL 2.19+; round 21).

envoy_in_path: Envoy's (Istio's sidecar) own words in the log: its RBAC filter's denial
("rbac_access_denied_matched_policy[...]", "RBAC: access denied"), or its debug logger
handling a port as an inbound cluster ("envoy upstream ... TLS cluster inbound|23456||")
(K8S-ISTIO-SIDECAR; kubeflow/trainer#1634, #1636).

quiet_alone: RCCL's "Missing "iommu=pt" from kernel command line" is a warning RCCL's own
maintainers call a false positive where passthrough is the kernel's default
(ROCm/rocm-systems#7916); with nothing else failing, stalled or warned in the log it is
not reported (a failure or a stall beside it still reads as P2P-IOMMU).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs8 import sigkill_beside

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules
    from ddptui.diagnosis.finding import Finding

# ids whose signature line alone, with no other finding in the log, is not reported
QUIET_ALONE: Final = frozenset({"P2P-IOMMU"})
_VERSION: Final = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
_OFI: Final = re.compile(r"version `(?P<ver>[^'`\s]+)' not found \(required by \S*?(?P<by>lib[\w.-]+?)\)?\s*(?:\)|$)")
_INBOUND: Final = re.compile(r"\binbound\|(?P<port>\d+)\|")
PEERMEM_CHECKED: Final = (2, 23, 4)  # the first release that reads /sys/module/nvidia_peermem


def watchdog_in_capture(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """The watchdog died, and the runtime refused an operation on a capturing stream."""
    died, refused = ctx.hints.get("watchdog_died"), ctx.hints.get("capture_refused")
    if died is None or refused is None:
        return None
    said = (
        "the process group watchdog terminated while a HIP/CUDA graph was being captured: "
        "its query of a collective's event was refused on the capturing stream"
    )
    return [], [refused, died] if refused != died else [died], said, {}


def pyxis_enroot_failed(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """pyxis could not run enroot, or an enroot hook failed; enroot's reason beside it."""
    failed = ctx.hints.get("pyxis_failed")
    if failed is None:
        return None
    said_by = ctx.hints.get("enroot_said")
    evidence = [failed] + ([said_by] if said_by is not None and said_by != failed else [])
    said = "Slurm's container plugin (pyxis) could not run enroot on the node"
    return [], evidence, said, {}


def gdr_off_everywhere(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NET/IB states GPU Direct RDMA Disabled for its HCAs and Enabled for none."""
    off = ctx.hints.get("gdr_off")
    if off is None or ctx.hints.get("gdr_on") is not None:
        return None
    old = sorted(
        {p.nccl_version for p in ctx.procs if p.nccl_version and _older(p.nccl_version)}
    )
    said = "NCCL's IB transport runs with GPUDirect RDMA disabled on its HCAs (none enabled)"
    if old:
        said += (
            f"; NCCL {old[0]} predates 2.23.4, the first release that detects the "
            "nvidia-peermem module (/sys/module/nvidia_peermem)"
        )
    return [], [off], said, {}


def _older(version: str) -> bool:
    m = _VERSION.match(version)
    return m is not None and tuple(int(x) for x in m.groups()) < PEERMEM_CHECKED


def sigkill_model_sync(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A SIGKILLed rank while the model state was being copied from rank 0 to every rank."""
    return sigkill_beside(
        ctx,
        "model_sync",
        "while the model state was copied from rank 0 to every rank (each rank holds a "
        "full copy in host memory); no scheduler or container limit is named: the "
        "kernel's OOM killer",
    )


def ofi_libfabric_mismatch(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """The loader refused a libfabric/EFA symbol version the OFI plugin stack needs."""
    line = ctx.hints.get("ofi_version")
    if line is None:
        return _ofi_register(ctx.hints.get("ofi_register"))
    m = _OFI.search(line)
    what = f" ({m['ver']}, required by {m['by']})" if m else ""
    said = f"NCCL's OFI network plugin stack could not load{what}: built against another libfabric"
    return [], [line], said, {}


_REGISTER: Final = re.compile(r"\(type = (?P<type>\d+)\)(?: for device (?P<dev>\d+))?.*?\bRC: (?P<rc>-?\d+)")


def _ofi_register(line: str | None) -> Hit | None:
    """aws-ofi-nccl could not register a buffer with libfabric (round 21, blind AT3)."""
    if line is None:
        return None
    m = _REGISTER.search(line)
    what = "GPU memory" if m is not None and m["type"] == "2" else "a buffer"
    rc = f" (RC {m['rc']})" if m is not None else ""
    said = f"NCCL's OFI network plugin could not register {what} with libfabric{rc}"
    return [], [line], said, {}


def envoy_in_path(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Envoy's RBAC denial, or its debug log handling a port as an inbound cluster."""
    denied, inbound = ctx.hints.get("envoy_rbac"), ctx.hints.get("envoy_inbound")
    if denied is None and inbound is None:
        return None
    m = _INBOUND.search(inbound or "")
    port = f" on port {m['port']}" if m else ""
    how = "denied a connection (RBAC)" if denied is not None else f"handles the traffic{port}"
    said = f"an Istio/Envoy sidecar {how}"
    return [], [x for x in (denied, inbound) if x is not None], said, {}


def quiet_alone(
    lead: Finding | None, findings: list[Finding], unknown: Finding | None
) -> tuple[Finding | None, list[Finding]]:
    """Drop a QUIET_ALONE finding when it is the log's only finding (nothing else failed,
    stalled or warned, no unrecognized error)."""
    if unknown is not None or not findings or any(f.id not in QUIET_ALONE for f in findings):
        return lead, findings
    return None, []
