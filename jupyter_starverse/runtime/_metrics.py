"""``log_metrics``: metrics.jsonl in the run folder, plus TensorBoard and W&B when installed."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import make_dir, open_under
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import folder_modes

from ._env import job_env
from ._guards import check_loss

__all__ = ["RANK_EVERY_S", "close_metrics", "log_metrics", "wandb_mode"]

_sinks: dict[str, Any] = {}


def _number(value: Any) -> float:
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


def _append(run_dir: Path, path: Path) -> Any:
    """``path`` (below ``run_dir``) opened for appending lines, with the run folder's modes whatever the
    umask: 0700/0600 in a private run folder, 2770/0640 in a group's; a link at any level is refused."""
    modes = folder_modes(run_dir)
    make_dir(path.parent, modes, root=run_dir)
    fd = open_under(run_dir, path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, modes.file)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != modes.file:
            os.fchmod(fd, modes.file)  # the umask took bits off (or added none we want): set them
        return os.fdopen(fd, "a", buffering=1)
    except BaseException:
        os.close(fd)
        raise


def _tensorboard() -> Any:
    if "tb" not in _sinks:
        env = job_env()
        writer = None
        if env.tensorboard_dir is not None and importlib.util.find_spec("tensorboard") is not None:
            from torch.utils.tensorboard import SummaryWriter

            if env.run_dir is not None:  # the folder gets the run folder's modes, not the umask's
                make_dir(env.tensorboard_dir, folder_modes(env.run_dir))

            writer = SummaryWriter(log_dir=str(env.tensorboard_dir), flush_secs=10)
        _sinks["tb"] = writer
    return _sinks["tb"]


_WANDB_MODES = ("online", "offline", "disabled")


def wandb_mode(environ: Mapping[str, str]) -> str:
    """How W&B runs in a job: ``online`` when the user configured it, else ``offline`` (or ``disabled``).

    ``STARVERSE_WANDB`` (``online``, ``offline`` or ``off``) decides; without it an explicit
    ``WANDB_MODE`` does; without either a ``WANDB_API_KEY`` in the job's environment (a secret
    by reference) means online. Offline runs stay in the run folder (``wandb sync`` uploads them).
    """
    choice = environ.get("STARVERSE_WANDB", "").strip().lower()
    if choice in ("off", "false", "0", "no", "disabled"):
        return "disabled"
    if choice in ("online", "offline"):
        return choice
    mode = environ.get("WANDB_MODE", "").strip().lower()
    if mode == "dryrun":
        return "offline"
    if mode in _WANDB_MODES:
        return mode
    return "online" if environ.get("WANDB_API_KEY", "").strip() else "offline"


def _wandb() -> Any:
    if "wandb" not in _sinks:
        env = job_env()
        run = None
        mode = wandb_mode(os.environ)
        if env.run_dir is not None and mode != "disabled" and importlib.util.find_spec("wandb") is not None:
            import wandb

            project = os.environ.get("WANDB_PROJECT") or (env.run_dir.parent.parent.name or None)
            run = wandb.init(mode=mode, dir=str(env.run_dir), name=env.job_id, project=project, resume="allow")
        _sinks["wandb"] = run
    return _sinks["wandb"]


#: Seconds between two records of a rank other than 0 (its own throughput and loss, for the monitor).
RANK_EVERY_S = 2.0
_last_rank_record: list[float] = []
#: The newest step a rank skipped (``run_dir, rank, step, values``): written when metrics close, so a
#: finished rank's record ends at its last step (400), not at the last one due (384).
_pending_rank: list[tuple[Path, int, int, dict[str, Any]]] = []


_exit_hook: list[bool] = []


def _at_exit() -> None:
    """Write the pending record when the process ends, for a script that logs in a loop of its own
    (:func:`steps` closes the metrics itself): else ranks 1..N end at their last due step (1 of 6)."""
    import atexit

    _exit_hook.append(True)
    atexit.register(_write_pending)


def _write_pending() -> None:
    for run_dir, rank, step, values in _pending_rank:
        try:
            _rank_record(run_dir, rank, step, values, check=False)
        except (OSError, ValueError, TypeError):
            pass  # the run folder went away or a value is not a number: the record ends earlier
    _pending_rank.clear()


def _rank_due(now: float) -> bool:
    """A rank other than 0 records at most every :data:`RANK_EVERY_S` (the first call always)."""
    if _last_rank_record and now - _last_rank_record[0] < RANK_EVERY_S:
        return False
    _last_rank_record[:] = [now]
    return True


def _rank_record(run_dir: Path, rank: int, step: int, values: dict[str, Any], *, check: bool = True) -> None:
    """Append one line to ``ranks/rankN.jsonl``: this rank's own step, time and values."""
    key = f"rank{rank}"
    if key not in _sinks:
        _sinks[key] = _append(run_dir, run_dir / "ranks" / f"{key}.jsonl")
    numbers = {k: _number(v) for k, v in values.items()}
    if check:
        check_loss(step, numbers)  # NaN/inf for STARVERSE_NAN_STEPS steps in a row: stop (see _guards)
    _sinks[key].write(json.dumps({"step": int(step), "time": time.time(), "rank": rank, **numbers}) + "\n")


def _check_reference(env: Any, step: int, numbers: dict[str, float]) -> tuple[str, float] | None:
    """A reproduction's loss against its reference curve: a warning when it leaves the band.

    Returns ``(metric, reference value at this step)`` for TensorBoard, or None."""
    if not env.reference_curve or env.rank != 0:
        return None
    watch = _sinks.get("reference")
    if watch is None:
        from ._reference import ReferenceCurve, ReferenceWatch

        try:
            curve = ReferenceCurve.load(env.reference_curve)
        except StarverseError as e:  # a missing curve never stops training
            print(f"warning: reference curve {env.reference_curve!r} not loaded: {e}", file=sys.stderr, flush=True)
            _sinks["reference"] = False
            return None
        watch = _sinks["reference"] = ReferenceWatch(curve, total_steps=env.steps, held=env.reference_check != "draw")
    if watch is False or watch.curve.metric not in numbers:
        return None
    line = watch.see(int(step), numbers[watch.curve.metric], numbers.get("tokens"))
    if line:
        print(line, file=sys.stderr, flush=True)
    x = watch.curve.x_of(int(step), total_steps=watch.total_steps, tokens=numbers.get("tokens"))
    ref = watch.curve.at(x) if x is not None else None
    return None if ref is None else (watch.curve.metric, ref)


def _reference_board() -> Any:
    """A second TensorBoard run (``TB/reference``) with the reference under the live metric's tag,
    so TensorBoard draws the two lines in one chart."""
    if "tb-reference" not in _sinks:
        folder = job_env().tensorboard_dir
        assert folder is not None  # called only once the live board was opened there
        from torch.utils.tensorboard import SummaryWriter

        _sinks["tb-reference"] = SummaryWriter(log_dir=str(folder / "reference"), flush_secs=10)
    return _sinks["tb-reference"]


def log_metrics(step: int, *, all_ranks: bool = False, **values: Any) -> None:
    """Record ``values`` (numbers or 0-d tensors) at ``step``: every call on rank 0 (``metrics.jsonl``).

    Every other rank keeps its own record (``ranks/rankN.jsonl``) every :data:`RANK_EVERY_S`
    seconds, so the monitor shows each rank's throughput and loss at a cost that does not grow
    with the step rate; with ``all_ranks`` it records into ``metrics.jsonl`` on every call.
    Name a throughput ``tokens_per_s`` and a model-FLOPs rate ``tflops_per_card``: the monitor
    and the panel show them.
    """
    env = job_env()
    if env.rank != 0 and not all_ranks:
        if env.run_dir is not None:
            if _rank_due(time.time()):
                _pending_rank.clear()
                _rank_record(env.run_dir, env.rank, step, values)
            else:  # kept as given (no tensor read here): the last one is written at the end
                if not _pending_rank and not _exit_hook:
                    _at_exit()
                _pending_rank[:] = [(env.run_dir, env.rank, step, dict(values))]
        return
    numbers = {k: _number(v) for k, v in values.items()}
    check_loss(step, numbers)  # NaN/inf for STARVERSE_NAN_STEPS steps in a row: stop (see _guards)
    reference = _check_reference(env, step, numbers)
    record = {"step": int(step), "time": time.time(), "rank": env.rank, **numbers}
    if env.run_dir is None:
        print(" ".join([f"step {step}", *(f"{k}={v:.6g}" for k, v in numbers.items())]), flush=True)
        return
    if "jsonl" not in _sinks:
        make_dir(env.run_dir, folder_modes(env.run_dir))
        _sinks["jsonl"] = _append(env.run_dir, env.run_dir / "metrics.jsonl")
    _sinks["jsonl"].write(json.dumps(record) + "\n")
    if env.rank == 0:
        tb = _tensorboard()
        if tb is not None:
            for k, v in numbers.items():
                tb.add_scalar(k, v, step)
            if reference is not None:
                _reference_board().add_scalar(reference[0], reference[1], step)
        run = _wandb()
        if run is not None:
            run.log(numbers, step=step)


def close_metrics() -> None:
    """Flush and close every sink (called at the end of :func:`steps`); a rank's last skipped step
    is written first, so every rank's record ends at the step it reached."""
    _write_pending()
    for key, sink in list(_sinks.items()):
        if sink is None:
            continue
        if key == "jsonl" or key.startswith(("tb", "rank")):
            sink.close()
        elif key == "wandb":
            sink.finish()
    _sinks.clear()
    _last_rank_record.clear()
