"""Checks at launch, before any manifest is sent: an image that can run the worker, and warm-up
sources the cluster can reach. Pure functions of their inputs (no API call, no I/O)."""

from __future__ import annotations

from jupyter_starverse._settings import DEFAULT_IMAGE
from jupyter_starverse.errors import BadInputError

__all__ = [
    "BOOT",
    "BUDGET_EXIT",
    "MIN_TORCH",
    "RDZV_LOST",
    "check_image",
    "check_warmup_source",
    "image_is_known_bad",
]

#: Exit code of a pod whose node was preempted more often than the budget allows: the pod failure
#: policy fails the Job on it (``FailJob``), so ``Ignore``d preemptions are not endless.
BUDGET_EXIT = 86
#: What torchrun's agent raises when the rendezvous store (hosted by node 0's agent) went away
#: with its pod: ``RendezvousConnectionError`` ("The connection to the C10d store has failed"),
#: or the store's own network / store errors. The pod then ends as a preemption (143): the Job
#: controller recreates it and the group re-forms at the recreated node 0 (same DNS name).
RDZV_LOST = ("RendezvousConnectionError", "RendezvousClosedError", "DistNetworkError", "DistStoreError")

#: The oldest torch the runtime and the templates run on: FSDP2's ``fully_shard`` is public in
#: ``torch.distributed.fsdp`` from 2.6 (``runtime.wrap`` for fsdp, the tp template). The image
#: (docs/image/Dockerfile) installs the ``train`` extra's pin, which tests/k8s/test_image.py
#: checks against this.
MIN_TORCH = (2, 6)

_IMAGE_FIX = (
    f"build the image from docs/image/Dockerfile (CUDA torch + `pip install jupyter_starverse`) and push it "
    f"with a version tag, or use the default {DEFAULT_IMAGE}; set it with --image, STARVERSE_IMAGE "
    "(STARVERSE_CPU_IMAGE for CPU jobs) or the pool table's \"image\" (docs/kubernetes.md, 'The image')"
)

#: Run by ``python -c BOOT MODULES MODULE ARGS...``: checks that MODULES (comma separated) are
#: importable, and that a job of the runtime (MODULES has torch and jupyter_starverse) has a torch of
#: at least MIN_TORCH, else prints the fix and exits 2 (a usage error: the Job fails at once, no retries),
#: then runs MODULE as ``__main__`` with ARGS. No shell, and no user text in the program: user
#: arguments stay separate argv entries. torchrun ends with 1 both when it got SIGTERM and when its
#: ranks stopped after a preemption (they exit 143 once every rank checkpointed): either way the
#: pod exits 143, which the pod failure policy takes for a preemption, not a failure; so does an
#: agent that lost its rendezvous store (:data:`RDZV_LOST`: node 0 was preempted). Before anything,
#: a pod whose node was preempted more than ``STARVERSE_PREEMPT_RESTARTS`` times (its
#: ``STARVERSE_NODE_PREEMPTIONS``, the Job controller's ignored-failure count of the index, read
#: through the downward API; in a PyTorchJob's pod, which the training-operator recreates under the
#: same name with no count of its own, the starts of ``STARVERSE_POD_NAME`` before this one, kept in
#: ``STARVERSE_STARTS_DIR`` on the run folder's volume) exits :data:`BUDGET_EXIT`. Why a pod
#: stopped goes to its termination message (``/dev/termination-log``: the kubelet copies it into
#: the pod's status).
BOOT = (
    "import importlib.util, os, runpy, sys\n"
    "def _say(text, code):\n"
    "    sys.stderr.write('starverse: ' + text + '\\n')\n"
    "    if os.path.isfile('/dev/termination-log'):  # the kubelet's file: only in a pod\n"
    "        try:\n"
    "            with open('/dev/termination-log', 'w') as f:\n"
    "                f.write(text)\n"
    "        except OSError:\n"
    "            pass\n"
    "    sys.exit(code)\n"
    "seen = os.environ.get('STARVERSE_NODE_PREEMPTIONS', '')\n"
    "starts, me = os.environ.get('STARVERSE_STARTS_DIR', ''), os.environ.get('STARVERSE_POD_NAME', '')\n"
    "if starts and me:  # an operator recreates the pod under its own name: count its starts on the volume\n"
    "    path = os.path.join(starts, me)\n"
    "    try:\n"
    "        with open(path) as f:\n"
    "            seen = f.read().strip()\n"
    "    except OSError:\n"
    "        seen = '0'\n"
    "    seen = seen if seen.isdigit() else '0'\n"
    "    try:\n"
    "        os.makedirs(starts, exist_ok=True)\n"
    "        with open(path + '.tmp', 'w') as f:\n"
    "            f.write(str(int(seen) + 1))\n"
    "        os.replace(path + '.tmp', path)\n"
    "    except OSError:\n"
    "        pass\n"
    "budget = os.environ.get('STARVERSE_PREEMPT_RESTARTS', '')\n"
    "if seen.isdigit() and budget.isdigit() and int(seen) > int(budget):\n"
    "    _say('this node was preempted ' + seen + ' times: no restarts left (preemption budget '\n"
    f"         + budget + ' used); the job stops (exit {BUDGET_EXIT})', {BUDGET_EXIT})\n"
    "missing = [m for m in sys.argv[1].split(',') if importlib.util.find_spec(m) is None]\n"
    "if missing:\n"
    "    sys.stderr.write('starverse: this image cannot run the job: no module ' + ', '.join(missing) + '.\\n'\n"
    "        'fix: use an image built from docs/image/Dockerfile (CUDA torch + pip install jupyter_starverse); '\n"
    "        'set it with --image, STARVERSE_IMAGE or the pool table image (docs/kubernetes.md).\\n')\n"
    "    sys.exit(2)\n"
    "if {'torch', 'jupyter_starverse'} <= set(sys.argv[1].split(',')):  # the runtime's jobs (not --command)\n"
    "    import torch\n"
    "    parts = (torch.__version__.split('+')[0].split('.') + ['0', '0'])[:2]\n"
    "    have = tuple(int(''.join(c for c in p if c.isdigit()) or 0) for p in parts)\n"
    f"    if have < {MIN_TORCH!r}:\n"
    "        sys.stderr.write('starverse: this image has torch ' + torch.__version__ + ', too old for the job: '\n"
    f"            'the runtime needs torch >= {'.'.join(map(str, MIN_TORCH))} (FSDP2 fully_shard).\\n'\n"
    "            'fix: use an image built from docs/image/Dockerfile (it installs the torch of the train extra); '\n"
    "            'set it with --image, STARVERSE_IMAGE or the pool table image (docs/kubernetes.md).\\n')\n"
    "        sys.exit(2)\n"
    "sys.argv = sys.argv[2:]\n"
    "try:\n"
    "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    "except BaseException as e:\n"
    "    codes = [getattr(f, 'exitcode', None) for f in (getattr(e, 'failures', None) or {}).values()]\n"
    "    if getattr(e, 'sigval', None) == 15 or (codes and all(c in (143, -15) for c in codes)):\n"
    "        _say('stopped on SIGTERM after the checkpoint (exit 143)', 143)\n"
    "    chain, x = [], e\n"
    "    while x is not None and len(chain) < 16:\n"
    "        chain.append(type(x).__name__)\n"
    "        x = x.__cause__ or x.__context__\n"
    f"    if set(chain) & set({RDZV_LOST!r}):\n"
    "        _say('the rendezvous store of node 0 is gone (its pod ended): this pod ends too, the group '\n"
    "             're-forms when node 0 is back (exit 143)', 143)\n"
    "    raise\n"
)


def image_is_known_bad(image: str, *, needs_package: bool = True) -> str | None:
    """Why ``image`` cannot be used (``None`` if it may): ``:latest`` or no tag at all is a moving
    target; the stock ``pytorch/pytorch`` images lack this package (needed by the worker)."""
    ref = image.strip()
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    if not digest and (tag is None or tag == "latest"):
        return (
            f"image {ref!r} is not pinned ({'no tag' if tag is None else ':latest'}): every pull may get another build"
        )
    repo = name.split(":")[0] if tag is None else name[: -len(tag) - 1]
    if needs_package and repo.removeprefix("docker.io/").removeprefix("library/") in ("pytorch/pytorch",):
        return f"image {ref!r} does not contain jupyter_starverse, which every job pod runs"
    return None


def check_image(image: str, *, where: str = "image", needs_package: bool = True) -> None:
    """:class:`BadInputError` with the fix when ``image`` is known not to work."""
    why = image_is_known_bad(image, needs_package=needs_package)
    if why is not None:
        raise BadInputError(why, field=where, hint=_IMAGE_FIX)


def _is_local(source: str) -> bool:
    return "://" not in source or source.startswith(("file://", "local://")) or source.startswith("memory:")


def check_warmup_source(name: str, kind: str, source: str, *, store_path: str | None) -> None:
    """A dataset the warm-up pod must pull needs a source the cluster reaches: a URL, or a folder
    inside the shared store (the one volume the warm-up pod mounts). A folder of the workspace
    is not there."""
    if kind != "dataset" or not _is_local(source):
        return
    path = source.removeprefix("file://")
    if store_path and not source.startswith("memory:"):
        root = store_path.rstrip("/") + "/"
        if path.startswith(root):
            return
    raise BadInputError(
        f"mount {name!r}: its source {source!r} is a path of this workspace, which the cluster's pods cannot read",
        field="mounts",
        hint=f"pull it into the shared store from the workspace first (`starverse store pull {name}`), then "
        "launch again; or register it from a URL the cluster can reach (s3://, gs://, https://)",
    )
