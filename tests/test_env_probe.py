"""The env probe, run for real through LocalTransport: layering, sources, and redaction.

Canary secrets are planted in ddptui's own environment (the local probe inherits
it, as a node's probe inherits its SSH login env), in the config's env and in the
node's env; none of them may appear anywhere in what comes back.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddptui.diagnosis.envaudit import EnvFacts, audit_env
from ddptui.probeset import probe_source
from ddptui.transport.base import NodeTarget, ProbeOutput
from ddptui.transport.local import LocalTransport

PROBES = Path(__file__).resolve().parent.parent / "probes"

HF = "hf_" + "Zq8RkP2mXw7LbN4vTc9YhJd3Gf6SaE1uK0"
PASSWORD = "Canary-Pa55word-Login"  # noqa: S105 - a planted canary, not a credential
DB_PASSWORD = "CanaryDbPw_7781"  # noqa: S105 - a planted canary
WANDB = "0f3c9a1be27d4c6f8a5b1e2d3c4f5a6b7c8d9e0f"
AWS_ID = "AKIA" + "QX7M2K9PLR4TWZ3N"
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAACanaryPemBody\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
PEM_BODY = "b3BlbnNzaC1rZXktdjEAAAAACanaryPemBody"
GH = "ghp_" + "CanaryGithubToken0123456789abcdefghij"
OPENAI = "sk-proj-" + "CanaryOpenAIKey0123456789abcdefXYZ"
SLACK = "xoxb-" + "123456789012-CanarySlackToken"
NODE_SECRET = "Canary-Node-Only-Secret-42"  # noqa: S105 - a planted canary
NODE_URL_PW = "CanaryUrlPw99"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.CanaryJwtSignature0123456789abcdef"
CANARIES = [
    HF,
    PASSWORD,
    DB_PASSWORD,
    WANDB,
    AWS_ID,
    PEM_BODY,
    GH,
    OPENAI,
    SLACK,
    NODE_SECRET,
    NODE_URL_PW,
    JWT,
]

LOGIN = {
    "HF_TOKEN": HF,
    "MY_PASSWORD": PASSWORD,
    "DATABASE_URL": f"postgres://bob:{DB_PASSWORD}@db.internal:5432/app",
    "WANDB_API_KEY": WANDB,
    "BUILD_NOTE": f"deployed by {AWS_ID} yesterday",  # innocent name, secret value
    "SETUP_BLOB": PEM,  # innocent name, PEM private key
    "CI_VALUE": GH,
    "TRACE_HEADER": f"Bearer {JWT}",
    "NCCL_SOCKET_IFNAME": "login-if",
    "MASTER_ADDR": "10.9.9.9",
    "DDPTUI_TEST_LOGIN_ONLY": "plain-visible-value",
}
OVERLAY = {
    "NCCL_SOCKET_IFNAME": "=eth0",
    "MASTER_ADDR": "10.0.0.8",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "OPENAI_API_KEY": OPENAI,
    "NOTES": f"slack {SLACK}",
    "HF_TOKEN_COPY": HF,  # same secret, second name
}
NODE_ENV = {
    "MASTER_ADDR": "10.0.0.1",
    "SERVICE_SECRET": NODE_SECRET,
    "HUB_URL": f"https://alice:{NODE_URL_PW}@hub.internal/x",
}


def run_env_probe(params: dict[str, Any], python: str = sys.executable) -> ProbeOutput:
    transport = LocalTransport(NodeTarget("n0", "local", 0, python))
    return asyncio.run(transport.run_probe("env", params, timeout=30))


def params(salt: str = "a1b2c3") -> dict[str, Any]:
    return {"overlay": OVERLAY, "node_env": NODE_ENV, "salt": salt, "master_addr": "127.0.0.1"}


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in LOGIN.items():
        monkeypatch.setenv(key, value)


def records(out: ProbeOutput) -> tuple[dict[str, Any], dict[str, Any]]:
    assert out.ok, (out.exit_status, out.stderr)
    assert [r["kind"] for r in out.records] == ["env", "net"]
    env_rec, net_rec = out.records
    return env_rec, net_rec


def assert_no_canary(out: ProbeOutput) -> None:
    raw = json.dumps(list(out.records)) + out.stderr + "\n".join(out.garbage)
    leaked = [c for c in CANARIES if c in raw]
    assert not leaked, leaked


def test_no_secret_leaves_the_node(planted: None) -> None:
    out = run_env_probe(params())
    assert_no_canary(out)
    env_rec, _ = records(out)
    env = env_rec["env"]
    assert set(env_rec["redacted"]) >= {
        "HF_TOKEN",
        "MY_PASSWORD",
        "DATABASE_URL",
        "WANDB_API_KEY",
        "BUILD_NOTE",
        "SETUP_BLOB",
        "CI_VALUE",
        "TRACE_HEADER",
        "OPENAI_API_KEY",
        "NOTES",
        "HF_TOKEN_COPY",
        "SERVICE_SECRET",
        "HUB_URL",
    }
    assert env["HF_TOKEN"].startswith("<redacted:")
    assert len(env["HF_TOKEN"]) == len("<redacted:>") + 10
    # URLs keep everything but the password.
    assert env["DATABASE_URL"].startswith("postgres://bob:<redacted:")
    assert env["DATABASE_URL"].endswith(">@db.internal:5432/app")
    assert env["HUB_URL"].startswith("https://alice:<redacted:")


def test_diagnostic_variables_stay_visible(planted: None) -> None:
    env_rec, net_rec = records(run_env_probe(params()))
    env = env_rec["env"]
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert env["MASTER_ADDR"] == "10.0.0.1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["PATH"] == os.environ["PATH"]
    assert env["DDPTUI_TEST_LOGIN_ONLY"] == "plain-visible-value"
    for name in ("NCCL_SOCKET_IFNAME", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "PATH"):
        assert name not in env_rec["redacted"]
    assert net_rec["cuda_visible_devices_raw_present"] is True
    assert isinstance(net_rec["interfaces"], list) and net_rec["interfaces"]
    assert any(i["name"] == "lo" for i in net_rec["interfaces"])
    assert net_rec["route"] is None or net_rec["route"]["dev"] == "lo"
    assert net_rec["hostname"]


def test_sources_node_over_config_over_login(planted: None) -> None:
    env_rec, _ = records(run_env_probe(params()))
    sources = env_rec["sources"]
    assert sources["MASTER_ADDR"] == "node"  # login, config and node all set it
    assert sources["NCCL_SOCKET_IFNAME"] == "config"  # login and config
    assert sources["DDPTUI_TEST_LOGIN_ONLY"] == "login"
    assert sources["SERVICE_SECRET"] == "node"  # noqa: S105 - a source label, not a password
    assert set(sources) == set(env_rec["env"])


def test_same_secret_same_marker_per_salt(planted: None) -> None:
    env1, _ = records(run_env_probe(params("salt-one")))
    env1b, _ = records(run_env_probe(params("salt-one")))
    env2, _ = records(run_env_probe(params("salt-two")))
    a = env1["env"]
    assert a["HF_TOKEN"] == a["HF_TOKEN_COPY"]  # one value, two names
    assert a["HF_TOKEN"] != a["MY_PASSWORD"]
    assert env1b["env"]["HF_TOKEN"] == a["HF_TOKEN"]  # stable across runs/nodes
    assert env2["env"]["HF_TOKEN"] != a["HF_TOKEN"]  # the salt changes it
    assert env2["env"]["HF_TOKEN"] == env2["env"]["HF_TOKEN_COPY"]


def test_missing_salt_still_redacts(planted: None) -> None:
    out = run_env_probe({"overlay": {}, "node_env": {}, "master_addr": "127.0.0.1"})
    assert_no_canary(out)
    env_rec, _ = records(out)
    assert env_rec["env"]["HF_TOKEN"].startswith("<redacted:")


def test_long_values_are_truncated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTUI_TEST_LONG", "x" * 10000)
    env_rec, _ = records(run_env_probe(params()))
    value = env_rec["env"]["DDPTUI_TEST_LONG"]
    assert value.startswith("x" * 4096) and value.endswith("<truncated 5904 chars>")


def test_probe_output_feeds_the_audit(planted: None) -> None:
    env_rec, net_rec = records(run_env_probe(params()))
    facts = EnvFacts.from_records("n0", 0, env_rec, net_rec, gpu_count=None)
    findings = audit_env([facts], master_addr="10.0.0.1", master_port=29500, nproc_per_node=1)
    # "=eth0" may or may not exist here; whatever is found is about n0 and carries no secret.
    assert all(f.nodes == ("n0",) for f in findings)
    raw = json.dumps([f.to_dict() for f in findings])
    assert not [c for c in CANARIES if c in raw]


def _python38() -> str | None:
    """A Python 3.8 interpreter, to prove the probe runs on the oldest supported node python."""
    pyenv = Path("~/.pyenv/versions").expanduser()
    candidates = [shutil.which("python3.8"), *map(str, pyenv.glob("3.8*/bin/python3.8"))]
    check = "import sys; assert sys.version_info[:2] == (3, 8)"
    for cand in candidates:
        # A pyenv shim is on PATH even when it cannot run 3.8, so try each one.
        if (
            cand
            and subprocess.run([cand, "-c", check], capture_output=True, check=False).returncode
            == 0
        ):
            return cand
    return None


def test_probe_runs_on_python38(planted: None) -> None:
    python = _python38()
    if python is None:
        pytest.skip("no Python 3.8 interpreter on this machine")
    out = run_env_probe(params(), python=python)
    assert_no_canary(out)
    env_rec, _ = records(out)
    assert env_rec["env"]["NCCL_SOCKET_IFNAME"] == "=eth0"


# --------------------------------------------------------------------------- redaction functions


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    """The probe's functions, loaded as the transport would (helpers first), without main()."""
    source = probe_source("env")
    namespace: dict[str, Any] = {"__name__": "env_probe_under_test", "PARAMS": {}}
    exec(compile(source, "<probe env>", "exec"), namespace)  # noqa: S102 - our own probe source
    return namespace


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("GITHUB_TOKENS", True),
        ("AUTHTOKEN", True),
        ("API_KEY", True),
        ("APIKEY", True),
        ("DB_PASSWORD", True),
        ("DB_PASSWD", True),
        ("MYSQL_PWD", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("SSH_AUTH_SOCK", True),
        ("SESSION_COOKIE", True),
        ("XDG_SESSION_ID", True),
        ("PRIVATE_KEY_PATH", True),
        ("MASTER_KEY", True),
        ("PASSWORD2", True),
        ("PWD", False),
        ("OLDPWD", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYBOARD", False),
        ("GIT_AUTHOR_NAME", False),
        ("HOME", False),
        ("NCCL_IB_PKEY", False),
        ("TORCH_NCCL_KEY_THING", False),
        ("GLOO_SOCKET_IFNAME", False),
        ("MASTER_ADDR", False),
        ("MY_SOCKET_IFNAME", False),
        ("CUDA_VISIBLE_DEVICES", False),
    ],
)
def test_secret_names(probe: dict[str, Any], name: str, secret: bool) -> None:
    assert probe["secret_name"](name) is secret


@pytest.mark.parametrize(
    "value",
    [
        GH,
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        AWS_ID,
        "ASIA" + "Y3K2M9PLR4TWZ3NQ",
        SLACK,
        HF,
        OPENAI,
        "sk-ant-api03-" + "abcdefghijklmnopqrstuvwxyz",
        "AIza" + "Sy" + "A" * 33,
        "glpat-" + "abcdefghij0123456789",
        JWT,
        PEM,
    ],
)
def test_secret_values_hidden_whatever_the_name(probe: dict[str, Any], value: str) -> None:
    env, redacted = probe["redact_env"]({"NCCL_DEBUG_FILE": f"x {value} y"}, "s")
    assert redacted == ["NCCL_DEBUG_FILE"] and value not in json.dumps(env)


def test_aws_secret_needs_an_aws_name(probe: dict[str, Any]) -> None:
    forty = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert probe["redact_env"]({"AWS_SAK": forty}, "s")[1] == ["AWS_SAK"]
    assert probe["redact_env"]({"BUILD_SHA": "0" * 40}, "s")[1] == []


def test_innocent_values_stay(probe: dict[str, Any]) -> None:
    env = {
        "PATH": "/usr/local/bin:/usr/bin",
        "NCCL_SOCKET_IFNAME": "^docker,lo",
        "JOB": "task-abcdefghijklmnopqrstuvwxyz",
        "URL": "https://example.com:8443/path",
        "GIT": "ssh://git@github.com/org/repo.git",
        "EMPTY_TOKEN": "",
        "PWD": "/home/alice",
    }
    assert probe["redact_env"](env, "s") == (env, [])


def test_url_password_with_at_sign_is_hidden_whole(probe: dict[str, Any]) -> None:
    env, redacted = probe["redact_env"]({"DSN": "mysql://u:p@ss/w0rd@db:3306/x"}, "s")
    assert redacted == ["DSN"] and "ss/w0rd" not in env["DSN"] and env["DSN"].endswith("@db:3306/x")


def test_effective_env_layers(probe: dict[str, Any]) -> None:
    env, sources = probe["effective_env"](
        {"A": "1", "B": "1", "C": "1"}, {"B": "2", "C": "2"}, {"C": 3, "A": None}
    )
    assert env == {"B": "2", "C": "3"} and sources == {"B": "config", "C": "node"}


# --------------------------------------------------------------------------- log-line redaction

LOG_SECRET = "Canary0LogLine0Secret0x9f"  # noqa: S105 - a planted canary


@pytest.mark.parametrize(
    "line",
    [
        f"wandb: logging in with token={LOG_SECRET}",
        f"wandb: token={LOG_SECRET}",  # a plain "name: " before must not swallow the name
        f"export HF_TOKEN={LOG_SECRET}",
        f"export AWS_SECRET_ACCESS_KEY='{LOG_SECRET}'",
        f"MYSQL_PWD={LOG_SECRET} mysql -u root",
        f'config: {{"api_key": "{LOG_SECRET}", "project": "x"}}',
        f"login failed, password: {LOG_SECRET}",
        f"Authorization: Bearer {LOG_SECRET}",
        f"curl -H 'Authorization: Basic {LOG_SECRET}'",
        f"python train.py --api-key {LOG_SECRET} --epochs 3",
        f"python train.py --password={LOG_SECRET}",
        f"apiKey={LOG_SECRET}",
    ],
)
def test_log_line_secrets_are_hidden(probe: dict[str, Any], line: str) -> None:
    out = probe["redact_text"](line, [], "s")
    assert LOG_SECRET not in out and LOG_SECRET[:12] not in out
    assert "<redacted:" in out


def test_log_line_redaction_keeps_the_line_readable(probe: dict[str, Any]) -> None:
    redact = probe["redact_text"]
    assert redact(f"wandb: token={LOG_SECRET} ok", [], "s") == (
        f"wandb: token={probe['marker']('s', LOG_SECRET)} ok"
    )
    out = redact(f"python train.py --api-key {LOG_SECRET} --epochs 3", [], "s")
    assert out.startswith("python train.py --api-key <redacted:") and out.endswith(" --epochs 3")
    assert redact(f"token={LOG_SECRET}", [], "s") == redact(f"token={LOG_SECRET}", [], "s")


@pytest.mark.parametrize(
    "line",
    [
        # c10d's store traces and errors name keys that say which rank failed.
        "[c10d - trace] wait key_count:1 keys[0]:init/ address:[::]:14002",
        "torch.distributed.DistStoreError: wait timeout after 15000ms, keys: /default_pg/0//cpu//0/1",
        "NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
        "NCCL_IB_PKEY=3 TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
        "TOKENIZERS_PARALLELISM=false",
        "PWD=/home/alice",
        "step 10 tokens: 2048 loss: 1.23",
        "KeyError: 'weight'",
        "torchrun --master-addr 10.0.0.1 --master-port 29500",
        "git clone ssh://git@github.com/org/repo.git",
    ],
)
def test_log_line_redaction_leaves_diagnostics(probe: dict[str, Any], line: str) -> None:
    assert probe["redact_text"](line, [], "s") == line


def test_redaction_never_changes_a_classified_line(probe: dict[str, Any]) -> None:
    """Every captured testbed log line and every signature sample survives the pattern
    rules untouched, so node-side redaction cannot blind the knowledge base."""
    from ddptui.diagnosis.signatures import load_signatures

    lines = [s.sample for s in load_signatures()]
    for log in (Path(__file__).parent / "fixtures" / "logs").glob("*.log"):
        lines += log.read_text(errors="replace").splitlines()
    changed = [ln for ln in lines if probe["redact_text"](ln, [], "s") != ln]
    assert len(lines) > 500 and not changed, changed[:5]


def test_login_side_scrub_uses_the_node_rules() -> None:
    from ddptui.transport.redact import scrub

    text = f"activate: export HF_TOKEN={LOG_SECRET}\nhttps://u:{LOG_SECRET}@h/x\nfine line"
    out = scrub(text)
    assert LOG_SECRET not in out
    assert out.endswith("\nfine line") and out.count("<redacted:") == 2


@pytest.mark.parametrize(
    "text", ["a." * 32000, "ab-" * 21000, "a" * 64000, "a:" * 32000, "http://" + "a:" * 30000]
)
def test_redaction_stays_linear_on_long_runs(text: str) -> None:
    """A probe's stderr is scrubbed whole (up to 64 KiB): a pattern that rescans from
    every character would take minutes on a long unbroken run."""
    from ddptui.transport.redact import scrub

    started = time.perf_counter()
    scrub(text)
    assert time.perf_counter() - started < 2.0
