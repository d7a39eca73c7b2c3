//===- NcclAbiTest.cpp - our NCCL declarations match <nccl.h> -------------===//
//
// runtime/cuda/Nccl.cpp opens libnccl with dlopen and declares the enums and
// structs it uses itself (nothing links CUDA); here they are compared with
// the toolkit's header. Built only where the toolkit is installed. The last
// test runs NCCL for real and is reported skipped without a GPU.
//
//===----------------------------------------------------------------------===//
#include "cuda/Nccl.h"
#include "stretto/Runtime/CudaDriver.h"

#include <nccl.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

using namespace stretto;

TEST(NcclAbi, EnumValuesMatchTheHeader) {
  EXPECT_EQ(nccl::kSuccess, static_cast<int>(ncclSuccess));
  EXPECT_EQ(nccl::kInProgress, static_cast<int>(ncclInProgress));
  EXPECT_EQ(nccl::kUint8, static_cast<int>(ncclUint8));
  EXPECT_EQ(nccl::kFloat32, static_cast<int>(ncclFloat32));
  EXPECT_EQ(nccl::kFloat64, static_cast<int>(ncclFloat64));
  EXPECT_EQ(nccl::kSum, static_cast<int>(ncclSum));
  EXPECT_EQ(nccl::kUniqueIdBytes, NCCL_UNIQUE_ID_BYTES);
  EXPECT_EQ(sizeof(nccl::UniqueId), sizeof(ncclUniqueId));
  EXPECT_EQ(nccl::kHeaderVersion, NCCL_VERSION_CODE);
}

TEST(NcclAbi, ConfigLayoutAndInitializerMatchTheHeader) {
  EXPECT_EQ(sizeof(nccl::Config), sizeof(ncclConfig_t));
#define SAME_OFFSET(f) EXPECT_EQ(offsetof(nccl::Config, f), offsetof(ncclConfig_t, f)) << #f
  SAME_OFFSET(size);
  SAME_OFFSET(magic);
  SAME_OFFSET(version);
  SAME_OFFSET(blocking);
  SAME_OFFSET(cgaClusterSize);
  SAME_OFFSET(minCTAs);
  SAME_OFFSET(maxCTAs);
  SAME_OFFSET(netName);
  SAME_OFFSET(splitShare);
  SAME_OFFSET(trafficClass);
  SAME_OFFSET(commName);
  SAME_OFFSET(collnetEnable);
  SAME_OFFSET(CTAPolicy);
  SAME_OFFSET(shrinkShare);
  SAME_OFFSET(nvlsCTAs);
  SAME_OFFSET(nChannelsPerNetPeer);
  SAME_OFFSET(nvlinkCentricSched);
#undef SAME_OFFSET
  ncclConfig_t theirs = NCCL_CONFIG_INITIALIZER;
  nccl::Config ours = nccl::defaultConfig();
  ASSERT_EQ(sizeof ours, sizeof theirs);
  EXPECT_EQ(0, std::memcmp(&ours, &theirs, sizeof ours));
}

TEST(NcclAbi, FunctionSignaturesMatchTheHeader) {
  // The header's signatures are the ones Api declares with int for NCCL's
  // enums and void * for the stream: a mismatch fails the build.
  using Comm = ncclComm_t;
  static_assert(std::is_same<decltype(&ncclSend),
                             ncclResult_t (*)(const void *, size_t, ncclDataType_t, int, Comm,
                                              cudaStream_t)>::value);
  static_assert(std::is_same<decltype(&ncclAllReduce),
                             ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t,
                                              ncclRedOp_t, Comm, cudaStream_t)>::value);
  static_assert(std::is_same<decltype(&ncclBroadcast),
                             ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, int,
                                              Comm, cudaStream_t)>::value);
  static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
                sizeof(ncclRedOp_t) == sizeof(int));
  static_assert(sizeof(cudaStream_t) == sizeof(void *));
}

TEST(Nccl, OneRankOnAGpu) {
  std::string why;
  std::unique_ptr<CudaDevice> dev = CudaDevice::open(why);
  if (!dev)
    GTEST_SKIP() << "no GPU: " << why;
  if (!nccl::Api::load(why))
    GTEST_SKIP() << why;
  InProcessGroup one(1);
  nccl::Communicator c(one.rank(0), std::chrono::seconds(60));
  const size_t n = 1000;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i)
    host[i] = static_cast<float>(i) * 0.5f;
  CudaDevice::Ptr a = dev->alloc(n * 4), b = dev->alloc(n * 4), s = dev->alloc(n * 4);
  dev->upload(a, host.data(), n * 4);
  void *stream = dev->stream();
  c.groupStart();
  c.send(reinterpret_cast<void *>(a), n, nccl::kFloat32, 0, stream);
  c.recv(reinterpret_cast<void *>(b), n, nccl::kFloat32, 0, stream);
  c.groupEnd();
  c.allReduceSum(reinterpret_cast<void *>(a), reinterpret_cast<void *>(s), n, nccl::kFloat32,
                 stream);
  dev->synchronize();
  std::vector<float> got(n), sum(n);
  dev->download(got.data(), b, n * 4);
  dev->download(sum.data(), s, n * 4);
  EXPECT_EQ(got, host);
  EXPECT_EQ(sum, host); // one rank: the sum is its own value
  c.abort();
  dev->free(a);
  dev->free(b);
  dev->free(s);
}
