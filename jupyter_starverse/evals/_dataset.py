"""The examples an evaluation reads: a store dataset ``NAME[@VERSION]`` (pulled, then mounted) or
a local file or folder, each row's input and target field as an :class:`~._run.Example`; rows
without them are counted, not guessed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jupyter_starverse._inputs import check_path, check_text
from jupyter_starverse.catalog import Catalog, DatasetRef, parse_ref
from jupyter_starverse.data import list_files, read_docs
from jupyter_starverse.errors import BadInputError

from ._run import Dataset, Example

__all__ = ["read_dataset"]


def read_dataset(
    catalog: Catalog,
    data: str,
    *,
    input_field: str = "input",
    target_field: str = "target",
    task: str = "classification",
    limit: int | None = None,
) -> Dataset:
    """The examples of ``data`` (a store dataset ``NAME[@VERSION]`` or a local file/folder)."""
    if not isinstance(data, str) or not data.strip():
        raise BadInputError("name a dataset", field="data", hint="--data NAME[@VERSION] (a labelled store dataset)")
    check_path(data, "data", hint="--data NAME[@VERSION] (a labelled store dataset) or a local file")
    for name in (input_field, target_field):
        check_text(name, "input_field", max_len=128, hint="a field name such as input or target")
    data = data.strip()
    version: str | None
    if os.sep in data or data.startswith((".", "~")) or Path(data).exists():
        location, ref, version = str(Path(data).expanduser()), data, None
    else:
        parsed = parse_ref(data)
        if not isinstance(parsed, DatasetRef):
            raise BadInputError(f"{data!r} is a model, not a dataset", field="data", hint="--data NAME[@VERSION]")
        entry = catalog.entry(data)
        catalog.pull(entry.ref)
        location, ref, version = str(catalog.mount(entry.ref)), entry.ref, entry.version
    skipped = 0

    def bad(_m: Any) -> None:
        nonlocal skipped
        skipped += 1

    examples: list[Example] = []
    for doc in read_docs(list_files(location), text_field=input_field, report=bad):
        target = doc.row.get(target_field) if task != "perplexity" else ""
        if target is None:
            skipped += 1
            continue
        examples.append(Example(len(examples), doc.text, str(target)))
        if limit is not None and len(examples) >= limit:
            break
    if not examples:
        raise BadInputError(
            f"{data}: no example has a string {input_field!r}"
            + ("" if task == "perplexity" else f" and a {target_field!r}"),
            field="input_field",
            hint="name the fields with --input-field / --target-field",
        )
    return Dataset(ref, version, tuple(examples), skipped)
