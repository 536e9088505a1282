"""NeMo Lens' module layout (nemo.lens v0.2.0): every module path and public name, and what each
does when called the way NeMo Lens code calls it."""

import importlib
import inspect
import json
import logging
import os
import socket

import pytest

import nemo_lens_cpp as lens

# NeMo Lens' modules and the public names each defines (v0.2.0).
MODULES = {
    "config": ["NemoLensConfig"],
    "groups": ["SpanGroup"],
    "state": ["is_span_group_enabled", "set_enabled_span_groups", "set_pp_trace_carrier",
              "get_pp_trace_carrier"],
    "handle": ["TelemetryHandle", "setup_telemetry"],
    "helpers": ["DEFAULT_REDACT_KEYS", "managed_span", "redact_value",
                "safe_set_span_attributes", "span_cm", "trace_fn"],
    "strategies": ["BUILTIN_STRATEGIES", "ExportStrategy", "get_export_strategy",
                   "register_export_strategy", "registered_strategies",
                   "unregister_export_strategy"],
    "propagation": ["extract_context", "inject_context"],
    "sampling": ["RankAwareSampler"],
    "distributed": ["broadcast_trace_context", "create_linked_span"],
    "resources": ["detect_resource", "detect_slurm", "detect_kubernetes", "detect_local"],
    "resources.slurm": ["detect_slurm"],
    "resources.kubernetes": ["detect_kubernetes"],
    "resources.local": ["detect_local"],
    "instruments": ["record_inference_metrics"],
    "instruments.inference": ["record_inference_metrics"],
    "instruments.rl": ["record_rl_metrics"],
    "instruments.gym": ["record_gym_metrics"],
    "logging_bridge": ["setup_logging_bridge"],
    "fallbacks": ["trace_fn", "managed_span", "span_cm", "is_span_group_enabled",
                  "safe_set_span_attributes"],
    "contrib": [],
    "contrib.nccl": ["serialize_context", "deserialize_context", "extract_nccl_context"],
    "contrib.ray": ["inject_ray_context", "extract_ray_context", "traced_remote_call",
                    "ray_dispatch_with_context"],
    "contrib.fastapi": ["instrument_fastapi"],
    "contrib.aiohttp": ["instrument_aiohttp_client"],
    "package_info": ["__version__", "__package_name__", "__contact_names__",
                     "__contact_emails__", "__homepage__", "__repository_url__",
                     "__download_url__"],
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_path_imports_with_its_names_documented(module):
    mod = importlib.import_module(f"nemo_lens_cpp.{module}")
    assert inspect.getdoc(mod), f"nemo_lens_cpp.{module} has no docstring"
    for name in MODULES[module]:
        obj = getattr(mod, name)
        if callable(obj) and name != "ExportStrategy":
            assert inspect.getdoc(obj), f"nemo_lens_cpp.{module}.{name} has no docstring"


def test_the_module_names_are_the_top_level_ones():
    from nemo_lens_cpp import handle, helpers, propagation, state, strategies

    assert helpers.managed_span is lens.managed_span
    assert handle.setup_telemetry is lens.setup_telemetry
    assert state.is_span_group_enabled is lens.is_span_group_enabled
    assert strategies.register_export_strategy is lens.register_export_strategy
    assert propagation.inject_context is lens.inject_context
    assert lens.redact_value is helpers.redact_value
    assert lens.safe_set_span_attributes is helpers.safe_set_span_attributes
    assert lens.DEFAULT_REDACT_KEYS == frozenset(
        {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"})


def test_version_is_the_compiled_library_one():
    from nemo_lens_cpp import package_info

    assert lens.__version__ == package_info.__version__
    parts = lens.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)
    assert package_info.VERSION[:3] == tuple(int(p) for p in parts)


def test_redact_value_and_safe_set_span_attributes(tracing):
    from nemo_lens_cpp.helpers import redact_value, safe_set_span_attributes

    assert redact_value("prompt", "secret words") == "[REDACTED]"
    assert redact_value("model", "llama") == "llama"
    assert redact_value("model", "llama", frozenset({"model"})) == "[REDACTED]"
    safe_set_span_attributes(None, {"x": 1})  # a disabled managed_span yields None
    with lens.span_cm("attrs") as span:
        safe_set_span_attributes(span, {"prompt": "hi", "n": 3, "none": None, "obj": object(),
                                        "ids": (1, 2), "mixed": [1, object()], "ok": True})
        safe_set_span_attributes(span, {"model": "x"}, redact_keys=frozenset({"model"}))
    (s,) = [s for s in tracing.spans() if s.name == "attrs"]
    assert s.attributes["prompt"] == "[REDACTED]" and s.attributes["n"] == 3
    assert s.attributes["ids"] == [1, 2] and s.attributes["ok"] is True
    assert s.attributes["model"] == "[REDACTED]"
    assert not {"none", "obj", "mixed"} & set(s.attributes)


class _OtelLikeSpan:
    """A span with OpenTelemetry's is_recording/set_attribute only."""

    def __init__(self, recording=True):
        self.recording = recording
        self.attributes = {}

    def is_recording(self):
        return self.recording

    def set_attribute(self, key, value):
        self.attributes[key] = value


def test_safe_set_span_attributes_takes_any_span_with_set_attribute():
    from nemo_lens_cpp.helpers import safe_set_span_attributes

    span = _OtelLikeSpan()
    safe_set_span_attributes(span, {"token": "abc", "step": 4, "t": (1.5, 2.5), "bad": {}})
    assert span.attributes == {"token": "[REDACTED]", "step": 4, "t": [1.5, 2.5]}
    idle = _OtelLikeSpan(recording=False)
    safe_set_span_attributes(idle, {"step": 4})
    assert idle.attributes == {}


def test_pp_trace_carrier_is_stored_and_cleared(tracing):
    from nemo_lens_cpp.state import get_pp_trace_carrier, set_pp_trace_carrier

    assert get_pp_trace_carrier() is None
    with lens.span_cm("stage0") as span:
        carrier = lens.inject_context({})
    set_pp_trace_carrier(carrier)
    assert get_pp_trace_carrier() is carrier
    assert carrier["traceparent"].split("-")[1] == span.get_span_context().trace_id_hex
    with pytest.raises(TypeError, match="dict or None"):
        set_pp_trace_carrier("00-abc")
    set_pp_trace_carrier(None)
    assert get_pp_trace_carrier() is None


def test_builtin_strategies_cannot_be_unregistered():
    from nemo_lens_cpp.strategies import BUILTIN_STRATEGIES, unregister_export_strategy

    assert BUILTIN_STRATEGIES == frozenset(
        {"all_ranks", "single_rank", "sampled", "first_rank_per_node"})
    assert BUILTIN_STRATEGIES <= set(lens.registered_strategies())
    for name in BUILTIN_STRATEGIES:
        with pytest.raises(ValueError, match="Cannot unregister built-in"):
            unregister_export_strategy(name)


def test_get_export_strategy_returns_the_registered_callable():
    def odd(config, rank, world_size):
        return rank % 2 == 1

    lens.register_export_strategy("odd_ranks", odd)
    try:
        assert lens.get_export_strategy("odd_ranks") is odd
        replacement = lambda c, r, w: True  # noqa: E731
        lens.register_export_strategy("odd_ranks", replacement, allow_override=True)
        assert lens.get_export_strategy("odd_ranks") is replacement
    finally:
        lens.unregister_export_strategy("odd_ranks")
    with pytest.raises(ValueError, match="Unknown export_strategy 'odd_ranks'"):
        lens.get_export_strategy("odd_ranks")


def test_second_setup_message_carries_nemo_lens_phrase():
    config = lens.NemoLensConfig(enabled=True, exporter="console", metrics_enabled=False,
                                 export_strategy="all_ranks")
    h = lens.setup_telemetry(config, _allow_reinit=True)
    try:
        with pytest.raises(RuntimeError, match="already been initialised") as err:
            lens.setup_telemetry(config)
        assert "allow_reinit" in str(err.value)  # lens' fuller text stays
    finally:
        h.shutdown()


def test_sample_rate_message_is_nemo_lens_one(monkeypatch):
    with pytest.raises(ValueError, match=r"export_sample_rate must be in \[0.0, 1.0\]"):
        lens.NemoLensConfig(export_sample_rate=1.5)
    monkeypatch.setenv("NEMO_LENS_EXPORT_SAMPLE_RATE", "-0.1")
    with pytest.raises(ValueError, match=r"NEMO_LENS_EXPORT_SAMPLE_RATE: '-0.1'.*"
                                         r"export_sample_rate must be in \[0.0, 1.0\]"):
        lens.NemoLensConfig.from_env()


def test_rank_aware_sampler_decides_as_the_sampled_strategy():
    from nemo_lens_cpp.sampling import RankAwareSampler

    sampled = lens.get_export_strategy("sampled")  # the compiled rule C++ set-ups use
    for rate in (0.0, 0.1, 0.5, 0.9, 1.0):
        config = lens.NemoLensConfig(export_sample_rate=rate)
        for rank in range(64):
            result = RankAwareSampler(rank=rank, world_size=64, sample_rate=rate).should_sample()
            if not isinstance(result, bool):  # the SDK's SamplingResult, when it is importable
                result = result.decision.name == "RECORD_AND_SAMPLE"
            assert result is sampled(config, rank, 64), (rate, rank)
    assert RankAwareSampler(3, 8, 0.25).get_description() == "RankAwareSampler(rank=3, rate=0.25)"


def test_detect_resource_is_what_setup_puts_on_every_span(monkeypatch):
    from nemo_lens_cpp.resources import (detect_kubernetes, detect_local, detect_resource,
                                         detect_slurm)

    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NAME", "pretrain")
    monkeypatch.setenv("SLURM_NNODES", "8")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("K8S_POD_NAME", "trainer-0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    detected = detect_resource()
    assert detected["host.name"] == socket.gethostname()
    assert detected["process.pid"] == os.getpid()
    assert detected["host.gpu.count"] == 3
    assert detected["slurm.job.id"] == "4242" and detected["slurm.job.name"] == "pretrain"
    assert detected["slurm.nnodes"] == "8"  # NeMo Lens v0.2.0 writes the string
    assert detected["k8s.pod.name"] == "trainer-0"
    assert detect_slurm() == {k: v for k, v in detected.items() if k.startswith("slurm.")}
    assert detect_kubernetes() == {"k8s.pod.name": "trainer-0"}
    assert set(detect_local()) == {"host.name", "process.pid", "host.gpu.count"}
    config = lens.NemoLensConfig(enabled=True, exporter="console", metrics_enabled=False,
                                 export_strategy="all_ranks")
    h = lens.setup_telemetry(config, _allow_reinit=True)
    try:
        resource = h.resource()
    finally:
        h.shutdown()
    for key, value in detected.items():
        assert resource[key] == value, key
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert detect_slurm() == {}
    if not os.path.exists("/var/run/secrets/kubernetes.io"):
        assert detect_kubernetes() == {}


def test_semconv_names_and_values_are_those_of_the_cpp_header():
    # Each Python constant NAME_X is kNameX in <nemo/lens/semconv.hpp>, with the same value.
    import pathlib
    import re

    from nemo_lens_cpp import semconv

    header = pathlib.Path(__file__).resolve().parents[2] / "include/nemo/lens/semconv.hpp"
    cpp = dict(re.findall(r'std::string_view (k\w+) = "([^"]*)";', header.read_text()))
    python = {n: getattr(semconv, n) for n in dir(semconv) if n.isupper()}
    assert len(python) >= 59
    for name, value in python.items():
        cpp_name = "k" + "".join(w.capitalize() for w in name.split("_"))
        assert cpp.get(cpp_name) == value, f"semconv.{name}: C++ {cpp_name}"


def test_semconv_has_every_nemo_lens_constant_with_its_value():
    from nemo_lens_cpp import semconv

    names = [n for n in dir(semconv) if n.isupper()]
    assert len(names) == 59
    assert semconv.SEMCONV_VERSION == "1.29.0"
    assert semconv.NEMO_SPAN_TRUNCATED == "nemo.span.truncated"
    assert semconv.GENAI_TOKEN_TYPE == "gen_ai.token.type"
    assert semconv.RL_THROUGHPUT_TOKENS_PER_SEC == "rl.throughput.tokens_per_sec"
    assert semconv.K8S_JOB_NAME == "k8s.job.name"
    values = [getattr(semconv, n) for n in names if n != "SEMCONV_VERSION"]
    assert len(values) == len(set(values))  # no two names for one attribute
    for v in values:
        assert v == v.lower() and " " not in v and "." in v, v


def _metric_points(path):
    """name -> (unit, kind, [data points]) from a file exporter's OTLP JSON lines."""
    out = {}
    for line in open(path):
        for rm in json.loads(line)["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for metric in sm["metrics"]:
                    kind = next(k for k in ("sum", "gauge", "histogram") if k in metric)
                    out[metric["name"]] = (metric.get("unit", ""), kind,
                                           metric[kind]["dataPoints"])
    return out


def _attrs(point):
    return {a["key"]: next(iter(a["value"].values())) for a in point.get("attributes", [])}


@pytest.fixture
def metrics_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMO_LENS_METRICS_EXPORT_PATH", str(tmp_path / "m{rank}.jsonl"))
    monkeypatch.setenv("NEMO_LENS_EXPORT_PATH", str(tmp_path / "t{rank}.jsonl"))
    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", exporter="file")
    h = lens.setup_telemetry(config, _allow_reinit=True)

    def read():
        assert h.shutdown(10000)
        return _metric_points(tmp_path / "m0.jsonl")

    yield read
    h.shutdown(10000)


def test_record_inference_metrics_names_and_attributes(metrics_file):
    from nemo_lens_cpp.instruments import record_inference_metrics

    meter = lens.get_meter("py.inference")
    record_inference_metrics(meter, request_duration_s=0.5, model="llama", input_tokens=128,
                             output_tokens=32)
    record_inference_metrics(meter, output_tokens=8, provider_name="vllm",
                             operation_name="chat")
    points = metrics_file()
    unit, kind, (duration,) = points["gen_ai.server.request.duration"]
    assert (unit, kind) == ("s", "histogram") and duration["sum"] == 0.5
    assert _attrs(duration) == {"gen_ai.operation.name": "text_completion",
                                "gen_ai.provider.name": "nemo", "gen_ai.request.model": "llama"}
    unit, kind, usage = points["gen_ai.client.token.usage"]
    assert (unit, kind) == ("{token}", "histogram")
    by_attrs = {tuple(sorted(_attrs(p).items())): p["sum"] for p in usage}
    assert by_attrs == {
        (("gen_ai.operation.name", "text_completion"), ("gen_ai.provider.name", "nemo"),
         ("gen_ai.request.model", "llama"), ("gen_ai.token.type", "input")): 128,
        (("gen_ai.operation.name", "text_completion"), ("gen_ai.provider.name", "nemo"),
         ("gen_ai.request.model", "llama"), ("gen_ai.token.type", "output")): 32,
        (("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "vllm"),
         ("gen_ai.token.type", "output")): 8,
    }


def test_record_rl_and_gym_metrics_names(metrics_file):
    from nemo_lens_cpp.instruments.gym import record_gym_metrics
    from nemo_lens_cpp.instruments.rl import record_rl_metrics

    meter = lens.get_meter("py.rl")
    record_rl_metrics(meter, reward_mean=0.75, kl_divergence=0.01, throughput_tokens_per_sec=900,
                      generation_duration_ms=850)
    record_rl_metrics(meter, reward_mean=0.5)  # the gauge keeps the last value
    record_gym_metrics(meter, server_request_duration_ms=12.5, verify_success_rate=0.9,
                       active_servers=4)
    points = metrics_file()
    assert points["rl.reward.mean"][1] == "gauge"
    assert [p["asDouble"] for p in points["rl.reward.mean"][2]] == [0.5]
    assert points["rl.throughput.tokens_per_sec"][0] == "{token}/s"
    assert points["rl.generation.duration_ms"][:2] == ("ms", "histogram")
    assert "rl.policy_loss" not in points  # never recorded: nothing exported
    assert points["gym.server.request_duration_ms"][:2] == ("ms", "histogram")
    assert [p["asDouble"] for p in points["gym.servers.active"][2]] == [4]
    assert [p["asDouble"] for p in points["gym.verify.success_rate"][2]] == [0.9]


def test_every_instrument_name_is_a_cpp_semconv_constant(metrics_file):
    # The C++ record_*_metrics (src/metrics/families.cpp) name their instruments with these
    # constants, so a C++ server and a Python one export the same metrics.
    import pathlib
    import re

    from nemo_lens_cpp.instruments import (record_gym_metrics, record_inference_metrics,
                                           record_rl_metrics)

    meter = lens.get_meter("py.parity")
    record_inference_metrics(meter, request_duration_s=1, model="m", input_tokens=1,
                             output_tokens=1)
    record_rl_metrics(meter, **{k: 1.0 for k in (
        "reward_mean", "kl_divergence", "policy_loss", "value_loss", "entropy",
        "response_length_mean", "grad_norm", "learning_rate", "throughput_tokens_per_sec",
        "generation_duration_ms", "rollout_duration_ms")})
    record_gym_metrics(meter, server_request_duration_ms=1, rollout_duration_ms=1,
                       verify_duration_ms=1, verify_success_rate=1, active_servers=1)
    names = {n for n in metrics_file() if n.startswith(("gen_ai.", "rl.", "gym."))}
    assert len(names) == 2 + 11 + 5, sorted(names)
    header = pathlib.Path(__file__).resolve().parents[2] / "include/nemo/lens/semconv.hpp"
    cpp = set(re.findall(r'std::string_view k\w+ = "([^"]*)";', header.read_text()))
    assert names <= cpp, names - cpp


def test_a_meter_that_cannot_make_instruments_is_logged_not_raised(caplog):
    from nemo_lens_cpp.instruments import record_inference_metrics

    class Broken:
        def create_histogram(self, **kwargs):
            raise RuntimeError("no histograms here")

    with caplog.at_level(logging.WARNING):
        record_inference_metrics(Broken(), request_duration_s=1.0)
    assert "Failed to create inference metric instruments" in caplog.text


def test_setup_logging_bridge_adds_one_lens_handler():
    from nemo_lens_cpp.logging_bridge import setup_logging_bridge

    logger = logging.getLogger("py.test.bridge")
    try:
        setup_logging_bridge("py.test.bridge", logging.WARNING)
        setup_logging_bridge("py.test.bridge", logging.ERROR)
        handlers = [h for h in logger.handlers if isinstance(h, lens.LoggingHandler)]
        assert len(handlers) == 1 and handlers[0].level == logging.ERROR
    finally:
        for h in list(logger.handlers):
            logger.removeHandler(h)


def _fake_otel_logs(monkeypatch, provider, sdk_provider_class):
    # OpenTelemetry's logs API and SDK modules as the bridge reads them, with `provider` global.
    import sys
    import types

    logs = types.ModuleType("opentelemetry._logs")
    sdk_logs = types.ModuleType("opentelemetry.sdk._logs")

    class OtelHandler(logging.Handler):
        def __init__(self, logger_provider):
            super().__init__()
            self.logger_provider = logger_provider

    logs.get_logger_provider = lambda: provider
    sdk_logs.LoggerProvider = sdk_provider_class
    sdk_logs.LoggingHandler = OtelHandler
    monkeypatch.setitem(sys.modules, logs.__name__, logs)
    monkeypatch.setitem(sys.modules, sdk_logs.__name__, sdk_logs)
    return OtelHandler


@pytest.mark.parametrize("provider_kind", ["sdk", "no-op", "proxy"])
def test_setup_logging_bridge_follows_the_global_logger_provider(monkeypatch, provider_kind):
    # NeMo Lens' rule: an SDK LoggerProvider gets OpenTelemetry's handler, another provider a
    # program set leaves the logger untouched; with none set (the proxy), lens' pipeline is the
    # provider and its handler is added.
    from nemo_lens_cpp.logging_bridge import setup_logging_bridge

    class LoggerProvider:
        pass

    class NoOpLoggerProvider:
        pass

    class ProxyLoggerProvider:
        pass

    provider = {"sdk": LoggerProvider, "no-op": NoOpLoggerProvider,
                "proxy": ProxyLoggerProvider}[provider_kind]()
    otel_handler = _fake_otel_logs(monkeypatch, provider, LoggerProvider)
    logger = logging.getLogger("py.test.bridge.provider")
    logger.handlers.clear()
    try:
        setup_logging_bridge(logger.name, logging.WARNING)
        if provider_kind == "sdk":
            assert [type(h) for h in logger.handlers] == [otel_handler]
            assert logger.handlers[0].logger_provider is provider
            assert logger.handlers[0].level == logging.WARNING
        elif provider_kind == "no-op":
            assert logger.handlers == []
        else:
            assert [type(h) for h in logger.handlers] == [lens.LoggingHandler]
    finally:
        logger.handlers.clear()


def test_fallbacks_need_only_the_standard_library():
    import ast

    from nemo_lens_cpp import fallbacks

    tree = ast.parse(inspect.getsource(fallbacks))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert imported == {"contextlib"}
    with fallbacks.managed_span("step", "x", iteration=1) as span:
        assert span is None
    with fallbacks.span_cm("x") as span:
        assert span is None
    f = lambda: 7  # noqa: E731
    assert fallbacks.trace_fn("step", "x")(f) is f
    assert fallbacks.is_span_group_enabled("job") is False
    assert fallbacks.safe_set_span_attributes(None, {"a": 1}) is None


def test_nccl_carrier_round_trip_and_bad_bytes(tracing):
    from nemo_lens_cpp.contrib.nccl import (deserialize_context, extract_nccl_context,
                                            serialize_context)

    assert serialize_context() == b"{}"
    with lens.span_cm("stage0") as span:
        payload = serialize_context()
    carrier = json.loads(payload.decode("utf-8"))
    assert carrier["traceparent"].split("-")[2] == span.get_span_context().span_id_hex
    assert deserialize_context(payload) == carrier
    assert deserialize_context(b"\xff\xfe") is None
    assert deserialize_context(b"[1, 2]") is None
    assert not extract_nccl_context(b"not json")
    with extract_nccl_context(payload), lens.span_cm("stage1"):
        pass
    stage1 = tracing.by_name()["stage1"]
    assert stage1.trace_id == span.get_span_context().trace_id_hex
    assert stage1.parent_span_id == span.get_span_context().span_id_hex and stage1.parent_is_remote


def test_ray_helpers_carry_the_trace_to_the_remote_call(tracing):
    from nemo_lens_cpp.contrib.ray import (extract_ray_context, ray_dispatch_with_context,
                                           traced_remote_call)

    def work(x):
        """The remote method."""
        return x * 2

    remote = traced_remote_call(work)
    assert remote.__doc__ == "The remote method."

    class RemoteFn:  # what ray.remote() makes: .remote(*args, **kwargs)
        def remote(self, *args, **kwargs):
            return remote(*args, **kwargs)

    with lens.span_cm("driver") as driver:
        assert ray_dispatch_with_context(RemoteFn(), 21) == 42
    assert not extract_ray_context(None)
    spans = tracing.by_name()
    call = spans[work.__qualname__]
    assert call.trace_id == driver.get_span_context().trace_id_hex
    assert call.parent_span_id == driver.get_span_context().span_id_hex


@pytest.mark.parametrize("module,function,package", [
    ("fastapi", "instrument_fastapi", "opentelemetry-instrumentation-fastapi"),
    ("aiohttp", "instrument_aiohttp_client", "opentelemetry-instrumentation-aiohttp-client"),
])
def test_contrib_instrumentations_name_the_missing_package(module, function, package):
    mod = importlib.import_module(f"nemo_lens_cpp.contrib.{module}")
    args = (object(),) if module == "fastapi" else ()
    with pytest.raises(ImportError, match=package):
        getattr(mod, function)(*args)
