# NCCL Inspector plugin output, when a job runs with it (NCCL_PROFILER_PLUGIN=...inspector,
# NCCL_INSPECTOR_ENABLE=1): one JSON object per collective per communicator, written by
# each process into NCCL_INSPECTOR_DUMP_DIR (default nccl-inspector-<SLURM_JOB_ID> or
# nccl-inspector-unknown-jobid in the job's working directory). Format (NCCL's
# ext-profiler/inspector/README.md, output format v4.0): {"header": {"id", "rank",
# "n_ranks", "nnodes"}, "metadata": {..., "hostname", "pid"}, "coll_perf": {"coll",
# "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us", "coll_algobw_gbs",
# "coll_busbw_gbs"}}. Only the tail of each file is read (files grow for the whole run).
# stdlib only; must run on Python 3.8+. Read-only: the job is never touched.
INSPECTOR_TAIL = 256 * 1024
INSPECTOR_KEEP = 64  # latest collectives per rank sent back


def inspector_dirs(workers):
    """Where the job's ranks write inspector output, from their own environment."""
    dirs = set()
    for pid, env in workers:
        if env.get("NCCL_INSPECTOR_ENABLE") != "1" or "inspector" not in env.get(
            "NCCL_PROFILER_PLUGIN", ""
        ):
            continue
        where = env.get("NCCL_INSPECTOR_DUMP_DIR")
        if not where:
            job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
            where = "nccl-inspector-%s" % (job_id or "unknown-jobid")
        if not os.path.isabs(where):
            try:
                where = os.path.join(os.readlink("/proc/%d/cwd" % pid), where)
            except OSError:
                continue
        dirs.add(where)
    return sorted(dirs)


def inspector_records(text):
    """Every complete JSON object in text (a tail may start mid-object)."""
    decoder = json.JSONDecoder()
    out = []
    i = text.find("{")
    while 0 <= i < len(text):
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("\n{", i + 1)
            i = i + 1 if i >= 0 else -1
            continue
        if isinstance(obj, dict) and isinstance(obj.get("coll_perf"), dict):
            out.append(obj)
        i = text.find("{", end)
    return out


def read_inspector(workers):
    """The latest collectives per rank from every inspector file of this job's ranks."""
    per_rank = {}
    for directory in inspector_dirs(workers):
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            emit("inspector", dir=directory, error=exc.strerror or str(exc))
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as fh:
                    fh.seek(max(0, os.fstat(fh.fileno()).st_size - INSPECTOR_TAIL))
                    text = fh.read().decode("utf-8", "replace")
            except OSError:
                continue
            for obj in inspector_records(text):
                header, perf = obj.get("header") or {}, obj["coll_perf"]
                rank = header.get("rank")
                if not isinstance(rank, int):
                    continue
                per_rank.setdefault(rank, []).append(
                    {
                        "coll": perf.get("coll"),
                        "sn": perf.get("coll_sn"),
                        "bytes": perf.get("coll_msg_size_bytes"),
                        "time_us": perf.get("coll_exec_time_us"),
                        "busbw_gbs": perf.get("coll_busbw_gbs"),
                        "n_ranks": header.get("n_ranks"),
                        "comm": header.get("id"),
                    }
                )
    for rank, items in sorted(per_rank.items()):
        emit("inspector", rank=rank, colls=items[-INSPECTOR_KEEP:])
