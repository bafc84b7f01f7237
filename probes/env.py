# Env probe: the launch environment a training job would see on this node (the
# non-interactive SSH login env, overlaid with the config's env, then the node's
# env), plus the network facts the audit judges it against.
#
# Secrets are redacted here, on the node, with probes/_redact.py (sent ahead of
# this file) before anything is written.
#
# PARAMS: {"overlay": {K: V}, "node_env": {K: V}, "salt": "<hex>", "master_addr": "..."}
# A None value in overlay/node_env unsets the variable (the config never sends
# one today; this keeps the meaning obvious if it ever does).
# stdlib only; must run on Python 3.8+.
import socket


def main():
    env, sources = effective_env(os.environ, PARAMS.get("overlay"), PARAMS.get("node_env"))
    # Without a salt from ddptui, a random one: markers then only compare within
    # this run on this node, but a short password can never be brute-forced back.
    salt = str(PARAMS.get("salt") or "") or os.urandom(16).hex()
    safe, redacted = redact_env(env, salt)
    emit("env", env=safe, sources=sources, redacted=redacted)
    master = PARAMS.get("master_addr")
    emit(
        "net",
        interfaces=interfaces(),
        route=route_to(master) if master else None,
        shm_bytes=shm_bytes(),
        hostname=socket.gethostname(),
        cuda_visible_devices_raw_present="CUDA_VISIBLE_DEVICES" in env,
    )


if __name__ == "__main__":
    main()
