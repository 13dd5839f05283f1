// Device graphs (see device_graph.h).
#include "core/device_graph.h"

#include "core/allocator.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dark {

namespace {
thread_local DeviceGraph* capturing_graph = nullptr;  // the graph this thread is capturing

// Makes `graph` the one capturing on this thread for a scope.
class Capturing {
 public:
  explicit Capturing(DeviceGraph* graph) { capturing_graph = graph; }
  ~Capturing() { capturing_graph = nullptr; }
  Capturing(const Capturing&) = delete;
  Capturing& operator=(const Capturing&) = delete;
};
}  // namespace

bool capture_detail::capturing() { return capturing_graph != nullptr; }

void capture_detail::keep(const Tensor& t) {
  DeviceGraph* graph = capturing_graph;
  if (graph == nullptr || !t.defined() || t.device() != graph->device_) return;
  if (allocator_for(graph->device_).in_capturing_pool(t.storage()->data())) return;  // the graph's own block
  graph->kept_.push_back(t.storage());
}

DeviceGraph::DeviceGraph(Device device, const std::function<void()>& work) : device_(device) {
  DARK_CHECK(device.is_cuda(), "a device graph needs a CUDA device, not ", device.to_string());
  const DeviceBackend& backend = backend_for(device.type);
  CachingAllocator& memory = allocator_for(device);
  pool_ = memory.begin_pool();
  try {
    backend.begin_capture(device.index);
  } catch (...) {
    memory.release_pool(pool_);
    throw;
  }
  try {
    const Capturing capturing(this);
    work();
  } catch (...) {
    try {
      (void)backend.end_capture(device.index);  // abandons it; its own complaint is not the news
    } catch (...) {
    }
    memory.release_pool(pool_);
    throw;
  }
  try {
    graph_ = backend.end_capture(device.index);
  } catch (...) {
    memory.release_pool(pool_);
    throw;
  }
  memory.end_pool();
}

DeviceGraph::~DeviceGraph() {
  backend_for(device_.type).release_graph(graph_);
  allocator_for(device_).release_pool(pool_);
}

void DeviceGraph::launch() const { backend_for(device_.type).launch_graph(graph_, device_.index); }

std::size_t DeviceGraph::pool_bytes() const { return allocator_for(device_).pool_bytes(pool_); }

}  // namespace dark
