"""The init step of a Kubernetes pod: check the job's environment, unpack its working folder.

``python -m jupyter_starverse.envs._unpack STORE ENV_ID|- WORKDIR_ID|- DEST``: exits 2 with the
fix when the environment or the packed folder is missing on the store (the pod fails before the
trainer starts, with no card busy), else unpacks the folder into DEST (an emptyDir the trainer
mounts read-only). Standard library only.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m jupyter_starverse.envs._unpack STORE ENV_ID|- WORKDIR_ID|- DEST", file=sys.stderr)
        return 2
    store, env_id, workdir_id, dest = Path(argv[0]), argv[1], argv[2], Path(argv[3])
    if env_id != "-" and not (store / "envs" / env_id / "env.json").is_file():
        print(f"starverse: the job's environment {env_id[:12]} is missing on the store ({store}/envs/{env_id}); "
              "fix: launch again from the notebook (it builds the environment first), or `starverse env build`",
              file=sys.stderr)  # fmt: skip
        return 2
    if workdir_id != "-":
        tar_path = store / "workdirs" / f"{workdir_id}.tar"
        if not tar_path.is_file():
            print(f"starverse: the job's working folder {workdir_id[:12]} is missing on the store ({tar_path}); "
                  "fix: launch again (the launch packs it)", file=sys.stderr)  # fmt: skip
            return 2
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                    continue
                target = dest / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is not None:
                    target.write_bytes(src.read())
                    target.chmod(0o555 if member.mode & 0o100 else 0o444)
        print(f"starverse: working folder {workdir_id[:12]} unpacked into {dest}")
    if env_id != "-":
        print(f"starverse: environment {env_id[:12]} found on the store")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
