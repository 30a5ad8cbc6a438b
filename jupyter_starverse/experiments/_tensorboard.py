"""TensorBoard over an experiment's runs: one process per experiment, on loopback, behind a prefix.

One board shows every run of an experiment, so runs are compared side by side. TensorBoard names
a run by its folder relative to ``--logdir`` (``--logdir_spec RUN:FOLDER`` names events in
FOLDER itself ``RUN/.``), so the process reads a private folder of links, one per run, named by
the run: its runs are ``RUN`` (and ``RUN/reference``, the reference curve a reproduction writes
beside its events). The process listens on
127.0.0.1 only and serves under ``path_prefix``: the Jupyter server proxies it at that path with
its own authentication, so a browser on another host sees it through the Jupyter port. Who
proxies (the server) holds no process: this service does.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse.errors import BackendUnavailableError, MissingDependencyError

__all__ = ["TENSORBOARDS", "Board", "TensorBoards", "experiment_board", "tensorboard_installed"]


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


@dataclass(frozen=True)
class Board:
    """The runs one TensorBoard shows: ``id`` (safe in a URL path) and ``runs`` (name -> event folder)."""

    id: str
    experiment: str
    runs: tuple[tuple[str, Path], ...]

    @property
    def logdir_spec(self) -> str:
        return ",".join(f"{name}:{folder}" for name, folder in self.runs)

    def link_folder(self) -> Path:
        """A new private folder with one link per run (``RUN -> its event folder``): TensorBoard's
        ``--logdir`` there names each run by the run's name, never ``RUN/.``."""
        folder = Path(tempfile.mkdtemp(prefix=f"starverse-tb-{self.id[:40]}-"))
        for name, events in self.runs:
            (folder / name).symlink_to(events.resolve(), target_is_directory=True)
        return folder


def experiment_board(run_dir: Path) -> Board:
    """The board of the experiment ``run_dir`` belongs to (``EXP/runs/RUN``): every run of it with a
    TensorBoard folder, named by its folder (the job id); a lone run folder is a board of one run."""
    run_dir = Path(run_dir)
    runs_dir = run_dir.parent
    if runs_dir.name == "runs":
        experiment = runs_dir.parent
        runs = [r for r in sorted(runs_dir.iterdir()) if (r / "tensorboard").is_dir() or r == run_dir]
    else:
        experiment, runs = run_dir, [run_dir]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", experiment.name).strip("-")[:40] or "board"
    digest = hashlib.sha256(str(experiment.resolve()).encode()).hexdigest()[:8]
    return Board(f"{slug}-{digest}", experiment.name, tuple((r.name, r / "tensorboard") for r in runs))


class TensorBoards:
    """The TensorBoard processes of this process, one per board (stopped when it exits)."""

    def __init__(self) -> None:
        self._procs: dict[str, tuple[subprocess.Popen[bytes], int, str]] = {}
        self._links: dict[str, Path] = {}  # board -> its folder of run links (removed when it stops)
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def port_of(self, board_id: str) -> int | None:
        """The loopback port of the live TensorBoard of ``board_id``, if one runs."""
        with self._lock:
            found = self._procs.get(board_id)
            return found[1] if found is not None and found[0].poll() is None else None

    def ensure(self, board: Board, *, path_prefix: str, log: Path, timeout: float = 60.0) -> int:
        """The port of ``board``'s TensorBoard: the running one when it shows the same runs, else a
        new one (serving under ``path_prefix``) once it answers. Its output goes to ``log``."""
        if not tensorboard_installed():
            raise MissingDependencyError("tensorboard", extra="train", purpose="showing runs in TensorBoard")
        with self._lock:
            found = self._procs.get(board.id)
            if found is not None and found[0].poll() is None and found[2] == board.logdir_spec:
                return found[1]
        if found is not None:
            self.stop(board.id)  # a new run joined the experiment: a board that shows it too
        with self._lock:
            for _, folder in board.runs:
                folder.mkdir(parents=True, exist_ok=True)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            links = self._links[board.id] = board.link_folder()
            # --load_fast=false: the Python loader, which follows the links (the Rust one is an
            # optional package whose walk we do not control)
            argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(links), "--load_fast", "false",
                    "--port", str(port), "--host", "127.0.0.1", "--path_prefix", path_prefix.rstrip("/"),
                    "--reload_interval", "5"]  # fmt: skip
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            self._procs[board.id] = (proc, port, board.logdir_spec)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-300:].strip()
                raise BackendUnavailableError(
                    f"tensorboard exited with code {proc.returncode} before it served {board.experiment}",
                    hint=f"its output is in {log}: {tail}",
                )
            with socket.socket() as probe:
                probe.settimeout(0.5)
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return port
            time.sleep(0.2)
        self.stop(board.id)
        raise BackendUnavailableError(
            f"tensorboard did not answer on port {port} within {timeout:g} s", hint=f"see {log}"
        )

    def stop(self, board_id: str) -> bool:
        """Stop the TensorBoard of ``board_id``; False when none ran."""
        with self._lock:
            found = self._procs.pop(board_id, None)
            links = self._links.pop(board_id, None)
        if links is not None:
            shutil.rmtree(links, ignore_errors=True)  # the links only, never what they point at
        if found is None:
            return False
        proc = found[0]
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        return True

    def stop_all(self) -> None:
        for key in list(self._procs):
            self.stop(key)


#: One per process (the Jupyter server's).
TENSORBOARDS = TensorBoards()
