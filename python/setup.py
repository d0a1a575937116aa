"""pip install ./python: builds kvtier's native module with CMake and installs
the package. Needs only Debian's packages (scripts/setup.sh installs them):
no package index is contacted, and there is deliberately no pyproject.toml
build-system table, so pip uses the setuptools that is already installed.

The native module is built by the repository's own CMake project (target
kvtier_python). An existing build tree is reused when it was configured for
this interpreter: $KVTIER_BUILD_DIR, else the repository's build/. Otherwise
a private build tree is configured under setuptools' build_temp.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(kvtier VERSION ([0-9.]+)", f.read())
    return m.group(1) if m else "0.0.0"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        build_dir = self._reusable_tree(suffix) or self._private_tree()
        jobs = os.environ.get("KVTIER_JOBS", "2")
        print(f"kvtier: building the native module in {build_dir}", flush=True)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "kvtier_python",
                               "-j", jobs])
        built = os.path.join(build_dir, "python", "kvtier", "_kvtier" + suffix)
        if not os.path.exists(built):
            raise RuntimeError(f"CMake did not produce {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)

    @staticmethod
    def _reusable_tree(suffix):
        for cand in (os.environ.get("KVTIER_BUILD_DIR"), os.path.join(ROOT, "build")):
            if not cand or not os.path.exists(os.path.join(cand, "CMakeCache.txt")):
                continue
            cache = open(os.path.join(cand, "CMakeCache.txt")).read()
            m = re.search(r"^Python_EXECUTABLE:[A-Z]+=(.*)$", cache, re.M)
            if m and os.path.realpath(m.group(1)) == os.path.realpath(sys.executable):
                return cand
            # Same interpreter ABI (a venv over Debian's python3) is fine too.
            built = os.path.join(cand, "python", "kvtier", "_kvtier" + suffix)
            if os.path.exists(built):
                return cand
        return None

    def _private_tree(self):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            cmd = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                   "-DKVTIER_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                cmd += ["-G", "Ninja"]
            subprocess.check_call(cmd)
        return build_dir


setup(
    name="kvtier",
    version=project_version(),
    description="A shared tier of RAM and NVMe for the KV cache of LLM prompt prefixes",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=find_packages(include=["kvtier", "kvtier.*"]),
    package_data={"kvtier": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("kvtier._kvtier", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[],  # numpy and torch are optional (buffers and the engine)
    zip_safe=False,
)
