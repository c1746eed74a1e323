"""Builds the Go parts into the wheel (see pyproject.toml for the metadata).

build_py runs, from the repository root (the parent of this directory, or
$MOONCAKE_SOURCE_ROOT):

  go build -buildmode=c-shared -o <build>/mooncake/_lib/libmooncake.so ./binding
  go build -o <build>/mooncake/_bin/mooncake ./cmd/mooncake

with the Go toolchain named by $GO (default ``go`` on PATH). The wheel is
platform-specific (it carries a shared library and an executable).
"""

import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel package: sdist/install only
    bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))


def source_root():
    root = os.environ.get("MOONCAKE_SOURCE_ROOT") or os.path.dirname(HERE)
    if not os.path.isfile(os.path.join(root, "go.mod")):
        raise SystemExit("mooncake-go: no go.mod in %s: build from the repository checkout "
                         "(pip install ./python) or set MOONCAKE_SOURCE_ROOT" % root)
    return root


def version_ldflags(root):
    try:
        v = subprocess.run(["git", "describe", "--tags", "--always", "--dirty"], cwd=root,
                           capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        v = ""
    return ["-ldflags", "-X github.com/kvcache-go/mooncake/internal/cli.Version=" + v] if v else []


class GoBuild(build_py):
    """build_py that also builds libmooncake.so and the mooncake binary."""

    def run(self):
        super().run()
        root = source_root()
        go = os.environ.get("GO", "go")
        pkg = os.path.join(os.path.abspath(self.build_lib), "mooncake")
        lib = os.path.join(pkg, "_lib", "libmooncake.so")
        exe = os.path.join(pkg, "_bin", "mooncake")
        for argv in ([go, "build", "-buildmode=c-shared", "-o", lib, "./binding"],
                     [go, "build"] + version_ldflags(root) + ["-o", exe, "./cmd/mooncake"]):
            self.announce("running %s" % " ".join(argv), level=2)
            subprocess.run(argv, cwd=root, check=True)
        header = os.path.splitext(lib)[0] + ".h"  # cgo's header: not needed at run time
        if os.path.exists(header):
            os.remove(header)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


cmdclass = {"build_py": GoBuild}
if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """Tags the wheel for this platform and any CPython 3 (ctypes, no C extension)."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
