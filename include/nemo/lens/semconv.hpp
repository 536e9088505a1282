// The names lens writes and reads: resource attributes, span and log attributes, span events and
// the training metrics, as constants, so that a program, a query or a dashboard spells them the way
// lens does. Header-only: nothing to link.
//
//   #include <nemo/lens/semconv.hpp>
//   namespace semconv = nemo::lens::semconv;
//   const AttributeValue* rank = resource.attribute(semconv::kDlRank);   // std::int64_t
//   std::string query = std::string(semconv::kNemoRunId) + "=" + run_id;  // Jaeger tag search
//   if (kv.key == semconv::kNemoSpanTruncated) continue;            // leave out of statistics
//
// Both rank spellings are written: `dl.*` (NeMo Lens v0.2.0, which lens mirrors) and `nv.dl.*`
// (newer NeMo Lens releases), so dashboards built for either work (docs/resources.md).
#pragma once

#include <string_view>

namespace nemo::lens::semconv {

// ---- the rank and the run ----

/// Resource: the process's global rank (int), the `rank` passed to setup_telemetry().
inline constexpr std::string_view kDlRank = "dl.rank";
/// Resource: the number of ranks of the job (int), the `world_size` passed to setup_telemetry().
inline constexpr std::string_view kDlWorldSize = "dl.world_size";
/// Resource: kDlRank as newer NeMo Lens releases spell it; always written beside it, same value.
inline constexpr std::string_view kNvDlRank = "nv.dl.rank";
/// Resource: kDlWorldSize as newer NeMo Lens releases spell it; always written beside it.
inline constexpr std::string_view kNvDlWorldSize = "nv.dl.world_size";
/// Resource: the submitted SLURM job's stable id (a UUID5 of cluster and job id): the same on
/// every rank, array element and requeue. Written under SLURM.
inline constexpr std::string_view kNvDlJobUuid = "nv.dl.job.uuid";
/// Resource: the id of one attempt of a job. Not derived by lens; recognised (typed as a
/// string) when it comes in OTEL_RESOURCE_ATTRIBUTES from a launcher.
inline constexpr std::string_view kNvDlRunUuid = "nv.dl.run.uuid";
/// Resource: the run id (NemoLensConfig::run_id), shared by every rank; absent when empty.
inline constexpr std::string_view kNemoRunId = "nemo.run.id";
/// Resource: an optional team or user label (NemoLensConfig::user).
inline constexpr std::string_view kNemoUserId = "nemo.user.id";
/// Resource: W&B entity and project (NemoLensConfig::wandb_entity, wandb_project).
inline constexpr std::string_view kWandbEntity = "wandb.entity";
/// Resource: see kWandbEntity.
inline constexpr std::string_view kWandbProject = "wandb.project";

// ---- standard OpenTelemetry resource attributes ----

/// Resource: NemoLensConfig::service_name (OTEL_SERVICE_NAME, default "nemo").
inline constexpr std::string_view kServiceName = "service.name";
/// Resource: the lens version.
inline constexpr std::string_view kServiceVersion = "service.version";
/// Resource: `<run id>-rank<rank>`, what tells the processes of a run apart.
inline constexpr std::string_view kServiceInstanceId = "service.instance.id";
/// Resource: DEPLOYMENT_ENV, else ENVIRONMENT; absent when empty.
inline constexpr std::string_view kDeploymentEnvironment = "deployment.environment";
/// Resource: the machine's host name.
inline constexpr std::string_view kHostName = "host.name";
/// Resource: the process id (int); a forked child's pipeline carries its own.
inline constexpr std::string_view kProcessPid = "process.pid";
/// Resource: the GPUs visible to the process (int): CUDA_VISIBLE_DEVICES, else nvidia-smi.
inline constexpr std::string_view kHostGpuCount = "host.gpu.count";

// ---- SLURM (written when SLURM_JOB_ID is set) ----

/// Resource: the job id; `<array job id>_<task id>` for an array element.
inline constexpr std::string_view kSlurmJobId = "slurm.job.id";
/// Resource: SLURM_JOB_ID as it is.
inline constexpr std::string_view kSlurmJobIdRaw = "slurm.job.id.raw";
/// Resource: the array job id (the job id outside an array).
inline constexpr std::string_view kSlurmArrayJobId = "slurm.array.job_id";
/// Resource: the array task id ("0" outside an array).
inline constexpr std::string_view kSlurmArrayTaskId = "slurm.array.task_id";
/// Resource: the number of array tasks (int, 1 outside an array).
inline constexpr std::string_view kSlurmArrayCount = "slurm.array.count";
/// Resource: the launcher's SLUID (LENS_SLURM_SLUID, NV_LAUNCH_SLUID).
inline constexpr std::string_view kSlurmSluid = "slurm.sluid";
/// Resource: the array's SLUID (LENS_SLURM_ARRAY_SLUID, NV_LAUNCH_ARRAY_SLUID).
inline constexpr std::string_view kSlurmArraySluid = "slurm.array.sluid";
/// Resource: SLURM_JOB_NAME.
inline constexpr std::string_view kSlurmJobName = "slurm.job.name";
/// Resource: SLURM_CLUSTER_NAME.
inline constexpr std::string_view kSlurmClusterName = "slurm.cluster.name";
/// Resource: SLURM_JOB_PARTITION, else SLURM_PARTITION.
inline constexpr std::string_view kSlurmPartition = "slurm.partition";
/// Resource: the number of nodes (int).
inline constexpr std::string_view kSlurmNnodes = "slurm.nnodes";
/// Resource: the number of tasks (int).
inline constexpr std::string_view kSlurmNtasks = "slurm.ntasks";
/// Resource: SLURM_RESTART_COUNT (int, 0 when unset).
inline constexpr std::string_view kSlurmRestartCount = "slurm.restart_count";
/// Resource: SLURM_JOB_USER.
inline constexpr std::string_view kSlurmJobUser = "slurm.job.user";
/// Resource: SLURM_JOB_ACCOUNT.
inline constexpr std::string_view kSlurmJobAccount = "slurm.job.account";
/// Resource: SLURM_JOB_QOS.
inline constexpr std::string_view kSlurmJobQos = "slurm.job.qos";
/// Resource: SLURM_JOB_RESERVATION.
inline constexpr std::string_view kSlurmJobReservation = "slurm.job.reservation";
/// Resource: SLURM_SEGMENT.
inline constexpr std::string_view kSlurmSegment = "slurm.segment";
/// Resource: SLURM_TOPOLOGY_ADDR.
inline constexpr std::string_view kSlurmTopologyAddr = "slurm.topology.addr";
/// Resource: SLURM_TOPOLOGY_ADDR_PATTERN.
inline constexpr std::string_view kSlurmTopologyAddrPattern = "slurm.topology.addr_pattern";
/// Resource: SLURMD_NODENAME, in the batch script only (outside a job step).
inline constexpr std::string_view kSlurmHeadNodeName = "slurm.head_node.name";

// ---- Kubernetes (standard OpenTelemetry names; written when running in a pod) ----

/// Resource: K8S_NAMESPACE.
inline constexpr std::string_view kK8sNamespaceName = "k8s.namespace.name";
/// Resource: K8S_POD_NAME, else HOSTNAME.
inline constexpr std::string_view kK8sPodName = "k8s.pod.name";
/// Resource: K8S_POD_UID.
inline constexpr std::string_view kK8sPodUid = "k8s.pod.uid";
/// Resource: K8S_NODE_NAME.
inline constexpr std::string_view kK8sNodeName = "k8s.node.name";
/// Resource: K8S_CONTAINER_NAME.
inline constexpr std::string_view kK8sContainerName = "k8s.container.name";
/// Resource: K8S_JOB_NAME.
inline constexpr std::string_view kK8sJobName = "k8s.job.name";

// ---- spans ----

/// Span attribute: the span group of a managed_span() or LENS_SPAN (string), as it was given.
inline constexpr std::string_view kNemoSpanGroup = "nemo.span.group";
/// Span attribute, and log attribute of the hang watchdog: the OS id of the thread (int).
inline constexpr std::string_view kThreadId = "thread.id";
/// Span attribute (true) and span event: the span was still open at shutdown and was ended
/// then; its end time is the shutdown's, so leave it out of duration statistics.
inline constexpr std::string_view kNemoSpanTruncated = "nemo.span.truncated";
/// Span event of record_exception() and of a span left by an exception.
inline constexpr std::string_view kExceptionEvent = "exception";
/// Attribute of kExceptionEvent: the exception's type.
inline constexpr std::string_view kExceptionType = "exception.type";
/// Attribute of kExceptionEvent: the exception's message.
inline constexpr std::string_view kExceptionMessage = "exception.message";

// ---- live control (docs/control.md) ----

/// Span event on the oldest exported root span when `lens ctl groups` changes the groups.
inline constexpr std::string_view kSpanGroupsChangedEvent = "lens.span_groups_changed";
/// Attribute of kSpanGroupsChangedEvent: the groups before the change, comma-separated.
inline constexpr std::string_view kSpanGroupsPrevious = "lens.span_groups.previous";
/// Attribute of kSpanGroupsChangedEvent: the groups after the change, comma-separated.
inline constexpr std::string_view kSpanGroupsCurrent = "lens.span_groups.current";
/// Span event (and warning log record) of the hang watchdog on a span open too long.
inline constexpr std::string_view kHangEvent = "lens.hang";
/// Attribute of kHangEvent and its log record: seconds the span has been open (double).
inline constexpr std::string_view kHangOpenSeconds = "lens.hang.open_s";
/// Attribute of kHangEvent and its log record: the configured <PREFIX>_HANG_TIMEOUT (double).
inline constexpr std::string_view kHangTimeoutSeconds = "lens.hang.timeout_s";
/// Attribute of the hang watchdog's log record: the stuck span, as `group/name`.
inline constexpr std::string_view kHangSpan = "lens.hang.span";

// ---- logs ----

/// Log attribute of the spdlog sink: the source file of the call.
inline constexpr std::string_view kCodeFilepath = "code.filepath";
/// Log attribute of the spdlog sink: the source line (int).
inline constexpr std::string_view kCodeLineno = "code.lineno";
/// Log attribute of the spdlog sink: the calling function.
inline constexpr std::string_view kCodeFunction = "code.function";

// ---- the training metrics (TrainingMetrics) ----

/// Counter: training steps done.
inline constexpr std::string_view kDlSteps = "dl.steps";
/// Histogram: wall time of a training step, in seconds.
inline constexpr std::string_view kDlStepDuration = "dl.step.duration";
/// Gauge: tokens per second in the last step.
inline constexpr std::string_view kDlThroughputTokens = "dl.throughput.tokens";
/// Gauge: samples per second in the last step.
inline constexpr std::string_view kDlThroughputSamples = "dl.throughput.samples";
/// Gauge: the training loss of the last step.
inline constexpr std::string_view kDlLoss = "dl.loss";
/// Gauge: the learning rate of the last step.
inline constexpr std::string_view kDlLearningRate = "dl.learning_rate";
/// Gauge: the gradient norm of the last step.
inline constexpr std::string_view kDlGradNorm = "dl.grad_norm";

}  // namespace nemo::lens::semconv
