//===- CommunicatorTest.cpp - in-process and Gloo communicators, rendezvous ===//
//
// Gloo ranks run as threads of this test, each with its own TCP device and
// connection over loopback, rendezvousing through a StoreServer the test
// hosts (as the launcher does). Multi-process runs are tested in
// test/dist/.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Distributed.h"
#include "comm/WireFormat.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace stretto;
using namespace std::chrono_literals;

namespace {

/// Runs fn(comm) on `n` Gloo ranks (threads); returns each rank's error text
/// ("" when it succeeded).
std::vector<std::string> onGloo(int n, const std::function<void(Communicator &)> &fn,
                                std::chrono::milliseconds timeout = 10s) {
  StoreServer store("127.0.0.1", 0, "secret");
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        WorldInfo w;
        w.rank = r;
        w.size = n;
        w.masterPort = store.port();
        w.token = "secret";
        w.storeHostedElsewhere = true;
        ConnectOptions o;
        o.timeout = timeout;
        std::unique_ptr<Communicator> c = connectGloo(w, o);
        fn(*c);
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (auto &t : threads)
    t.join();
  return errors;
}

std::vector<std::string> onThreads(int n, const std::function<void(Communicator &)> &fn,
                                   std::chrono::milliseconds timeout = 10s) {
  InProcessGroup g(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        g.rank(r).setTimeout(timeout);
        fn(g.rank(r));
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (auto &t : threads)
    t.join();
  return errors;
}

using Runner = std::function<std::vector<std::string>(
    int, const std::function<void(Communicator &)> &, std::chrono::milliseconds)>;

class BothTransports : public ::testing::TestWithParam<const char *> {
protected:
  std::vector<std::string> run(int n, const std::function<void(Communicator &)> &fn,
                               std::chrono::milliseconds timeout = 10s) {
    return std::string(GetParam()) == "gloo" ? onGloo(n, fn, timeout)
                                             : onThreads(n, fn, timeout);
  }
};

void expectOk(const std::vector<std::string> &errors) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

} // namespace

TEST_P(BothTransports, TensorsArriveExactlyInTagOrder) {
  expectOk(run(2, [](Communicator &c) {
    if (c.rank() == 0) {
      HostTensor a{{2, 3}, {1, 2, 3, 4, 5, 6.5}}, b{{2}, {0.1, -7}};
      auto r1 = sendTensor(c, 1, 7, a, DType::F32);
      auto r2 = sendTensor(c, 1, 8, b, DType::F64);
      r1->wait();
      r2->wait();
    } else {
      // Received out of send order: tags keep them apart.
      HostTensor b = recvTensor(c, 0, 8, {2}, DType::F64);
      HostTensor a = recvTensor(c, 0, 7, {2, 3}, DType::F32);
      EXPECT_EQ(b.data, (std::vector<double>{0.1, -7}));
      EXPECT_EQ(a.data, (std::vector<double>{1, 2, 3, 4, 5, 6.5}));
    }
  }));
}

TEST_P(BothTransports, AMismatchedMessageNamesThePeer) {
  std::vector<std::string> e = run(2, [](Communicator &c) {
    if (c.rank() == 0) {
      HostTensor a{{4}, {1, 2, 3, 4}};
      sendTensor(c, 1, 3, a, DType::F32)->wait();
      sendTensor(c, 1, 4, a, DType::F32)->wait();
    } else {
      std::vector<float> small(3);
      // Wrong count: refused before a payload byte lands.
      c.recv(0, 3, WireType::F32, small.data(), small.size());
    }
  }, 3s);
  EXPECT_NE(e[1].find("rank 0 sent tag 3 with 4 f32 elements where tag 3 with 3 f32 elements "
                      "was expected"),
            std::string::npos)
      << e[1];
}

TEST_P(BothTransports, AllReduceGivesEveryRankTheSameSum) {
  const int n = 4;
  std::vector<std::vector<float>> out(n);
  expectOk(run(n, [&](Communicator &c) {
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(std::sin(double(i) + c.rank())) * 1e-3f;
    c.allReduceSum(v.data(), v.size());
    double d = c.rank() + 0.5;
    c.allReduceSum(&d, 1);
    EXPECT_EQ(d, 0.5 + 1.5 + 2.5 + 3.5);
    out[c.rank()] = v;
    std::vector<char> msg(5, 0);
    if (c.rank() == 2)
      std::memcpy(msg.data(), "hello", 5);
    c.broadcast(msg.data(), msg.size(), 2);
    EXPECT_EQ(std::string(msg.begin(), msg.end()), "hello");
    c.barrier();
  }));
  for (int r = 1; r < n; ++r)
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[r].data(), out[0].size() * sizeof(float)));
  for (size_t i = 0; i < out[0].size(); i += 97) {
    double want = 0;
    for (int r = 0; r < n; ++r)
      want += static_cast<float>(std::sin(double(i) + r)) * 1e-3f;
    EXPECT_NEAR(out[0][i], want, 1e-8);
  }
}

TEST_P(BothTransports, TwoRanksSumInEitherOrderToTheSameBits) {
  // With two ranks a+b == b+a: data parallelism over 2 ranks is bit-exact.
  std::vector<float> got(2);
  expectOk(run(2, [&](Communicator &c) {
    float v = c.rank() == 0 ? 0.1f : 0.7f;
    c.allReduceSum(&v, 1);
    got[c.rank()] = v;
  }));
  EXPECT_EQ(got[0], 0.1f + 0.7f);
  EXPECT_EQ(got[1], 0.1f + 0.7f);
}

TEST_P(BothTransports, AMissingMessageTimesOutNamingThePeer) {
  std::vector<std::string> e = run(2, [](Communicator &c) {
    if (c.rank() == 1) {
      float x;
      c.recv(0, 1, WireType::F32, &x, 1);
    }
  }, 500ms);
  EXPECT_EQ(e[0], "");
  EXPECT_NE(e[1].find("rank 0"), std::string::npos) << e[1];
}

INSTANTIATE_TEST_SUITE_P(Transports, BothTransports, ::testing::Values("in-process", "gloo"));

TEST(InProcess, AbortUnblocksAWaitingRank) {
  std::vector<std::string> e = onThreads(2, [](Communicator &c) {
    if (c.rank() == 0) {
      std::this_thread::sleep_for(50ms);
      c.abort("stage 0 failed");
    } else {
      float x;
      c.recv(0, 1, WireType::F32, &x, 1);
    }
  }, 30s);
  EXPECT_NE(e[1].find("stage 0 failed"), std::string::npos) << e[1];
}

TEST(Gloo, ADeadPeerIsNamedQuickly) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> e = onGloo(2, [](Communicator &c) {
    if (c.rank() == 1) {
      float x;
      c.recv(0, 1, WireType::F32, &x, 1);
    }
    // rank 0 returns: its communicator (and its connections) close.
  }, 20s);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(e[1].find("rank 0"), std::string::npos) << e[1];
  EXPECT_LT(s, 15.0) << "a closed connection must not wait for the timeout";
}

TEST(WireHeader, RandomBytesNeverPassAsAMessage) {
  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    wire::Header h;
    unsigned char *p = reinterpret_cast<unsigned char *>(&h);
    for (size_t k = 0; k < sizeof h; ++k)
      p[k] = static_cast<unsigned char>(rng());
    // Half the time keep a valid magic/version so the other checks are hit.
    if (i % 2) {
      h.magic = wire::Header::kMagic;
      h.version = wire::Header::kVersion;
    }
    try {
      wire::checkHeader(h, 3, 5, WireType::F32, 16);
      ++accepted;
    } catch (const CommError &e) {
      EXPECT_EQ(e.peer, 3);
    }
  }
  EXPECT_EQ(accepted, 0);
  EXPECT_NO_THROW(wire::checkHeader(wire::makeHeader(5, WireType::F32, 16), 3, 5,
                                    WireType::F32, 16));
}

TEST(Rendezvous, AWrongTokenIsRefused) {
  StoreServer store("127.0.0.1", 0, "right");
  try {
    StoreClient c("127.0.0.1", store.port(), "wrong", 5s);
    FAIL() << "joined with a wrong token";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("wrong job token"), std::string::npos) << e.what();
  }
  StoreClient ok("127.0.0.1", store.port(), "right", 5s);
  ok.set("k", {'v'});
  EXPECT_EQ(ok.get("k"), std::vector<char>{'v'});
  EXPECT_EQ(ok.add("n", 2), 2);
  EXPECT_EQ(ok.add("n", 3), 5);
}

TEST(Rendezvous, APortInUseSaysSo) {
  StoreServer a("127.0.0.1", 0, "");
  try {
    StoreServer b("127.0.0.1", a.port(), "");
    FAIL() << "two stores on one port";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("Address already in use"), std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, AMissingRankIsNamedWithinTheTimeout) {
  StoreServer store("127.0.0.1", 0, "t");
  WorldInfo w;
  w.rank = 0;
  w.size = 3; // ranks 1 and 2 never come
  w.masterPort = store.port();
  w.token = "t";
  w.storeHostedElsewhere = true;
  ConnectOptions o;
  o.timeout = 300ms;
  try {
    connectGloo(w, o);
    FAIL();
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 3 did not join"), std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, DisagreeingWorldSizesAreNamed) {
  StoreServer store("127.0.0.1", 0, "t");
  std::vector<std::string> errors(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      WorldInfo w;
      w.rank = r;
      w.size = r == 0 ? 2 : 3;
      w.masterPort = store.port();
      w.token = "t";
      w.storeHostedElsewhere = true;
      ConnectOptions o;
      o.timeout = 2s;
      try {
        connectGloo(w, o);
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (auto &t : th)
    t.join();
  EXPECT_NE(errors[0].find("rank 1 was started with WORLD_SIZE=3, this rank (0) with "
                           "WORLD_SIZE=2"),
            std::string::npos)
      << errors[0];
}

TEST(Environment, TorchrunOpenMpiAndSlurmVariables) {
  EXPECT_FALSE(worldFromEnvironment({"HOME=/root"}).has_value());
  auto t = worldFromEnvironment({"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1",
                                 "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1",
                                 "MASTER_PORT=29500"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->rank, 1);
  EXPECT_EQ(t->size, 4);
  EXPECT_EQ(t->localSize, 2);
  EXPECT_EQ(t->masterAddr, "10.0.0.1");
  EXPECT_EQ(t->masterPort, 29500);
  EXPECT_EQ(t->source, "torchrun variables");
  auto m = worldFromEnvironment({"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                                 "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                 "MASTER_PORT=1234", "OMPI_MCA_ess_base_jobid=77"});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->source, "Open MPI");
  EXPECT_EQ(m->masterAddr, "127.0.0.1");
  EXPECT_FALSE(m->token.empty());
  auto s = worldFromEnvironment({"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                                 "SLURM_NTASKS_PER_NODE=2", "MASTER_ADDR=node1",
                                 "MASTER_PORT=29500", "SLURM_JOB_ID=99"});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->source, "Slurm");
  EXPECT_EQ(s->rank, 3);
  EXPECT_EQ(s->localRank, 1);
  // Two jobs get different derived tokens; STRETTO_JOB_TOKEN wins.
  EXPECT_NE(jobTokenFromEnvironment({"SLURM_JOB_ID=99"}),
            jobTokenFromEnvironment({"SLURM_JOB_ID=100"}));
  EXPECT_EQ(jobTokenFromEnvironment({"SLURM_JOB_ID=99", "STRETTO_JOB_TOKEN=abc"}), "abc");
}

TEST(Environment, BadSettingsAreNamed) {
  auto msg = [](std::vector<std::string> env) {
    try {
      worldFromEnvironment(env);
    } catch (const std::exception &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(msg({"RANK=2", "WORLD_SIZE=2", "MASTER_PORT=1"}).find("RANK=2 is outside the world"),
            std::string::npos);
  // Without MASTER_PORT only a file store can meet: the TCP rendezvous says so.
  std::optional<WorldInfo> noPort = worldFromEnvironment({"RANK=0", "WORLD_SIZE=2"});
  ASSERT_TRUE(noPort);
  try {
    connectGloo(*noPort, ConnectOptions());
    ADD_FAILURE() << "connected without MASTER_PORT";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_PORT is not set"), std::string::npos) << e.what();
  }
  EXPECT_NE(msg({"RANK=0", "WORLD_SIZE=x", "MASTER_PORT=1"}).find("WORLD_SIZE='x'"),
            std::string::npos);
  EXPECT_NE(msg({"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=70000"}).find("not a TCP port"),
            std::string::npos);
  EXPECT_NE(msg({"RANK=0", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "MASTER_PORT=5"})
                .find("MASTER_ADDR is not set and the run spans several nodes"),
            std::string::npos);
}

TEST(Rendezvous, RandomBytesNeverCrashTheStore) {
  // The store is the one listener a stranger can reach: random frames,
  // truncated frames and huge length prefixes are refused or dropped, and a
  // real client is served afterwards.
  StoreServer store("127.0.0.1", 0, "tok");
  std::mt19937_64 rng(11);
  int sent = 0;
  for (int i = 0; i < 300; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(store.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
    std::string bytes(1 + rng() % 200, '\0');
    for (char &c : bytes)
      c = static_cast<char>(rng());
    if (i % 3 == 0) // a plausible length prefix, then garbage
      bytes[0] = 8, bytes[1] = bytes[2] = bytes[3] = 0;
    if (i % 2 == 1) { // a hello with the right token, then well-framed garbage
      bytes = std::string("\x08\x00\x00\x00\x01\x03\x00\x00\x00tok", 12);
      for (int f = 0; f < 5; ++f) {
        uint32_t n = 1 + static_cast<uint32_t>(rng() % 24);
        for (int k = 0; k < 4; ++k)
          bytes.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
        for (uint32_t k = 0; k < n; ++k)
          bytes.push_back(static_cast<char>(k == 0 ? 1 + rng() % 5 : rng() % 8));
      }
    }
    sent += static_cast<int>(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0);
    ::close(fd);
  }
  EXPECT_GT(sent, 250);
  StoreClient c("127.0.0.1", store.port(), "tok", 5s);
  c.set("after", {'o', 'k'});
  EXPECT_EQ(c.get("after"), (std::vector<char>{'o', 'k'}));
}

TEST(Gloo, RandomHeadersFromAPeerAreRefusedNamingIt) {
  // A receiving rank fed random header bytes (half with a plausible magic)
  // refuses every message with a CommError naming the sender, and goes on
  // receiving; nothing is written past its buffer.
  ::setenv("STRETTO_FAULT_CORRUPT_HEADERS", "0", 1); // rank 0 sends garbage
  const int messages = 300;
  int refused = 0;
  std::vector<std::string> e = onGloo(2, [&](Communicator &c) {
    if (c.rank() == 0) {
      std::vector<std::unique_ptr<Request>> sent;
      std::vector<float> x(64, 1.0f);
      for (int i = 0; i < messages; ++i)
        sent.push_back(c.isend(1, static_cast<uint64_t>(i), WireType::F32, x.data(), x.size()));
      for (auto &s : sent)
        s->wait();
      float done;
      c.recv(1, 999999, WireType::F32, &done, 1); // until rank 1 has read them all
    } else {
      std::vector<float> buf(64 + 16, -7.0f);
      for (int i = 0; i < messages; ++i) {
        try {
          c.recv(0, static_cast<uint64_t>(i), WireType::F32, buf.data(), 64);
        } catch (const CommError &err) {
          EXPECT_EQ(err.peer, 0);
          ++refused;
        }
      }
      for (size_t k = 64; k < buf.size(); ++k)
        EXPECT_EQ(buf[k], -7.0f); // the guard past the buffer is untouched
      float one = 1;
      c.isend(0, 999999, WireType::F32, &one, 1)->wait();
    }
  }, 20s);
  ::unsetenv("STRETTO_FAULT_CORRUPT_HEADERS");
  EXPECT_EQ(e[0], "");
  EXPECT_EQ(e[1], "");
  EXPECT_EQ(refused, messages);
}
