"""pip's build of nemo_lens_cpp: CMake builds libnemo_lens and the _core module, and the wheel
holds both beside the package's Python files (_core finds the library through $ORIGIN). Read by
`pip install .` through pyproject.toml. Environment:
  NEMO_LENS_CMAKE_ARGS       extra CMake options, e.g. "-DNEMO_LENS_WITH_GRPC=ON"
  NEMO_LENS_CMAKE_BUILD_DIR  the CMake build directory (default build/pip in the source tree)
"""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
(ROOT / "build/setuptools").mkdir(parents=True, exist_ok=True)  # setuptools writes there


def version():
    text = (ROOT / "include/nemo/lens/version.hpp").read_text()
    parts = [re.search(rf"#define NEMO_LENS_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class BuildWithCMake(build_py):
    """Copies the Python files, then builds and adds _core and libnemo_lens."""

    def run(self):
        super().run()
        build_dir = pathlib.Path(os.environ.get("NEMO_LENS_CMAKE_BUILD_DIR", ROOT / "build/pip"))
        staging = build_dir / "staging"
        args = ["-DCMAKE_BUILD_TYPE=Release", "-DNEMO_LENS_BUILD_TESTS=OFF",
                "-DNEMO_LENS_BUILD_BENCH=OFF", "-DNEMO_LENS_BUILD_EXAMPLES=OFF",
                "-DNEMO_LENS_BUILD_TOOLS=OFF", "-DNEMO_LENS_WITH_PYTHON=ON",
                f"-DPython3_EXECUTABLE={sys.executable}", "-DNEMO_LENS_PYTHON_RPATH=$ORIGIN",
                f"-DCMAKE_INSTALL_PREFIX={staging}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        args += shlex.split(os.environ.get("NEMO_LENS_CMAKE_ARGS", ""))
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args])
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2)])
        subprocess.check_call(["cmake", "--install", str(build_dir)])
        package = pathlib.Path(self.build_lib) / "nemo_lens_cpp"
        modules = list((staging / "lib/python/nemo_lens_cpp").glob("_core*.so"))
        libraries = list((staging / "lib").glob("libnemo_lens.so.*"))
        if len(modules) != 1 or not libraries:
            raise RuntimeError(f"the CMake build in {build_dir} did not install _core and "
                               f"libnemo_lens (found {modules} and {libraries})")
        shutil.copy2(modules[0], package / modules[0].name)
        soname = min(libraries, key=lambda p: len(p.name))  # libnemo_lens.so.0, what _core needs
        shutil.copy2(soname, package / soname.name)


class BinaryDistribution(Distribution):
    """A wheel for this platform and Python: it holds compiled code."""

    def has_ext_modules(self):
        return True


setup(
    version=version(),
    package_dir={"": "python"},
    packages=find_packages(where="python"),
    package_data={"nemo_lens_cpp": ["py.typed"]},
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
    options={"build": {"build_base": "build/setuptools"},
             "egg_info": {"egg_base": "build/setuptools"}},
    zip_safe=False,
)
