"""The same random stream on every rank, through the project's helpers: a seeding
helper called alike on every rank, DataLoader generators seeded alike."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint18 import last_entry_anchor
from ddptui.lint.lint23 import flag_off_seed
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.rules_data import is_loader
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

_STARTS: Final = frozenset(
    {"init_dist", "init_distributed", "init_distributed_mode", "Accelerator", "init_process_group"}
)
_GLOBAL_SEEDS: Final = frozenset(
    {"torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "random.seed",
     "numpy.random.seed", "np.random.seed"}
)  # fmt: skip
_DRAWS: Final = re.compile(
    r"^torch\.(randn|rand|randint|randperm|randn_like|rand_like|randint_like|bernoulli"
    r"|multinomial|normal|poisson)$|^(numpy|np)\.random\.(?!seed)\w+$|^random\.(?!seed)\w+$"
)
# samplers that draw from torch's global generator unless handed their own
_RANDOM_SAMPLERS: Final = re.compile(
    r"^torch\.utils\.data(\.sampler)?\.(WeightedRandomSampler|RandomSampler|SubsetRandomSampler)$"
)
_SEED_NAME: Final = re.compile(r"seed", re.I)
_SEEDS: Final = frozenset({"manual_seed", "manual_seed_all", "seed_everything", "set_seed", "seed"})
# a re-seed per epoch or step (`torch.manual_seed(epoch)` for a permutation every rank
# shares) is not the run's seed: it comes after the model is built
_STEP_SEED: Final = re.compile(
    r"^(\w+\.)?(epoch|cur_epoch|ep|step|global_step|it|iter|iteration|i)$"
)
_AUGMENT: Final = re.compile(
    r"^(Random\w+|RandAugment|AutoAugment|TrivialAugmentWide|AugMix"
    r"|Dropout\d?d?|dropout\d?d?)$"
)


def _multi_process(s: Script, f: Flow) -> bool:
    return f.distributed or any(last(s.call_name(c)) in _STARTS for c in s.calls)


def _seeding(s: Script, c: ast.Call, depth: int = 0) -> bool:
    """A call that seeds the global generators: torch/numpy/random directly, or a
    project helper that does (`set_random_seed(seed)`)."""
    qn = s.call_name(c)
    if qn in _GLOBAL_SEEDS:
        return True
    if depth > 1 or not _SEED_NAME.search(last(qn)):
        return False
    return any(_seeding(s, inner, depth + 1) for fn in s.callees(c) for inner in calls_in(fn.body))


def seed_calls(s: Script) -> list[ast.Call]:
    found = [
        c
        for c in s.calls
        if last(s.call_name(c)) in _SEEDS
        and (last(s.call_name(c)) != "seed" or "random" in s.call_name(c))
        and not (c.args and _STEP_SEED.match(ast.unparse(c.args[0])))
    ]
    if not found:
        return found
    used = _names_used(s)
    return [c for c in found if not _in_unused_helper(s, c, used) and not flag_off_seed(s, c)]


def _names_used(s: Script) -> set[str]:
    """Every name the reached code reads (`random_seed`, `utils.random_seed`, a callback
    handed to a framework)."""
    out: set[str] = set()
    for n in s.nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
            out.add(n.attr)
        elif isinstance(n, ast.alias) and n.name != "*":
            out.add(n.name.rsplit(".", 1)[-1])
    return out


def _in_unused_helper(s: Script, c: ast.Call, used: set[str]) -> bool:
    """The seed call sits in a module-level seeding helper nothing reads: `def random_seed(...):
    torch.manual_seed(...)` defined and never called (LAION-AI/CLAP 0dc2b92, main.py:122;
    the fix calls the seeds at the start of main). Imported or handed on by name counts
    as used."""
    fn = s.scope_of(c)
    return (
        isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        and isinstance(s.parents.get(fn), ast.Module)
        and _SEED_NAME.search(fn.name) is not None  # a seeding helper, not an uncalled main
        and fn.name not in used
    )


def rank_seed(s: Script, f: Flow) -> Iterator[Hit]:
    seeds = seed_calls(s)
    if not f.distributed or not seeds or any(f.is_rank_expr(c) for c in seeds):
        return
    if f.uses("worker_init_fn") or not any(_random_op(s.call_name(c)) for c in s.calls):
        return
    yield Hit.at(
        "DDP-RANK-SEED",
        seeds[0],
        (
            f"`{ast.unparse(seeds[0])}` gives every rank the same random stream for dropout "
            "and augmentation"
        ),
        seed=ast.unparse(seeds[0].args[0]) if seeds[0].args else "seed",
    )


def _random_op(qn: str) -> bool:
    """A random augmentation (torchvision transforms) or dropout (torch)."""
    name = last(qn)
    return bool(_AUGMENT.match(name)) and (
        ("transforms" in qn and not name.startswith(("Dropout", "dropout")))
        or (qn.startswith("torch") and name.lower().startswith("dropout"))
    )


def _old_rule_fires(s: Script, f: Flow) -> bool:
    seeds = seed_calls(s)
    return (
        f.distributed
        and bool(seeds)
        and not any(f.is_rank_expr(c) for c in seeds)
        and not f.uses("worker_init_fn")
        and any(_random_op(s.call_name(c)) for c in s.calls)
    )


def rank_seed_helpers(s: Script, f: Flow) -> Iterator[Hit]:
    """`set_random_seed(seed)` (a project helper, or torch/numpy/random directly) with
    the same value on every rank, in a project that draws random numbers (noise, masks,
    crops): said at the entry's call, where `+ rank` belongs."""
    if not _multi_process(s, f) or _old_rule_fires(s, f) or f.uses("LightningModule"):
        return
    # a project helper (`set_random_seed`): a direct `torch.manual_seed(0)` before the
    # model is built is the advice for equal initial weights (DDP-SEED), left alone
    seeds = [c for c in s.calls if s.callees(c) and _seeding(s, c)]
    if not seeds or not any(_draws(s, c) for c in s.calls):
        return
    for c in seeds:
        inner = [n for fn in s.callees(c) for n in ast.walk(fn)]
        if f.is_rank_expr(c) or any(
            isinstance(n, ast.Name | ast.Attribute | ast.Call) and f.rank_valued(n) for n in inner
        ):
            return  # one of them adds the rank
    at = last_entry_anchor(s, seeds[0])
    if at is not seeds[0] and f.is_rank_expr(at):
        return  # the entry hands the helper a per-rank seed (`DpLoaderSet(..., seed=seed + rank)`)
    if at is not seeds[0] and isinstance(at, ast.Call) and not _takes_seed(s, at):
        # `setup_environment(cfg)` takes no seed: the rank belongs where the seed value
        # is passed, inside it (Metta-AI/metta 1565d67 metta/util/runtime_configuration.py:
        # `seed_everything(cfg.seed, ...)`; the fix offsets the seed there by the rank)
        at = seeds[0]
    yield Hit.at(
        "DDP-RANK-SEED",
        at,
        (
            f"`{ast.unparse(at)[:60]}` seeds every rank alike and the project draws random "
            "numbers (noise, masks, crops): every GPU draws the same ones"
        ),
        seed=ast.unparse(seeds[0].args[0]) if seeds[0].args else "seed",
    )


def _takes_seed(s: Script, call: ast.Call) -> bool:
    """The call passes a seed on (`seed=...`, an argument named like one: `args.seed`), or
    could: the function or class it calls has a parameter named like one (deepmd-kit's
    `DpLoaderSet(..., seed=None)`, where the fix passes `seed=seed + rank`)."""
    if any(k.arg is not None and _SEED_NAME.search(k.arg) for k in call.keywords):
        return True
    for fn in s.callees(call):
        a = fn.args
        if any(_SEED_NAME.search(p.arg) for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]):
            return True
    return any(
        isinstance(n, ast.Name | ast.Attribute) and _SEED_NAME.search(ast.unparse(n))
        for a in [*call.args, *(k.value for k in call.keywords)]
        for n in ast.walk(a)
    )


def _draws(s: Script, c: ast.Call) -> bool:
    """A draw from the global generators: `torch.randn`, `np.random.rand`, or a random
    sampler without its own generator (deepmd-kit's WeightedRandomSampler over the
    systems: every rank seeded alike picks the same system for each batch)."""
    qn = s.call_name(c)
    return bool(_DRAWS.match(qn)) or (
        bool(_RANDOM_SAMPLERS.match(qn)) and kwarg(c, "generator") is None
    )


def loader_generator_seed(s: Script, f: Flow) -> Iterator[Hit]:
    """`DataLoader(..., generator=get_generator(seed))` with one seed for every rank: the
    workers' random streams (augmentation, noise) coincide across GPUs."""
    if not _multi_process(s, f):
        return
    for c in s.calls:
        gen = kwarg(c, "generator") if is_loader(s, c) else None
        if gen is None or f.is_rank_expr(gen):
            continue
        if not _SEED_NAME.search(ast.unparse(gen)):
            continue
        yield Hit.at(
            "DDP-RANK-SEED",
            gen,
            (
                f"`generator={ast.unparse(gen)}` seeds this DataLoader alike on every rank: "
                "its workers draw the same augmentations and noise on every GPU"
            ),
            seed=ast.unparse(gen),
        )


RULES = (rank_seed_helpers, loader_generator_seed)
