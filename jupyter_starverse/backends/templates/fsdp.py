"""Template ``fsdp``: the same LM, parameters sharded with FSDP2 (``fully_shard``).

``runtime.wrap`` shards every block and the root module when the job's template is
``fsdp``; checkpoints are DCP, so a run with another world size resumes them.
"""

from __future__ import annotations

from jupyter_starverse.backends.templates.ddp import main

if __name__ == "__main__":
    main()
