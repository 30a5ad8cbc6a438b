"""Two (or more) real users on one shared volume, for the multi-user tests.

The tests run each user as a real non-root uid with ``setpriv`` (root bypasses permission
checks, so every write that must fail is tried as a plain uid). They are skipped, visibly,
when the tests do not run as root. The uids need no passwd entry; ``Owner`` shows them as
``uid N``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALICE, BOB, CAROL, TEAM, ADMINS = 60001, 60002, 60003, 60100, 60200  # CAROL is outside TEAM

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="multi-user test: needs root and setpriv to run processes as two other uids",
)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder every uid can reach (pytest's tmp_path is 0700 root)."""
    base = Path(tempfile.mkdtemp(prefix="sv-share-", dir="/tmp"))
    base.chmod(0o777)
    yield base
    for dirpath, dirs, _files in os.walk(base):
        for d in dirs:
            p = Path(dirpath) / d
            if not p.is_symlink():
                p.chmod(0o755)
    shutil.rmtree(base, ignore_errors=True)


def as_user(
    uid: int, groups: list[int], code: str, env: dict[str, str], cwd: Path, *, umask: int = 0o022, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` as ``uid`` (supplementary ``groups``, ``umask``) with the project importable."""
    group_args = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    full_env.update(env)
    full_env.update(
        {"HOME": str(cwd), "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "STARVERSE_USER": f"u{uid}"}
    )
    prelude = f"import os; os.umask({umask:#o})\n"
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            *group_args,
            sys.executable,
            "-c",
            prelude + textwrap.dedent(code),
        ],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_CLI = "import sys; from jupyter_starverse.cli import main; sys.exit(main(sys.argv[1:]))"


def cli_as(
    uid: int, groups: list[int], env: dict[str, str], cwd: Path, *argv: str, umask: int = 0o022
) -> subprocess.CompletedProcess[str]:
    """``starverse ARGV`` as ``uid``."""
    code = f"import sys; sys.argv = ['starverse', *{list(argv)!r}]\n{_CLI}"
    return as_user(uid, groups, code, env, cwd, umask=umask)


def shared_env(base: Path, **extra: str) -> dict[str, str]:
    """Settings of a user of the volume under ``base``: one store, one experiments root."""
    return {
        "STARVERSE_HOME": str(base / "home"),
        "STARVERSE_STORE": str(base / "store"),
        "STARVERSE_EXPERIMENTS": str(base / "experiments"),
        "STARVERSE_LOCK_TTL": "5",
        **extra,
    }
