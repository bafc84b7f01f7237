"""Typed inventory facts between steps: what the env and allreduce steps read."""

from __future__ import annotations

from ddptui.checklist.facts import InventoryFacts, Route


def test_inventory_facts_from_a_probe_record() -> None:
    data = {
        "hostname": "gpu1",
        "gpus": [{"index": 0}, {"index": 1}],
        "interfaces": [
            {"name": "lo", "up": True, "speed_mbps": None, "addrs": [{"addr": "127.0.0.1"}]},
            {"name": "eth0", "up": True, "speed_mbps": 25000, "addrs": [{"addr": "10.0.0.2"}]},
        ],
        "ib_ports": [{"device": "mlx5_0", "port": 1, "state": "4: ACTIVE"}],
        "machine_id": "abc",
    }
    facts = InventoryFacts.from_data(data)
    assert facts.gpu_count == 2 and facts.ib_active and facts.machine_id == "abc"
    eth0 = facts.interface("eth0")
    assert eth0 is not None and eth0.speed_mbps == 25000 and eth0.addrs == ("10.0.0.2",)
    assert Route.from_data({"route": {"dev": "eth0", "src": "10.0.0.2"}}) == Route("eth0", "10.0.0.2")


def test_garbage_record_gives_unknowns_not_exceptions() -> None:
    facts = InventoryFacts.from_data({"gpus": "n/a", "interfaces": [3, None], "ib_ports": {}})
    assert facts.gpu_count is None and facts.interfaces == () and not facts.ib_active
    assert Route.from_data({"route": "?"}) is None
