"""``/jupyter-starverse/jobs/ID/tensorboard`` and ``/jupyter-starverse/tensorboard/BOARD/...``: a job's TensorBoard.

| verb   | path                        | answer                                             |
|--------|-----------------------------|----------------------------------------------------|
| GET    | jobs/ID/tensorboard         | ``TensorBoardInfo`` (``url`` when one runs)        |
| POST   | jobs/ID/tensorboard         | start (or find) the board of its experiment's runs |
| DELETE | jobs/ID/tensorboard         | stop it                                            |
| any    | tensorboard/BOARD/...       | that TensorBoard, proxied from loopback (Jupyter's auth) |

The boards are processes of the experiments service (``TENSORBOARDS``: start, find, stop, idle
exit); these handlers only name the job's board and pass its pages through.
"""

from __future__ import annotations

import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado import web

from jupyter_starverse.errors import (
    BackendUnavailableError,
    NotFoundError,
)
from jupyter_starverse.experiments import (
    TENSORBOARDS,
    RunPaths,
    experiment_board,
    tensorboard_installed,
)
from jupyter_starverse.jobmodel import Job

from ._base import StarverseHandler
from ._jobs import _ID, _JobsBase

__all__ = ["TensorBoardInfo", "board_prefix", "routes", "tensorboard_info"]


@dataclass(frozen=True)
class TensorBoardInfo:
    """Where a job's TensorBoard events are, how to look at them, and the board serving them: one
    TensorBoard over every run of the job's experiment, reached through this server (``url``)."""

    job_id: str
    logdir: str
    has_events: bool
    installed: bool
    command: tuple[str, ...]
    url: str | None = None  # under this server's base_url (None: none runs)
    port: int | None = None  # its loopback port (the server proxies it)
    proxied: bool = True
    board: str = ""
    runs: tuple[str, ...] = ()  # the run names the board shows (the experiment's runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "logdir": self.logdir,
            "has_events": self.has_events,
            "installed": self.installed,
            "command": list(self.command),
            "url": self.url,
            "port": self.port,
            "proxied": self.proxied,
            "running": self.url is not None,
            "board": self.board,
            "runs": list(self.runs),
        }


def board_prefix(base_url: str, board_id: str) -> str:
    """The path a board is served at through this server (TensorBoard's ``--path_prefix``)."""
    return f"{base_url.rstrip('/')}/jupyter-starverse/tensorboard/{board_id}"


def tensorboard_info(job: Job, *, port: int | None = None, base_url: str = "/") -> TensorBoardInfo:
    """TensorBoard log folder of ``job`` (``TENSORBOARD_LOGDIR`` of its ranks), its state, and the
    URL of its experiment's board when one runs."""
    logdir = RunPaths(Path(job.experiment_dir)).tensorboard
    board = experiment_board(Path(job.experiment_dir))
    has_events = logdir.is_dir() and any(p.name.startswith("events.out.tfevents") for p in logdir.rglob("*"))
    installed = tensorboard_installed() or shutil.which("tensorboard") is not None
    try:  # the copyable command reads EXP/.tensorboard, as the server's board does: made here too
        board.write_links()
    except OSError:
        pass  # another user's experiment: its owner's board keeps the links
    command = board.command  # what the server runs for the board (less its port and prefix)
    runs = tuple(name for name, _ in board.runs)
    if port is None:
        return TensorBoardInfo(job.id, str(logdir), has_events, installed, command, board=board.id, runs=runs)
    url = board_prefix(base_url, board.id) + "/"
    return TensorBoardInfo(job.id, str(logdir), has_events, installed, command, url, port, True, board.id, runs)


class TensorBoardHandler(_JobsBase):
    """``GET``: where the events are (and the URL when the board runs); ``POST``: start or find the
    board of the job's experiment and answer its URL; ``DELETE``: stop it. The processes are the
    experiments service's (``TENSORBOARDS``); this handler only names the job's board."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        backend = await self.backend()

        def info() -> TensorBoardInfo:
            job = backend.get(job_id)
            port = TENSORBOARDS.port_of(experiment_board(Path(job.experiment_dir)).id)
            return tensorboard_info(job, port=port, base_url=self.base_url)

        self.finish_json(await self.run(info))

    @web.authenticated
    async def post(self, job_id: str) -> None:
        backend = await self.backend()

        def start() -> TensorBoardInfo:
            job = backend.get(job_id)
            board = experiment_board(Path(job.experiment_dir))
            log = Path(job.experiment_dir) / "tensorboard.log"
            # TensorBoard matches the decoded path: a base_url such as /a%40b/ is /a@b/ to it
            prefix = urllib.parse.unquote(board_prefix(self.base_url, board.id))
            port = TENSORBOARDS.ensure(board, path_prefix=prefix, log=log)
            return tensorboard_info(job, port=port, base_url=self.base_url)

        self.finish_json(await self.run(start))

    @web.authenticated
    async def delete(self, job_id: str) -> None:
        backend = await self.backend()

        def stop() -> TensorBoardInfo:
            job = backend.get(job_id)
            TENSORBOARDS.stop(experiment_board(Path(job.experiment_dir)).id)
            return tensorboard_info(job, base_url=self.base_url)

        self.finish_json(await self.run(stop))


#: Not passed on either way: hop-by-hop headers, and the Jupyter credentials (TensorBoard needs none).
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "host", "content-length", "cookie", "authorization", "x-xsrftoken"}  # fmt: skip


class TensorBoardProxyHandler(StarverseHandler):
    """A board this server started, proxied from loopback under the server's base_url with the
    server's authentication: a browser on another host reaches it through the Jupyter port.
    Only boards of ``TENSORBOARDS`` are reached (an unknown board is a 404, never another port)."""

    @property
    def content_security_policy(self) -> str:
        # TensorBoard's page (scripts, styles, its data API), framed by JupyterLab only; not the
        # API handlers' "default-src 'none'". TensorBoard's own policy header is passed on too.
        return "frame-ancestors 'self'"

    def check_xsrf_cookie(self) -> None:
        # TensorBoard's own page POSTs its data queries without Jupyter's XSRF header; they only
        # read, and the request still needs the user's Jupyter token or cookie (authenticated).
        return None

    async def _forward(self, board: str, path: str) -> None:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        port = TENSORBOARDS.port_of(board)
        if port is None:
            raise NotFoundError(f"no TensorBoard {board!r} runs here", hint="open it from the job's TensorBoard button")
        headers = {k: v for k, v in self.request.headers.get_all() if k.lower() not in _HOP}
        body = self.request.body if self.request.method in ("POST", "PUT", "PATCH") else None
        try:
            reply = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{self.request.uri}", method=self.request.method, headers=headers,
                body=body, follow_redirects=False, decompress_response=False, request_timeout=120,
                allow_nonstandard_methods=True, raise_error=False,
            )  # fmt: skip
        except (OSError, HTTPClientError) as e:
            raise BackendUnavailableError(f"TensorBoard {board!r} did not answer: {e}",
                                          hint="start it again from the job's TensorBoard button") from e  # fmt: skip
        if reply.code == 599:
            raise BackendUnavailableError(f"TensorBoard {board!r} did not answer: {reply.error}",
                                          hint="start it again from the job's TensorBoard button")  # fmt: skip
        self.set_status(reply.code, reply.reason)
        for name, value in reply.headers.get_all():
            if name.lower() not in _HOP | {"set-cookie", "content-type"}:
                self.add_header(name, value)
        content_type = reply.headers.get("Content-Type", "application/octet-stream")
        self.finish(reply.body or b"", set_content_type=content_type)

    @web.authenticated
    async def get(self, board: str, path: str) -> None:
        await self._forward(board, path)

    @web.authenticated
    async def post(self, board: str, path: str) -> None:
        await self._forward(board, path)


routes: list[tuple[str, type[StarverseHandler]]] = [
    (rf"jobs/{_ID}/tensorboard", TensorBoardHandler),
    (r"tensorboard/(?P<board>[A-Za-z0-9_-]{1,64})/(?P<path>.*)", TensorBoardProxyHandler),
]
