"""TensorBoard over an experiment's runs: one process per experiment, on loopback, behind a prefix.

One board shows every run of an experiment, so runs are compared side by side. TensorBoard names
a run by its folder relative to ``--logdir`` (``--logdir_spec RUN:FOLDER`` names events in
FOLDER itself ``RUN/.``), so the process reads a folder of links, one per run, named by the run:
``EXP/.tensorboard/RUN -> ../runs/RUN/tensorboard`` (relative, so it reads the same on every host
that mounts the experiments). Its runs are ``RUN`` (and ``RUN/reference``, the reference curve a
reproduction writes beside its events). ``Board.command`` is that same ``tensorboard --logdir``,
for a terminal. The process listens on
127.0.0.1 only and serves under ``path_prefix``: the Jupyter server proxies it at that path with
its own authentication, so a browser on another host sees it through the Jupyter port. Who
proxies (the server) holds no process: this service does.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse._children import Children, free_port, port_open
from jupyter_starverse.errors import BackendUnavailableError, MissingDependencyError

__all__ = ["TENSORBOARDS", "Board", "TensorBoards", "experiment_board", "tensorboard_installed"]


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


#: The folder of run links inside an experiment (``--logdir`` of its board).
LINKS = ".tensorboard"


@dataclass(frozen=True)
class Board:
    """The runs one TensorBoard shows: ``id`` (safe in a URL path) and ``runs`` (name -> event folder)."""

    id: str
    experiment: str
    runs: tuple[tuple[str, Path], ...]
    root: Path | None = None  # the experiment folder (its ``.tensorboard`` holds the run links)

    @property
    def logdir_spec(self) -> str:
        return ",".join(f"{name}:{folder}" for name, folder in self.runs)

    @property
    def links(self) -> Path | None:
        """``EXP/.tensorboard``: one link per run, TensorBoard's ``--logdir`` (None: no experiment folder)."""
        return self.root / LINKS if self.root is not None else None

    @property
    def command(self) -> tuple[str, ...]:
        """The command that shows this board in a terminal, as the server runs it (less its port and prefix)."""
        where = self.links if self.links is not None else Path(LINKS)
        return ("tensorboard", "--logdir", str(where), "--load_fast", "false")

    def link_folder(self) -> tuple[Path, bool]:
        """The folder of one link per run (``RUN -> its event folder``), made or brought up to date:
        TensorBoard's ``--logdir`` there names each run by the run's name, never ``RUN/.``.

        ``EXP/.tensorboard`` with relative links; a link of a run that is gone is removed (links only,
        never what they point at). Where the experiment cannot be written (another user's), a new
        private folder instead: ``(folder, True)``, removed when the board stops."""
        try:
            return self.write_links(), False
        except OSError:
            pass
        folder = Path(tempfile.mkdtemp(prefix=f"starverse-tb-{self.id[:40]}-"))
        for name, events in self.runs:
            (folder / name).symlink_to(events.resolve(), target_is_directory=True)
        return folder, True

    def write_links(self) -> Path:
        """``EXP/.tensorboard`` brought up to date (what :attr:`command` reads); OSError where it cannot be."""
        folder = self.links
        if folder is None:
            raise OSError("a board without an experiment folder has no links folder")
        folder.mkdir(exist_ok=True)
        names = {name for name, _ in self.runs}
        for entry in folder.iterdir():
            if entry.is_symlink() and entry.name not in names:
                entry.unlink()
        for name, events in self.runs:
            link = folder / name
            target = os.path.relpath(events, folder)
            if link.is_symlink() and str(link.readlink()) == target:
                continue
            if link.is_symlink():
                link.unlink()
            elif link.exists():
                raise OSError(f"{link} is not a link")
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target, target_is_directory=True)
            tmp.replace(link)  # atomic: a board reading the folder never misses the run
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
    runs_of = tuple((r.name, r / "tensorboard") for r in runs)
    return Board(f"{slug}-{digest}", experiment.name, runs_of, experiment)


class TensorBoards:
    """The TensorBoard processes of this process, one per board: children of :class:`Children`
    (stopped when this process exits; with ``idle_seconds``, when nobody looked for that long)."""

    def __init__(self, *, idle_seconds: float | None = None) -> None:
        self._children = Children("tensorboard")
        self._idle_seconds = idle_seconds
        self._links: dict[str, Path] = {}  # board -> its private folder of run links (removed when it stops)
        self._lock = threading.Lock()
        atexit.register(self._drop_links)

    def port_of(self, board_id: str) -> int | None:
        """The loopback port of the live TensorBoard of ``board_id``, if one runs (a use of it)."""
        child = self._children.find(board_id)
        return child.port if child is not None else None

    def ensure(self, board: Board, *, path_prefix: str, log: Path, timeout: float = 60.0) -> int:
        """The port of ``board``'s TensorBoard: the running one when it shows the same runs, else a
        new one (serving under ``path_prefix``) once it answers. Its output goes to ``log``."""
        if not tensorboard_installed():
            raise MissingDependencyError("tensorboard", extra="train", purpose="showing runs in TensorBoard")
        with self._lock:
            found = self._children.find(board.id)
            if found is not None and found.meta == board.logdir_spec and found.port is not None:
                return found.port
        if found is not None or board.id in self._links:
            self.stop(board.id)  # a new run joined the experiment: a board that shows it too
        with self._lock:
            for _, folder in board.runs:
                folder.mkdir(parents=True, exist_ok=True)
            port = free_port()
            links, private = board.link_folder()
            if private:
                self._links[board.id] = links
            # --load_fast=false: the Python loader, which follows the links (the Rust one is an
            # optional package whose walk we do not control)
            argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(links), "--load_fast", "false",
                    "--port", str(port), "--host", "127.0.0.1", "--path_prefix", path_prefix.rstrip("/"),
                    "--reload_interval", "5"]  # fmt: skip
            with log.open("ab") as out:
                child = self._children.start(board.id, argv, stdout=out, stderr=subprocess.STDOUT, port=port,
                                             meta=board.logdir_spec, idle_seconds=self._idle_seconds)  # fmt: skip
        answered = child.wait_ready(lambda: port_open(port), timeout)
        if answered:
            return port
        if answered is False:
            tail = log.read_text(errors="replace")[-300:].strip()
            raise BackendUnavailableError(
                f"tensorboard exited with code {child.returncode} before it served {board.experiment}",
                hint=f"its output is in {log}: {tail}",
            )
        self.stop(board.id)
        raise BackendUnavailableError(
            f"tensorboard did not answer on port {port} within {timeout:g} s", hint=f"see {log}"
        )

    def stop(self, board_id: str) -> bool:
        """Stop the TensorBoard of ``board_id``; False when none ran."""
        with self._lock:
            links = self._links.pop(board_id, None)
        if links is not None:
            shutil.rmtree(links, ignore_errors=True)  # the links only, never what they point at
        return self._children.stop(board_id)

    def stop_all(self) -> None:
        self._children.stop_all()
        self._drop_links()

    def _drop_links(self) -> None:
        with self._lock:
            folders, self._links = list(self._links.values()), {}
        for links in folders:
            shutil.rmtree(links, ignore_errors=True)


#: One per process (the Jupyter server's).
TENSORBOARDS = TensorBoards()
