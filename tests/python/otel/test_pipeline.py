"""One pipeline with OpenTelemetry Python: spans made through OpenTelemetry's API are lens spans,
lens spans are OpenTelemetry's current span, contexts and exporters cross both ways, and a
program that configured OpenTelemetry itself keeps NeMo Lens' behaviour."""

import asyncio
import os
import random
import threading
import time

import pytest

import nemo_lens_cpp as lens
from nemo_lens_cpp import providers
from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from conftest import reset_global_providers  # noqa: E402

lens_demo = pytest.importorskip("lens_demo", reason="the examples' C++ extension is not built")


def ids(otel_span):
    c = otel_span.get_span_context()
    return format(c.trace_id, "032x"), format(c.span_id, "016x")


class RecordingExporter(SpanExporter):
    """An OpenTelemetry SpanExporter that keeps what it gets and the thread it got it on."""

    def __init__(self, result=SpanExportResult.SUCCESS):
        self.spans, self.threads, self.result = [], set(), result
        self.flushed = self.shut_down = 0

    def export(self, spans):
        self.threads.add(threading.get_ident())
        self.spans.extend(spans)
        return self.result

    def force_flush(self, timeout_millis=30000):
        self.flushed += 1
        return True

    def shutdown(self):
        self.shut_down += 1


@pytest.fixture
def pipeline(tracing):
    """Lens set up exporting into its InMemorySpanExporter; OpenTelemetry's global providers are
    lens' (set-up made them so)."""
    tracing.start()
    assert isinstance(trace.get_tracer_provider(), providers.LensTracerProvider)
    return tracing


def test_otel_api_spans_after_setup_are_lens_spans_in_one_trace(pipeline):
    tracer = trace.get_tracer("user.module")
    with lens.managed_span("step", "step") as step:
        with tracer.start_as_current_span("otel child", attributes={"shard": 3}) as child:
            lens_demo.forward(1)  # a C++ LENS_SPAN under the OpenTelemetry-API span
            with lens.managed_span("forward_backward", "lens grandchild"):
                pass
    spans = pipeline.by_name()
    assert {s.trace_id for s in spans.values()} == {step.get_span_context().trace_id_hex}
    assert spans["otel child"].parent_span_id == step.get_span_context().span_id_hex
    assert spans["otel child"].attributes["shard"] == 3
    assert ids(child)[1] == spans["otel child"].span_id
    assert spans["forward"].parent_span_id == spans["otel child"].span_id
    assert spans["lens grandchild"].parent_span_id == spans["otel child"].span_id
    # The resource and rank decisions are lens' own: the span left through lens' exporter.
    assert pipeline.handle.stats()["spans_exported"] == len(spans)


def test_get_current_span_is_the_lens_span_and_propagators_inject_it(pipeline):
    with lens.managed_span("step", "outer") as outer:
        current = trace.get_current_span()
        assert current.is_recording()
        assert ids(current) == (outer.get_span_context().trace_id_hex,
                                outer.get_span_context().span_id_hex)
        current.set_attribute("set.through.otel", True)  # lands on the lens span
        carrier = {}
        TraceContextTextMapPropagator().inject(carrier)
        assert carrier["traceparent"] == lens.inject_context({})["traceparent"]
    assert trace.get_current_span() is trace.INVALID_SPAN or \
        not trace.get_current_span().get_span_context().is_valid
    (span,) = pipeline.spans()
    assert span.attributes["set.through.otel"] is True


def test_inside_a_cpp_span_get_current_span_is_its_context(pipeline):
    seen = []
    with lens.managed_span("step", "python"):
        lens_demo.all_reduce(lambda: seen.append(trace.get_current_span().get_span_context()))
    spans = pipeline.by_name()
    (ctx,) = seen
    assert format(ctx.span_id, "016x") == spans["all_reduce"].span_id
    assert format(ctx.trace_id, "032x") == spans["python"].trace_id


def test_extract_context_is_an_otel_context(pipeline):
    header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = lens.extract_context({"traceparent": header})
    remote = trace.get_current_span(ctx).get_span_context()
    assert (remote.trace_id, remote.span_id, remote.is_remote) == (
        0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331, True)
    tracer = trace.get_tracer("server")
    tracer.start_span("explicit parent", context=ctx).end()
    token = otel_context.attach(ctx)
    try:
        with lens.managed_span("step", "under attached"):
            lens_demo.forward(1)
    finally:
        otel_context.detach(token)
    with lens.managed_span("step", "after detach"):
        pass
    spans = pipeline.by_name()
    for name in ("explicit parent", "under attached"):
        assert (spans[name].trace_id, spans[name].parent_span_id) == (
            "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
        assert spans[name].parent_is_remote
    assert spans["forward"].parent_span_id == spans["under attached"].span_id
    assert spans["after detach"].parent_span_id is None


def test_inject_context_writes_a_span_of_a_programs_own_provider(pipeline):
    own = TracerProvider().get_tracer("own")
    with own.start_as_current_span("own span") as span:
        carrier = lens.inject_context({})
        with lens.managed_span("step", "lens child"):
            pass
    trace_id, span_id = ids(span)
    assert carrier["traceparent"] == f"00-{trace_id}-{span_id}-" + carrier["traceparent"][-2:]
    (child,) = pipeline.spans()
    assert (child.trace_id, child.parent_span_id) == (trace_id, span_id)


def test_use_span_and_start_span_follow_otel_semantics(pipeline):
    tracer = trace.get_tracer("t")
    parent = tracer.start_span("not current")  # started, not current
    with lens.managed_span("step", "root"):
        pass
    with trace.use_span(parent, end_on_exit=True):
        with lens.managed_span("step", "under use_span"):
            pass
    spans = pipeline.by_name()
    assert spans["root"].parent_span_id is None
    assert spans["under use_span"].parent_span_id == spans["not current"].span_id


def test_threads_and_asyncio_tasks_each_see_their_own_parent(pipeline):
    tracer = trace.get_tracer("t")

    async def task(name):
        with tracer.start_as_current_span(name):
            await asyncio.sleep(0)
            with lens.managed_span("step", name + ".lens"):
                await asyncio.sleep(0)

    async def main():
        await asyncio.gather(task("a"), task("b"))

    def thread():
        with tracer.start_as_current_span("thread"):
            with lens.managed_span("step", "thread.lens"):
                lens_demo.forward(1)

    with lens.managed_span("step", "main"):
        asyncio.run(main())
        worker = threading.Thread(target=thread)
        worker.start()
        worker.join()
    spans = pipeline.by_name()
    for name in ("a", "b", "thread"):
        assert spans[name + ".lens"].parent_span_id == spans[name].span_id
    assert spans["a"].parent_span_id == spans["main"].span_id
    assert spans["thread"].parent_span_id is None  # a new thread starts with no current span
    assert spans["forward"].parent_span_id == spans["thread.lens"].span_id


def test_an_otel_sdk_exporter_gets_readable_spans_on_the_exporter_thread(tracing):
    exporter = RecordingExporter()
    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", span_groups="all",
                                 exporter="console", metrics_enabled=False)
    handle = lens.setup_telemetry(config, span_exporter=exporter, _allow_reinit=True)
    with lens.managed_span("step", "parent", iteration=7) as parent:
        with trace.get_tracer("t").start_as_current_span("child") as child:
            child.add_event("tick", {"n": 1})
            child.set_status(trace.Status(trace.StatusCode.ERROR, "bad"))
            lens_demo.forward(1)
    assert handle.force_flush(10000)
    by_name = {s.name: s for s in exporter.spans}
    assert set(by_name) == {"parent", "child", "forward", "layer"} or "parent" in by_name
    assert all(isinstance(s, ReadableSpan) for s in exporter.spans)
    assert threading.get_ident() not in exporter.threads
    p, c = by_name["parent"], by_name["child"]
    assert p.context.trace_id == parent.get_span_context().trace_id
    assert p.parent is None and c.parent.span_id == p.context.span_id
    assert by_name["forward"].parent.span_id == c.context.span_id
    assert p.attributes["iteration"] == 7
    assert [e.name for e in c.events] == ["tick"] and c.events[0].attributes["n"] == 1
    assert c.status.status_code is trace.StatusCode.ERROR and c.status.description == "bad"
    assert c.end_time >= c.start_time > 0
    assert c.resource.attributes["service.name"] == handle.resource()["service.name"]
    assert c.instrumentation_scope.name == "nemo.lens"
    assert handle.shutdown(10000)
    assert exporter.shut_down == 1


def test_a_failing_or_raising_exporter_is_counted_and_never_reaches_the_program(tracing, caplog):
    class Raising(RecordingExporter):
        def export(self, spans):
            raise RuntimeError("collector is down")

    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", span_groups="all",
                                 exporter="console", metrics_enabled=False)
    for exporter in (RecordingExporter(SpanExportResult.FAILURE), Raising()):
        handle = lens.setup_telemetry(config, span_exporter=exporter, _allow_reinit=True)
        for _ in range(3):
            with lens.managed_span("step", "lost"):
                pass
        handle.force_flush(10000)
        assert handle.stats()["spans_dropped_export_failed"] == 3
        assert handle.stats()["spans_exported"] == 0
        handle.shutdown(10000)
    assert "span_exporter.export() raised; 3 spans dropped" in caplog.text


def test_objects_lens_cannot_take_are_refused_with_what_to_use(tracing):
    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks")
    with pytest.raises(TypeError, match="OpenTelemetry SpanExporter.*not int"):
        lens.setup_telemetry(config, span_exporter=3, _allow_reinit=True)
    with pytest.raises(TypeError, match="must be an OpenTelemetry MetricReader.*not object"):
        lens.setup_telemetry(config, metric_reader=object(), _allow_reinit=True)


def test_tracer_argument_makes_the_span_behind_lens_gate(pipeline):
    own_exporter = InMemorySpanExporter()
    own = TracerProvider()
    own.add_span_processor(SimpleSpanProcessor(own_exporter))
    tracer = own.get_tracer("own")
    lens.set_enabled_span_groups(lens.enabled_span_groups() - {"checkpoint"})
    with lens.managed_span("step", "on own tracer", tracer=tracer, k=1) as span:
        assert span.is_recording()
        lens_demo.forward(1)  # a lens C++ span: lens' pipeline, child of the program's span
    with lens.managed_span("checkpoint", "gated off", tracer=tracer) as off:
        assert off is None
    with lens.span_cm("ungated", tracer=tracer):
        pass
    with pytest.raises(ValueError):
        with lens.managed_span("step", "raises", tracer=tracer):
            raise ValueError("boom")
    names = [s.name for s in own_exporter.get_finished_spans()]
    assert names == ["on own tracer", "ungated", "raises"]
    own_spans = {s.name: s for s in own_exporter.get_finished_spans()}
    assert own_spans["on own tracer"].attributes["k"] == 1
    assert own_spans["raises"].status.status_code is trace.StatusCode.ERROR
    (forward,) = [s for s in pipeline.spans() if s.name == "forward"]
    assert forward.parent_span_id == format(
        own_spans["on own tracer"].context.span_id, "016x")
    # lens' own tracer is lens' pipeline
    with lens.managed_span("step", "lens tracer", tracer=lens.get_tracer()):
        pass
    assert "lens tracer" in [s.name for s in pipeline.spans()]


def test_a_program_that_configured_otel_itself_gets_nemo_lens_behaviour():
    # A fresh interpreter: lens never set up, OpenTelemetry configured by the program.
    code = """
import nemo_lens_cpp as lens
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with lens.managed_span("step", "gated off") as off:
    assert off is None
lens.set_enabled_span_groups({"step"})
with lens.managed_span("step", "outer", iteration=3) as span:
    with lens.span_cm("inner"):
        carrier = lens.inject_context({})
@lens.trace_fn("step", "decorated")
def f():
    return 5
assert f() == 5
spans = {s.name: s for s in exporter.get_finished_spans()}
assert sorted(spans) == ["decorated", "inner", "outer"], sorted(spans)
assert spans["inner"].parent.span_id == spans["outer"].context.span_id
assert spans["outer"].attributes["iteration"] == 3
assert carrier["traceparent"].split("-")[2] == format(spans["inner"].context.span_id, "016x")
print("ok")
"""
    assert _run(code) == "ok"


def test_a_rank_that_does_not_export_records_nothing_through_either_api(tracing):
    exporter = RecordingExporter()
    config = lens.NemoLensConfig(enabled=True, export_strategy="single_rank", span_groups="all",
                                 exporter="console", metrics_enabled=False)
    handle = lens.setup_telemetry(config, rank=0, world_size=2, span_exporter=exporter,
                                  _allow_reinit=True)
    assert not handle.is_exporting
    with trace.get_tracer("t").start_as_current_span("otel") as span:
        assert not span.is_recording()
        with lens.managed_span("step", "lens") as gated:
            assert gated is None  # the gate ran and stayed shut: this rank records nothing
    handle.force_flush(10000)
    assert exporter.spans == []


def test_after_shutdown_otel_api_spans_record_nothing(pipeline):
    tracer = trace.get_tracer("t")
    assert trace.get_tracer_provider().force_flush(10000)
    pipeline.handle.shutdown(10000)
    with tracer.start_as_current_span("late") as late:
        assert not late.is_recording()


def test_nemo_lens_test_suites_reset_pattern_replaces_the_setup(tracing):
    # NeMo Lens' conftest resets nemo.lens.handle._INITIALIZED and snapshots the strategy
    # registry; code written for it keeps working.
    from nemo_lens_cpp import handle as handle_module
    from nemo_lens_cpp.strategies import _REGISTRY, _REGISTRY_LOCK

    config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", exporter="console")
    first = lens.setup_telemetry(config, _allow_reinit=True)
    with pytest.raises(RuntimeError, match="already been initialised"):
        lens.setup_telemetry(config)
    handle_module._INITIALIZED = False
    second = lens.setup_telemetry(config)
    assert first._core.is_shut_down and not second._core.is_shut_down
    with _REGISTRY_LOCK:
        snapshot = dict(_REGISTRY)
    lens.register_export_strategy("even", lambda c, r, w: r % 2 == 0)
    assert "even" in _REGISTRY
    with _REGISTRY_LOCK:
        _REGISTRY.clear()
        _REGISTRY.update(snapshot)
    assert sorted(_REGISTRY) == sorted(snapshot) and "even" not in lens.registered_strategies()
    assert _REGISTRY["all_ranks"] is lens.get_export_strategy("all_ranks")
    second.shutdown(10000)


def test_build_providers_and_build_noop_providers(tracing):
    exporter = RecordingExporter()
    providers.build_providers(lens.NemoLensConfig(exporter="console", metrics_enabled=False),
                              span_exporter=exporter)
    with trace.get_tracer("t").start_as_current_span("built"):
        pass
    assert trace.get_tracer_provider().force_flush(10000)
    assert [s.name for s in exporter.spans] == ["built"]
    assert isinstance(metrics.get_meter_provider(), providers.LensMeterProvider)
    trace.get_tracer_provider().shutdown()
    assert exporter.shut_down == 1
    reset_global_providers()
    providers.build_noop_providers()
    assert isinstance(trace.get_tracer_provider(), trace.NoOpTracerProvider)
    assert isinstance(metrics.get_meter_provider(), metrics.NoOpMeterProvider)


@pytest.mark.parametrize("sampler_enabled", [True, False])
def test_the_tracer_provider_is_the_sdks_with_lens_sampler_ids_and_resource(tracing,
                                                                             sampler_enabled):
    # As NeMo Lens' provider: an SDK TracerProvider whose sampler is the RankAwareSampler when
    # the sampler is on, with seed-independent ids and lens' resource; its tracers stay lens'.
    from nemo_lens_cpp.sampling import RankAwareSampler

    providers.build_providers(
        lens.NemoLensConfig(exporter="console", metrics_enabled=False,
                            sampler_enabled=sampler_enabled, export_sample_rate=0.5),
        rank=3, world_size=4, resource_attributes={"team": "lens"})
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    assert isinstance(provider, providers.LensTracerProvider)
    if sampler_enabled:
        assert isinstance(provider.sampler, RankAwareSampler)
        assert provider.sampler.get_description() == "RankAwareSampler(rank=3, rate=0.5)"
    else:
        assert not isinstance(provider.sampler, RankAwareSampler)
    assert isinstance(provider.id_generator, providers.SeedIndependentIdGenerator)
    random.seed(7)
    first = provider.id_generator.generate_span_id()
    random.seed(7)
    assert provider.id_generator.generate_span_id() != first
    # (rank 3 is kept at 0.5 by the MD5 rule, so this rank exports and has a resource)
    assert provider.resource.attributes["team"] == "lens"
    assert provider.resource.attributes["dl.rank"] == 3
    assert isinstance(provider.get_tracer("t"), lens.Tracer)
    provider.shutdown()


def test_a_second_set_up_rewires_the_global_lens_provider(tracing):
    from nemo_lens_cpp.sampling import RankAwareSampler

    config = lens.NemoLensConfig(exporter="console", metrics_enabled=False, sampler_enabled=True)
    providers.build_providers(config, rank=0, world_size=2)
    provider = trace.get_tracer_provider()
    assert isinstance(provider.sampler, RankAwareSampler)
    providers.build_providers(lens.NemoLensConfig(exporter="console", metrics_enabled=False),
                              rank=0, world_size=1, resource_attributes={"round": 2})
    assert trace.get_tracer_provider() is provider
    assert not isinstance(provider.sampler, RankAwareSampler)
    assert provider.resource.attributes["round"] == 2
    provider.shutdown()


def test_seed_independent_ids_survive_random_seed_and_fork():
    a, b = providers.SeedIndependentIdGenerator(), providers.SeedIndependentIdGenerator()
    random.seed(1)
    first = (a.generate_trace_id(), a.generate_span_id())
    random.seed(1)
    second = (b.generate_trace_id(), b.generate_span_id())
    assert first != second
    assert all(0 < t < 2**128 and 0 < s < 2**64 for t, s in (first, second))
    assert a.is_trace_id_random() is True
    read, write = os.pipe()
    pids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            os.write(write, b"%032x\n" % a.generate_trace_id())
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    os.close(write)
    with os.fdopen(read) as r:
        children = r.read().split()
    assert len(children) == 3 and len(set(children)) == 3


def _run(code):
    import subprocess
    import sys

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


class RecordingReader:
    """What a test of a metric_reader needs: an InMemoryMetricReader that counts its shutdowns."""

    def __new__(cls, **kwargs):
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        class Reader(InMemoryMetricReader):
            shut_down = 0

            def shutdown(self, timeout_millis=30_000, **kw):
                type(self).shut_down += 1

        return Reader(**kwargs)


def metrics_of(data):
    """{(scope, name): metric} of one MetricsData, and its resource."""
    (resource_metrics,) = data.resource_metrics
    out = {(sm.scope.name, m.name): m for sm in resource_metrics.scope_metrics
           for m in sm.metrics}
    return out, resource_metrics.resource


def point_value(metric, **attributes):
    (p,) = [p for p in metric.data.data_points if dict(p.attributes) == attributes]
    return p


def test_a_metric_reader_reads_lens_metrics_when_it_collects(tmp_path, monkeypatch):
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    # lens' own metric export is replaced by the reader (as in NeMo Lens): the file stays empty.
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("NEMO_LENS_METRICS_EXPORT_PATH", str(path))
    monkeypatch.setenv("NEMO_LENS_EXPORT_PATH", str(tmp_path / "traces.jsonl"))
    reader = RecordingReader()
    handle = lens.setup_telemetry(
        lens.NemoLensConfig(enabled=True, exporter="file", export_strategy="all_ranks"), 0, 2,
        resource_attributes={"team": "lens"}, metric_reader=reader, _allow_reinit=True)
    try:
        otel_counter = metrics.get_meter("user.module").create_counter("user.requests")
        lens_histogram = lens.get_meter("train").create_histogram("train.step_time", unit="s")
        otel_counter.add(3, {"route": "a"})
        lens_histogram.record(0.5)
        lens_histogram.record(2.0)
        first, resource = metrics_of(reader.get_metrics_data())
        assert resource.attributes["team"] == "lens" and resource.attributes["dl.world_size"] == 2
        requests = first[("user.module", "user.requests")]
        assert requests.data.is_monotonic
        assert requests.data.aggregation_temporality == AggregationTemporality.CUMULATIVE
        assert point_value(requests, route="a").value == 3
        step = first[("train", "train.step_time")]
        assert step.unit == "s"
        p = point_value(step)
        assert (p.count, p.sum, p.min, p.max) == (2, 2.5, 0.5, 2.0)
        assert sum(p.bucket_counts) == 2 and len(p.bucket_counts) == len(p.explicit_bounds) + 1
        otel_counter.add(4, {"route": "a"})
        second, _ = metrics_of(reader.get_metrics_data())
        assert point_value(second[("user.module", "user.requests")], route="a").value == 7
        assert handle.force_flush(10000)
    finally:
        handle.shutdown(10000)
    assert reader.shut_down == 1
    assert not path.exists() or path.read_text() == ""
    flushed, _ = metrics_of(reader.get_metrics_data())  # what force_flush() collected
    assert ("user.module", "user.requests") in flushed
    assert reader.get_metrics_data() is None  # shut down: the reader has no source any more


def test_a_delta_metric_reader_gets_the_change_since_its_last_collection():
    from opentelemetry.sdk.metrics import Counter
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    reader = RecordingReader(preferred_temporality={Counter: AggregationTemporality.DELTA})
    handle = lens.setup_telemetry(
        lens.NemoLensConfig(enabled=True, exporter="console", export_strategy="all_ranks"),
        metric_reader=reader, _allow_reinit=True)
    try:
        counter = lens.get_meter("delta").create_counter("delta.items")
        counter.add(5)
        first, _ = metrics_of(reader.get_metrics_data())
        items = first[("delta", "delta.items")]
        assert items.data.aggregation_temporality == AggregationTemporality.DELTA
        assert point_value(items).value == 5
        counter.add(2)
        second, _ = metrics_of(reader.get_metrics_data())
        assert point_value(second[("delta", "delta.items")]).value == 2
        third, _ = metrics_of(reader.get_metrics_data())
        assert ("delta", "delta.items") not in third  # nothing new: no point
    finally:
        handle.shutdown(10000)


@pytest.mark.parametrize("why", ["rank does not export", "metrics off"])
def test_a_metric_reader_gets_nothing_where_lens_records_no_metrics(why):
    reader = RecordingReader()
    config = lens.NemoLensConfig(enabled=True, exporter="console",
                                 export_strategy="single_rank",
                                 metrics_enabled=why != "metrics off")
    # single_rank: the last rank exports
    handle = lens.setup_telemetry(config, 0 if why == "rank does not export" else 1, 2,
                                  metric_reader=reader, _allow_reinit=True)
    try:
        lens.get_meter("off").create_counter("off.items").add(1)
        assert reader.get_metrics_data() is None
    finally:
        handle.shutdown(10000)




def test_otel_api_start_time_and_end_time_are_kept(pipeline):
    """OpenTelemetry's own start_time / end_time cases: a span started in the past through the
    API keeps the times it was given, ended now or at a time of its own."""
    tracer = trace.get_tracer("t")
    start = time.time_ns() - 3_000_000_000
    given = tracer.start_span("given", start_time=start)
    given.end(end_time=start + 500)
    before = time.time_ns()
    with tracer.start_as_current_span("ended now", start_time=start):
        pass
    after = time.time_ns()
    spans = pipeline.by_name()
    assert (spans["given"].start_time_unix_nano, spans["given"].end_time_unix_nano) == \
        (start, start + 500)
    assert spans["ended now"].start_time_unix_nano == start
    assert before <= spans["ended now"].end_time_unix_nano <= after
