# Secret redaction, shared by the probes that handle environments and logs (env,
# allreduce). Secrets are redacted HERE, on the node, before anything is written:
# the login node only ever sees "<redacted:HASH>", where HASH = sha256(salt +
# value)[:10]. Equal values give equal markers under one salt, so "same value on
# every node?" stays answerable without the value ever leaving the node.
# stdlib only; must run on Python 3.8+.
import hashlib
import re

MAX_VALUE_CHARS = 4096

# Variables that are diagnostic and stay visible even when their name contains a
# secret word (NCCL_IB_PKEY is a partition key, not a credential). Their values
# are still checked against SECRET_VALUE_PATTERNS and URL_USERINFO.
# MASTER_ADDR/MASTER_PORT are listed by name rather than as MASTER_*: a
# MASTER_KEY or MASTER_PASSWORD is a secret, and torchrun reads only those two.
DIAGNOSTIC_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "CUDA_")
DIAGNOSTIC_SUFFIXES = ("_SOCKET_IFNAME",)
DIAGNOSTIC_NAMES = frozenset(
    [
        "MASTER_ADDR",
        "MASTER_PORT",
        "PATH",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "PYTHONPATH",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "GROUP_RANK",
        "LOCAL_WORLD_SIZE",
        "OMP_NUM_THREADS",
    ]
)

# A name part (the name split on non-alphanumerics, lower-cased, a trailing
# plural 's' or digits dropped) that ENDS with one of these words marks a secret:
# API_KEY, APIKEY, HF_TOKEN, AUTHTOKEN, DB_PASSWORDS, MYSQL_PWD, SECRET2.
SECRET_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "key",
    "credential",
    "auth",
    "authorization",
    "bearer",
    "cookie",
    "session",
    "private",
)
# These also match at the START of a part (PASSWORDFILE, SESSIONID, PRIVATEKEY).
# "token" and "key" do not: TOKENIZERS_PARALLELISM and KEYBOARD are not secrets.
SECRET_PREFIX_WORDS = ("secret", "password", "passwd", "credential", "cookie", "session", "private")
# The shell's working directories, not passwords (MYSQL_PWD still is one).
NOT_SECRET_NAMES = frozenset(["PWD", "OLDPWD"])

_NOT_ALNUM = r"(?<![A-Za-z0-9])"
# A value matching any of these anywhere is replaced whole.
SECRET_VALUE_PATTERNS = [
    # GitHub classic tokens: personal (ghp), OAuth (gho), user-to-server (ghu),
    # server-to-server (ghs), refresh (ghr).
    re.compile(r"gh[pousr]_[A-Za-z0-9]{36,}"),
    # GitHub fine-grained personal access tokens.
    re.compile(r"github_pat_[A-Za-z0-9_]{20,}"),
    # AWS access key ids: long-term (AKIA) and temporary STS (ASIA).
    re.compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}"),
    # Slack bot / user / app / refresh / config tokens.
    re.compile(r"xox[abprs]-[A-Za-z0-9-]{10,}"),
    # Hugging Face user and org tokens.
    re.compile(_NOT_ALNUM + r"hf_[A-Za-z0-9]{30,}"),
    # OpenAI / Anthropic style keys (sk-..., sk-proj-..., sk-ant-api03-...); the
    # look-behind keeps "task-..." or "disk-..." from matching.
    re.compile(_NOT_ALNUM + r"sk-[A-Za-z0-9_-]{20,}"),
    # Google API keys.
    re.compile(r"AIza[0-9A-Za-z_-]{35}"),
    # GitLab personal / project access tokens.
    re.compile(r"glpat-[0-9A-Za-z_-]{20,}"),
    # JSON Web Tokens: base64url('{"...') . base64url('{"...') . signature.
    re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    # PEM private keys of any kind (RSA, EC, OPENSSH, ENCRYPTED, PKCS#8).
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"),
]
# AWS secret access keys are 40 base64 characters: too generic to match on every
# value (hashes, paths), so only when the variable's name mentions AWS.
AWS_SECRET_VALUE = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])")
# scheme://user:password@host: only the password is replaced, the URL stays
# readable. Greedy up to the last '@' of the run, so a password holding '@' or
# '/' is hidden whole (hiding too much is the safe way to be wrong).
# The look-behind starts a scheme only at a word's start: scanning from every letter of
# a long run of text would take quadratic time.
URL_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(\S+)(@)")

# Free text (log lines, stderr): a secret-named word assigned a value, as scripts and
# tools print them: `token=...`, `export HF_TOKEN=...`, `"api_key": "..."`,
# `password: ...`, `--password ...`. The name follows text_secret_name(); the value
# (TEXT_VALUE, read only after a secret name) runs to the next blank, quote, comma or
# semicolon and is replaced whole. Only name and separator are matched, so in
# `wandb: token=...` the "token" is not swallowed as the value of "wandb". Names start
# at a word's start only, which keeps the scan linear on long runs of text.
TEXT_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z][A-Za-z0-9_.-]*)([\"']?[ \t]*[:=][ \t]*[\"']?)"
)
TEXT_FLAG = re.compile(r"(?<![A-Za-z0-9_-])--([A-Za-z][A-Za-z0-9_-]*)([ \t]+|=)(?=[^\s\"',;-])")
TEXT_VALUE = re.compile(r"[^\s\"',;]+")
# Words too common in torch/NCCL logs to mark a secret on their own there: the c10d
# store prints `keys: /default_pg/0//cpu//0/1`, which names the rank that failed. In
# an environment variable's name they still count (KEY, SESSION are secrets there).
TEXT_GENERIC_NAMES = frozenset(["key", "keys", "tokens", "session", "sessions", "auth", "private"])
# c10d names its store keys after what they are for; the number after one says which
# barrier or rank timed out.
TEXT_STORE_KEY_PREFIXES = ("store_based_barrier",)
# HTTP-style credentials: `Authorization: Bearer <token>`, `Basic <base64>`.
TEXT_BEARER = re.compile(
    r"(?<![A-Za-z0-9])((?:[Bb]earer|BEARER|[Bb]asic|BASIC)[ \t]+)([A-Za-z0-9._~+/=-]{8,})"
)
_MARKER_START = "<redacted:"


def marker(salt, value):
    digest = hashlib.sha256((salt + value).encode("utf-8", "surrogateescape")).hexdigest()
    return "<redacted:" + digest[:10] + ">"


def is_diagnostic(name):
    return (
        name in DIAGNOSTIC_NAMES
        or name.startswith(DIAGNOSTIC_PREFIXES)
        or name.endswith(DIAGNOSTIC_SUFFIXES)
    )


def _part_is_secret(part):
    bare = re.sub(r"(?:s|[0-9]+)$", "", part)
    for word in SECRET_WORDS:
        if part.endswith(word) or bare.endswith(word):
            return True
    return part.startswith(SECRET_PREFIX_WORDS)


def secret_name(name):
    """Rule (a): the name says the value is a secret."""
    if name in NOT_SECRET_NAMES or is_diagnostic(name):
        return False
    return any(_part_is_secret(p) for p in re.split(r"[^a-z0-9]+", name.lower()) if p)


_TEXT_NAME_VERDICTS = {}


def text_secret_name(name):
    """Rule (a) for a name in free text, stricter than for a variable: its LAST part is
    a secret word (api_key, HF_TOKEN, db_password, Authorization), and it is not a lone
    generic word. `key_count:3` and `keys[0]:init/` in c10d's trace lines stay.
    Remembered per name: a log repeats its few names millions of times."""
    verdict = _TEXT_NAME_VERDICTS.get(name)
    if verdict is None:
        if len(_TEXT_NAME_VERDICTS) > 50000:
            _TEXT_NAME_VERDICTS.clear()
        verdict = _TEXT_NAME_VERDICTS[name] = _text_secret_name(name)
    return verdict


def _text_secret_name(name):
    if name.lower() in TEXT_GENERIC_NAMES or not secret_name(name.upper()):
        return False
    if name.lower().startswith(TEXT_STORE_KEY_PREFIXES):
        return False  # a c10d store key's name (`store_based_barrier_key:1`), not a secret
    parts = [p for p in re.split(r"[^a-z0-9]+", name.lower()) if p]
    return bool(parts) and _part_is_secret(parts[-1])


def secret_value(name, value):
    """Rule (b): the value looks like a credential, whatever the name."""
    if any(p.search(value) for p in SECRET_VALUE_PATTERNS):
        return True
    return "aws" in name.lower() and AWS_SECRET_VALUE.search(value) is not None


def redact_value(name, value, salt):
    """(the value as it may leave the node, whether anything was hidden).
    Empty values stay empty: "set but empty" is a useful fact and hides nothing."""
    if value and (secret_name(name) or secret_value(name, value)):
        return marker(salt, value), True
    cleaned = URL_USERINFO.sub(lambda m: m.group(1) + marker(salt, m.group(2)) + m.group(3), value)
    return cleaned, cleaned != value


def truncate(value):
    # After redaction, so a secret is never cut into an unrecognisable half.
    if len(value) <= MAX_VALUE_CHARS:
        return value
    return value[:MAX_VALUE_CHARS] + f"...<truncated {len(value) - MAX_VALUE_CHARS} chars>"


def redact_env(env, salt):
    """(env safe to emit, sorted names whose value was hidden in whole or in part)."""
    out = {}
    redacted = []
    for name in sorted(env):
        value, hidden = redact_value(name, env[name], salt)
        if hidden:
            redacted.append(name)
        out[name] = truncate(value)
    return out, redacted


def effective_env(login, overlay, node_env):
    """The job's env and where each variable came from; later layers win."""
    env = dict(login)
    sources = dict.fromkeys(env, "login")
    for label, layer in (("config", overlay), ("node", node_env)):
        for name, value in (layer or {}).items():
            if value is None:
                env.pop(name, None)
                sources.pop(name, None)
            else:
                env[name] = str(value)
                sources[name] = label
    return env, sources


def secret_values(env):
    """The values of this env that are secrets (by name or by shape): log lines are
    scrubbed of them, so a training script that echoes its token leaks nothing."""
    found = []
    for name, value in env.items():
        if value and len(value) >= 6 and (secret_name(name) or secret_value(name, value)):
            found.append(value)
    # Longest first, so a secret containing another is replaced whole.
    return sorted(set(found), key=len, reverse=True)


# A literal every match of the pattern at the same index of SECRET_VALUE_PATTERNS holds:
# a pattern whose literals are all absent cannot match, and is not run (`in` is far
# faster than a regex scan that starts with a look-behind).
_VALUE_LITERALS = (
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("AKIA", "ASIA"),
    ("xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"),
    ("hf_",),
    ("sk-",),
    ("AIza",),
    ("glpat-",),
    ("eyJ",),
    ("-----BEGIN ",),
)
_BEARER_LITERALS = ("earer", "EARER", "asic", "ASIC")
# Every word a secret-named name in free text holds (text_secret_name), lower case.
_NAME_WORDS = tuple(sorted(set(SECRET_WORDS) | set(SECRET_PREFIX_WORDS)))


def redact_text(text, known, salt):
    """A log line as it may leave the node: known secret values, credential-shaped
    strings, URL passwords, bearer tokens and values assigned to secret-named words
    replaced by markers. Without known values (the login node's pass over probe
    stderr) the pattern rules alone apply.  Several lines joined by newlines give the
    same result as each line alone: no rule matches across a line end, and a line's
    start reads as a word start to every look-behind."""
    for value in known:
        if value in text:
            text = text.replace(value, marker(salt, value))
    for i, pattern in enumerate(SECRET_VALUE_PATTERNS):
        literals = _VALUE_LITERALS[i] if i < len(_VALUE_LITERALS) else None
        if literals is None or any(lit in text for lit in literals):
            text = pattern.sub(lambda m: marker(salt, m.group(0)), text)
    if "://" in text:
        text = URL_USERINFO.sub(lambda m: m.group(1) + marker(salt, m.group(2)) + m.group(3), text)
    if any(lit in text for lit in _BEARER_LITERALS):
        text = TEXT_BEARER.sub(lambda m: m.group(1) + marker(salt, m.group(2)), text)
    return _redact_named(text, salt)


def _redact_named(text, salt):
    """The assignment and flag rules, run only on the lines that hold a secret word (a
    secret-named name holds one; every other line is left as it is)."""
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case is longer: no shortcut
        return _assigned_rules(text, salt)
    lines = set()
    for word in _NAME_WORDS:
        i = low.find(word)
        while i >= 0:
            start = text.rfind("\n", 0, i) + 1
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            lines.add((start, end))
            i = low.find(word, end)
    if not lines:
        return text
    spans = sorted(lines)
    # The candidate lines go through the rules together (a line end stops every rule),
    # then back to their places.
    redacted = _assigned_rules("\n".join(text[s:e] for s, e in spans), salt).split("\n")
    if len(redacted) != len(spans):  # cannot happen (no marker holds a line end); be safe
        redacted = [_assigned_rules(text[s:e], salt) for s, e in spans]
    out = []
    done = 0
    for i, (start, end) in enumerate(spans):
        out.append(text[done:start])
        out.append(redacted[i])
        done = end
    out.append(text[done:])
    return "".join(out)


def _assigned_rules(text, salt):
    for pattern in (TEXT_ASSIGNMENT, TEXT_FLAG):
        text = _redact_assigned(pattern, text, salt)
    return text


def _redact_assigned(pattern, text, salt):
    """Replace the value that follows each secret-named name (group 1) and separator."""
    out = []
    done = 0
    for m in pattern.finditer(text):
        if m.start() < done or not text_secret_name(m.group(1)):
            continue  # inside a value already hidden, or not a secret's name
        value = TEXT_VALUE.match(text, m.end())
        if value is None:
            continue
        hidden = value.group(0)
        if hidden.startswith(_MARKER_START) or hidden.lower() in ("bearer", "basic"):
            continue
        out.append(text[done : value.start()])
        out.append(marker(salt, hidden))
        done = value.end()
    out.append(text[done:])
    return "".join(out)
