"""GLOO-MESH names the cause the threads established for Gloo's full-mesh failure: the
interface Gloo picked (GLOO_SOCKET_IFNAME unset on nodes with several NICs), read on the real
excerpts of the corpus (four collected as [NEW] before the finding said so: named_later)."""



from __future__ import annotations

import pytest
from corpus_excerpts import CORPUS, excerpt, lead
from logchunks import first_via_chunks


@pytest.mark.parametrize(
    "eid",
    [
        "i-gloo-gitcode-447a6367",  # "Gloo connectFullMesh failed" alone (a case write-up)
        "i2-gloo-ifname-vllm-13121",  # vLLM's Gloo CPU group over Ray, "[...pair.cc:144] no error"
        "k1-gloo-ifname-hiascend-commonqa-0027",  # a vendor FAQ, "[...] no error"
        "n1-interface-discuss-pytorch-191076",  # a VPN tunnel the default interface is not
        "iface-sglang-3226",  # IB + Ethernet nodes: "Set Env GLOO_SOCKET_IFNAME works for me"
    ],
)
def test_gloos_full_mesh_failure_says_which_interface_to_name(eid: str) -> None:
    d = excerpt(eid)
    assert lead(d) == "GLOO-MESH"
    assert d.first is not None and "GLOO_SOCKET_IFNAME" in d.first.cause and "GLOO_SOCKET_IFNAME" in d.first.fix
    assert first_via_chunks(list(CORPUS[eid].lines), "g.log") == "GLOO-MESH"


def test_a_wrapped_mesh_failure_leaves_its_specifics_to_the_next_line() -> None:
    # aws-samples/aws-do-eks#69: the line ends at the bracket, the next says the peer was
    # 127.0.0.1: the loopback finding, not the generic one
    assert lead(excerpt("host-aws-do-eks-69")) == "GLOO-MESH-LOOPBACK"
