"""A recipe job's script: ``python lm.py --recipe NAME --objective OBJ --model hf:ORG/NAME --data DATASET
--param KEY=VALUE ...`` on every rank (see :mod:`jupyter_starverse.recipes.train`)."""

from __future__ import annotations

from jupyter_starverse.recipes.train import main

if __name__ == "__main__":
    main()
