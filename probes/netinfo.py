# Debug probe: the network facts helpers, as one record.
emit(
    "net",
    interfaces=interfaces(),
    route=route_to(PARAMS.get("addr", "127.0.0.1")),
    resolved=resolve(PARAMS.get("host", "localhost")),
    shm_bytes=shm_bytes(),
)
