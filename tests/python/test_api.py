"""The API surface against NeMo Lens' names, span-group catalogs and configuration."""

import inspect

import pytest

import nemo_lens_cpp as lens

# NeMo Lens' public names (nemo.lens v0.2.0) that nemo_lens_cpp provides with the same behaviour.
NEMO_LENS_NAMES = [
    "NemoLensConfig", "SpanGroup", "TelemetryHandle", "setup_telemetry", "span_cm",
    "managed_span", "trace_fn", "DEFAULT_REDACT_KEYS", "inject_context", "extract_context",
    "is_span_group_enabled", "set_enabled_span_groups", "ExportStrategy",
    "register_export_strategy", "registered_strategies", "unregister_export_strategy",
    "safe_set_span_attributes", "redact_value", "broadcast_trace_context", "create_linked_span",
    "__version__", "__package_name__", "__contact_names__", "__contact_emails__",
    "__homepage__", "__repository_url__", "__download_url__",
]


def test_every_nemo_lens_name_is_exported_and_documented():
    for name in NEMO_LENS_NAMES + ["MegatronSpanGroup", "bridge_opentelemetry",
                                   "InMemorySpanExporter", "SpanGroupError", "ConfigError",
                                   "capture"]:
        assert name in lens.__all__, name
        obj = getattr(lens, name)
        if callable(obj) and name != "ExportStrategy":
            assert inspect.getdoc(obj), f"{name} has no docstring"
    for name in lens.__all__:
        assert hasattr(lens, name), name


def test_signatures_take_nemo_lens_arguments():
    params = inspect.signature(lens.setup_telemetry).parameters
    assert list(params)[:7] == ["config", "rank", "world_size", "resource_attributes",
                                "span_exporter", "metric_reader", "export_strategy"]
    assert params["rank"].default == 0 and params["world_size"].default == 1
    params = inspect.signature(lens.NemoLensConfig.from_env).parameters
    assert list(params) == ["prefix", "fallback_prefix", "span_group_cls"]
    assert params["prefix"].default == "NEMO_LENS"
    assert inspect.signature(lens.register_export_strategy).parameters[
        "allow_override"].kind is inspect.Parameter.KEYWORD_ONLY


def test_span_group_constants_all_groups_and_presets_are_nemo_lens_ones():
    g = lens.SpanGroup
    assert (g.JOB, g.CHECKPOINT, g.EVALUATE, g.MODEL_INIT, g.LOAD_CHECKPOINT, g.STEP,
            g.FORWARD_BACKWARD, g.OPTIMIZER) == ("job", "checkpoint", "evaluate", "model_init",
                                                 "load_checkpoint", "step", "forward_backward",
                                                 "optimizer")
    assert isinstance(g.ALL_GROUPS, frozenset) and len(g.ALL_GROUPS) == 8
    assert g._PRESETS["default"] == {"job", "checkpoint", "evaluate"}
    assert g._PRESETS["per_step"] == g.ALL_GROUPS
    m = lens.MegatronSpanGroup
    assert len(m.ALL_GROUPS) == 14 and m.LAYER == "layer" and m.MICROBATCH == "microbatch"
    assert m._PRESETS["default"] == {"job", "checkpoint", "evaluate", "inference"}
    assert m.resolve("per_step") == g.ALL_GROUPS | {"communication", "data_loading", "inference"}


def test_resolve_follows_the_spec_rules():
    g = lens.SpanGroup
    assert g.resolve("default") == {"job", "checkpoint", "evaluate"}
    assert g.resolve(" Default , STEP,,") == {"job", "checkpoint", "evaluate", "step"}
    assert g.resolve("") == frozenset()
    assert isinstance(g.resolve("all"), frozenset)
    assert lens.MegatronSpanGroup.resolve("all") == lens.MegatronSpanGroup.ALL_GROUPS


def test_an_unknown_part_raises_a_value_error_naming_it_and_every_option():
    with pytest.raises(lens.SpanGroupError) as err:
        lens.SpanGroup.resolve("default,layer")
    assert isinstance(err.value, ValueError)
    message = str(err.value)
    assert "'layer'" in message
    for option in sorted(lens.SpanGroup.ALL_GROUPS | {"default", "per_step", "all"}):
        assert f"'{option}'" in message
    with pytest.raises(TypeError):
        lens.SpanGroup.resolve(None)


class RLSpanGroup(lens.SpanGroup):
    """A subclass written as in the NeMo Lens documentation."""

    ROLLOUT = "rollout"
    REWARD = "reward"
    ALL_GROUPS = frozenset([*lens.SpanGroup.ALL_GROUPS, ROLLOUT, REWARD])
    _PRESETS = {
        "default": frozenset([lens.SpanGroup.JOB, ROLLOUT]),
        "per_step": frozenset([*lens.SpanGroup.ALL_GROUPS, ROLLOUT]),
        "all": ALL_GROUPS,
    }


def test_a_python_subclass_is_a_catalog():
    assert RLSpanGroup.resolve("default") == {"job", "rollout"}
    assert RLSpanGroup.resolve("all") == RLSpanGroup.ALL_GROUPS
    assert RLSpanGroup.resolve("reward,step") == {"reward", "step"}
    with pytest.raises(ValueError, match="'rewards'.*'reward'.*'rollout'"):
        RLSpanGroup.resolve("rewards")
    assert RLSpanGroup.ROLLOUT == "rollout" and RLSpanGroup.STEP == "step"  # inherited


def test_a_subclass_whose_preset_names_an_unknown_group_is_refused():
    class Broken(lens.SpanGroup):
        _PRESETS = {"default": frozenset(["nope"])}

    with pytest.raises(lens.SpanGroupError, match="nope"):
        Broken.resolve("default")


def test_config_defaults_are_nemo_lens_ones():
    c = lens.NemoLensConfig()
    assert (c.enabled, c.service_name, c.export_strategy, c.export_rank, c.export_sample_rate,
            c.sampler_enabled, c.traces_enabled, c.metrics_enabled, c.logs_enabled,
            c.span_groups, c.exporter, c.run_id, c.user, c.wandb_entity, c.wandb_project) == (
        False, "nemo", "single_rank", -1, 1.0, False, True, True, False, "default", "otlp", "",
        "", "", "")
    assert c.resolved_span_groups == {"job", "checkpoint", "evaluate"}
    with pytest.raises(ValueError, match="export_sample_rate"):
        lens.NemoLensConfig(export_sample_rate=1.5)


def test_from_env_reads_prefix_then_fallback_and_resolves_against_the_subclass(monkeypatch):
    monkeypatch.setenv("NEMO_LENS_ENABLED", "yes")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "default,reward")
    monkeypatch.setenv("RL_OTEL_SPAN_GROUPS", " ")  # blank: the fallback's value
    monkeypatch.setenv("RL_OTEL_EXPORT_RANK", "3")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rl-trainer")
    monkeypatch.setenv("WANDB_PROJECT", "rlhf")
    c = lens.NemoLensConfig.from_env("RL_OTEL", "NEMO_LENS", RLSpanGroup)
    assert c.enabled is True and c.export_rank == 3 and c.service_name == "rl-trainer"
    assert c.span_groups == "default,reward" and c.wandb_project == "rlhf"
    assert c.resolved_span_groups == {"job", "rollout", "reward"}
    with pytest.raises(ValueError, match="'reward'"):
        lens.NemoLensConfig.from_env("RL_OTEL", "NEMO_LENS").resolved_span_groups


@pytest.mark.parametrize("var,value,phrase", [
    ("NEMO_LENS_ENABLED", "maybe", "Invalid boolean for NEMO_LENS_ENABLED: 'maybe'"),
    ("NEMO_LENS_EXPORT_RANK", "2.5", "NEMO_LENS_EXPORT_RANK"),
    ("NEMO_LENS_EXPORT_SAMPLE_RATE", "lots", "NEMO_LENS_EXPORT_SAMPLE_RATE"),
])
def test_from_env_errors_name_the_variable_and_value(monkeypatch, var, value, phrase):
    monkeypatch.setenv(var, value)
    with pytest.raises(lens.ConfigError) as err:
        lens.NemoLensConfig.from_env()
    assert isinstance(err.value, ValueError)
    assert phrase in str(err.value)


def test_a_field_of_the_wrong_type_is_named_at_setup():
    with pytest.raises(lens.ConfigError, match="NemoLensConfig.enabled must be a bool"):
        lens.setup_telemetry(lens.NemoLensConfig(enabled="yes"))


def test_unknown_strategy_and_bad_spec_fail_setup_with_value_errors():
    with pytest.raises(ValueError, match="no_such_strategy"):
        lens.setup_telemetry(lens.NemoLensConfig(enabled=True, export_strategy="no_such_strategy"),
                             _allow_reinit=True)
    with pytest.raises(lens.SpanGroupError, match="'stepp'"):
        lens.setup_telemetry(lens.NemoLensConfig(enabled=True, span_groups="stepp"),
                             _allow_reinit=True)


def test_strategies_register_decide_and_unregister():
    seen = []

    def even(config, rank, world_size):
        seen.append((type(config).__name__, config.span_groups, rank, world_size))
        return rank % 2 == 0

    lens.register_export_strategy("even_ranks", even)
    try:
        assert "even_ranks" in lens.registered_strategies()
        assert {"all_ranks", "single_rank", "sampled", "first_rank_per_node"} <= set(
            lens.registered_strategies())
        with pytest.raises(ValueError, match="even_ranks"):
            lens.register_export_strategy("even_ranks", even)
        lens.register_export_strategy("even_ranks", even, allow_override=True)
        config = lens.NemoLensConfig(enabled=True, export_strategy="even_ranks",
                                     exporter="console", metrics_enabled=False)
        h = lens.setup_telemetry(config, 2, 4, _allow_reinit=True)
        assert h.is_exporting
        h.shutdown()
        h = lens.setup_telemetry(config, 1, 4, _allow_reinit=True)
        assert not h.is_exporting
        h.shutdown()
        assert seen[-2:] == [("NemoLensConfig", "default", 2, 4), ("NemoLensConfig", "default",
                                                                   1, 4)]
        assert lens.get_export_strategy("even_ranks")(config, 0, 2) is True
        # The built-ins decide as NeMo Lens does: the last rank for single_rank.
        single = lens.get_export_strategy("single_rank")
        assert [single(lens.NemoLensConfig(), r, 4) for r in range(4)] == [False, False, False,
                                                                         True]
    finally:
        lens.unregister_export_strategy("even_ranks")
    assert "even_ranks" not in lens.registered_strategies()
    with pytest.raises(ValueError):
        lens.unregister_export_strategy("all_ranks")


def test_an_ad_hoc_strategy_and_a_second_setup():
    config = lens.NemoLensConfig(enabled=True, exporter="console", metrics_enabled=False)
    h = lens.setup_telemetry(config, 0, 8, export_strategy=lambda c, r, w: r == 0,
                             _allow_reinit=True)
    try:
        assert h.is_exporting
        with pytest.raises(lens.AlreadySetUpError) as err:
            lens.setup_telemetry(config)
        assert isinstance(err.value, RuntimeError) and isinstance(err.value, ValueError)
    finally:
        assert h.shutdown()
    assert h.shutdown()  # idempotent


def test_disabled_setup_enables_nothing():
    h = lens.setup_telemetry(lens.NemoLensConfig(enabled=False, span_groups="all"))
    assert not h.is_exporting
    assert lens.enabled_span_groups() == frozenset()
    assert not lens.is_span_group_enabled("step")


def test_metrics_and_logs_reach_the_file_exporter(tmp_path):
    import json
    import logging

    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", exporter="file",
                                 logs_enabled=True, span_groups="all")
    os_env = {"NEMO_LENS_EXPORT_PATH": str(tmp_path / "t{rank}.jsonl"),
              "NEMO_LENS_METRICS_EXPORT_PATH": str(tmp_path / "m{rank}.jsonl"),
              "NEMO_LENS_LOGS_EXPORT_PATH": str(tmp_path / "l{rank}.jsonl")}
    import os
    os.environ.update(os_env)
    try:
        h = lens.setup_telemetry(config, _allow_reinit=True)
        meter = lens.get_meter("py.test")
        assert lens.get_meter("py.test") is meter
        tokens = meter.create_counter("train.tokens", unit="{token}", description="Tokens seen")
        tokens.add(100, {"dataset": "web", "bad": object()})
        tokens.add(28, {"dataset": "web"})
        tokens.add(-5)  # negative: dropped, not an error
        meter.create_histogram("train.step.duration", unit="s").record(0.5)
        meter.create_gauge("train.loss").set(1.25, {"phase": "train"})
        meter.create_up_down_counter("queue.depth").add(-3)
        with pytest.raises(lens.ConfigError, match="instrument"):
            meter.create_counter("bad name!")
        logger = logging.getLogger("py.test.logger")
        logger.addHandler(lens.LoggingHandler())
        logger.setLevel(logging.INFO)
        with lens.span_cm("logging span") as span:
            lens.log(lens.Severity.WARN, "loss spike", {"iteration": 7})
            logger.warning("from logging %d", 42)
        assert h.shutdown(10000)
    finally:
        for k in os_env:
            os.environ.pop(k)
    points = {}
    for line in open(tmp_path / "m0.jsonl"):
        for rm in json.loads(line)["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for metric in sm["metrics"]:
                    points[metric["name"]] = (sm["scope"]["name"], metric)
    scope, tokens_metric = points["train.tokens"]
    assert scope == "py.test" and tokens_metric["unit"] == "{token}"
    (dp,) = tokens_metric["sum"]["dataPoints"]
    assert dp["asDouble"] == 128
    assert dp["attributes"] == [{"key": "dataset", "value": {"stringValue": "web"}}]
    assert {"train.step.duration", "train.loss", "queue.depth"} <= set(points)
    records = []
    for line in open(tmp_path / "l0.jsonl"):
        for rl in json.loads(line)["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                records.extend((sl["scope"]["name"], r) for r in sl["logRecords"])
    ctx = span.get_span_context()
    by_body = {r["body"]["stringValue"]: (scope, r) for scope, r in records}
    scope, spike = by_body["loss spike"]
    assert spike["severityNumber"] == 13 and spike["traceId"] == ctx.trace_id_hex
    assert spike["spanId"] == ctx.span_id_hex
    scope, from_logging = by_body["from logging 42"]
    assert scope == "py.test.logger" and from_logging["severityText"] == "WARN"
    keys = {a["key"] for a in from_logging["attributes"]}
    assert {"code.filepath", "code.lineno", "code.function"} <= keys


def test_an_export_rank_beyond_the_world_size_exports_nothing_and_rank_zero_says_so(
        monkeypatch, capfd):
    # As NeMo Lens, single_rank exports from no rank; as the C++ library, rank 0 says so once.
    monkeypatch.setenv("NEMO_LENS_CONTROL", "off")
    monkeypatch.setenv("NEMO_LENS_EXPORT_RANK", "2147483647")
    config = lens.NemoLensConfig.from_env()
    config.enabled = True
    config.exporter = "console"
    capfd.readouterr()
    h = lens.setup_telemetry(config, 0, 1, _allow_reinit=True)
    try:
        assert not h.is_exporting
    finally:
        h.shutdown()
    assert capfd.readouterr().err == (
        "lens: NEMO_LENS_EXPORT_RANK is 2147483647, but the world size is 1: with export_strategy "
        "single_rank no rank exports. Give a rank from 0 to 0, or -1 for the last rank.\n")
    config = lens.NemoLensConfig(enabled=True, exporter="console", export_rank=4)
    for rank in range(2):
        h = lens.setup_telemetry(config, rank, 4, _allow_reinit=True)
        h.shutdown()
        assert capfd.readouterr().err == ("" if rank else (
            "lens: export_rank is 4, but the world size is 4: with export_strategy single_rank "
            "no rank exports. Give a rank from 0 to 3, or -1 for the last rank.\n"))


def test_bad_ranks_and_strategy_results_are_named_not_pybind11s_messages():
    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", exporter="console")
    with pytest.raises(TypeError, match=r"rank must be an int, got '1' \(str\)"):
        lens.setup_telemetry(config, "1", 2, _allow_reinit=True)
    with pytest.raises(TypeError, match=r"rank must be an int, got 0.9 \(float\)"):
        lens.setup_telemetry(config, 0.9, _allow_reinit=True)
    with pytest.raises(TypeError, match=r"world_size must be an int, got True \(bool\)"):
        lens.setup_telemetry(config, 0, True, _allow_reinit=True)
    with pytest.raises(lens.ConfigError,
                       match=r"rank must be in \[0, 1\], got 1180591620717411303424"):
        lens.setup_telemetry(config, 2**70, 2, _allow_reinit=True)
    with pytest.raises(lens.ConfigError, match=r"world_size must be in \[1, 2147483647\], got 0"):
        lens.setup_telemetry(config, 0, 0, _allow_reinit=True)
    with pytest.raises(lens.ConfigError,
                       match=r"setup_telemetry's export_strategy returned 'yes' \(str\) for "
                             r"rank 0: an export strategy must return True or False"):
        lens.setup_telemetry(config, export_strategy=lambda c, r, w: "yes", _allow_reinit=True)
    lens.register_export_strategy("answers_none", lambda c, r, w: None, allow_override=True)
    try:
        with pytest.raises(lens.ConfigError, match=r"export strategy 'answers_none' returned None"):
            lens.setup_telemetry(lens.NemoLensConfig(enabled=True, export_strategy="answers_none",
                                                     exporter="console"), _allow_reinit=True)
    finally:
        lens.unregister_export_strategy("answers_none")
