"""Bundles the C library (and the `zshard` executable) into the Python package, so that an
installed zshard imports without ZSHARD_LIB. pyproject.toml holds the metadata; this file only
adds the binaries to the build_py step and marks the distribution as non-pure.

What is bundled, the real file behind any symlink, as zshard/libzshard.so and zshard/bin/zshard:
$ZSHARD_LIB and $ZSHARD_EXE when set (a missing file is an error), else the checkout's build
directory next to this file (../build/libzshard.so, ../build/zshard). Without a library the
install still succeeds, with a warning: importing zshard then needs ZSHARD_LIB or a system
install (`cmake --install build`)."""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.normpath(os.path.join(HERE, os.pardir, "build"))

# (environment override, file in the checkout's build directory, place in the package)
BINARIES = (("ZSHARD_LIB", "libzshard.so", "libzshard.so"),
            ("ZSHARD_EXE", "zshard", os.path.join("bin", "zshard")))


def _source(env, name):
    """The file to bundle with its symlinks resolved, or None when there is none."""
    path = os.environ.get(env)
    if path:
        if not os.path.isfile(path):
            sys.exit(f"zshard setup: {env}={path}: no such file (unset {env} to take "
                     f"{os.path.join(BUILD, name)})")
        return os.path.realpath(path)
    path = os.path.join(BUILD, name)
    return os.path.realpath(path) if os.path.isfile(path) else None


class BuildPyWithLib(build_py):
    """build_py, then the binaries copied into the package's build directory."""

    def run(self):
        super().run()
        for env, name, dest in BINARIES:
            src, out = _source(env, name), os.path.join(self.build_lib, "zshard", dest)
            if src is None:
                if os.path.exists(out):  # a previous build's copy would be stale
                    os.remove(out)
                sys.stderr.write(
                    f"WARNING: zshard: no {name} to bundle: neither ${env} nor "
                    f"{os.path.join(BUILD, name)} exists. The package installs without it; "
                    f"build zshard first (bash scripts/setup.sh, or cmake --build build), then "
                    f"`pip install ./python` again, or set {env} at import time.\n")
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copy2(src, out)  # always: a rebuilt or another library replaces the copy
            sys.stderr.write(f"zshard: bundled {src} as zshard/{dest}\n")


class BinaryDistribution(Distribution):
    """The wheel carries a shared library and an executable: platform-specific, not pure."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLib}, distclass=BinaryDistribution)
