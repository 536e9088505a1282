// A stand-in libcuda.so.1 for the CUPTI source's tests (gpu_cupti_test.cpp): the driver functions
// lens may call, with the driver's own types (cuda.h), and a count of cuInit calls, which lens must
// never make (the program initialises the driver, after setting CUDA_VISIBLE_DEVICES, before or
// after its forks). Streams being captured and graphs (their nodes' types, child graphs) are what
// the test says. Not part of the library.
#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace {

struct Node {
  CUgraphNodeType type;
  CUgraph child = nullptr;
};
struct Graph {
  std::vector<Node> nodes;
};

std::atomic<int> g_init_calls{0};
std::atomic<int> g_driver_version{13000};
std::atomic<CUstream> g_capturing{nullptr};
std::mutex g_mu;
std::vector<std::unique_ptr<Graph>> g_graphs;

}  // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int) {
  ++g_init_calls;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  *version = g_driver_version.load();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (g_init_calls.load() == 0) return CUDA_ERROR_NOT_INITIALIZED;
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  *status = stream != nullptr && stream == g_capturing.load() ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                              : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  auto* g = reinterpret_cast<Graph*>(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes == nullptr) {
    *count = g->nodes.size();
    return CUDA_SUCCESS;
  }
  const size_t n = *count < g->nodes.size() ? *count : g->nodes.size();
  for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(&g->nodes[i]);
  *count = n;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  *type = reinterpret_cast<Node*>(node)->type;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* graph) {
  const Node* n = reinterpret_cast<Node*>(node);
  if (n->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *graph = n->child;
  return CUDA_SUCCESS;
}

// ---- What the test drives ------------------------------------------------------------------

int lens_stand_in_cuinit_calls() { return g_init_calls.load(); }

void lens_stand_in_set_driver_version(int version) { g_driver_version = version; }

// `stream` is being captured into a graph from now on (null: none is).
void lens_stand_in_capture(CUstream stream) { g_capturing = stream; }

// A graph of nodes of `types` (CUgraphNodeType values); a CU_GRAPH_NODE_TYPE_GRAPH node's child
// is the next of `children`, in order.
CUgraph lens_stand_in_graph(const int* types, size_t n, const CUgraph* children) {
  auto g = std::make_unique<Graph>();
  size_t child = 0;
  for (size_t i = 0; i < n; ++i) {
    Node node{static_cast<CUgraphNodeType>(types[i])};
    if (node.type == CU_GRAPH_NODE_TYPE_GRAPH) node.child = children[child++];
    g->nodes.push_back(node);
  }
  std::lock_guard lock(g_mu);
  g_graphs.push_back(std::move(g));
  return reinterpret_cast<CUgraph>(g_graphs.back().get());
}

}  // extern "C"
