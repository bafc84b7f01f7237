# inventory probe: facts about this node. Cheap on purpose: package metadata and
# file reads, never `import torch` (seconds of CPU per node).
import platform
import re
import socket


def torch_facts():
    import importlib.util

    facts = {
        "torch": None,
        "torch_cuda": None,
        "torch_path": None,
        "nccl": None,
        "nccl_source": None,
        "torch_error": None,
    }
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as exc:
        spec = None
        facts["torch_error"] = str(exc)
    if spec is None or not spec.origin:
        facts["torch_error"] = facts["torch_error"] or "No module named 'torch'"
        return facts
    pkg = os.path.dirname(spec.origin)
    facts["torch_path"] = pkg
    version_py = read_text(os.path.join(pkg, "version.py"), "") or ""
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py, re.M)
    if m:
        facts["torch"] = m.group(1)
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_py, re.M)
    if m:
        facts["torch_cuda"] = m.group(1)
    if not any(
        n.startswith("_C") and (n.endswith(".so") or n.endswith(".pyd")) for n in os.listdir(pkg)
    ):
        facts["torch_error"] = "torch at %s has no compiled _C extension (broken install)" % pkg
    try:
        from importlib import metadata
    except ImportError:
        return facts
    if facts["torch"] is None:
        try:
            facts["torch"] = metadata.version("torch")
        except metadata.PackageNotFoundError:
            pass
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if name.startswith("nvidia-nccl-cu"):
            facts["nccl"] = dist.version
            facts["nccl_source"] = name
            break
    return facts


def gpu_facts():
    """NVML (nvidia-ml-py) first, nvidia-smi second; no GPU is a fact, not an error."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            gpus = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                gpus.append(
                    {
                        "index": i,
                        "name": _s(pynvml.nvmlDeviceGetName(h)),
                        "uuid": _s(pynvml.nvmlDeviceGetUUID(h)),
                        "pci_bus_id": _s(pynvml.nvmlDeviceGetPciInfo(h).busId),
                        "memory_total_mib": int(mem.total // (1024 * 1024)),
                    }
                )
            return {"source": "nvml", "driver": _s(driver), "gpus": gpus, "error": None}
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - NVML raises many types; any means "try nvidia-smi"
        nvml_error = "%s: %s" % (type(exc).__name__, exc)
    rc, out, err = run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version",
            "--format=csv,noheader,nounits",
        ],
        timeout=10,
    )
    if rc == 0:
        gpus, driver = [], None
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 6:
                gpus.append(
                    {
                        "index": int(parts[0]),
                        "name": parts[1],
                        "uuid": parts[2],
                        "pci_bus_id": parts[3],
                        "memory_total_mib": int(float(parts[4]))
                        if parts[4][:1].isdigit()
                        else None,
                    }
                )
                driver = parts[5]
        return {"source": "nvidia-smi", "driver": driver, "gpus": gpus, "error": None}
    if rc is None:
        return {
            "source": "none",
            "driver": None,
            "gpus": [],
            "error": None,
            "note": "no NVIDIA driver or GPU found (%s; nvidia-smi not installed)" % nvml_error,
        }
    return {
        "source": "none",
        "driver": None,
        "gpus": [],
        "error": "nvidia-smi failed: %s" % (err.strip() or out.strip())[:300],
    }


def _s(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def ib_ports():
    ports = []
    base = "/sys/class/infiniband"
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return ports
    for dev in devices:
        try:
            port_ids = sorted(os.listdir(os.path.join(base, dev, "ports")))
        except OSError:
            continue
        for port in port_ids:
            p = os.path.join(base, dev, "ports", port)
            ports.append(
                {
                    "device": dev,
                    "port": int(port) if port.isdigit() else port,
                    "state": read_text(os.path.join(p, "state")),
                    "phys_state": read_text(os.path.join(p, "phys_state")),
                    "rate": read_text(os.path.join(p, "rate")),
                    "link_layer": read_text(os.path.join(p, "link_layer")),
                }
            )
    return ports


def os_name():
    text = read_text("/etc/os-release", "") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return m.group(1) if m else platform.system()


def identity():
    """Which machine and which network stack this is: two config entries with the same
    boot id and network namespace are one host (loopback reaches both); containers or
    namespaces on one host share the boot id but not the namespace."""
    try:
        netns = os.readlink("/proc/self/ns/net")  # "net:[4026531840]"
    except OSError:
        netns = None
    return {
        "machine_id": (read_text("/etc/machine-id", "") or "").strip() or None,
        "boot_id": (read_text("/proc/sys/kernel/random/boot_id", "") or "").strip() or None,
        "netns": netns,
    }


def mem_total():
    for line in (read_text("/proc/meminfo", "") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


facts = {
    "hostname": socket.gethostname(),
    "kernel": platform.release(),
    "os": os_name(),
    "arch": platform.machine(),
    "python": platform.python_version(),
    "python_executable": sys.executable,
    "cpus": os.cpu_count(),
    "mem_bytes": mem_total(),
    "shm_bytes": shm_bytes(),
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
}
facts.update(identity())
facts.update(torch_facts())
gpu = gpu_facts()
facts["gpu_source"] = gpu["source"]
facts["driver"] = gpu["driver"]
facts["gpus"] = gpu["gpus"]
facts["gpu_error"] = gpu.get("error")
facts["gpu_note"] = gpu.get("note")
facts["interfaces"] = interfaces()
facts["ib_ports"] = ib_ports()
emit("inventory", **facts)
