//===- Launcher.cpp - start the local ranks of a job ----------------------===//
#include "stretto/Runtime/Launcher.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Distributed.h"
#include "stretto/Runtime/PlanFile.h"
#include "stretto/Runtime/RunSettings.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using namespace stretto;

namespace {

std::atomic<int> gSignal{0};
extern "C" void onLauncherSignal(int sig) { gSignal = sig; }

std::string randomToken() {
  unsigned char b[16] = {};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char *>(b), sizeof b);
  if (!f)
    throw std::runtime_error("cannot read /dev/urandom for the job token");
  char hex[33];
  for (int i = 0; i < 16; ++i)
    std::snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return hex;
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1; // read ends
  std::string outBuf, errBuf;
  bool exited = false;
  int status = 0;
  std::unique_ptr<std::ofstream> log;
};

std::string describeStatus(int status) {
  if (WIFEXITED(status))
    return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    const char *name = strsignal(s);
    return "signal " + std::to_string(s) + " (" + (name ? name : "?") + ")";
  }
  return "status " + std::to_string(status);
}

int exitCodeOf(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

/// Moves whole lines of `buf` to `stream` with the rank's prefix.
void flushLines(Rank &r, std::string &buf, FILE *stream, bool all) {
  size_t start = 0;
  for (;;) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos)
      break;
    std::string line = buf.substr(start, nl - start);
    // A progress line redrawn with '\r' keeps only its last state.
    size_t cr = line.rfind('\r');
    if (cr != std::string::npos)
      line = line.substr(cr + 1);
    std::fprintf(stream, "[rank %d] %s\n", r.rank, line.c_str());
    if (r.log)
      *r.log << line << "\n";
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    std::fprintf(stream, "[rank %d] %s\n", r.rank, buf.c_str());
    if (r.log)
      *r.log << buf << "\n";
    buf.clear();
  }
  std::fflush(stream);
  if (r.log)
    r.log->flush();
}

} // namespace

std::string stretto::selfExecutable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    throw std::runtime_error("cannot read /proc/self/exe");
  buf[n] = 0;
  return buf;
}

/// The job's exit status when no rank stopped it (--on-peer-failure=
/// continue): 0 while any rank finished, naming the ranks that failed; the
/// first failure's status when every rank failed.
static int survivorsOutcome(const std::vector<int> &failures, int firstStatus, size_t ranks) {
  if (failures.empty())
    return 0;
  if (failures.size() == ranks) {
    // Continuing needs someone to continue: a job where every rank failed failed.
    std::fprintf(stderr, "launcher: the job failed: every rank failed (rank %d exited with %s)\n",
                 failures.front(), describeStatus(firstStatus).c_str());
    int code = exitCodeOf(firstStatus);
    return code == 0 ? 1 : code;
  }
  std::string failed;
  for (int r : failures)
    failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  std::fprintf(stderr, "launcher: rank%s %s failed; the other %zu finished\n",
               failures.size() > 1 ? "s" : "", failed.c_str(), ranks - failures.size());
  return 0;
}

namespace {

/// Where the job's ranks meet: node 0 hosts the rendezvous store for the
/// whole job, so no rank races for the port.
struct JobEndpoint {
  std::string token, addr;
  int port = 0;
  std::unique_ptr<StoreServer> store;
};

JobEndpoint openJob(const LaunchOptions &o) {
  if (o.command.empty())
    throw std::runtime_error("launcher: no command to run");
  if (o.nnodes > 1 && (o.masterAddr.empty() || o.masterPort == 0))
    throw std::runtime_error("--nnodes " + std::to_string(o.nnodes) +
                             " needs --master-addr (node 0's address) and --master-port");
  JobEndpoint job;
  if (const char *t = std::getenv("STRETTO_JOB_TOKEN"))
    job.token = t;
  else if (o.nnodes > 1)
    throw std::runtime_error("--nnodes " + std::to_string(o.nnodes) +
                             ": set STRETTO_JOB_TOKEN to the same secret on every node (the "
                             "rendezvous store admits only ranks that present it)");
  else
    job.token = randomToken();
  job.addr = o.masterAddr.empty() ? "127.0.0.1" : o.masterAddr;
  job.port = o.masterPort;
  if (o.nodeRank == 0) {
    job.store = std::make_unique<StoreServer>(isLoopback(job.addr) ? "127.0.0.1" : job.addr,
                                              job.port, job.token);
    job.port = job.store->port();
  }
  if (!o.logDir.empty()) {
    ::mkdir(o.logDir.c_str(), 0755);
    if (::access(o.logDir.c_str(), W_OK) != 0)
      throw std::runtime_error("--log-dir '" + o.logDir + "': " + std::strerror(errno));
  }
  return job;
}

/// Local rank `local`'s environment: ours, with the rank's variables
/// (torchrun's names) replaced, and its share of the cores unless the user
/// set the thread counts.
std::vector<std::string> rankEnvironment(const LaunchOptions &o, const JobEndpoint &job, int local,
                                         int rank) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string threads = std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc)));
  std::vector<std::string> env;
  auto set = [&](const std::string &k, const std::string &v) { env.push_back(k + "=" + v); };
  const char *replaced[] = {"RANK=",
                            "WORLD_SIZE=",
                            "LOCAL_RANK=",
                            "LOCAL_WORLD_SIZE=",
                            "MASTER_ADDR=",
                            "MASTER_PORT=",
                            "STRETTO_JOB_TOKEN=",
                            "STRETTO_LAUNCHER=",
                            "STRETTO_STORE_HOSTED="};
  bool ompSet = false, blasSet = false;
  for (char **e = environ; *e; ++e) {
    std::string kv = *e;
    bool drop = false;
    for (const char *p : replaced)
      drop = drop || kv.rfind(p, 0) == 0;
    ompSet = ompSet || kv.rfind("OMP_NUM_THREADS=", 0) == 0;
    blasSet = blasSet || kv.rfind("OPENBLAS_NUM_THREADS=", 0) == 0;
    if (!drop)
      env.push_back(kv);
  }
  set("RANK", std::to_string(rank));
  set("WORLD_SIZE", std::to_string(o.nnodes * o.nproc));
  set("LOCAL_RANK", std::to_string(local));
  set("LOCAL_WORLD_SIZE", std::to_string(o.nproc));
  set("MASTER_ADDR", job.addr);
  set("MASTER_PORT", std::to_string(job.port));
  set("STRETTO_JOB_TOKEN", job.token);
  set("STRETTO_LAUNCHER", "1");
  set("STRETTO_STORE_HOSTED", "1");
  if (!ompSet)
    set("OMP_NUM_THREADS", threads);
  if (!blasSet)
    set("OPENBLAS_NUM_THREADS", threads);
  return env;
}

/// Starts `command` as rank `r` with `env`, its output on two pipes.
void spawnRank(Rank &r, const std::vector<std::string> &command,
               const std::vector<std::string> &env) {
  int po[2], pe[2];
  if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("launcher: pipe: ") + std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error(std::string("launcher: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0); // Ctrl-C on the terminal reaches the launcher only
    ::dup2(po[1], STDOUT_FILENO);
    ::dup2(pe[1], STDERR_FILENO);
    std::vector<char *> argv, envp;
    for (const std::string &a : command)
      argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string &e : env)
      envp.push_back(const_cast<char *>(e.c_str()));
    envp.push_back(nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(po[1]);
  ::close(pe[1]);
  r.pid = pid;
  r.out = po[0];
  r.err = pe[0];
}

/// Watches the running ranks: relays their output line by line, forwards
/// Ctrl-C and SIGTERM, stops the others when one fails (or lets them run on
/// under --on-peer-failure=continue), and kills what outlives the timeout.
class Supervisor {
public:
  Supervisor(const LaunchOptions &o, std::vector<Rank> &ranks) : o(o), ranks(ranks) {}

  /// Runs until every rank has exited and its output is drained; the job's
  /// exit status.
  int run() {
    for (;;) {
      if (int s = gSignal.exchange(0)) {
        // Forward; each rank checkpoints and exits as a one-process run does.
        signalAll(s);
        if (!forwarded)
          stopTime = std::chrono::steady_clock::now() + o.timeout;
        forwarded = true;
      }
      relayOutput();
      if (reap())
        break;
      killLateRanks();
    }
    return outcome();
  }

private:
  const LaunchOptions &o;
  std::vector<Rank> &ranks;
  int firstFailure = -1, firstStatus = 0;
  std::vector<int> survivorFailures; // ranks that failed while the others went on
  int survivorStatus = 0;
  bool forwarded = false, terminating = false;
  std::chrono::steady_clock::time_point stopTime = std::chrono::steady_clock::time_point::max();

  void signalAll(int sig) {
    for (Rank &r : ranks)
      if (!r.exited)
        ::kill(r.pid, sig);
  }

  /// Waits up to 100 ms for output and relays what came.
  void relayOutput() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank *, bool>> who;
    for (Rank &r : ranks) {
      if (r.out >= 0)
        fds.push_back({r.out, POLLIN, 0}), who.push_back({&r, false});
      if (r.err >= 0)
        fds.push_back({r.err, POLLIN, 0}), who.push_back({&r, true});
    }
    if (!fds.empty())
      ::poll(fds.data(), fds.size(), 100);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!fds[k].revents)
        continue;
      Rank &r = *who[k].first;
      bool isErr = who[k].second;
      char buf[65536];
      ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
      std::string &acc = isErr ? r.errBuf : r.outBuf;
      if (n > 0) {
        acc.append(buf, static_cast<size_t>(n));
        flushLines(r, acc, isErr ? stderr : stdout, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        flushLines(r, acc, isErr ? stderr : stdout, true);
        ::close(fds[k].fd);
        (isErr ? r.err : r.out) = -1;
      }
    }
  }

  /// Collects the ranks that exited; true once all have and their output
  /// is drained.
  bool reap() {
    // The ranks that ended since the last look. One killed by a signal is
    // the cause when others end with it: they saw its connections close
    // and exited with an error, often before this loop (in rank order)
    // would reach it. So the killed one is named first, as the failure.
    std::vector<std::pair<Rank *, int>> ended;
    for (Rank &r : ranks) {
      int st = 0;
      if (!r.exited && ::waitpid(r.pid, &st, WNOHANG) == r.pid)
        ended.emplace_back(&r, st);
    }
    std::stable_sort(ended.begin(), ended.end(), [](const auto &a, const auto &b) {
      return WIFSIGNALED(a.second) && !WIFSIGNALED(b.second);
    });
    for (auto &[r, st] : ended)
      exited(*r, st);
    bool allDone = true;
    for (const Rank &r : ranks)
      allDone = allDone && r.exited && r.out < 0 && r.err < 0;
    return allDone;
  }

  void exited(Rank &r, int st) {
    r.exited = true;
    r.status = st;
    bool failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    bool fatal = WIFEXITED(st) && WEXITSTATUS(st) == kExitRunFailed;
    if (failed && o.continueOnFailure && !forwarded && !fatal) {
      std::fprintf(stderr,
                   "launcher: rank %d failed (%s); the others continue "
                   "(--on-peer-failure=continue%s)\n",
                   r.rank, describeStatus(st).c_str(),
                   o.onPeerFailureGiven ? "" : ", the default for gossip and DiLoCo");
      if (survivorFailures.empty())
        survivorStatus = st;
      survivorFailures.push_back(r.rank);
    } else if (failed && firstFailure < 0) {
      firstFailure = r.rank;
      firstStatus = st;
      if (!forwarded) {
        std::fprintf(stderr, "launcher: rank %d failed (%s); stopping the other ranks\n", r.rank,
                     describeStatus(st).c_str());
        signalAll(SIGTERM);
        terminating = true;
        stopTime = std::chrono::steady_clock::now() + o.timeout;
      }
    }
  }

  void killLateRanks() {
    if (!(terminating || forwarded) || std::chrono::steady_clock::now() <= stopTime)
      return;
    for (Rank &r : ranks)
      if (!r.exited) {
        std::fprintf(stderr, "launcher: rank %d did not stop within %s; killing it\n", r.rank,
                     describeTimeout(o.timeout).c_str());
        ::kill(r.pid, SIGKILL);
      }
    stopTime = std::chrono::steady_clock::time_point::max();
  }

  int outcome() const {
    if (firstFailure < 0)
      return survivorsOutcome(survivorFailures, survivorStatus, ranks.size());
    if (forwarded) // interrupted by the user: the ranks' own status (130 after a checkpoint)
      return exitCodeOf(firstStatus);
    std::fprintf(stderr, "launcher: the job failed: rank %d exited with %s\n", firstFailure,
                 describeStatus(firstStatus).c_str());
    int code = exitCodeOf(firstStatus);
    return code == 0 ? 1 : code;
  }
};

} // namespace

int stretto::launchRanks(const LaunchOptions &o) {
  JobEndpoint job = openJob(o);
  struct sigaction sa {};
  sa.sa_handler = onLauncherSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction oldInt {
  }, oldTerm{};
  gSignal = 0;
  ::sigaction(SIGINT, &sa, &oldInt);
  ::sigaction(SIGTERM, &sa, &oldTerm);

  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  for (int i = 0; i < o.nproc; ++i) {
    Rank &r = ranks[static_cast<size_t>(i)];
    r.rank = o.nodeRank * o.nproc + i;
    if (!o.logDir.empty())
      r.log = std::make_unique<std::ofstream>(o.logDir + "/rank" + std::to_string(r.rank) + ".log");
    spawnRank(r, o.command, rankEnvironment(o, job, i, r.rank));
  }
  int code = Supervisor(o, ranks).run();
  ::sigaction(SIGINT, &oldInt, nullptr);
  ::sigaction(SIGTERM, &oldTerm, nullptr);
  return code;
}

void stretto::applyPeerFailureDefault(LaunchOptions &o, const std::string &planPath) {
  if (o.onPeerFailureGiven)
    return;
  o.continueOnFailure = std::string(peerFailureDefault(loadPlanFile(planPath).graph)) == "continue";
}
