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
/// Resource: the GPUs visible to the process (int): the entries of CUDA_VISIBLE_DEVICES, else
/// the GPUs nvidia-smi lists.
inline constexpr std::string_view kHostGpuCount = "host.gpu.count";

// ---- SLURM (written when SLURM_JOB_ID is set) ----
// The seven keys of NeMo Lens v0.2.0 are strings, each its variable's value as it is.

/// Resource: SLURM_JOB_ID (an array element's own id; see kSlurmArrayJobId).
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
/// Resource: SLURM_NODELIST, the job's nodes in SLURM's compressed form ("node[01-04]").
inline constexpr std::string_view kSlurmNodelist = "slurm.nodelist";
/// Resource: SLURM_PARTITION (the partition asked for, when the launch names one).
inline constexpr std::string_view kSlurmPartition = "slurm.partition";
/// Resource: SLURM_JOB_PARTITION, the partition SLURM ran the job in (lens only).
inline constexpr std::string_view kSlurmJobPartition = "slurm.job.partition";
/// Resource: SLURM_NNODES, the number of nodes (a string, as NeMo Lens v0.2.0 writes it).
inline constexpr std::string_view kSlurmNnodes = "slurm.nnodes";
/// Resource: SLURM_NTASKS, the number of tasks (a string, as NeMo Lens v0.2.0 writes it).
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
/// Span attribute of a span the flight recorder captured (docs/flight-recorder.md): why
/// (string: "slow_step", "hang", "error", "manual", or the reason given to capture()).
inline constexpr std::string_view kLensCaptureReason = "lens.capture.reason";
/// Span attribute of a span the flight recorder captured: the capture it came with (int, unique
/// within a process: with the rank, it tells captures apart).
inline constexpr std::string_view kLensCaptureId = "lens.capture.id";
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

// ---- the OpenTelemetry semantic-conventions version the standard names follow ----

/// The semantic-conventions release of the gen_ai.* and k8s.* names.
inline constexpr std::string_view kSemconvVersion = "1.29.0";

// ---- the parallel layout and the step (span and metric attributes NeMo Lens defines) ----

/// The rank within its node (int).
inline constexpr std::string_view kDlLocalRank = "dl.local_rank";
/// The rank within its data-parallel group (int).
inline constexpr std::string_view kDlDataParallelRank = "dl.data_parallel.rank";
/// The size of the data-parallel group (int).
inline constexpr std::string_view kDlDataParallelSize = "dl.data_parallel.size";
/// The rank within its tensor-parallel group (int).
inline constexpr std::string_view kDlTensorParallelRank = "dl.tensor_parallel.rank";
/// The size of the tensor-parallel group (int).
inline constexpr std::string_view kDlTensorParallelSize = "dl.tensor_parallel.size";
/// The pipeline stage (int).
inline constexpr std::string_view kDlPipelineParallelRank = "dl.pipeline_parallel.rank";
/// The number of pipeline stages (int).
inline constexpr std::string_view kDlPipelineParallelSize = "dl.pipeline_parallel.size";
/// The training iteration a span belongs to (int).
inline constexpr std::string_view kDlIteration = "dl.iteration";
/// Achieved TFLOP/s (double).
inline constexpr std::string_view kDlThroughputTflops = "dl.throughput_tflops";
/// Tokens per second (double).
inline constexpr std::string_view kDlThroughputTokensPerSec = "dl.throughput_tokens_per_sec";
/// The global batch size (int).
inline constexpr std::string_view kDlBatchSize = "dl.batch_size";
/// The sequence length (int).
inline constexpr std::string_view kDlSequenceLength = "dl.sequence_length";
/// The microbatch a span covers (int).
inline constexpr std::string_view kDlMicrobatchId = "dl.microbatch_id";

// ---- generative AI (OpenTelemetry's gen_ai.* conventions, record_inference_metrics) ----

/// The operation, e.g. text_completion.
inline constexpr std::string_view kGenaiOperationName = "gen_ai.operation.name";
/// Who serves the model, e.g. nemo.
inline constexpr std::string_view kGenaiProviderName = "gen_ai.provider.name";
/// The model a request asked for.
inline constexpr std::string_view kGenaiRequestModel = "gen_ai.request.model";
/// Input or output, on gen_ai.client.token.usage.
inline constexpr std::string_view kGenaiTokenType = "gen_ai.token.type";

// ---- reinforcement learning (rl.*, record_rl_metrics) ----

/// The algorithm, e.g. grpo.
inline constexpr std::string_view kRlAlgorithm = "rl.algorithm";
/// A rollout's reward (double).
inline constexpr std::string_view kRlReward = "rl.reward";
/// Gauge: the mean reward of the last rollout batch.
inline constexpr std::string_view kRlRewardMean = "rl.reward.mean";
/// Gauge: KL divergence between policy and reference.
inline constexpr std::string_view kRlKlDivergence = "rl.kl_divergence";
/// Gauge: the policy-gradient loss.
inline constexpr std::string_view kRlPolicyLoss = "rl.policy_loss";
/// Gauge: the value-function loss.
inline constexpr std::string_view kRlValueLoss = "rl.value_loss";
/// Gauge: the policy's entropy.
inline constexpr std::string_view kRlEntropy = "rl.entropy";
/// The generation engine, e.g. vllm.
inline constexpr std::string_view kRlGenerationBackend = "rl.generation.backend";
/// Rollouts in a batch (int).
inline constexpr std::string_view kRlNumRollouts = "rl.num_rollouts";
/// Gauge: mean generated length in tokens.
inline constexpr std::string_view kRlResponseLengthMean = "rl.response_length.mean";
/// Gauge: the gradient norm of the policy update.
inline constexpr std::string_view kRlGradNorm = "rl.grad_norm";
/// Gauge: the optimizer's learning rate.
inline constexpr std::string_view kRlLearningRate = "rl.learning_rate";
/// Gauge: training tokens per second.
inline constexpr std::string_view kRlThroughputTokensPerSec = "rl.throughput.tokens_per_sec";

// ---- NeMo Gym (gym.*, record_gym_metrics) ----

/// The Gym server's name.
inline constexpr std::string_view kGymServerName = "gym.server.name";
/// The Gym server's type.
inline constexpr std::string_view kGymServerType = "gym.server.type";
/// Gym servers in use (int).
inline constexpr std::string_view kGymNumServers = "gym.num_servers";
/// Rollouts per batch (int).
inline constexpr std::string_view kGymRolloutBatchSize = "gym.rollout.batch_size";
/// Gauge: the fraction of successful verifications.
inline constexpr std::string_view kGymVerifySuccessRate = "gym.verify.success_rate";

// ---- the inference, RL and Gym metrics (record_inference_metrics, ...) ----

/// Histogram (s): a GenAI server request's duration.
inline constexpr std::string_view kGenaiServerRequestDuration = "gen_ai.server.request.duration";
/// Histogram ({token}): tokens per request, by gen_ai.token.type.
inline constexpr std::string_view kGenaiClientTokenUsage = "gen_ai.client.token.usage";
/// Histogram (ms): text generation time.
inline constexpr std::string_view kRlGenerationDurationMs = "rl.generation.duration_ms";
/// Histogram (ms): rollout collection time.
inline constexpr std::string_view kRlRolloutDurationMs = "rl.rollout.duration_ms";
/// Histogram (ms): a Gym server request's duration.
inline constexpr std::string_view kGymServerRequestDurationMs = "gym.server.request_duration_ms";
/// Histogram (ms): rollout collection time.
inline constexpr std::string_view kGymRolloutDurationMs = "gym.rollout.duration_ms";
/// Histogram (ms): a verification call's duration.
inline constexpr std::string_view kGymVerifyDurationMs = "gym.verify.duration_ms";
/// Gauge: the number of active Gym servers.
inline constexpr std::string_view kGymServersActive = "gym.servers.active";

}  // namespace nemo::lens::semconv
