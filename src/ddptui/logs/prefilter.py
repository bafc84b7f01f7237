"""A fast prefilter in front of the signature regexes.  Core layer, stdlib only.

A 1 GB log has ~10 million lines and almost none of them is a failure; running 80+
regexes on each would take minutes.  Every signature's regex needs some literal text to
match (``Bootstrap : no socket interface found`` needs ``no socket interface``), so the
needles are derived from the regexes themselves, and a small set of short "trigger"
strings is chosen that every needle contains (a greedy set cover, preferring strings
that healthy runs do not print).  A line without any trigger cannot match any signature:
it is skipped with a few ``bytes.find`` scans per megabyte instead of a regex per line.
Signatures added to the YAML are covered automatically.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ddptui.diagnosis.signatures import MAX_LINE, Signature, load_signatures

# The regex parser (re._parser since Python 3.11): the needles come from the parsed
# pattern, so they are exactly what the engine requires.
sre_parse: Any = importlib.import_module("re._parser")

# Lines the log reader needs to see besides signature matches: torch's "Last error:"
# (the cause is on the next line), NCCL's Init lines (pid -> rank, the rank timeline),
# torchrun's per-worker failure lines (pid -> local rank), and the lines ranks state
# facts in (logs/facts.py): NCCL's version, bootstrap and NET interfaces, variables set
# by environment; torch's process-group options; launchers' rank and world size.  Each
# is printed a few times per rank, never per step.
CONTEXT_TRIGGERS: Final = (  # no leading space: see _choose
    # Each starts on a character ordinary text rarely has (upper case, "_"): the scan
    # regex tests every position against the set of first characters.
    "Last error:",
    "nranks ",
    "_rank: ",
    "Bootstrap : Using",
    "Bootstrap: Using",
    "NCCL version",
    "Using [",
    "Using network",
    "Using interface",
    "NCCL_",  # "NCCL_X set by environment to Y"
    "_RANK: ",
    "options: size: ",
    "_addr=",
    "_world_size",
    "WORLD_SIZE",
    "Running collective",
    "_count=",  # c10d's store barrier: "(world_size=6, worker_count=287"
    "Plugin Path : ",
    "NET/Plugin",
    "Some NCCL operations",  # gpu10: the watchdog's failure line (factrules.yaml hints)
    "not called before program exit",  # gpu11: a rank's normal exit (hints.exit_no_destroy)
    # the end of the training loop, in the frameworks' words (factrules.yaml run_ended)
    "Trainer.fit",
    "Stopping training",
    "Training completed",
    "Pid ",  # nccl-tests' device list: "#   Rank  0 Pid   1688 on host device  0"
    "_nodes ",  # torchrun's launch configuration: "  max_nodes                : 3"
    "_configs ",  # "  rdzv_configs             : {'timeout': '15', 'rank': 1}"
    # where a job waits, and the lines that say it stopped waiting (factrules.yaml stalls)
    "All distributed processes",
    "Rendezvous'ing",
    "Rendezvous complete",
    "Attempting to join",
    "Added self to waiting",
    "Joined rendezvous",
    "Creating new rendezvous",
    "Completed store",
    "ProcessGroupNCCL init",
    "out-of-place",
    "[00:00<?",
    "%|",  # a progress bar (tqdm): what one rank did while others waited
    # torch's watchdog naming the work it timed out in (2.2+), without the operation
    "PG status: last",
    "Exception (either",
    # NCCL's intra-node channels (printed at communicator init): the ranks share a host
    "via P2P",
    "via SHM",
    # a GPU model ("NVIDIA H100 80GB HBM3"), for the NCCL release that supports it
    "NVIDIA ",
    # logs8 (factrules.yaml hints): NCCL could not use IB verbs; a model being loaded
    "Failed to open libibverbs",
    "NET/IB : No device",
    "Loading checkpoint",
    "Initializing ",
    # logs9: torch's barrier() in a traceback (factrules.yaml hints.barrier)
    "_pg.barrier(",
    # logs11: nccl-tests' header and summary (facts.py bench_repeated)
    "Avg bus bandwidth",
    "Using devices",
    # logs12: Python's semaphore in a traceback's source line (factrules.yaml hints.semlock)
    "_multiprocessing.SemLock(",
    # logs14: a process stating it is rank 0 of a world of 1, and mpirun's command line
    # (facts.py WORLD_OF_ONE, LAUNCH_N)
    "0 of 1",
    "0 out of 1",
    "mpirun ",
    "mpiexec ",
    # logs16: c10d's store could not name a client (its reverse lookup failed); the times
    # these come at (factrules_logs16.rdns_slow)
    "socket cannot be retrieved",
    # logs34: the flight recorder's analysis (factrules_logs34.fr_not_joined)
    "Not all ranks joining",
    "missing ranks: {",
    "collective: nccl:",  # its operation (another backend's reads "a collective": a common word)
    # logs17: a process stating its host-memory use (factrules_logs17.sigkill_host_memory)
    "CPU memory usage: ",
    "CPU Virtual Memory: ",
    # logs17: a crash report's frame in NCCL (factrules_logs17.nccl_crash)
    "/libnccl.so",
    # gpu7: the second line of Lightning's device check (factrules_gpu7.lightning_gpus)
    "But your machine only has",
    # logs22: NCCL's GPUDirect RDMA state per HCA, the model state copied to every rank
    # (factrules_logs22.gdr_off_everywhere, sigkill_model_sync)
    "NET/IB : GPU Direct RDMA",
    "NET/IB: GPU Direct RDMA",
    "Synchronizing model states",
    # logs22: Envoy's debug logger handling a port as an inbound cluster (envoy_in_path)
    "TLS cluster inbound|",
    # logs23: a channel over an IB device (factrules_logs23.ib_open_in_use)
    "NET/IB/",
    # gpu8: NCCL's communicator abort at exit (logs/teardown.py; its "Abort COMPLETE" line
    # passes on "nranks ")
    "Abort START",  # "... - Abort START" (not a bare "START": user logs print it per step)
    # logs27: NCCL RAS's Errors section: which process, which rank (factrules_logs27.ras_missing;
    # its "Missing communicator data" line passes as a failure line)
    "managing GPU ",
    "The missing rank",
    # logs28: ssh asking about a host key no known_hosts holds (factrules_logs28.ssh_hostkey_prompt)
    "The authenticity of host",
    "Are you sure you want to continue connecting",
    # logs29: a job's own words that it requeues itself (factrules_logs29.self_requeue)
    "SIGUSR",
    "Requeu",
    "re-queu",
    "scontrol requeue",
    # logs30: the work was done before a logger thread's EOFError (factrules_logs30.LoggerExit)
    "Saved checkpoint",
    "Saving final checkpoint",
    "Training finished",
    # logs30: a credential rejected as expired (factrules_logs30.credential_clock)
    "Job credential expired",
    "Expired credential",
    # logs31: py-spy's dump, its thread headers and the frames that say where a thread is
    # (factrules_logs31.StackDumps)
    '(idle): "',
    '(active): "',
    '(active+gil): "',
    "(threading.py:",
    "(queue.py:",
    "distributed_c10d.py:",
    "dataloader.py:",
    # logs31: Megatron's fused-kernel build and its end (factrules.yaml stalls)
    "compiling and loading fused",
    # logs36: NCCL 1.x's words (factrules.yaml hints.nccl1): nccl-tests' header, its WARN
    # macro's bare "WARN src/core.cu:225" (its version line passes on "NCCL version")
    "Tests compiled with NCCL",
    "WARN src/",
    # logs37: a thread that got past its retry warnings, and the thread NCCL's abort
    # reached (logs/recovered.py, logs/teardown.py)
    "Connected after ",
    "ProgressOpt: abort called",
)
MIN_NEEDLE: Final = 4
# Typical healthy output: a trigger found there would cost a classification per line,
# so windows start on characters it rarely prints.
SAMPLE_FILE: Final = Path(__file__).with_name("healthy_sample.txt")


def _literal_runs(items: Iterable[tuple[Any, Any]]) -> list[str]:
    runs, cur = [], []
    for op, av in items:
        if op is sre_parse.LITERAL:
            cur.append(chr(av))
            continue
        if cur:
            runs.append("".join(cur))
            cur = []
    if cur:
        runs.append("".join(cur))
    return runs


Needle = tuple[str, bool]  # (literal, case-insensitive)


def _required(
    items: Sequence[tuple[Any, Any]], ci: bool = False, sample: str = ""
) -> list[Needle] | None:
    """Literals of which a match of this sequence contains at least one (any-of), or None
    when no literal is required.  Picks the best requirement of the sequence's parts."""
    options: list[list[Needle]] = [[(r, ci)] for r in _literal_runs(items)]
    for op, av in items:
        sub: list[Needle] | None = None
        if op is sre_parse.SUBPATTERN:
            add, remove = av[1], av[2]
            sub_ci = (ci or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE
            sub = _required(list(av[-1]), sub_ci, sample)
        elif op is sre_parse.BRANCH:
            alts = [_required(list(b), ci, sample) for b in av[1]]
            if all(a is not None for a in alts):
                sub = [n for a in alts if a is not None for n in a]
        elif op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT) and av[0] >= 1:
            sub = _required(list(av[2]), ci, sample)
        if sub:
            options.append(sub)
    options = [o for o in options if o and min(len(n) for n, _ in o) >= MIN_NEEDLE]
    if not options:
        return None
    # Every part is required: take the one healthy output prints least ("NCCL " is on
    # every NCCL line, "error" is not), then the longest, then the fewest alternatives.
    folded = sample.lower()

    def key(o: list[Needle]) -> tuple[int, int, int]:
        printed = sum(1 for n, c in o if (n.lower() in folded if c else n in sample))
        return (-printed, min(12, *(len(n) for n, _ in o)), -len(o))

    return max(options, key=key)


def needles(sig: Signature, sample: str = "") -> list[Needle] | None:
    """(literal, case-insensitive) pairs one of which every line this signature matches
    contains; None when the regex requires none we can use (that signature then sees
    every line)."""
    try:
        parsed = sre_parse.parse(sig.regex.pattern, sig.regex.flags)
    except Exception:  # noqa: BLE001 - an exotic pattern just goes without a prefilter
        return None
    return _required(list(parsed), bool(sig.regex.flags & re.IGNORECASE), sample)


WINDOW: Final = 8


def _windows(needle: str, sample: str) -> set[str]:
    """Digit-free pieces of `needle`, 4 to WINDOW long, that healthy output does not
    print (all its digit-free pieces of 3+ when every window is printed there).  Digit-
    free keeps the line cache (digits replaced by 0) exact."""
    pieces = [p for p in re.split(r"\d+", needle) if len(p) >= 3]
    found = {
        p[i : i + n]
        for p in pieces
        for n in range(4, WINDOW + 1)
        for i in range(len(p) - n + 1)
        if p[i : i + n] not in sample
    }
    return found or {p[:WINDOW] for p in pieces}


def _choose(all_needles: Sequence[str], freq: Mapping[str, float], sample: str) -> dict[str, str]:
    """One window per needle, all starting on few, rare characters: the scan regex
    tests each position against that set of first characters before anything else, so
    the smaller and rarer the set, the faster a line without any trigger is passed."""
    options = {n: _windows(n, sample) for n in all_needles}
    options = {n: w for n, w in options.items() if w}
    starts_of = {n: {w[0] for w in ws} for n, ws in options.items()}
    left, firsts = set(options), set()
    while left:
        covered: dict[str, int] = {}
        for n in left:
            for c in starts_of[n]:
                covered[c] = covered.get(c, 0) + 1
        best = max(sorted(covered), key=lambda c: covered[c] / (freq.get(c, 0.0) + 0.002))
        firsts.add(best)
        left = {n for n in left if best not in starts_of[n]}
    return {
        n: min(
            (w for w in ws if w[0] in firsts),
            # Long first (a short piece of a common word, "mplete", is printed by healthy
            # jobs the sample does not know), then the rarest first character.
            key=lambda w: (len(w) < WINDOW, freq.get(w[0], 0.0), -len(w), w),
        )
        for n, ws in options.items()
    }


def _trie_pattern(words: Iterable[str]) -> str:
    """One regex for many literals, factored by common prefixes so that the engine tests
    one character set per position instead of every alternative."""
    root: dict[str, Any] = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a shorter word ends here: its prefix is enough to stop
        alts = [re.escape(ch) + emit(sub) for ch, sub in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return emit(root)


@dataclass(frozen=True)
class _Side:
    """Triggers matched as written, or (case-insensitive needles) on lowercased text."""

    scan: re.Pattern[bytes] | None
    scan_text: re.Pattern[str] | None  # every trigger on a line, overlapping ones too
    by_trigger: dict[str, tuple[Signature, ...]]


def _side(by_trigger: dict[str, list[Signature]], sigs: Sequence[Signature]) -> _Side:
    if not by_trigger:
        return _Side(None, None, {})
    pattern = _trie_pattern(by_trigger)
    # The trie stops at the shortest trigger of a shared prefix: map what the regex
    # returns to every trigger starting with it.
    merged: dict[str, tuple[Signature, ...]] = {}
    for t in by_trigger:
        m = re.match(pattern, t)
        found = m.group() if m is not None else t
        members = {id(x) for k, ss in by_trigger.items() if k.startswith(found) for x in ss}
        merged[found] = tuple(x for x in sigs if id(x) in members)
    return _Side(re.compile(pattern.encode("utf-8")), re.compile(f"(?=({pattern}))"), merged)


DIGITS_TO_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")


def _trie_bytes(words: Iterable[str]) -> re.Pattern[bytes] | None:
    words = list(words)
    return re.compile(_trie_pattern(words).encode("utf-8")) if words else None


@dataclass(frozen=True)
class KeyScan:
    """Verdicts for a line's key (the line with its digits made 0), which many lines
    share (time stamps, pids and counters differ, the words do not): `plain` holds the
    triggers without a digit, exact on the key; `digits` the other triggers with their
    digits made 0, which a key holds whenever its line holds the trigger (a progress
    bar's "[00:00<?", NCCL's "via P2P"): the line itself must then be looked at."""

    plain_exact: re.Pattern[bytes] | None
    plain_folded: re.Pattern[bytes] | None
    digits_exact: re.Pattern[bytes] | None
    digits_folded: re.Pattern[bytes] | None

    @classmethod
    def of(cls, exact: Iterable[str], folded: Iterable[str]) -> KeyScan:
        def split(words: Iterable[str]) -> tuple[list[str], list[str]]:
            plain = [w for w in words if not any(c.isdigit() for c in w)]
            zeroed = {w.encode("utf-8").translate(DIGITS_TO_ZERO).decode("utf-8")
                      for w in words if w not in plain}
            return plain, sorted(zeroed)

        pe, de = split(list(exact))
        pf, df = split(list(folded))
        return cls(_trie_bytes(pe), _trie_bytes(pf), _trie_bytes(de), _trie_bytes(df))

    def verdict(self, key: bytes) -> bool | None:
        """True: every line with this key holds a trigger; False: none does; None: a
        line with this key may hold a trigger with digits (look at the line)."""
        head = key[:MAX_LINE]
        low = head.lower() if self.plain_folded is not None or self.digits_folded is not None else b""
        if self.plain_exact is not None and self.plain_exact.search(head) is not None:
            return True
        if self.plain_folded is not None and self.plain_folded.search(low) is not None:
            return True
        if self.digits_exact is not None and self.digits_exact.search(head) is not None:
            return None
        if self.digits_folded is not None and self.digits_folded.search(low) is not None:
            return None
        return False

    def patterns(self) -> dict[str, str | None]:
        """The four patterns' sources (for the logread probe)."""
        return {
            name: pat.pattern.decode("utf-8") if pat is not None else None
            for name, pat in (
                ("plain_exact", self.plain_exact), ("plain_folded", self.plain_folded),
                ("digits_exact", self.digits_exact), ("digits_folded", self.digits_folded),
            )
        }


@dataclass(frozen=True)
class Prefilter:
    """The scan regexes and, per trigger, the signatures a line holding it may match."""

    exact: _Side
    folded: _Side
    unfiltered: tuple[Signature, ...]  # signatures with no usable needle: every line
    signatures: tuple[Signature, ...]
    keys: KeyScan  # verdicts per line key, for the readers' caches
    # file order of each signature (by identity): a line holding several triggers gets
    # its signatures sorted, not the whole catalogue walked
    order: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", {id(x): i for i, x in enumerate(self.signatures)})

    def hit(self, raw: bytes) -> bool:
        """Whether the raw line holds any trigger (it may match a signature)."""
        head = raw[:MAX_LINE]
        if self.exact.scan is not None and self.exact.scan.search(head) is not None:
            return True
        if self.folded.scan is not None and self.folded.scan.search(head.lower()) is not None:
            return True
        return bool(self.unfiltered)

    def candidates(self, line: str) -> tuple[Signature, ...] | None:
        """The signatures that may match `line` in file order, () for a line that only
        holds a context trigger, None when it holds nothing."""
        head = line[:MAX_LINE]
        hits: list[tuple[Signature, ...]] = []
        for side, text in ((self.exact, head), (self.folded, head.lower())):
            if side.scan_text is not None:
                hits += [side.by_trigger.get(t, ()) for t in side.scan_text.findall(text)]
        if not hits and not self.unfiltered:
            return None
        groups = [g for g in hits if g]
        if len(groups) == 1 and not self.unfiltered:
            return groups[0]  # the common case: one trigger, already in file order
        keep = {id(x): x for g in groups for x in g} | {id(x): x for x in self.unfiltered}
        return tuple(sorted(keep.values(), key=lambda x: self.order[id(x)]))


def _char_freq(sample: str) -> dict[str, float]:
    counts: dict[str, int] = {}
    for ch in sample:
        counts[ch] = counts.get(ch, 0) + 1
    return {ch: n / len(sample) for ch, n in counts.items()}


def build_prefilter(sigs: Sequence[Signature], sample: str | None = None) -> Prefilter:
    if sample is None:
        sample = SAMPLE_FILE.read_text(encoding="utf-8")
    freq = _char_freq(sample)
    exact: dict[str, list[Signature]] = {t: [] for t in CONTEXT_TRIGGERS}
    folded: dict[str, list[Signature]] = {}
    unfiltered = []
    found = {sig.id: needles(sig, sample) for sig in sigs}
    plain = sorted({n for ns in found.values() for n, ci in ns or () if not ci})
    folded_needles = sorted({n.lower() for ns in found.values() for n, ci in ns or () if ci})
    chosen = {**_choose(plain, freq, sample), **_choose(folded_needles, freq, sample.lower())}
    for sig in sigs:
        ns = found[sig.id]
        windows = [(chosen.get(n.lower() if ci else n), ci) for n, ci in ns or ()]
        if not windows or any(w is None for w, _ in windows):
            unfiltered.append(sig)
            continue
        for w, ci in windows:
            assert w is not None
            bucket = folded.setdefault(w, []) if ci else exact.setdefault(w, [])
            if sig not in bucket:
                bucket.append(sig)
    return Prefilter(
        _side(exact, sigs), _side(folded, sigs), tuple(unfiltered), tuple(sigs),
        KeyScan.of(exact, folded),
    )


@functools.lru_cache(maxsize=1)
def default_prefilter() -> Prefilter:
    """The signatures, then the lines that look like a failure no signature knows."""
    from ddptui.diagnosis.factrules import load_factrules

    return build_prefilter((*load_signatures(), *load_factrules().failure_signatures()))
