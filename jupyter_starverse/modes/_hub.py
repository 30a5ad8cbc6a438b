"""Switch a JupyterHub (KubeSpawner) workspace by restarting the user's server with another profile.

Uses the Hub REST API with the server's own credentials (``JUPYTERHUB_API_TOKEN``,
``JUPYTERHUB_API_URL``, ``JUPYTERHUB_USER``): stop the server, wait until it is gone,
start it again with ``{"profile": <slug>}`` as user options. When the Hub refuses the new
profile, the server is started again with the previous one, so the user is never left
without a server; saved kernel state stays on disk either way.

The profile of each mode comes from ``STARVERSE_HUB_PROFILES`` (``cpu=cpu-small,
a100-80g=gpu-a100``); without it the slug is the mode's accelerator (``cpu``, ``a100-80g``).

Limitation: the Hub API has no "restart with other options" call. Called from inside the
server being switched, the stop ends this very process (KubeSpawner deletes the pod), so
the start request must come from a process that outlives it: the CLI outside the workspace
or a Hub service. Kernel state is saved before the stop either way.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    ConflictError,
    PermissionDeniedError,
    StarverseError,
)

from ._switch import SwitchOutcome, WorkspaceSwitcher

if TYPE_CHECKING:
    from jupyter_starverse._settings import Settings

    from ._mode import Mode

__all__ = ["HubSwitcher", "parse_profiles"]


def parse_profiles(text: str | None) -> dict[str, str]:
    """``"cpu=cpu-small, a100-80g=gpu-a100"`` -> ``{"cpu": "cpu-small", "a100-80g": "gpu-a100"}``."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, slug = part.partition("=")
        if not sep or not key.strip() or not slug.strip():
            raise BadInputError(
                f"STARVERSE_HUB_PROFILES: {part.strip()!r} is not MODE=PROFILE",
                field="STARVERSE_HUB_PROFILES",
                hint="write it as cpu=cpu-small,a100-80g=gpu-a100",
            )
        out[key.strip().lower()] = slug.strip()
    return out


class HubSwitcher(WorkspaceSwitcher):
    """Restart the user's server through the Hub with the profile of the target mode.

    Parameters
    ----------
    settings
        ``hub_profiles`` maps modes to KubeSpawner profile slugs.
    environ
        Holds ``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_API_URL``, ``JUPYTERHUB_USER``.
    poll, stop_timeout
        How often and how long to wait for the old server to stop.
    """

    where = "jupyterhub"

    def __init__(
        self, settings: Settings, *, environ: Mapping[str, str], poll: float = 0.5, stop_timeout: float = 300.0
    ) -> None:
        missing = [k for k in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_USER") if not environ.get(k)]
        if missing:
            raise BackendUnavailableError(
                f"not running under JupyterHub: {', '.join(missing)} missing", hint="set STARVERSE_WORKSPACE=local"
            )
        self.token = environ["JUPYTERHUB_API_TOKEN"]
        self.api_url = environ["JUPYTERHUB_API_URL"].rstrip("/")
        self.user = environ["JUPYTERHUB_USER"]
        self.profiles = parse_profiles(settings.hub_profiles)
        self.poll = poll
        self.stop_timeout = stop_timeout

    def profile(self, mode: Mode) -> str:
        """The KubeSpawner profile slug of ``mode``."""
        key = mode.accelerator
        if not self.profiles:
            return key
        if key not in self.profiles:
            raise BadInputError(
                f"the Hub has no profile for {key!r}",
                field="gpu_type",
                hint="profiles: " + ", ".join(f"{k}={v}" for k, v in sorted(self.profiles.items()))
                + " (STARVERSE_HUB_PROFILES)",
            )
        return self.profiles[key]

    # -- HTTP ------------------------------------------------------------------------
    def _url(self, *parts: str) -> str:
        return self.api_url + "/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)

    def _request(self, method: str, url: str, body: Any | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        if not url.startswith(("http://", "https://")):
            raise BackendUnavailableError(f"JUPYTERHUB_API_URL {self.api_url!r} is not an http(s) URL")
        req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - scheme checked above
        req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - URL from the Hub's own env
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = json.loads(raw).get("message") or e.reason
            except (ValueError, AttributeError):
                message = e.reason
            return e.code, {"message": str(message)}
        except (urllib.error.URLError, OSError) as e:
            raise BackendUnavailableError(f"cannot reach the Hub at {self.api_url}: {e}", hint="is the Hub up?") from e

    def _fail(self, code: int, body: Any, what: str) -> StarverseError:
        message = (body or {}).get("message", "") if isinstance(body, dict) else ""
        if code in (401, 403):
            return PermissionDeniedError(
                f"the Hub refused to {what}: {message or code}",
                hint="the server's token needs the servers scope for its own user; ask the Hub admin",
            )
        if code == 400:
            return BadInputError(f"the Hub refused to {what}: {message}", hint="check STARVERSE_HUB_PROFILES")
        if code == 404:
            return BadInputError(f"the Hub does not know how to {what}: {message}", hint="check JUPYTERHUB_USER")
        return BackendUnavailableError(f"the Hub failed to {what}: HTTP {code} {message}", hint="try again later")

    def _server_state(self) -> Mapping[str, Any] | None:
        code, body = self._request("GET", self._url("users", self.user))
        if code != 200:
            raise self._fail(code, body, "show the user")
        return (body or {}).get("servers", {}).get("") if isinstance(body, dict) else None

    def _start(self, profile: str) -> tuple[int, Any]:
        return self._request("POST", self._url("users", self.user, "server"), {"profile": profile})

    # -- the switcher ----------------------------------------------------------------
    def check(self, target: Mode) -> None:
        self.profile(target)
        code, body = self._request("GET", self._url("user"))
        if code != 200:
            raise self._fail(code, body, "identify this server's token")

    def apply(self, target: Mode) -> SwitchOutcome:
        profile = self.profile(target)
        state = self._server_state()
        previous = ((state or {}).get("user_options") or {}).get("profile")
        code, body = self._request("DELETE", self._url("users", self.user, "server"))
        if code not in (202, 204):
            raise self._fail(code, body, "stop the server")
        deadline = time.monotonic() + self.stop_timeout
        while (state := self._server_state()) is not None and state.get("stopped") is not True:
            if time.monotonic() > deadline:
                raise ConflictError(
                    f"the Hub did not stop the server within {self.stop_timeout:g} s",
                    hint="start it again from the Hub control panel; your saved variables stay on disk",
                )
            time.sleep(self.poll)
        code, body = self._start(profile)
        if code in (201, 202):
            action = f"the Hub restarts the server with profile {profile!r}"
            return SwitchOutcome("jupyterhub", action, restarts_workspace=True)
        refusal = self._fail(code, body, f"start the server with profile {profile!r}")
        back = ""
        if previous:
            back_code, _ = self._start(previous)
            back = f"; started it again with the previous profile {previous!r}" if back_code in (201, 202) else (
                f"; starting it again with {previous!r} failed too (HTTP {back_code})"
            )
        refusal.message += back + "; nothing was lost: the saved variables stay on disk"
        raise refusal
