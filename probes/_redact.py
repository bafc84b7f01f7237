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
URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(\S+)(@)")


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


def redact_text(text, known, salt):
    """A log line as it may leave the node: known secret values, credential-shaped
    strings and URL passwords replaced by markers."""
    for value in known:
        if value in text:
            text = text.replace(value, marker(salt, value))
    for pattern in SECRET_VALUE_PATTERNS:
        text = pattern.sub(lambda m: marker(salt, m.group(0)), text)
    return URL_USERINFO.sub(lambda m: m.group(1) + marker(salt, m.group(2)) + m.group(3), text)
