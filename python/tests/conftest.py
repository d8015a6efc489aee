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
    """The launcher: $ZSHARD_EXE, else the one the package bundles, else `zshard` on PATH."""
    import zshard
    exe = zshard.executable()
    if not exe:
        pytest.fail("no zshard executable: build zshard before `pip install ./python`, or set "
                    "ZSHARD_EXE to it")
    return exe
