//===- Nccl.cpp - NCCL communicators, loaded at run time ------------------===//
#include "cuda/Nccl.h"
#include "cuda/DynamicLibrary.h"

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

using namespace stretto;
using namespace stretto::nccl;

Config stretto::nccl::defaultConfig() {
  Config c;
  c.size = sizeof(Config);
  c.magic = kConfigMagic;
  c.version = kHeaderVersion;
  c.blocking = INT_MIN;
  c.cgaClusterSize = INT_MIN;
  c.minCTAs = INT_MIN;
  c.maxCTAs = INT_MIN;
  c.netName = nullptr;
  c.splitShare = INT_MIN;
  c.trafficClass = INT_MIN;
  c.commName = nullptr;
  c.collnetEnable = INT_MIN;
  c.CTAPolicy = INT_MIN;
  c.shrinkShare = INT_MIN;
  c.nvlsCTAs = INT_MIN;
  c.nChannelsPerNetPeer = INT_MIN;
  c.nvlinkCentricSched = INT_MIN;
  return c;
}

const Api *Api::load(std::string &why) {
  static std::once_flag once;
  static Api api;
  static std::string error;
  static bool ok = false;
  std::call_once(once, [] {
    static DynamicLibrary lib;
    if (!lib.open({"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2"})) {
      error = "libnccl.so.2 not found (the CUDA toolkit's NCCL, or nvidia-nccl-cu13)";
      return;
    }
#define STRETTO_NCCL_BIND(member, name, ...) lib.bind(api.member, "nccl" #name);
    STRETTO_NCCL_FUNCTIONS(STRETTO_NCCL_BIND)
#undef STRETTO_NCCL_BIND
    if (!lib.missing().empty()) {
      error = "libnccl has no " + lib.missing() + " (NCCL 2.14 or later is needed)";
      return;
    }
    ok = true;
  });
  if (!ok)
    why = error;
  return ok ? &api : nullptr;
}

void nccl::Communicator::check(int rc, const char *what) {
  if (rc == kSuccess || rc == kInProgress)
    return;
  failed_ = true;
  std::string msg = std::string("NCCL ") + what + " on rank " + std::to_string(rank_) + ": " +
                    (api_->getErrorString ? api_->getErrorString(rc) : "error") + " (" +
                    std::to_string(rc) + ")";
  abort();
  throw std::runtime_error(msg);
}

static const Api &loadOrThrow() {
  std::string why;
  const Api *api = Api::load(why);
  if (!api)
    throw std::runtime_error("NCCL: " + why);
  return *api;
}

nccl::Communicator::Communicator(stretto::Communicator &bootstrap,
                                 std::chrono::milliseconds timeout)
    : Communicator(loadOrThrow(), bootstrap, timeout) {}

nccl::Communicator::Communicator(const Api &api, stretto::Communicator &bootstrap,
                                 std::chrono::milliseconds timeout)
    : api_(&api), rank_(bootstrap.rank()), size_(bootstrap.size()), timeout_(timeout) {
  api_->getVersion(&version_);
  // Rank 0 makes the id; the bootstrap communicator carries it to the others.
  UniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == 0)
    check(api_->getUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast(&id, sizeof id, 0);
  Config cfg = defaultConfig();
  cfg.blocking = 0; // return at once; poll below against our deadline
  check(api_->commInitRankConfig(&comm_, size_, id, rank_, &cfg), "ncclCommInitRankConfig");
  waitFor([] { return true; }, "communicator initialisation");
}

nccl::Communicator::~Communicator() {
  if (!comm_)
    return;
  if (failed_) {
    api_->commAbort(comm_);
    return;
  }
  // Finalize runs asynchronously on a non-blocking communicator: poll it
  // against the deadline, then destroy, or abort when it failed or stalled.
  int state = api_->commFinalize(comm_);
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  while ((state == kSuccess || state == kInProgress) &&
         api_->commGetAsyncError(comm_, &state) == kSuccess && state == kInProgress &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (state == kSuccess)
    api_->commDestroy(comm_);
  else
    api_->commAbort(comm_);
}

void nccl::Communicator::waitFor(const std::function<bool()> &done, const char *what) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    int state = kSuccess;
    int rc = api_->commGetAsyncError(comm_, &state);
    if (rc != kSuccess)
      check(rc, "ncclCommGetAsyncError");
    if (state != kSuccess && state != kInProgress)
      check(state, what);
    if (state == kSuccess && done())
      return;
    if (std::chrono::steady_clock::now() > deadline) {
      failed_ = true;
      abort();
      throw std::runtime_error(std::string("NCCL ") + what + " on rank " +
                               std::to_string(rank_) + ": no progress within " +
                               describeTimeout(timeout_) + "; aborted (is a peer gone?)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void nccl::Communicator::settle(int rc, const char *what) {
  check(rc, what);
  // NCCL user guide, "Nonblocking Group Operation": after ncclInProgress,
  // poll ncclCommGetAsyncError until it is no longer in progress before the
  // next NCCL call on this communicator. (The H200 run's self-check failed
  // with ncclInvalidArgument on the all-reduce after an unpolled groupEnd.)
  if (groupDepth_ == 0)
    waitFor([] { return true; }, what);
}

void nccl::Communicator::groupStart() {
  check(api_->groupStart(), "ncclGroupStart");
  ++groupDepth_;
}

void nccl::Communicator::groupEnd() {
  if (groupDepth_ == 0)
    throw std::logic_error("ncclGroupEnd without ncclGroupStart");
  --groupDepth_;
  settle(api_->groupEnd(), "ncclGroupEnd");
}

void nccl::Communicator::send(const void *dev, size_t count, DataType t, int peer, void *stream) {
  settle(api_->send(dev, count, t, peer, comm_, stream), "ncclSend");
}

void nccl::Communicator::recv(void *dev, size_t count, DataType t, int peer, void *stream) {
  settle(api_->recv(dev, count, t, peer, comm_, stream), "ncclRecv");
}

void nccl::Communicator::allReduceSum(const void *in, void *out, size_t count, DataType t,
                                      void *stream) {
  settle(api_->allReduce(in, out, count, t, kSum, comm_, stream), "ncclAllReduce");
}

void nccl::Communicator::broadcast(const void *in, void *out, size_t count, DataType t, int root,
                                   void *stream) {
  settle(api_->broadcast(in, out, count, t, root, comm_, stream), "ncclBroadcast");
}

void nccl::Communicator::abort() {
  if (comm_) {
    api_->commAbort(comm_);
    comm_ = nullptr;
  }
}

// One-rank self-check (stretto-run --nccl-check, the GPU kit)

#include "stretto/Runtime/CudaDriver.h"

#include <cstdio>
#include <vector>

int stretto::nccl::selfCheck() {
  std::string why;
  std::unique_ptr<CudaDevice> dev = CudaDevice::open(why);
  if (!dev) {
    std::printf("nccl-check: no GPU: %s\n", why.c_str());
    return 2;
  }
  const Api *api = Api::load(why);
  if (!api) {
    std::printf("nccl-check: %s\n", why.c_str());
    return 2;
  }
  try {
    InProcessGroup one(1);
    auto t0 = std::chrono::steady_clock::now();
    nccl::Communicator c(one.rank(0), std::chrono::seconds(60));
    std::printf("nccl-check: NCCL %d on %s: a one-rank communicator (non-blocking init) in %.2f s\n",
                c.version(), dev->name().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const size_t n = 1 << 20;
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i)
      host[i] = static_cast<float>(i % 1000) * 0.25f;
    CudaDevice::Ptr a = dev->alloc(n * 4), b = dev->alloc(n * 4), s = dev->alloc(n * 4),
                    r = dev->alloc(n * 4);
    dev->upload(a, host.data(), n * 4);
    void *stream = dev->stream();
    dev->makeCurrent();
    c.groupStart();
    c.send(reinterpret_cast<void *>(a), n, kFloat32, 0, stream);
    c.recv(reinterpret_cast<void *>(b), n, kFloat32, 0, stream);
    c.groupEnd();
    c.allReduceSum(reinterpret_cast<void *>(a), reinterpret_cast<void *>(s), n, kFloat32, stream);
    c.broadcast(reinterpret_cast<void *>(a), reinterpret_cast<void *>(r), n, kFloat32, 0, stream);
    dev->synchronize();
    std::vector<float> got(n), sum(n), bcast(n);
    dev->download(got.data(), b, n * 4);
    dev->download(sum.data(), s, n * 4);
    dev->download(bcast.data(), r, n * 4);
    bool sendOk = got == host, sumOk = sum == host, bcastOk = bcast == host;
    std::printf("nccl-check: send/recv to self of 4 MB: %s; all-reduce of one rank: %s; "
                "broadcast from rank 0: %s\n",
                sendOk ? "ok" : "WRONG", sumOk ? "ok" : "WRONG", bcastOk ? "ok" : "WRONG");
    c.abort();
    std::printf("nccl-check: abort: ok\n");
    dev->free(a);
    dev->free(b);
    dev->free(s);
    dev->free(r);
    return sendOk && sumOk && bcastOk ? 0 : 1;
  } catch (const std::exception &e) {
    std::printf("nccl-check: FAILED: %s\n", e.what());
    return 1;
  }
}
