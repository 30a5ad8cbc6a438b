"""What torchrun starts for each rank: ``python -m jupyter_starverse.backends._worker SCRIPT ARGS``.

It sends the rank's output to ``logs/rank<N>.log``, records its pid (so cancel finds
workers that torchrun put in their own sessions), runs the script as ``__main__`` in this
same process, and on an exception records which rank failed and why in ``errors/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _mode(folder: Path) -> int:
    """Files are never more open than their run folder (0600, 0640 in group mode), whatever the umask."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return 0o600
    return 0o644 if mode & 0o005 == 0o005 else 0o640 if mode & 0o050 == 0o050 else 0o600


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # ours from an earlier attempt, or a planted link: never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), _mode(path.parent))
        f.write(json.dumps(data))
    tmp.replace(path)


def _redirect(log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: a link another user put in logs/ is refused, never appended through
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW, _mode(log.parent))
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m jupyter_starverse.backends._worker SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script = argv[0]
    run_dir = Path(os.environ.get("STARVERSE_EXPERIMENT_DIR", "."))
    rank = int(os.environ.get("RANK", "0"))
    info = {
        "pid": os.getpid(),
        "rank": rank,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "node": int(os.environ.get("STARVERSE_NODE_INDEX", "0")),
        "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "started": time.time(),
    }
    _redirect(run_dir / "logs" / f"rank{rank}.log")
    if info["attempt"]:
        print(f"--- restart {info['attempt']} (node {info['node']}, pid {info['pid']}) ---", flush=True)
    (run_dir / "pids").mkdir(parents=True, exist_ok=True)
    _write(run_dir / "pids" / f"rank{rank}.json", info)
    script = _in_workdir(script)
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, str(Path(script).resolve().parent))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            _record(run_dir, info, f"SystemExit: {e.code}", "")
    except BaseException as e:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        _record(run_dir, info, f"{type(e).__name__}: {e}", tb)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _in_workdir(script: str) -> str:
    """With a job working folder (``STARVERSE_WORKDIR``, unpacked read-only): run there, and a script
    of the packed folder (``STARVERSE_WORKDIR_SOURCE``) from its packed copy, not from the notebook's."""
    workdir = os.environ.get("STARVERSE_WORKDIR")
    if not workdir or not Path(workdir).is_dir():
        return script
    os.chdir(workdir)
    source = os.environ.get("STARVERSE_WORKDIR_SOURCE")
    if source:
        with contextlib.suppress(ValueError):
            copy = Path(workdir) / Path(script).absolute().relative_to(Path(source).absolute())
            if copy.is_file():
                return str(copy)
    return script


def _record(run_dir: Path, info: dict[str, Any], message: str, tb: str) -> None:
    (run_dir / "errors").mkdir(parents=True, exist_ok=True)
    _write(
        run_dir / "errors" / f"rank{info['rank']}.json",
        {**info, "time": time.time(), "error": message, "traceback": tb[-8000:]},
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
