// The official OpenTelemetry JS SDK (pinned in package.json) against lens: run by
// tests/js/run-interop (ctest -L js), which puts the SDK on NODE_PATH.
//
//   node interop.js LENS W3C_PEER SCRATCH_DIR
//
// 1. Spans (10,000 of every shape: each attribute type and arrays of each, events, links, status,
//    span kinds, remote parents), metrics (counter, up-down counter, histogram, exponential
//    histogram, gauge, observable gauge) and logs are exported by the SDK's OTLP exporters to
//    `lens collect` over OTLP/HTTP JSON, OTLP/HTTP protobuf and OTLP/gRPC, each with and without
//    gzip. What collect wrote is compared field by field with the request the SDK sent (what its
//    serialiser for that transport writes for the same data: JSON parsed, or protobuf decoded by
//    the SDK's own generated messages), under the OTLP/JSON equivalences (proto3 defaults may be
//    omitted, 64-bit integers as numbers or strings, ids in hex) and collect's normalisations of
//    JSON (docs/otlp.md). Values the SDK itself sends differently per transport (NaN and the
//    infinities, a lone surrogate, 1e300) are checked apart. Then lens report and lens convert
//    read every line collect wrote, none skipped.
// 2. W3C contexts (random trace flags, tracestate) and baggage go from the JS propagators to lens
//    (w3c_peer relay: extract_context) and from lens (inject_context) to the JS propagators.
// 3. A Node span's context in TRACEPARENT, TRACESTATE, BAGGAGE of a lens child process (w3c_peer
//    child): the child's root span continues the Node span's trace.
'use strict';

const assert = require('node:assert/strict');
const child_process = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');

const api = require('@opentelemetry/api');
const { W3CTraceContextPropagator, W3CBaggagePropagator, ExportResultCode } =
  require('@opentelemetry/core');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { AlwaysOnSampler, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } =
  require('@opentelemetry/sdk-trace-base');
const { AggregationType, MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics');
const { LoggerProvider, InMemoryLogRecordExporter, SimpleLogRecordProcessor } =
  require('@opentelemetry/sdk-logs');
const { JsonTraceSerializer, JsonMetricsSerializer, JsonLogsSerializer, ProtobufTraceSerializer,
  ProtobufMetricsSerializer, ProtobufLogsSerializer } = require('@opentelemetry/otlp-transformer');
// The SDK's own generated protobuf messages: what its protobuf serialisers wrote, decoded.
const otlpProto = require('@opentelemetry/otlp-transformer/build/src/generated/root').opentelemetry.proto;

const [lensBinary, peerBinary, scratch] = process.argv.slice(2);
if (!lensBinary || !peerBinary || !scratch) {
  console.error('usage: node interop.js LENS W3C_PEER SCRATCH_DIR');
  process.exit(2);
}

const kSpans = 10000;
const kBatch = 500;
let collectChild;  // stopped by the deadline too: no receiver outlives the test
const deadline = setTimeout(() => {
  console.error('js interop: still running after 240 s; giving up');
  if (collectChild) collectChild.kill('SIGKILL');
  process.exit(1);
}, 240000);
deadline.unref();

// ---------------------------------------------------------------------------------------------
// A deterministic generator (mulberry32), so a failure can be reproduced.
let seed = 0x1e45;
function random() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];
const int = (n) => Math.floor(random() * n);
function hex(bytes) {
  let s = '';
  for (let i = 0; i < bytes; ++i) s += int(256).toString(16).padStart(2, '0');
  return /^0+$/.test(s) ? hex(bytes) : s;
}

const kStrings = ['', 'plain', 'with "quotes" and \\ backslash', 'line\nbreak\ttab',
  'unicode é ü 漢字 🚀', '\u0001 control', '{"looks":"like json"}', 'x'.repeat(300)];
const kDoubles = [0.5, -1.25, 3.141592653589793, 1e-300, 1.7976931348623157e308, 5e-324, 1e21,
  123456.789, -0.001];
const kInts = [0, 1, -1, 42, 2 ** 31, -(2 ** 31) - 1, Number.MAX_SAFE_INTEGER,
  Number.MIN_SAFE_INTEGER, 1e15];

function attributes(n) {
  const a = {};
  const makers = [
    () => pick(kStrings), () => random() < 0.5, () => pick(kInts), () => pick(kDoubles),
    () => [pick(kStrings), pick(kStrings)], () => [true, false, random() < 0.5],
    () => [pick(kInts), pick(kInts), pick(kInts)], () => [pick(kDoubles), pick(kDoubles)],
    () => [],
  ];
  for (let i = 0; i < n; ++i) a[`attr.${i}.${int(1000)}`] = makers[int(makers.length)]();
  return a;
}

// HrTime with nanoseconds, from a fixed epoch.
const kEpochSeconds = 1767225600;  // 2026-01-01
function hrtime(offsetNs) {
  return [kEpochSeconds + Math.floor(offsetNs / 1e9), offsetNs % 1e9];
}

function remoteContext() {
  const traceState = random() < 0.5 ? new (require('@opentelemetry/core').TraceState)(
    `vendor${int(9)}=v${int(99)},other@sys=x${int(9)}`) : undefined;
  return { traceId: hex(16), spanId: hex(8), traceFlags: int(4), isRemote: true, traceState };
}

const resource = resourceFromAttributes({
  'service.name': 'lens-js-interop',
  'service.instance.id': 'js-1',
  'deployment.environment': 'ci',
  'host.cores': 2,
});

// The spans, once: each transport sends the same ones.
function makeSpans() {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource,
    sampler: new AlwaysOnSampler(),  // remote parents without the sampled flag too
    spanProcessors: [new SimpleSpanProcessor(memory)],
    spanLimits: { attributeCountLimit: 128, eventCountLimit: 128, linkCountLimit: 128 },
  });
  const tracers = [provider.getTracer('lens.interop', '1.2.3'),
    provider.getTracer('lens.interop.other', undefined, { schemaUrl: 'https://opentelemetry.io/schemas/1.30.0' })];
  const kinds = [api.SpanKind.INTERNAL, api.SpanKind.SERVER, api.SpanKind.CLIENT,
    api.SpanKind.PRODUCER, api.SpanKind.CONSUMER];
  let parent;
  for (let i = 0; i < kSpans; ++i) {
    const tracer = tracers[i % 2];
    let ctx = api.ROOT_CONTEXT;
    const r = random();
    if (r < 0.3) ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, remoteContext());
    else if (r < 0.6 && parent) ctx = api.trace.setSpan(api.ROOT_CONTEXT, parent);
    const start = i * 1000003 + int(1000);
    const links = [];
    for (let l = int(3); l > 0; --l) {
      links.push({ context: remoteContext(), attributes: attributes(int(3)) });
    }
    const span = tracer.startSpan(`op-${i % 37}`, {
      kind: kinds[i % kinds.length], attributes: attributes(int(8)), links,
      startTime: hrtime(start),
    }, ctx);
    for (let e = int(4); e > 0; --e) {
      span.addEvent(pick(['retry', 'checkpoint', 'exception', '']), attributes(int(4)),
        hrtime(start + 10 + e));
    }
    const status = int(3);
    if (status === 1) span.setStatus({ code: api.SpanStatusCode.OK });
    if (status === 2) span.setStatus({ code: api.SpanStatusCode.ERROR, message: pick(kStrings) });
    span.end(hrtime(start + 500 + int(100000)));
    if (i % 10 === 0) parent = span;
  }
  return memory.getFinishedSpans();
}

// A MetricReader collected by hand: the data a metric exporter is handed.
class ManualReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

async function makeMetrics() {
  const reader = new ManualReader();
  const provider = new MeterProvider({
    resource,
    readers: [reader],
    views: [{ instrumentName: 'latency.exponential',
      aggregation: { type: AggregationType.EXPONENTIAL_HISTOGRAM, options: { maxSize: 40 } } }],
  });
  const meter = provider.getMeter('lens.interop.metrics', '0.1.0');
  const counter = meter.createCounter('requests', { unit: '{request}', description: 'served' });
  const doubles = meter.createCounter('bytes', { unit: 'By' });
  const updown = meter.createUpDownCounter('queue.depth');
  const histogram = meter.createHistogram('latency', { unit: 's', description: 'step time' });
  const exponential = meter.createHistogram('latency.exponential', { unit: 's' });
  const gauge = meter.createGauge('temperature', { unit: 'Cel' });
  const observed = meter.createObservableGauge('memory.used', { unit: 'By' });
  observed.addCallback((r) => {
    r.observe(1024, { pool: 'a' });
    r.observe(2048.5, { pool: 'b' });
  });
  for (let i = 0; i < 200; ++i) {
    const attrs = { route: pick(['/a', '/b', '/c']), ok: random() < 0.8 };
    counter.add(int(10), attrs);
    doubles.add(random() * 1000, attrs);
    updown.add(int(21) - 10, { queue: pick(['x', 'y']) });
    histogram.record(random() * 2, attrs);
    exponential.record(random() < 0.1 ? 0 : random() * 1e3 - 100, { route: attrs.route });
    gauge.record(20 + random() * 5, { sensor: pick(['s1', 's2']) });
  }
  const { resourceMetrics, errors } = await reader.collect();
  assert.equal(errors.length, 0, String(errors));
  await provider.shutdown();
  return resourceMetrics;
}

function makeLogs() {
  const memory = new InMemoryLogRecordExporter();
  const provider = new LoggerProvider({ resource, processors: [new SimpleLogRecordProcessor(memory)] });
  const logger = provider.getLogger('lens.interop.logs', '2.0.0');
  for (let i = 0; i < 300; ++i) {
    const ctx = random() < 0.5 ? api.trace.setSpanContext(api.ROOT_CONTEXT, remoteContext())
      : api.ROOT_CONTEXT;
    logger.emit({
      severityNumber: 1 + int(24), severityText: pick(['DEBUG', 'INFO', 'WARN', 'ERROR']),
      body: pick([pick(kStrings), { nested: { list: [1, 'two', false] } }, 17, 2.5, true]),
      attributes: { seq: i, ...attributes(int(5)) },
      timestamp: hrtime(i * 7919), observedTimestamp: hrtime(i * 7919 + 3), context: ctx,
      eventName: i % 3 === 0 ? `event.${i % 5}` : undefined,
    });
  }
  return memory.getFinishedLogRecords();
}

// ---------------------------------------------------------------------------------------------
// OTLP/JSON equivalence: one canonical form for the SDK's request and collect's line.

// 64-bit integer members (numbers or decimal strings in OTLP/JSON).
const kInt64 = new Set(['intValue', 'asInt', 'startTimeUnixNano', 'endTimeUnixNano',
  'timeUnixNano', 'observedTimeUnixNano', 'count', 'bucketCounts', 'zeroCount']);
// Members whose presence is the value (oneof members, proto3 optional): kept even at a default.
const kPresence = new Set(['stringValue', 'boolValue', 'intValue', 'doubleValue', 'bytesValue',
  'arrayValue', 'kvlistValue', 'asInt', 'asDouble', 'sum', 'min', 'max']);
const kIds = new Set(['traceId', 'spanId', 'parentSpanId']);

function isDefault(v) {
  return v === undefined || v === null || v === 0 || v === '' || v === false ||
    (Array.isArray(v) && v.length === 0) ||
    (typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0);
}

const kInt64Range = [-(2n ** 63n), 2n ** 63n - 1n];

// `json`: the value is the SDK's JSON request, and what docs/otlp.md says collect makes of it
// applies (doubleValue null is "NaN", an intValue beyond int64 a doubleValue).
function canon(value, key, json) {
  if (kInt64.has(key)) {
    if (Array.isArray(value)) return value.map((v) => BigInt(v).toString());
    return BigInt(value).toString();
  }
  if (kIds.has(key)) {
    if (typeof value === 'string' && /^([0-9a-fA-F]{16}){1,2}$|^$/.test(value)) {
      return value.toLowerCase();
    }
    return Buffer.from(value, 'base64').toString('hex');  // protobuf bytes, decoded as base64
  }
  if (typeof value === 'number' && !Number.isFinite(value)) {
    return Number.isNaN(value) ? 'NaN' : value > 0 ? 'Infinity' : '-Infinity';
  }
  if (typeof value === 'string') return value.toWellFormed();
  if (Array.isArray(value)) return value.map((v) => canon(v, '', json));
  if (value === null || typeof value !== 'object') return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (json && k === 'doubleValue' && v === null) {
      out[k] = 'NaN';
      continue;
    }
    if (json && k === 'intValue' && typeof v === 'number' &&
        (!Number.isInteger(v) || BigInt(v) < kInt64Range[0] || BigInt(v) > kInt64Range[1])) {
      out.doubleValue = v;
      continue;
    }
    const c = canon(v, k, json);
    if (!kPresence.has(k) && isDefault(c)) continue;
    out[k] = c;
  }
  return out;
}

// collect's lines, with 64-bit integers written as numbers read exactly (JSON.parse would round
// those beyond 2^53).
function parseLine(line) {
  return JSON.parse(line.replace(/([:,[])(-?\d{16,})(?=[,\]}])/g, '$1"$2"'));
}

// The items of requests (spans, metrics or log records), each with its resource and scope.
function flatten(requests, signal, json) {
  const [root, scopes, items] = {
    traces: ['resourceSpans', 'scopeSpans', 'spans'],
    metrics: ['resourceMetrics', 'scopeMetrics', 'metrics'],
    logs: ['resourceLogs', 'scopeLogs', 'logRecords'],
  }[signal];
  const out = [];
  for (const request of requests) {
    for (const r of request[root] || []) {
      for (const s of r[scopes] || []) {
        for (const item of s[items] || []) {
          out.push(canon({ resource: r.resource, resourceSchemaUrl: r.schemaUrl, scope: s.scope,
            scopeSchemaUrl: s.schemaUrl, item }, '', json));
        }
      }
    }
  }
  return out;
}

function compare(label, sent, written) {
  assert.equal(written.length, sent.length, `${label}: ${written.length} items written, ` +
    `${sent.length} sent`);
  for (let i = 0; i < sent.length; ++i) {
    try {
      assert.deepStrictEqual(written[i], sent[i]);
    } catch (e) {
      console.error(`${label}: item ${i} differs:\nsent    ${JSON.stringify(sent[i])}\n` +
        `written ${JSON.stringify(written[i])}`);
      throw e;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// lens collect as a child process; its readiness line says it listens.

function startCollect() {
  const files = { traces: path.join(scratch, 'traces.jsonl'),
    metrics: path.join(scratch, 'metrics.jsonl'), logs: path.join(scratch, 'logs.jsonl') };
  const child = child_process.spawn(lensBinary, ['collect', '--out', files.traces,
    '--metrics-out', files.metrics, '--logs-out', files.logs, '--listen', '127.0.0.1:0',
    '--grpc-listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  collectChild = child;
  let stderr = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lens collect not ready in 30 s: ${stderr}`)),
      30000);
    child.on('exit', (code) => reject(new Error(`lens collect exited (${code}): ${stderr}`)));
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      if (!stderr.includes('lens collect: ready')) return;
      clearTimeout(timer);
      const http = Number(/OTLP\/HTTP on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr)[1]);
      const grpc = Number(/OTLP\/gRPC on 127\.0\.0\.1:(\d+)/.exec(stderr)[1]);
      child.removeAllListeners('exit');
      resolve({ child, files, http, grpc, stderr: () => stderr });
    });
  });
}

// The lines appended to `file` since the last call for it.
const offsets = new Map();
function newLines(file) {
  const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  const from = offsets.get(file) || 0;
  offsets.set(file, text.length);
  return text.slice(from).split('\n').filter((l) => l !== '').map(parseLine);
}

function exportWith(exporter, data) {
  return new Promise((resolve, reject) => {
    exporter.export(data, (result) => {
      if (result.code === ExportResultCode.SUCCESS) resolve();
      else reject(result.error || new Error('export failed'));
    });
  });
}

function exporters(transport, gzip, collect) {
  const compression = gzip ? 'gzip' : 'none';
  const http = (p) => ({ url: `http://127.0.0.1:${collect.http}/v1/${p}`, compression,
    timeoutMillis: 20000 });
  const grpcOptions = { url: `http://127.0.0.1:${collect.grpc}`, compression, timeoutMillis: 20000 };
  const kind = { json: 'http', proto: 'proto', grpc: 'grpc' }[transport];
  const T = require(`@opentelemetry/exporter-trace-otlp-${kind}`).OTLPTraceExporter;
  const M = require(`@opentelemetry/exporter-metrics-otlp-${kind}`).OTLPMetricExporter;
  const L = require(`@opentelemetry/exporter-logs-otlp-${kind}`).OTLPLogExporter;
  return {
    traces: new T(kind === 'grpc' ? grpcOptions : http('traces')),
    metrics: new M(kind === 'grpc' ? grpcOptions : http('metrics')),
    logs: new L(kind === 'grpc' ? grpcOptions : http('logs')),
  };
}

// The request the SDK's serialiser for `transport` writes for `data`, as an object: its JSON parsed,
// or its protobuf decoded by the SDK's own generated messages (64-bit integers as strings).
const kSerializers = {
  traces: { json: JsonTraceSerializer, proto: ProtobufTraceSerializer,
    message: otlpProto.collector.trace.v1.ExportTraceServiceRequest },
  metrics: { json: JsonMetricsSerializer, proto: ProtobufMetricsSerializer,
    message: otlpProto.collector.metrics.v1.ExportMetricsServiceRequest },
  logs: { json: JsonLogsSerializer, proto: ProtobufLogsSerializer,
    message: otlpProto.collector.logs.v1.ExportLogsServiceRequest },
};
function sentRequest(signal, transport, data) {
  const s = kSerializers[signal];
  if (transport === 'json') return JSON.parse(new TextDecoder().decode(s.json.serializeRequest(data)));
  const message = s.message.decode(s.proto.serializeRequest(data));
  return s.message.toObject(message, { longs: String, bytes: String, enums: Number });
}

async function exportAndCompare(collect, spans, metrics, logs) {
  const batches = [];
  for (let i = 0; i < spans.length; i += kBatch) batches.push(spans.slice(i, i + kBatch));
  const expectations = {};
  for (const transport of ['json', 'proto']) {
    const json = transport === 'json';
    expectations[transport] = {
      traces: flatten(batches.map((b) => sentRequest('traces', transport, b)), 'traces', json),
      metrics: flatten([sentRequest('metrics', transport, metrics)], 'metrics', json),
      logs: flatten([sentRequest('logs', transport, logs)], 'logs', json),
    };
  }
  expectations.grpc = expectations.proto;
  const times = [];
  for (const transport of ['json', 'proto', 'grpc']) {
    for (const gzip of [false, true]) {
      const label = `${transport}${gzip ? '+gzip' : ''}`;
      const started = Date.now();
      const e = exporters(transport, gzip, collect);
      for (const batch of batches) await exportWith(e.traces, batch);
      await exportWith(e.metrics, metrics);
      await exportWith(e.logs, logs);
      await Promise.all([e.traces.shutdown(), e.metrics.shutdown(), e.logs.shutdown()]);
      for (const signal of ['traces', 'metrics', 'logs']) {
        compare(`${label} ${signal}`, expectations[transport][signal],
          flatten(newLines(collect.files[signal]), signal, false));
      }
      times.push(`${label} ${Date.now() - started} ms`);
    }
  }
  const counts = expectations.json;
  console.log(`js interop: ${counts.traces.length} spans, ${counts.metrics.length} metrics, ` +
    `${counts.logs.length} log records over 6 transports, every field as sent (${times.join(', ')})`);
}

// ---------------------------------------------------------------------------------------------
// What the SDK cannot send as it holds it: NaN and the infinities (JSON.stringify writes null),
// a lone surrogate, a whole number beyond int64. Sent over JSON and protobuf; what collect keeps.

async function oddValues(collect) {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new SimpleSpanProcessor(memory)] });
  const span = provider.getTracer('lens.interop.odd').startSpan('odd', {
    attributes: { nan: NaN, inf: Infinity, ninf: -Infinity, surrogate: 'bad\ud800', big: 1e300,
      doubles: [1.5, NaN] },
  });
  span.end();
  const spans = memory.getFinishedSpans();
  const got = {};
  for (const transport of ['json', 'proto']) {
    await exportWith(exporters(transport, false, collect).traces, spans);
    const [line] = newLines(collect.files.traces);
    const attrs = {};
    for (const kv of line.resourceSpans[0].scopeSpans[0].spans[0].attributes) {
      attrs[kv.key] = kv.value;
    }
    got[transport] = attrs;
  }
  // Over JSON: null is NaN (which non-finite value it was is lost), the surrogate U+FFFD, 1e300 a
  // double (docs/otlp.md).
  assert.deepStrictEqual(got.json, {
    nan: { doubleValue: 'NaN' }, inf: { doubleValue: 'NaN' }, ninf: { doubleValue: 'NaN' },
    surrogate: { stringValue: 'bad\ufffd' }, big: { doubleValue: 1e300 },
    doubles: { arrayValue: { values: [{ doubleValue: 1.5 }, { doubleValue: 'NaN' }] } },
  });
  // Over protobuf the doubles arrive exactly. The SDK's protobuf encoder writes the surrogate as
  // the three bytes ED A0 80 (not UTF-8), each of which collect replaces with U+FFFD, and 1e300
  // into an int64 as 0 (protobufjs' conversion): what the SDK sent, kept.
  assert.deepStrictEqual(got.proto, {
    nan: { doubleValue: 'NaN' }, inf: { doubleValue: 'Infinity' }, ninf: { doubleValue: '-Infinity' },
    surrogate: { stringValue: 'bad\ufffd\ufffd\ufffd' }, big: { intValue: '0' },
    doubles: { arrayValue: { values: [{ doubleValue: 1.5 }, { doubleValue: 'NaN' }] } },
  });
}

// ---------------------------------------------------------------------------------------------
// W3C Trace Context and Baggage between the JS propagators and lens, both ways.

// Keys with '(' or ')' (which the JS propagator keeps), keys it percent-encodes
// (encodeURIComponent: '#', '$', '&', '+', '^', '`', '|', a space, non-ASCII) and plain ones: lens
// decodes every key and escapes on inject what is not a token character (docs/distributed.md).
const kBaggageKeys = ['user', 'tenant.id', 'k-1', 'a_b', 'UPPER', "x!~*'.-_", 'a(b)', 'k#1', 'x$y',
  'p+q', 'u&v', 'c^d', 'g`h', 'i|j', 'sp ace', 'clé'];
const kBaggageValues = ['v', 'hello world', 'ünïcode', 'a,b;c=d', '100%', '"quoted"', '', 'x=y'];

function randomContext() {
  const members = [];
  for (let n = int(5); n > 0; --n) {
    const key = pick(['vendor', 'congo', 'rojo', 'tenant@system', 'a1-_*/', 'x@y']) + int(50);
    if (!members.some((m) => m.startsWith(`${key}=`))) members.push(`${key}=${pick(['t61rcWkgMzE', 'v1', '00f067aa0ba902b7', 'a b', '!~'])}`);
  }
  const baggage = [];
  for (let n = int(4); n > 0; --n) {
    const key = pick(kBaggageKeys);
    if (!baggage.some(([k]) => k === key)) baggage.push([key, pick(kBaggageValues)]);
  }
  return { trace_id: hex(16), span_id: hex(8), flags: int(4), trace_state: members.join(','), baggage };
}

// The JS view of a context: what its propagators extract from `carrier`.
function jsExtract(carrier) {
  let ctx = new W3CTraceContextPropagator().extract(api.ROOT_CONTEXT, carrier, api.defaultTextMapGetter);
  ctx = new W3CBaggagePropagator().extract(ctx, carrier, api.defaultTextMapGetter);
  const sc = api.trace.getSpanContext(ctx);
  const bag = api.propagation.getBaggage(ctx);
  const out = {};
  if (sc && api.isSpanContextValid(sc)) {
    out.trace_id = sc.traceId;
    out.span_id = sc.spanId;
    out.flags = sc.traceFlags;
    out.trace_state = sc.traceState ? sc.traceState.serialize() : '';
  }
  out.baggage = bag ? bag.getAllEntries().map(([k, v]) => [k, v.value]) : [];
  return out;
}

function jsInject(c) {
  const core = require('@opentelemetry/core');
  const sc = { traceId: c.trace_id, spanId: c.span_id, traceFlags: c.flags, isRemote: false,
    traceState: c.trace_state ? new core.TraceState(c.trace_state) : undefined };
  let ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, sc);
  if (c.baggage.length > 0) {
    ctx = api.propagation.setBaggage(ctx, api.propagation.createBaggage(
      Object.fromEntries(c.baggage.map(([k, v]) => [k, { value: v }]))));
  }
  const carrier = {};
  new W3CTraceContextPropagator().inject(ctx, carrier, api.defaultTextMapSetter);
  new W3CBaggagePropagator().inject(ctx, carrier, api.defaultTextMapSetter);
  return carrier;
}

const sortBaggage = (b) => [...b].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));

async function propagation() {
  const peer = child_process.spawn(peerBinary, ['relay'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: peer.stdout });
  const answers = lines[Symbol.asyncIterator]();
  const kContexts = 500;
  for (let i = 0; i < kContexts; ++i) {
    const c = randomContext();
    const carrier = jsInject(c);
    peer.stdin.write(`${JSON.stringify({ carrier, context: c })}\n`);
    const { value, done } = await answers.next();
    assert.ok(!done, 'w3c_peer relay ended early');
    const answer = JSON.parse(value);
    const label = `context ${JSON.stringify(c)} (JS headers ${JSON.stringify(carrier)})`;
    // JS -> lens: lens extracts what the JS propagators injected.
    const sent = jsExtract(carrier);
    assert.deepStrictEqual({ ...answer.extracted, baggage: sortBaggage(answer.extracted.baggage) },
      { ...sent, baggage: sortBaggage(sent.baggage) }, `JS -> lens: ${label}`);
    assert.equal(answer.extracted.flags, c.flags, `random flag kept: ${label}`);
    // lens -> JS: the JS propagators extract what lens injected for the same context.
    const back = jsExtract(answer.injected);
    assert.deepStrictEqual({ ...back, baggage: sortBaggage(back.baggage) },
      { ...sent, baggage: sortBaggage(sent.baggage) },
      `lens -> JS: ${label}, lens headers ${JSON.stringify(answer.injected)}`);
  }
  peer.stdin.end();
  await new Promise((resolve) => peer.on('exit', resolve));
  console.log(`js interop: ${kContexts} W3C contexts with baggage round-tripped JS -> lens -> JS`);
}

// A Node span's context in a lens child's environment: the child's root span is its child.
async function environment(collect) {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new SimpleSpanProcessor(memory)] });
  const parent = provider.getTracer('lens.interop.parent').startSpan('node-parent');
  const c = { ...randomContext(), trace_id: parent.spanContext().traceId,
    span_id: parent.spanContext().spanId, flags: 3, trace_state: 'node=1',
    baggage: [['job', 'interop'], ['stage', 'ci 1']] };
  const carrier = jsInject(c);
  const env = { ...process.env, TRACEPARENT: carrier.traceparent, TRACESTATE: carrier.tracestate,
    BAGGAGE: carrier.baggage, NEMO_LENS_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collect.http}`,
    NEMO_LENS_METRICS_ENABLED: 'false', NEMO_LENS_LOGS_ENABLED: 'false' };
  const run = child_process.spawnSync(peerBinary, ['child'], { env, encoding: 'utf8', timeout: 60000 });
  assert.equal(run.status, 0, `w3c_peer child: ${run.stderr}`);
  parent.end();
  const out = JSON.parse(run.stdout);
  assert.equal(out.flushed, true);
  assert.equal(out.trace_id, c.trace_id);
  const [line] = newLines(collect.files.traces);
  const span = line.resourceSpans[0].scopeSpans[0].spans[0];
  assert.equal(span.name, 'lens-child');
  assert.equal(span.traceId, c.trace_id);
  assert.equal(span.parentSpanId, c.span_id);
  assert.equal(span.spanId, out.span_id);
  // What the child hands its own children: its span, with the trace state and baggage inherited.
  const grandchild = jsExtract({ traceparent: out.environment.TRACEPARENT,
    tracestate: out.environment.TRACESTATE, baggage: out.environment.BAGGAGE });
  assert.equal(grandchild.trace_id, c.trace_id);
  assert.equal(grandchild.span_id, out.span_id);
  assert.equal(grandchild.flags & 1, 1, 'the sampled flag of the Node span is kept');
  assert.equal(grandchild.trace_state, 'node=1');
  assert.deepStrictEqual(sortBaggage(grandchild.baggage), sortBaggage(c.baggage));
  console.log('js interop: a lens child process continued the Node span through TRACEPARENT, ' +
    'TRACESTATE and BAGGAGE');
}

// Everything collect accepted from the SDK is read by lens report and lens convert, no line
// skipped.
function readable(files) {
  const run = (args) => {
    const r = child_process.spawnSync(lensBinary, args, { encoding: 'utf8', timeout: 60000,
      maxBuffer: 64 << 20 });
    assert.equal(r.status, 0, `lens ${args.join(' ')}: ${r.stderr}`);
    return r;
  };
  // The SDK's resources carry no nemo.run.id and the lens child's does: two runs, one report each
  // (an array), each counting the whole input.
  const runs = [].concat(JSON.parse(
    run(['report', '--json', files.traces, files.metrics, files.logs]).stdout));
  const report = runs[0];
  for (const r of runs) assert.deepStrictEqual(r.input, report.input);
  assert.equal(report.input.malformed_lines, 0, JSON.stringify(report.malformed));
  // 6 transports of the spans, the odd span over JSON and protobuf, and the lens child's.
  assert.equal(report.input.spans, 6 * kSpans + 2 + 1);
  assert.equal(report.input.metric_lines, 6);
  assert.equal(report.input.log_lines, 6);
  const chrome = path.join(scratch, 'trace.json');
  const convert = run(['convert', '--to', 'chrome', files.traces, '-o', chrome]);
  assert.equal(convert.stderr, '', 'lens convert skipped lines');
  const events = JSON.parse(fs.readFileSync(chrome, 'utf8')).traceEvents.filter((e) => e.ph === 'X');
  assert.equal(events.length, 6 * kSpans + 2 + 1);
  console.log(`js interop: lens report and lens convert read all ${events.length} spans, ` +
    `${report.input.data_points} data points and ${report.input.log_lines} lines of logs`);
}

async function main() {
  const started = Date.now();
  const spans = makeSpans();
  const metrics = await makeMetrics();
  const logs = makeLogs();
  const collect = await startCollect();
  try {
    await exportAndCompare(collect, spans, metrics, logs);
    await oddValues(collect);
    await propagation();
    await environment(collect);
  } finally {
    collect.child.kill('SIGTERM');
  }
  const code = await new Promise((resolve) => collect.child.on('exit', resolve));
  assert.equal(code, 0, `lens collect: ${collect.stderr()}`);
  readable(collect.files);
  console.log(`js interop: passed in ${Date.now() - started} ms`);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  if (collectChild) collectChild.kill('SIGKILL');
  process.exit(1);
});
