"""The installed package finds libzshard by itself: `pip install ./python` bundles the library
(and the zshard executable); $ZSHARD_LIB stays an override; without any library the import
error names every place it looked and the fix."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import zshard

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)  # python/: setup.py, pyproject.toml, zshard/
PKG = os.path.dirname(os.path.abspath(zshard.__file__))  # the installed package

PROBE = """
import json, os, zshard, zshard._lib as L
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libzshard" in l})
print(json.dumps({"path": L.lib_path, "source": L.lib_source, "maps": maps,
                  "pkg": os.path.dirname(os.path.abspath(zshard.__file__)),
                  "exe": zshard.executable()}))
"""


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ZSHARD_LIB", "ZSHARD_EXE", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(extra)
    return env


def _python(code, cwd, **env):
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=120)


def test_import_loads_the_bundled_library_without_environment(tmp_path):
    out = _python(PROBE, tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    bundled = os.path.join(got["pkg"], "libzshard.so")
    assert got["path"] == bundled and got["source"] == "bundled with the package"
    assert got["maps"] == [bundled]  # the process mapped that file and no other libzshard
    assert os.path.isfile(bundled) and not os.path.islink(bundled)  # the real file, copied
    exe = os.path.join(got["pkg"], "bin", "zshard")
    assert got["exe"] == exe
    v = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60,
                       env=_clean_env())
    assert v.returncode == 0 and v.stdout.startswith("zshard "), v.stdout + v.stderr


def test_zshard_lib_overrides_and_must_exist(tmp_path):
    link = tmp_path / "libzshard-elsewhere.so"
    link.symlink_to(os.path.join(PKG, "libzshard.so"))
    out = _python(PROBE, tmp_path, ZSHARD_LIB=str(link))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["path"] == str(link) and got["source"] == "$ZSHARD_LIB"
    missing = tmp_path / "no-such-lib.so"
    out = _python("import zshard", tmp_path, ZSHARD_LIB=str(missing))
    assert out.returncode != 0
    assert f"ZSHARD_LIB={missing}: no such file" in out.stderr  # no silent fallback


def test_missing_library_names_every_place_and_the_fix(tmp_path):
    """The package without its bundled library (installed before zshard was built)."""
    shutil.copytree(PKG, tmp_path / "zshard",
                    ignore=shutil.ignore_patterns("libzshard.so", "bin", "__pycache__"))
    code = ("import ctypes.util, sys\n"
            "if ctypes.util.find_library('zshard'): sys.exit(3)\n"  # a system install: n/a
            "import zshard")
    out = _python(code, tmp_path, PYTHONPATH=str(tmp_path))
    if out.returncode == 3:
        pytest.skip("a system libzshard is installed: the search cannot come up empty")
    assert out.returncode != 0
    err = out.stderr.strip().splitlines()[-1]
    assert err.startswith("ImportError: libzshard not found"), out.stderr
    for said in ("$ZSHARD_LIB", os.path.join(str(tmp_path), "zshard", "libzshard.so"),
                 "find_library", "Build zshard", "pip install ./python"):
        assert said in err, (said, err)


def _pip_install(src, target, **env):
    return subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-deps",
                           "--no-build-isolation", "--no-index", "--target", str(target),
                           str(src)], env=_clean_env(**env), capture_output=True, text=True,
                          timeout=300)


def test_pip_install_bundles_the_real_file_or_warns(tmp_path):
    src = tmp_path / "checkout" / "python"  # a checkout with no build/ next to python/
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests", "examples"))
    out = _pip_install(src, tmp_path / "bare")
    assert out.returncode == 0, out.stdout + out.stderr  # the install still succeeds
    log = out.stdout + out.stderr
    assert "WARNING: zshard: no libzshard.so to bundle" in log, log
    assert "pip install ./python` again" in log
    assert not os.path.exists(tmp_path / "bare" / "zshard" / "libzshard.so")

    link = tmp_path / "libzshard.so"  # as in a build dir: a symlink to the versioned file
    link.symlink_to(os.path.join(PKG, "libzshard.so"))
    out = _pip_install(src, tmp_path / "full", ZSHARD_LIB=str(link),
                       ZSHARD_EXE=os.path.join(PKG, "bin", "zshard"))
    assert out.returncode == 0, out.stdout + out.stderr
    lib = tmp_path / "full" / "zshard" / "libzshard.so"
    assert lib.is_file() and not lib.is_symlink()
    assert lib.read_bytes() == (tmp_path / "libzshard.so").read_bytes()
    assert os.access(tmp_path / "full" / "zshard" / "bin" / "zshard", os.X_OK)
    wheel = [p for p in (tmp_path / "full").glob("zshard-*.dist-info/WHEEL")]
    assert len(wheel) == 1 and "Root-Is-Purelib: false" in wheel[0].read_text()
