"""Invariants of the naming module, over exhaustive generated inputs (no randomness)."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import pytest

from jupyter_starverse.backends.kubernetes._names import HASH_LEN, MAX_JOB_ID, dns_label, label_value, make_job_id

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ALPHABET = ["a", "Z", "0", "-", "_", ".", " ", "é", "/", "x9"]


def _inputs() -> list[str]:
    """Every string of up to 4 symbols from an alphabet mixing valid and invalid characters,
    plus long, hashed-looking, unicode and empty inputs."""
    out = [""] + ["".join(p) for n in range(1, 5) for p in itertools.product(ALPHABET, repeat=n)]
    out += ["a" * n for n in (62, 63, 64, 65, 200)]
    out += [
        "x-0123456789",
        "my-job-" + "a" * HASH_LEN,
        "My_Job",
        "my-job",
        "\U0001d518nicode",
        "-lead",
        "trail-",
        "1abc",
    ]
    return out


@pytest.mark.parametrize("max_len", [12, 30, 63])
def test_every_output_is_a_dns_1035_label_within_length(max_len: int) -> None:
    for text in _inputs():
        name = dns_label(text, max_len=max_len)
        assert DNS1035.match(name) and len(name) <= max_len, (text, name)


def test_collision_free_over_all_generated_inputs() -> None:
    for max_len in (12, 63):
        seen: dict[str, str] = {}
        for text in _inputs():
            name = dns_label(text, max_len=max_len)
            assert seen.setdefault(name, text) == text, f"{text!r} and {seen[name]!r} both became {name!r}"


def test_valid_names_are_kept_and_others_hashed() -> None:
    assert dns_label("train-gpt") == "train-gpt"
    assert dns_label("My_Job").startswith("my-job-") and len(dns_label("My_Job")) == len("my-job-") + HASH_LEN
    # a valid name that looks hashed is hashed too, so it cannot meet a hashed output
    looks_hashed = "my-job-" + "a" * HASH_LEN
    assert dns_label(looks_hashed) != looks_hashed


def test_stable_across_processes() -> None:
    texts = ["My_Job", "a" * 100, "é/x", "1abc"]
    code = (
        "from jupyter_starverse.backends.kubernetes._names import dns_label; import sys; "
        "print('\\n'.join(dns_label(t) for t in sys.argv[1:]))"
    )
    other = subprocess.run([sys.executable, "-c", code, *texts], capture_output=True, text=True, check=True)
    assert other.stdout.split() == [dns_label(t) for t in texts]


def test_job_ids_fit_hostnames_and_suffixes() -> None:
    for name in ("a", "demo", "x" * 63, "my.run_1", "0-start"):
        job_id = make_job_id(name, now=0, token="beef")
        assert DNS1035.match(job_id) and len(job_id) <= MAX_JOB_ID
        assert job_id.endswith("-700101-000000-beef")
        assert len(f"{job_id}-node-0-4095") <= 63  # JobSet pod hostname, the longest we make
    assert make_job_id("demo", now=0, token="beef") == make_job_id("demo", now=0, token="beef")


def test_label_values() -> None:
    assert label_value("exp_1.v2") == "exp_1.v2"
    long = label_value("e" * 80)
    assert len(long) <= 63 and long != label_value("e" * 81)
