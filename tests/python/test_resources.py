"""The resource attributes NeMo Lens v0.2.0 detects, checked differentially: for full SLURM,
Kubernetes and host environments, each of v0.2.0's keys has the same presence, value and type in
lens' ``detect_slurm``/``detect_kubernetes``/``detect_local``, in ``TelemetryHandle.resource()``
and in the resource a set-up exports (the file exporter's OTLP JSON), as in the reference.
lens may write more keys than v0.2.0; it must not change v0.2.0's.

The reference is NeMo Lens itself when ``nemo.lens`` can be found on ``sys.path``: its
``resources/slurm.py``, ``kubernetes.py`` and ``local.py`` run in the same process as lens'
detection (loaded on their own: ``nemo/lens/__init__.py`` needs OpenTelemetry and Python 3.12,
the three modules only the standard library). By hand, from a NeMo Lens v0.2.0 checkout::

    PYTHONPATH=build/python:build/examples/python_extension:$NEMO_LENS/src \\
        python3 -m pytest tests/python/test_resources.py

Otherwise it is V020 below, v0.2.0's keys with their variables and types. Each test's id ends
with the reference it used (``nemo_lens`` or ``table``); with NeMo Lens found,
test_the_table_is_nemo_lens_v020 also checks V020 against it.

Each environment runs in a subprocess of its own, with ``PATH`` holding nothing but a fake
``nvidia-smi`` (or nothing), so that the GPU count does not depend on this machine.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

# ---- the reference: NeMo Lens v0.2.0's detected keys ----

# Every key is a string, the variable's value exactly as it is (never parsed or trimmed), absent
# when the variable is unset or empty. The SLURM keys only when SLURM_JOB_ID is not empty.
V020_SLURM = {
    "slurm.job.id": "SLURM_JOB_ID",
    "slurm.job.name": "SLURM_JOB_NAME",
    "slurm.nodelist": "SLURM_NODELIST",
    "slurm.nnodes": "SLURM_NNODES",
    "slurm.ntasks": "SLURM_NTASKS",
    "slurm.partition": "SLURM_PARTITION",
    "slurm.cluster.name": "SLURM_CLUSTER_NAME",
}
# The Kubernetes keys only when KUBERNETES_SERVICE_HOST is not empty or the service-account secrets
# are mounted; the first of the variables that is not empty.
K8S_SECRETS = "/var/run/secrets/kubernetes.io"
V020_KUBERNETES = {
    "k8s.namespace.name": ("K8S_NAMESPACE",),
    "k8s.pod.name": ("K8S_POD_NAME", "HOSTNAME"),
    "k8s.pod.uid": ("K8S_POD_UID",),
    "k8s.node.name": ("K8S_NODE_NAME",),
    "k8s.container.name": ("K8S_CONTAINER_NAME",),
    "k8s.job.name": ("K8S_JOB_NAME",),
}
# Always: host.name (str), process.pid (int). host.gpu.count (int): with CUDA_VISIBLE_DEVICES set,
# 0 when it is blank, else its comma-separated entries, blank ones included; unset, the lines
# `nvidia-smi --query-gpu=count --format=csv,noheader` prints, when it runs and exits with 0;
# else absent.
V020_LOCAL_KEYS = ("host.name", "process.pid", "host.gpu.count")
V020_KEYS = {"slurm": tuple(V020_SLURM), "kubernetes": tuple(V020_KUBERNETES),
             "local": V020_LOCAL_KEYS}


def table_reference(env, pid, hostname, nvidia_smi_lines):
    """What V020 says NeMo Lens v0.2.0 detects in `env` (by a process `pid` on `hostname`, with
    an nvidia-smi that prints `nvidia_smi_lines` GPU lines, or None where there is none)."""
    slurm = {}
    if env.get("SLURM_JOB_ID"):
        slurm = {key: ["str", env[var]] for key, var in V020_SLURM.items() if env.get(var)}
    kubernetes = {}
    if env.get("KUBERNETES_SERVICE_HOST") or os.path.exists(K8S_SECRETS):
        for key, variables in V020_KUBERNETES.items():
            value = next((env[v] for v in variables if env.get(v)), None)
            if value is not None:
                kubernetes[key] = ["str", value]
    local = {"host.name": ["str", hostname], "process.pid": ["int", pid]}
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        local["host.gpu.count"] = ["int", 0 if not visible.strip() else visible.count(",") + 1]
    elif nvidia_smi_lines:
        local["host.gpu.count"] = ["int", nvidia_smi_lines]
    return {"slurm": slurm, "kubernetes": kubernetes, "local": local}


def find_nemo_lens():
    """The folder of the real NeMo Lens' nemo/lens package, or None."""
    try:
        spec = importlib.util.find_spec("nemo.lens")
    except ImportError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = list(spec.submodule_search_locations)[0]
    if not os.path.exists(os.path.join(folder, "resources", "slurm.py")):
        return None
    return folder


NEMO_LENS = find_nemo_lens()
REFERENCE = "nemo_lens" if NEMO_LENS else "table"

# ---- the environments ----

FULL_SLURM = {
    "SLURM_JOB_ID": "4242107",
    "SLURM_JOB_NAME": "pretrain-gpt",
    "SLURM_NODELIST": "gpu-[001-004,010],gpu-020",
    "SLURM_NNODES": "4",
    "SLURM_NTASKS": "32",
    "SLURM_PARTITION": "batch_short",
    "SLURM_CLUSTER_NAME": "eos",
    # What lens also reads: none may change a key of v0.2.0.
    "SLURM_JOB_NUM_NODES": "5",
    "SLURM_JOB_PARTITION": "batch",
    "SLURM_ARRAY_JOB_ID": "4242100",
    "SLURM_ARRAY_TASK_ID": "7",
    "SLURM_ARRAY_TASK_COUNT": "8",
    "SLURM_RESTART_COUNT": "1",
    "SLURM_JOB_USER": "alice",
    "SLURMD_NODENAME": "gpu-001",
    "LENS_SLURM_SLUID": "sluid-1",
}
FULL_KUBERNETES = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "K8S_NAMESPACE": "training",
    "K8S_POD_NAME": "pretrain-worker-3",
    "K8S_POD_UID": "0f4e7a52-8c1d-4b7e-9a31-5d2c6e8f1b40",
    "K8S_NODE_NAME": "dgx-b200-17",
    "K8S_CONTAINER_NAME": "trainer",
    "K8S_JOB_NAME": "pretrain",
    "HOSTNAME": "pod-hostname",  # K8S_POD_NAME comes first
}

# name -> (variables, lines the fake nvidia-smi prints or None for no nvidia-smi on PATH)
ENVIRONMENTS = {
    "full": ({**FULL_SLURM, **FULL_KUBERNETES, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, None),
    "raw_values": ({
        "SLURM_JOB_ID": " 99 ",
        "SLURM_NNODES": "04",
        "SLURM_NTASKS": " sixteen ",
        "SLURM_NODELIST": "node1",
        "SLURM_JOB_NAME": "",
        "SLURM_PARTITION": "",
        "SLURM_JOB_PARTITION": "batch",
        "SLURM_CLUSTER_NAME": "",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "K8S_NAMESPACE": "",
        "K8S_POD_NAME": "",
        "HOSTNAME": "pod-from-hostname",
        "CUDA_VISIBLE_DEVICES": "0,1,",
    }, None),
    "detected_nowhere": ({
        **{k: v for k, v in FULL_SLURM.items() if k != "SLURM_JOB_ID"},
        "SLURM_JOB_ID": "",
        **{k: v for k, v in FULL_KUBERNETES.items() if k != "KUBERNETES_SERVICE_HOST"},
        "KUBERNETES_SERVICE_HOST": "",
        "CUDA_VISIBLE_DEVICES": " ",
    }, None),
    "gpus_from_nvidia_smi": ({"SLURM_JOB_ID": "12", "SLURM_NNODES": "1"}, 8),
    "no_gpu_information": ({}, None),
}

# Variables of the test's own environment that the subprocess does not inherit.
_NOT_INHERITED = ("SLURM", "LENS_SLURM_", "NV_LAUNCH_", "K8S_", "KUBERNETES_", "HOSTNAME",
                  "CUDA_VISIBLE_DEVICES", "NEMO_LENS_", "OTEL_", "MEGATRON_OTEL_", "RL_OTEL_",
                  "DEPLOYMENT_ENV", "ENVIRONMENT", "WANDB_", "PATH")

# Run in the subprocess: prints {source: {group: {key: [type name, value]}}} as JSON.
_PROBE = textwrap.dedent("""
    import importlib.util, json, os, socket, sys

    import nemo_lens_cpp as lens
    from nemo_lens_cpp.resources import detect_kubernetes, detect_local, detect_slurm

    def typed(attributes):
        return {k: [type(v).__name__, v] for k, v in attributes.items()}

    out = {"pid": os.getpid(), "hostname": socket.gethostname(),
           "python": {"slurm": typed(detect_slurm()), "kubernetes": typed(detect_kubernetes()),
                      "local": typed(detect_local())}}
    if len(sys.argv) > 1:  # NeMo Lens' own detection, in this same process
        out["nemo_lens"] = {}
        for group in ("slurm", "kubernetes", "local"):
            path = os.path.join(sys.argv[1], "resources", group + ".py")
            spec = importlib.util.spec_from_file_location("nemo_lens_v020_" + group, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            out["nemo_lens"][group] = typed(getattr(module, "detect_" + group)())
    config = lens.NemoLensConfig(enabled=True, exporter="file", metrics_enabled=False,
                                 export_strategy="all_ranks")
    handle = lens.setup_telemetry(config)
    with lens.span_cm("probe"):
        pass
    out["handle"] = typed(handle.resource())
    assert handle.shutdown(10000)
    print(json.dumps(out))
""")


def _typed_otlp(value):
    """[type name, value] of an OTLP JSON AnyValue."""
    (kind, v), = value.items()
    return {"stringValue": lambda: ["str", v], "intValue": lambda: ["int", int(v)],
            "boolValue": lambda: ["bool", v], "doubleValue": lambda: ["float", v]}[kind]()


def _exported_resource(path):
    """The resource of the spans in a file of OTLP JSON lines: one, the same for every span."""
    resources = []
    with open(path) as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                attrs = {a["key"]: _typed_otlp(a["value"]) for a in rs["resource"]["attributes"]}
                if attrs not in resources:
                    resources.append(attrs)
    assert len(resources) == 1, resources
    return resources[0]


def _by_group(attributes):
    groups = {"slurm": "slurm.", "kubernetes": "k8s.", "local": ("host.", "process.")}
    return {g: {k: v for k, v in attributes.items() if k.startswith(p)} for g, p in groups.items()}


def _probe(name, tmp_path):
    variables, nvidia_smi_lines = ENVIRONMENTS[name]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if nvidia_smi_lines is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text("#!/bin/sh\n[ \"$1\" = --query-gpu=count ] || exit 3\n" +
                        f"echo {nvidia_smi_lines}\n" * nvidia_smi_lines)
        fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(variables)
    env.update(PATH=str(bin_dir), NEMO_LENS_EXPORT_PATH=str(tmp_path / "t{rank}.jsonl"),
               NEMO_LENS_CONTROL_DIR=str(tmp_path / "ctl"))
    args = [sys.executable, "-c", _PROBE] + ([NEMO_LENS] if NEMO_LENS else [])
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    out["exported"] = _by_group(_exported_resource(tmp_path / "t0.jsonl"))
    out["handle"] = _by_group(out["handle"])
    out["table"] = table_reference(env, out["pid"], out["hostname"], nvidia_smi_lines)
    return out


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """name -> what the subprocess for that environment detected, per source."""
    return {name: _probe(name, tmp_path_factory.mktemp(name)) for name in ENVIRONMENTS}


def _v020_view(detected, group):
    """`detected`'s value of each key v0.2.0 can write in `group` (None where absent)."""
    return {key: detected.get(key) for key in V020_KEYS[group]}


@pytest.mark.parametrize("name", ENVIRONMENTS, ids=[f"{n}-vs-{REFERENCE}" for n in ENVIRONMENTS])
@pytest.mark.parametrize("group", ["slurm", "kubernetes", "local"])
@pytest.mark.parametrize("source", ["python", "handle", "exported"])
def test_v020_keys_have_v020_values_and_types(probes, name, group, source):
    out = probes[name]
    reference = out[REFERENCE][group]
    assert set(reference) <= set(V020_KEYS[group])  # the reference writes no other key
    assert _v020_view(out[source][group], group) == _v020_view(reference, group)
    if not reference and group != "local":  # not detected: lens adds nothing of its own either
        assert out[source][group] == {}


def test_the_environments_cover_every_v020_key(probes):
    # Each of v0.2.0's keys is present in some environment and absent in another.
    seen = {key: set() for keys in V020_KEYS.values() for key in keys}
    for out in probes.values():
        for group, keys in V020_KEYS.items():
            for key in keys:
                seen[key].add(key in out[REFERENCE][group])
    assert {k: v for k, v in seen.items() if v != {True, False}} == {
        "host.name": {True}, "process.pid": {True}}  # always written


def test_the_counts_are_strings_and_lens_keeps_its_own_keys(probes):
    full = probes["full"]["python"]["slurm"]
    assert full["slurm.nnodes"] == ["str", "4"]  # SLURM_NNODES, not SLURM_JOB_NUM_NODES
    assert full["slurm.ntasks"] == ["str", "32"]
    assert full["slurm.job.id"] == ["str", "4242107"]  # the element's own id
    assert full["slurm.array.job_id"] == ["str", "4242100"]
    assert full["slurm.array.task_id"] == ["str", "7"]
    assert full["slurm.job.partition"] == ["str", "batch"]
    assert full["slurm.restart_count"] == ["int", 1]
    raw = probes["raw_values"]["exported"]["slurm"]
    assert raw["slurm.nnodes"] == ["str", "04"] and raw["slurm.ntasks"] == ["str", " sixteen "]
    assert "slurm.partition" not in raw and raw["slurm.job.partition"] == ["str", "batch"]
    assert probes["gpus_from_nvidia_smi"]["python"]["local"]["host.gpu.count"] == ["int", 8]
    assert "host.gpu.count" not in probes["no_gpu_information"]["exported"]["local"]


@pytest.mark.skipif(NEMO_LENS is None,
                    reason="NeMo Lens (nemo.lens) not found: the differential tests used the "
                           "table V020 as their reference")
@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_the_table_is_nemo_lens_v020(probes, name):
    assert probes[name]["table"] == probes[name]["nemo_lens"]

