import os
import shutil

import pytest


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A small byte-level text corpus (deterministic)."""
    words = ["the", "shard", "gathers", "its", "unit", "before", "forward", "and", "after",
             "backward", "reduces", "every", "gradient", "rank"]
    text = " ".join(words[(i * 7 + i // 5) % len(words)] for i in range(6000)) + "\n"
    p = tmp_path_factory.mktemp("data") / "corpus.txt"
    p.write_text(text)
    return str(p)


@pytest.fixture(scope="session")
def zshard_exe():
    exe = os.environ.get("ZSHARD_EXE") or shutil.which("zshard")
    if not exe:
        pytest.fail("set ZSHARD_EXE to the zshard launcher (ctest does)")
    return exe
