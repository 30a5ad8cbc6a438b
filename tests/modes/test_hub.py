"""JupyterHub switch against a tiny Hub-like REST server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, PermissionDeniedError
from jupyter_starverse.modes import Mode, ModeService, detect_workspace
from jupyter_starverse.modes._hub import HubSwitcher, parse_profiles

TOKEN = "secret-token"


@dataclass
class FakeHub:
    """State of the Hub: the user's one server, the profiles KubeSpawner offers, requests seen."""

    profiles: set[str] = field(default_factory=lambda: {"cpu-small", "gpu-a100", "gpu-h100"})
    server: dict[str, Any] | None = field(
        default_factory=lambda: {"stopped": False, "user_options": {"profile": "gpu-a100"}}
    )
    stopping_polls: int = 0
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    url: str = ""


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            hub.requests.append((self.command, self.path, body))
            if self.headers.get("Authorization") != f"token {TOKEN}":
                return self._send(403, {"status": 403, "message": "Action is not authorized with current scopes"})
            route = (self.command, self.path)
            if route == ("GET", "/hub/api/user"):
                return self._send(200, {"name": "ada", "kind": "user"})
            if route == ("GET", "/hub/api/users/ada"):
                if hub.server is not None and hub.server.get("stopping"):
                    hub.stopping_polls -= 1
                    if hub.stopping_polls <= 0:
                        hub.server = None
                servers = {"": hub.server} if hub.server is not None else {}
                return self._send(200, {"name": "ada", "servers": servers})
            if route == ("DELETE", "/hub/api/users/ada/server"):
                if hub.server is None:
                    return self._send(400, {"message": "ada's server is not running"})
                hub.server = {**hub.server, "stopping": True}
                hub.stopping_polls = 2
                return self._send(202)
            if route == ("POST", "/hub/api/users/ada/server"):
                if hub.server is not None:
                    return self._send(400, {"message": "ada is already running"})
                profile = (body or {}).get("profile")
                if profile not in hub.profiles:
                    return self._send(400, {"message": f"No such profile: {profile}"})
                hub.server = {"stopped": False, "user_options": {"profile": profile}}
                return self._send(202)
            return self._send(404, {"message": "Not Found"})

        do_GET = do_POST = do_DELETE = _handle

    return Handler


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    state = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hub/api"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def _service(settings: Settings, hub: FakeHub, *, token: str = TOKEN, profiles: str | None = None) -> ModeService:
    env = {"JUPYTERHUB_API_TOKEN": token, "JUPYTERHUB_API_URL": hub.url, "JUPYTERHUB_USER": "ada"}
    assert detect_workspace(env) == "jupyterhub"
    config = settings.replace(hub_profiles=profiles or "cpu=cpu-small,a100-80g=gpu-a100,h100-80g=gpu-h100")
    return ModeService(config, switcher=HubSwitcher(config, environ=env, poll=0.01))


def test_parse_profiles() -> None:
    assert parse_profiles(" cpu=cpu-small , a100-80g=gpu-a100,") == {"cpu": "cpu-small", "a100-80g": "gpu-a100"}
    with pytest.raises(BadInputError, match="is not MODE=PROFILE"):
        parse_profiles("cpu")


def test_switch_restarts_the_server_with_the_other_profile(settings: Settings, hub: FakeHub) -> None:
    service = _service(settings, hub)
    assert "start it from the Hub control panel with the profile 'cpu-small'" in service.plan("cpu").warnings[0]
    result = service.switch("cpu")
    assert result.outcome is not None and "cpu-small" in result.outcome.action
    assert service.current() == Mode("cpu")
    writes = [(m, p, b) for m, p, b in hub.requests if m != "GET"]
    assert writes == [
        ("DELETE", "/hub/api/users/ada/server", None),
        ("POST", "/hub/api/users/ada/server", {"profile": "cpu-small"}),
    ]
    assert hub.server == {"stopped": False, "user_options": {"profile": "cpu-small"}}

    service.switch("gpu", gpu_type="h100-80g")
    assert hub.server == {"stopped": False, "user_options": {"profile": "gpu-h100"}}


def test_hub_refusing_the_profile_restarts_the_old_one(settings: Settings, hub: FakeHub) -> None:
    hub.profiles.discard("cpu-small")
    service = _service(settings, hub)
    with pytest.raises(BadInputError, match="refused to start the server with profile 'cpu-small'") as err:
        service.switch("cpu")
    message = str(err.value)
    assert "No such profile: cpu-small" in message
    assert "started it again with the previous profile 'gpu-a100'" in message
    assert "nothing was lost" in message
    assert hub.server == {"stopped": False, "user_options": {"profile": "gpu-a100"}}
    assert service.current() == Mode("gpu", "a100-80g", 1)  # not recorded


def test_refused_token_changes_nothing(settings: Settings, hub: FakeHub) -> None:
    service = _service(settings, hub, token="wrong")
    with pytest.raises(PermissionDeniedError, match="not authorized") as err:
        service.switch("cpu")
    assert "servers scope" in str(err.value)
    assert [m for m, _, _ in hub.requests] == ["GET"]  # only the check, no stop


def test_mode_without_a_profile_is_bad_input(settings: Settings, hub: FakeHub) -> None:
    service = _service(settings, hub, profiles="cpu=cpu-small,a100-80g=gpu-a100")
    with pytest.raises(BadInputError, match="no profile for 'l40s'") as err:
        service.switch("gpu", gpu_type="l40s")
    assert "cpu=cpu-small" in str(err.value)
    assert hub.requests == []


def test_unreachable_hub_is_a_clear_error(settings: Settings) -> None:
    import socket

    from jupyter_starverse.errors import BackendUnavailableError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"JUPYTERHUB_API_TOKEN": TOKEN, "JUPYTERHUB_API_URL": f"http://127.0.0.1:{port}/hub/api",
           "JUPYTERHUB_USER": "ada"}
    service = ModeService(settings, switcher=HubSwitcher(settings, environ=env))
    with pytest.raises(BackendUnavailableError, match="cannot reach the Hub") as err:
        service.switch("cpu")
    assert "is the Hub up?" in str(err.value)
    assert service.current() == Mode("gpu", "a100-80g", 1)
    with pytest.raises(BackendUnavailableError, match="not running under JupyterHub"):
        HubSwitcher(settings, environ={"JUPYTERHUB_USER": "ada"})
