//===- NcclProtocolTest.cpp - the non-blocking NCCL protocol, without a GPU ===//
//
// A non-blocking NCCL communicator (config.blocking = 0) may answer a call
// with ncclInProgress; until ncclCommGetAsyncError stops saying
// ncclInProgress, the next call on that communicator is refused with
// ncclInvalidArgument ("Attempt to use communicator before the previous
// operation returned ncclSuccess": the H200 run's --nccl-check failure).
// A fake NCCL (its function table, no library, no GPU) keeps that rule and
// counts every call made too early; nccl::Communicator must make none.
//
//===----------------------------------------------------------------------===//
#include "cuda/Nccl.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace stretto;

namespace {

constexpr int kInvalidArgument = 4; // ncclInvalidArgument
constexpr int kSystemError = 2;     // ncclSystemError

/// The fake library's state: how many more polls an operation stays in
/// progress, what each call did.
struct FakeNccl {
  int pollsPerOperation = 3; // polls an operation stays in progress
  int pending = 0;           // polls left for the current operation
  int early = 0;             // calls made while an operation was in progress
  int failAsync = 0;         // when set, the async state after an operation
  std::vector<std::string> calls;
  bool inGroup = false;
};
FakeNccl fake;
const nccl::Comm kComm = reinterpret_cast<nccl::Comm>(0x1000);

/// A call that starts an operation: refused while one is in progress.
int start(const char *name) {
  fake.calls.push_back(name);
  if (fake.pending > 0) {
    ++fake.early;
    return kInvalidArgument;
  }
  fake.pending = fake.pollsPerOperation;
  return nccl::kInProgress;
}

/// A call inside a group is queued: it returns ncclSuccess (the group's
/// end is the operation).
int queued(const char *name) {
  if (fake.inGroup) {
    fake.calls.push_back(name);
    if (fake.pending > 0) {
      ++fake.early;
      return kInvalidArgument;
    }
    return nccl::kSuccess;
  }
  return start(name);
}

nccl::Api fakeApi() {
  nccl::Api api{};
  api.getVersion = [](int *v) {
    *v = 22809;
    return 0;
  };
  api.getUniqueId = [](nccl::UniqueId *id) {
    id->internal[0] = 42;
    return 0;
  };
  api.commInitRankConfig = [](nccl::Comm *comm, int, nccl::UniqueId, int, nccl::Config *cfg) {
    EXPECT_EQ(cfg->blocking, 0) << "the communicator is made non-blocking";
    *comm = kComm;
    return start("init");
  };
  api.commGetAsyncError = [](nccl::Comm, int *state) {
    if (fake.pending > 0) {
      --fake.pending;
      *state = nccl::kInProgress;
    } else {
      *state = fake.failAsync;
    }
    return 0;
  };
  api.commAbort = [](nccl::Comm) {
    fake.calls.push_back("abort");
    fake.pending = 0;
    return 0;
  };
  api.commDestroy = [](nccl::Comm) {
    fake.calls.push_back("destroy");
    return 0;
  };
  api.commFinalize = [](nccl::Comm) { return start("finalize"); };
  api.groupStart = [] {
    fake.inGroup = true;
    fake.calls.push_back("groupStart");
    return 0;
  };
  api.groupEnd = [] {
    fake.inGroup = false;
    return start("groupEnd");
  };
  api.send = [](const void *, size_t, int, int, nccl::Comm, void *) { return queued("send"); };
  api.recv = [](void *, size_t, int, int, nccl::Comm, void *) { return queued("recv"); };
  api.allReduce = [](const void *, void *, size_t, int, int, nccl::Comm, void *) {
    return start("allReduce");
  };
  api.broadcast = [](const void *, void *, size_t, int, int, nccl::Comm, void *) {
    return start("broadcast");
  };
  api.getErrorString = [](int rc) {
    return rc == kInvalidArgument ? "invalid argument" : "some error";
  };
  return api;
}

class NcclProtocol : public ::testing::Test {
protected:
  void SetUp() override { fake = FakeNccl(); }
};

} // namespace

// The self-check's sequence (grouped send/recv to itself, an all-reduce,
// a broadcast) waits for each operation before the next: no call is refused.
TEST_F(NcclProtocol, EachCallWaitsForThePreviousOperation) {
  nccl::Api api = fakeApi();
  InProcessGroup one(1);
  {
    nccl::Communicator c(api, one.rank(0), std::chrono::seconds(10));
    float a = 1, b = 0, s = 0;
    c.groupStart();
    c.send(&a, 1, nccl::kFloat32, 0, nullptr);
    c.recv(&b, 1, nccl::kFloat32, 0, nullptr);
    c.groupEnd();
    c.allReduceSum(&a, &s, 1, nccl::kFloat32, nullptr);
    c.allReduceSum(&a, &s, 1, nccl::kFloat32, nullptr);
    c.broadcast(&a, &s, 1, nccl::kFloat32, 0, nullptr);
    c.allReduceSum(&a, &s, 1, nccl::kFloat32, nullptr);
  }
  EXPECT_EQ(fake.early, 0) << "calls refused because an operation was still in progress";
  std::vector<std::string> want = {"init",      "groupStart", "send",      "recv",
                                   "groupEnd",  "allReduce",  "allReduce", "broadcast",
                                   "allReduce", "finalize",   "destroy"};
  EXPECT_EQ(fake.calls, want);
}

// An operation that never leaves ncclInProgress ends in an error naming it,
// within the timeout, and the communicator is aborted.
TEST_F(NcclProtocol, AStuckOperationTimesOutNamingIt) {
  nccl::Api api = fakeApi();
  InProcessGroup one(1);
  nccl::Communicator c(api, one.rank(0), std::chrono::milliseconds(200));
  fake.pollsPerOperation = 1 << 30;
  try {
    float a = 1, s = 0;
    c.allReduceSum(&a, &s, 1, nccl::kFloat32, nullptr);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("ncclAllReduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no progress within"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake.calls.back(), "abort");
}

// An asynchronous error (a peer gone, a network failure) surfaces from the
// poll as an error naming the operation.
TEST_F(NcclProtocol, AnAsynchronousErrorNamesTheOperation) {
  nccl::Api api = fakeApi();
  InProcessGroup one(1);
  nccl::Communicator c(api, one.rank(0), std::chrono::seconds(10));
  fake.failAsync = kSystemError;
  try {
    c.groupStart();
    float a = 1;
    c.send(&a, 1, nccl::kFloat32, 0, nullptr);
    c.groupEnd();
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("ncclGroupEnd"), std::string::npos) << e.what();
  }
}
