"""The workspace's current mode, persisted under ``STARVERSE_HOME`` so every process agrees."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._settings import MODES, Settings
from jupyter_starverse.errors import BadInputError, ConflictError, StoreError

from ._mode import Mode

if TYPE_CHECKING:
    from jupyter_starverse.jobmodel import JobSpec

    from ._kernelstate import SavedState
    from ._plan import ModeStatus, PriceChange, SwitchPlan, SwitchResult
    from ._switch import SwitchOutcome, WorkspaceSwitcher

__all__ = ["Mode", "ModeService"]


class ModeService:
    """Reads, records and switches the workspace mode (``$STARVERSE_HOME/mode.json``).

    Parameters
    ----------
    settings
        Resolved configuration.
    environ
        Environment used to find where the workspace runs (``os.environ`` by default).
    switcher
        The workspace switcher to use instead of the one for where the workspace runs.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        environ: Mapping[str, str] | None = None,
        switcher: WorkspaceSwitcher | None = None,
    ) -> None:
        self.settings = settings
        self.environ = os.environ if environ is None else environ
        self._switcher = switcher

    @property
    def path(self) -> Path:
        return self.settings.home / "mode.json"

    def default(self) -> Mode:
        if self.settings.default_mode == "gpu":
            return Mode("gpu", self.settings.gpu_type, 1)
        return Mode("cpu")

    def current(self) -> Mode:
        """The recorded mode, or the default from the settings when none was recorded."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return self.default()
        except (OSError, ValueError) as e:
            raise StoreError(
                f"cannot read the mode file {self.path}: {e}", hint="delete it to fall back to the default mode"
            ) from e
        return Mode.from_json(data)

    def record(self, mode: Mode) -> Mode:
        """Persist ``mode`` atomically (temp file + rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".mode.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(mode.to_json(), f)
            Path(tmp).replace(self.path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return mode

    # -- switching ---------------------------------------------------------------
    @property
    def switcher(self) -> WorkspaceSwitcher:
        """The switcher for where this workspace runs (built once)."""
        if self._switcher is None:
            from ._switchers import make_switcher

            self._switcher = make_switcher(self.settings, environ=self.environ)
        return self._switcher

    def target(self, kind: str, *, gpu_type: str | None = None, gpus: int | None = None) -> Mode:
        """The mode ``kind`` asks for; GPU type and count default to the current or configured ones."""
        kind = (kind or "").strip().lower()
        if kind not in MODES:
            raise BadInputError(f"mode {kind!r} is not one of {', '.join(MODES)}", field="mode", hint="use cpu or gpu")
        if kind == "cpu":
            if gpu_type:
                raise BadInputError("--gpu only goes with gpu mode", field="gpu_type", hint="use `mode gpu --gpu TYPE`")
            return Mode("cpu")
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus > 64):  # <1: Mode
            raise BadInputError(f"gpus must be a whole number between 1 and 64, got {gpus!r}"[:120], field="gpus",
                                hint="for example `mode gpu --gpus 2`")  # fmt: skip
        current = self.current()
        last = current if current.kind == "gpu" else None
        return Mode(
            "gpu",
            (gpu_type or (last.gpu_type if last else None) or self.settings.gpu_type).lower(),
            gpus if gpus is not None else (last.gpus if last else 1),
        )

    def price_change(self, current: Mode, target: Mode) -> PriceChange:
        """Price per hour of the workspace in ``current`` and ``target`` mode."""
        from jupyter_starverse.costs import load_price_table

        from ._plan import PriceChange

        table = load_price_table(self.settings)

        def hourly(mode: Mode) -> Any:
            try:
                price = table.price(mode.accelerator).on_demand
            except BadInputError:
                return None
            return price * mode.gpus if mode.kind == "gpu" else price

        return PriceChange(table.currency, hourly(current), hourly(target))

    def active_pulls(self) -> list[str]:
        """Refs of pulls running now (a workspace restart would interrupt them)."""
        from jupyter_starverse.catalog import Catalog

        try:
            pulls = Catalog(self.settings).pulls()
        except (OSError, StoreError):
            return []
        fresh = time.time() - 3 * self.settings.lock_ttl
        running = ("downloading", "verifying")
        return [f"{p.ref} ({p.percent:.0f}%)" for p in pulls if p.phase in running and p.updated_at >= fresh]

    def plan(
        self, kind: str, *, gpu_type: str | None = None, gpus: int | None = None, force: bool = False
    ) -> SwitchPlan:
        """Check a switch without making it: target mode, price change, blockers.

        Raises :class:`ConflictError` while a pull runs (unless ``force``) and whatever
        the switcher finds wrong (no such GPU pool, bare pod, refused profile).
        """
        from ._plan import SwitchPlan

        current = self.current()
        target = self.target(kind, gpu_type=gpu_type, gpus=gpus)
        warnings: list[str] = []
        if target != current:
            pulls = self.active_pulls()
            if pulls and not force:
                raise ConflictError(
                    f"a pull is running: {', '.join(pulls)}; switching now would interrupt it",
                    hint="wait for the pull to finish, or switch with --force (the pull resumes later)",
                )
            if pulls:
                warnings.append(f"pulls interrupted: {', '.join(pulls)} (they resume when pulled again)")
            self.switcher.check(target)
            if self.switcher.where == "jupyterhub":
                profile = getattr(self.switcher, "profile", None)
                slug = profile(target) if callable(profile) else target.accelerator
                warnings.append(
                    f"the Hub stops this server; if it does not come back by itself, start it from the Hub "
                    f"control panel with the profile {slug!r}"
                )
            if target.kind == "gpu":
                from jupyter_starverse.costs import load_price_table

                load_price_table(self.settings).price(target.accelerator)  # unknown GPU type: BadInputError
        # what every door shows: no GPU here (a warning), and the price of what the workspace really runs on
        warnings += self.switcher.warnings(target)
        price = self.price_change(self.switcher.workspace_mode(current), self.switcher.workspace_mode(target))
        return SwitchPlan(current, target, self.switcher.where, price, tuple(warnings))

    def apply(self, plan: SwitchPlan) -> SwitchOutcome | None:
        """Make a checked switch and record the new mode (``None`` when nothing changes)."""
        if not plan.changes:
            return None
        outcome = self.switcher.apply(plan.target)
        self.record(plan.target)
        return outcome

    def switch(
        self,
        kind: str,
        *,
        gpu_type: str | None = None,
        gpus: int | None = None,
        force: bool = False,
        saved: tuple[SavedState, ...] = (),
    ) -> SwitchResult:
        """Plan and apply a switch of the workspace (kernels are handled by the caller)."""
        from ._plan import SwitchResult

        plan = self.plan(kind, gpu_type=gpu_type, gpus=gpus, force=force)
        return SwitchResult(plan, self.apply(plan), saved=saved)

    def status(self) -> ModeStatus:
        """Current mode, where the workspace runs, its price, and saved states waiting."""
        from jupyter_starverse.costs import load_price_table

        from ._kernelstate import last_report
        from ._plan import ModeStatus

        mode = self.current()
        where = self.settings.workspace if self.settings.workspace != "auto" else self._detected()
        from ._switch import machine_has_gpu

        runs_on = mode if where != "local" or machine_has_gpu(self.settings.local_gpu) else Mode("cpu")
        price = self.price_change(runs_on, runs_on)  # a GPU-mode workspace without a GPU costs what its CPU does
        gpus = tuple(sorted(load_price_table(self.settings).gpus))
        return ModeStatus(
            mode, where, price.currency, price.before, gpus, tuple(self.saved_states()), last_report(self.settings.home)
        )

    def _detected(self) -> str:
        from ._switchers import detect_workspace

        return detect_workspace(self.environ)

    # -- kernel state ------------------------------------------------------------
    def saved_states(self) -> list[SavedState]:
        """Saved kernel states waiting on disk to be restored, newest first."""
        from ._kernelstate import list_states

        return list_states(self.settings.home)

    # -- jobs --------------------------------------------------------------------
    def translate(self, spec: JobSpec, *, mode: Mode | None = None) -> JobSpec:
        """``spec`` as it runs in ``mode`` (default: the current mode)."""
        from ._jobs import translate_spec

        return translate_spec(spec, mode or self.current(), cpu_image=self.settings.cpu_image)
