"""Rules over a log's facts added in round logs28 (issue 15, blind batch T: documentation
of the training stack), read from the printing programs' own lines (factrules.yaml hints).

ib_link_mixed: NCCL's "NET/IB : Using [0]mlx5_0:1/IB ... [8]mlx5_bond_0:1/RoCE" lists the
ports it will use with their link layers; ports of both link layers in one list mean NCCL
mixes InfiniBand and RoCE (an Ethernet bond beside the IB HCAs): connections across the two
fail or crawl (ml-engineering's network debug notes; NCCL's "Attempted to connect
incompatible devices").  The same id as that line, IB-INCOMPAT, as a warning on its own.

ssh_hostkey_prompt: ssh's "The authenticity of host 'H (A)' can't be established." is
printed when the host's key is in no known_hosts file and ssh asks whether to go on; a
launcher (horovodrun, mpirun, pdsh, deepspeed's runner) has nobody to answer it, so the
launch stops there (Horovod's running notes).  The checklist's id, SSH-HOSTKEY-UNKNOWN.

Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_PORT: Final = re.compile(r"\[\d+\](?P<dev>[\w.-]+:\d+)/(?P<ll>IB|RoCE)\b")
_HOST: Final = re.compile(r"authenticity of host '(?P<name>[^' ]+)(?: \((?P<addr>[^)']+)\))?'")


def ib_link_mixed(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL's NET/IB port list holds ports of both link layers, IB and RoCE."""
    line = ctx.hints.get("ib_link_mixed")
    if line is None:
        return None
    ports: dict[str, list[str]] = {"IB": [], "RoCE": []}
    for m in _PORT.finditer(line):
        ports[m["ll"]].append(m["dev"])
    if not ports["IB"] or not ports["RoCE"]:
        return None
    few = ports["RoCE"] if len(ports["RoCE"]) <= len(ports["IB"]) else ports["IB"]
    said = (
        f"NCCL uses InfiniBand ports ({', '.join(ports['IB'][:4])}"
        f"{' …' if len(ports['IB']) > 4 else ''}) and RoCE ports "
        f"({', '.join(ports['RoCE'][:4])}{' …' if len(ports['RoCE']) > 4 else ''}) "
        f"together: {', '.join(few[:4])} should most likely not be in NCCL_IB_HCA"
    )
    return [], [line], said, {}


def ssh_hostkey_prompt(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """ssh asked whether to trust a host whose key no known_hosts file holds."""
    line = ctx.hints.get("ssh_hostkey")
    if line is None:
        return None
    m = _HOST.search(line)
    host = m["name"] if m else "the host"
    evidence = [line] + [x for x in (ctx.hints.get("ssh_prompt"),) if x is not None]
    said = (
        f"ssh asked whether to trust {host}: its host key is in no known_hosts file, and a "
        "launcher has nobody to answer, so the launch stops there"
    )
    return [], evidence, said, {"host": host, "port": "22"}
