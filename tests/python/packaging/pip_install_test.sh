#!/usr/bin/env bash
# The packaging test: `pip install --no-build-isolation .` into a fresh venv over the distribution's
# python3 (offline: --no-index), then the installed package, imported from outside the source tree,
# sets up, records a span through its own libnemo_lens and reports its version.
#   pip_install_test.sh PYTHON SOURCE_DIR WORK_DIR CMAKE_DIR [CMAKE_ARGS...]
# WORK_DIR (emptied) holds the venv, CMAKE_DIR the CMake build; CMAKE_ARGS are passed to the build.
# So that ccache serves the objects the test's own build already compiled, the test passes that
# build's options and a CMAKE_DIR beside it: ccache's CCACHE_BASEDIR makes paths relative to the
# directory a compiler runs in, so only a build directory as deep as the first gets the same
# command lines (one nested in build/tests/ missed every object: 250 s of CI's 42 minutes).
set -euo pipefail
python=$1 source=$2 work=$3 cmake_dir=$4
shift 4
rm -rf "$work"
mkdir -p "$work/run"
"$python" -m venv --system-site-packages "$work/venv"
# Quoted for setup.py's shlex.split: a flags option holds spaces.
NEMO_LENS_CMAKE_ARGS=$(printf '%q ' "$@")
export NEMO_LENS_CMAKE_BUILD_DIR=$cmake_dir NEMO_LENS_CMAKE_ARGS CCACHE_NOHASHDIR=1
(cd "$source" && "$work/venv/bin/pip" install --no-build-isolation --no-index -q .) \
  > "$work/pip.log" 2>&1 || { tail -40 "$work/pip.log"; exit 1; }
cd "$work/run"
env -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" <<'PY'
import importlib.metadata, os, sys
import nemo_lens_cpp as lens

venv = os.path.realpath(sys.argv[1])
package = os.path.dirname(os.path.realpath(lens.__file__))
assert package.startswith(venv), f"imported {package}, not the venv's copy under {venv}"
libraries = {line.split()[-1] for line in open("/proc/self/maps") if "libnemo_lens.so" in line}
assert libraries == {os.path.join(package, "libnemo_lens.so.0")}, libraries
assert importlib.metadata.version("nemo-lens-cpp") == lens.__version__, lens.__version__
exporter = lens.InMemorySpanExporter()
handle = lens.setup_telemetry(lens.NemoLensConfig(enabled=True, span_groups="all",
                                                  exporter="console"), span_exporter=exporter)
with lens.managed_span("step", "installed"):
    pass
assert handle.force_flush(10000)
assert [s.name for s in exporter.get_finished_spans()] == ["installed"]
handle.shutdown()
print(f"pip-installed nemo_lens_cpp {lens.__version__} from {package}: ok")
PY
