//===- Partition.cpp - stage partitions: cost model, DP search, simulator -===//
//
// See include/stretto/Tune/Partition.h. No MLIR: train-partition (the
// compiler) and stretto-tune share it.
//
//===----------------------------------------------------------------------===//
#include "stretto/Tune/Partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

using namespace stretto::tune;

double CostModel::limitOf(int stage) const {
  if (memoryLimit.empty())
    return std::numeric_limits<double>::infinity();
  if (memoryLimit.size() == 1)
    return memoryLimit[0];
  return memoryLimit.at(stage);
}

std::string stretto::tune::formatBytes(double bytes) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && i < 4)
    v /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, i ? "%.2f %s" : "%.0f %s", v, unit[i]);
  return buf;
}

StageEstimate stretto::tune::estimateStage(const CostModel &model, int first, int end, int s,
                                           int S) {
  StageEstimate e;
  e.first = first;
  e.end = end;
  e.limit = model.limitOf(s);
  double params = 0, opt = 0, stash = 0;
  for (int u = first; u < end; ++u) {
    const UnitProfile &p = model.units[u];
    e.forward += p.forward;
    e.backward += p.backward;
    e.update += p.update;
    params += p.paramBytes;
    opt += p.optimizerBytes;
    stash += p.stashBytes;
  }
  // The activation goes forward after each forward, the cotangent back
  // after each backward; the sender is busy while it sends.
  if (s < S - 1)
    e.sendForward = model.link.time(model.units[end].cutBytes);
  if (s > 0)
    e.sendBackward = model.link.time(model.units[first].cutBytes);
  int64_t inFlight = std::min<int64_t>(S - s, std::max<int64_t>(1, model.microBatches));
  double versions = model.schedule == Sched::TwoBW ? 2 : 1;
  if (model.schedule == Sched::TwoBW && model.efMemory)
    versions += 1;
  e.state = params * versions + opt;
  e.stash = stash;
  e.memory = e.state + stash * double(inFlight);
  return e;
}

namespace {

double objectiveOf(const CostModel &model, const std::vector<StageEstimate> &stages) {
  double m = double(std::max<int64_t>(1, model.microBatches));
  if (model.schedule == Sched::TwoBW) {
    double worst = 0;
    for (const StageEstimate &e : stages)
      worst = std::max(worst, m * e.perMicroBatch() + e.update);
    return worst;
  }
  double sum = 0, worst = 0;
  for (const StageEstimate &e : stages) {
    sum += e.perMicroBatch();
    worst = std::max(worst, e.perMicroBatch());
  }
  return sum + (m - 1) * worst + stages.front().update;
}

std::string overflow(const StageEstimate &e, int s) {
  return "stage " + std::to_string(s) + " needs " + formatBytes(e.memory) + ", " +
         formatBytes(e.memory - e.limit) + " over its limit of " + formatBytes(e.limit);
}

} // namespace

Candidate stretto::tune::evaluate(const CostModel &model, const std::vector<int> &bounds) {
  int S = int(bounds.size()) - 1;
  if (S < 1 || bounds.front() != 0 || bounds.back() != int(model.units.size()))
    throw std::invalid_argument("a partition must cover units [0, " +
                                std::to_string(model.units.size()) + ")");
  Candidate c;
  c.bounds = bounds;
  for (int s = 0; s < S; ++s) {
    if (bounds[s + 1] <= bounds[s])
      throw std::invalid_argument("stage " + std::to_string(s) + " of a partition is empty");
    c.stages.push_back(estimateStage(model, bounds[s], bounds[s + 1], s, S));
    if (c.feasible && !c.stages.back().fits()) {
      c.feasible = false;
      c.why = overflow(c.stages.back(), s);
    }
  }
  c.objective = objectiveOf(model, c.stages);
  return c;
}

Candidate stretto::tune::searchPartition(const CostModel &model, int S) {
  const int U = int(model.units.size());
  if (S < 1 || S > U)
    throw std::invalid_argument("cannot split " + std::to_string(U) + " unit(s) into " +
                                std::to_string(S) + " stage(s)");
  const double inf = std::numeric_limits<double>::infinity();
  const double m = double(std::max<int64_t>(1, model.microBatches));
  // est[s][k][l]: stage s holding units [k, l).
  auto est = [&](int s, int k, int l) { return estimateStage(model, k, l, s, S); };
  std::vector<int> bounds;
  auto backtrack = [&](const std::vector<std::vector<int>> &cut) {
    bounds.assign(S + 1, 0);
    bounds[S] = U;
    for (int s = S, l = U; s > 0; --s) {
      l = cut[s][l];
      bounds[s - 1] = l;
    }
  };

  if (model.schedule == Sched::TwoBW) {
    // best[s][l]: smallest max over the first s stages of m·c + u, units [0, l).
    std::vector<std::vector<double>> best(S + 1, std::vector<double>(U + 1, inf));
    std::vector<std::vector<int>> cut(S + 1, std::vector<int>(U + 1, 0));
    best[0][0] = 0;
    for (int s = 1; s <= S; ++s)
      for (int l = s; l <= U; ++l)
        for (int k = s - 1; k < l; ++k) {
          if (best[s - 1][k] == inf)
            continue;
          StageEstimate e = est(s - 1, k, l);
          if (!e.fits())
            continue;
          double c = std::max(best[s - 1][k], m * e.perMicroBatch() + e.update);
          if (c < best[s][l])
            best[s][l] = c, cut[s][l] = k;
        }
    if (best[S][U] < inf)
      backtrack(cut);
  } else {
    // For each candidate largest stage cost t: the smallest Σ c_s (+ u_0)
    // with every c_s <= t; the objective adds (m − 1)·t.
    std::vector<double> ts;
    for (int s = 0; s < S; ++s)
      for (int k = 0; k < U; ++k)
        for (int l = k + 1; l <= U; ++l)
          ts.push_back(est(s, k, l).perMicroBatch());
    std::sort(ts.begin(), ts.end());
    ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
    // Stage estimates do not depend on t: compute them once.
    std::vector<std::vector<std::vector<StageEstimate>>> E(
        S, std::vector<std::vector<StageEstimate>>(U + 1, std::vector<StageEstimate>(U + 1)));
    for (int s = 0; s < S; ++s)
      for (int k = 0; k < U; ++k)
        for (int l = k + 1; l <= U; ++l)
          E[s][k][l] = est(s, k, l);
    double bestObjective = inf;
    std::vector<std::vector<double>> sum(S + 1, std::vector<double>(U + 1));
    std::vector<std::vector<int>> cut(S + 1, std::vector<int>(U + 1, 0));
    for (double t : ts) {
      if ((m - 1) * t >= bestObjective)
        break; // ts ascend: no larger t can win
      for (auto &row : sum)
        std::fill(row.begin(), row.end(), inf);
      sum[0][0] = 0;
      for (int s = 1; s <= S; ++s)
        for (int l = s; l <= U; ++l)
          for (int k = s - 1; k < l; ++k) {
            if (sum[s - 1][k] == inf)
              continue;
            const StageEstimate &e = E[s - 1][k][l];
            if (e.perMicroBatch() > t || !e.fits())
              continue;
            double c = sum[s - 1][k] + e.perMicroBatch() + (s == 1 ? e.update : 0);
            if (c < sum[s][l])
              sum[s][l] = c, cut[s][l] = k;
          }
      if (sum[S][U] == inf)
        continue;
      double j = sum[S][U] + (m - 1) * t;
      if (j < bestObjective) {
        bestObjective = j;
        backtrack(cut);
      }
    }
  }
  if (bounds.empty()) {
    // Nothing fits: say how the least-overflowing even-ish split overflows.
    std::vector<bool> blocks(U, true);
    Candidate c = evaluate(model, evenSplit(blocks, S));
    c.feasible = false;
    c.why = "no partition into " + std::to_string(S) + " stage(s) fits the memory limit (" +
            (c.why.empty() ? std::string("every one overflows some stage") : "an even split of the units: " + c.why) +
            ")";
    return c;
  }
  return evaluate(model, bounds);
}

std::vector<std::vector<int>> stretto::tune::allPartitions(int units, int S, size_t limit) {
  std::vector<std::vector<int>> out;
  if (S < 1 || S > units)
    return out;
  std::vector<int> b(S + 1);
  b[0] = 0;
  b[S] = units;
  // Choose S − 1 cuts in 1..units−1, lexicographically.
  std::vector<int> cuts(S - 1);
  for (int i = 0; i < S - 1; ++i)
    cuts[i] = i + 1;
  while (true) {
    for (int i = 0; i < S - 1; ++i)
      b[i + 1] = cuts[i];
    if (out.size() >= limit)
      throw std::length_error("more than " + std::to_string(limit) + " partitions");
    out.push_back(b);
    int i = S - 2;
    while (i >= 0 && cuts[i] == units - (S - 1 - i))
      --i;
    if (i < 0)
      break;
    ++cuts[i];
    for (int j = i + 1; j < S - 1; ++j)
      cuts[j] = cuts[j - 1] + 1;
  }
  return out;
}

std::vector<int> stretto::tune::evenSplit(const std::vector<bool> &isBlock, int S) {
  const int U = int(isBlock.size());
  std::vector<int> blocks;
  for (int u = 0; u < U; ++u)
    if (isBlock[u])
      blocks.push_back(u);
  int B = int(blocks.size());
  if (S < 1 || S > std::max(B, 1))
    throw std::invalid_argument("cannot split " + std::to_string(B) + " block(s) evenly into " +
                                std::to_string(S) + " stage(s)");
  std::vector<int> bounds(S + 1);
  bounds[0] = 0;
  bounds[S] = U;
  int at = 0;
  for (int s = 0; s < S - 1; ++s) {
    at += B / S + (s < B % S ? 1 : 0);
    bounds[s + 1] = blocks[at]; // stage s + 1 starts at its first block
  }
  return bounds;
}

// The simulator.

std::vector<Work> stretto::tune::stageOrder(int s, int S, int64_t m, int64_t steps,
                                            Sched sched) {
  std::vector<Work> ops;
  int64_t total = steps * m, fwd = 0, bwd = 0, updates = 0;
  while (bwd < total) {
    bool ready = sched == Sched::TwoBW ? fwd / m - 1 <= updates : fwd / m <= updates;
    if (fwd < total && fwd - bwd < S - s && ready) {
      ops.push_back({'F', fwd++});
      continue;
    }
    ops.push_back({'B', bwd++});
    if (bwd % m == 0) {
      ops.push_back({'U', bwd / m - 1});
      ++updates;
    }
  }
  return ops;
}

SimResult stretto::tune::simulate(const std::vector<StageEstimate> &stages, int64_t m,
                                  int64_t steps, Sched sched) {
  const int S = int(stages.size());
  m = std::max<int64_t>(1, m);
  steps = std::max<int64_t>(1, steps);
  const int64_t total = steps * m;
  std::vector<std::vector<Work>> order(S);
  for (int s = 0; s < S; ++s)
    order[s] = stageOrder(s, S, m, steps, sched);
  // Arrival of micro-batch j's activation at stage s (from s − 1) and of its
  // cotangent at stage s (from s + 1); −1 until sent.
  std::vector<std::vector<double>> fArrive(S, std::vector<double>(total, -1)),
      bArrive(S, std::vector<double>(total, -1));
  std::vector<std::vector<double>> updateEnd(S, std::vector<double>(steps, 0));
  std::vector<size_t> next(S, 0);
  std::vector<double> clock(S, 0), busy(S, 0);
  std::vector<int64_t> inFlight(S, 0), peakInFlight(S, 0);
  SimResult r;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      const StageEstimate &e = stages[s];
      while (next[s] < order[s].size()) {
        Work w = order[s][next[s]];
        double dep = 0, work = 0, send = 0;
        if (w.kind == 'F') {
          if (s > 0) {
            if (fArrive[s][w.index] < 0)
              break;
            dep = fArrive[s][w.index];
          }
          work = e.forward;
          send = s < S - 1 ? e.sendForward : 0;
        } else if (w.kind == 'B') {
          if (s < S - 1) {
            if (bArrive[s][w.index] < 0)
              break;
            dep = bArrive[s][w.index];
          }
          work = e.backward;
          send = s > 0 ? e.sendBackward : 0;
        } else {
          work = e.update;
        }
        double start = std::max(clock[s], dep);
        clock[s] = start + work + send;
        busy[s] += work + send;
        if (w.kind == 'F') {
          if (s < S - 1)
            fArrive[s + 1][w.index] = clock[s];
          peakInFlight[s] = std::max(peakInFlight[s], ++inFlight[s]);
        } else if (w.kind == 'B') {
          if (s > 0)
            bArrive[s - 1][w.index] = clock[s];
          --inFlight[s];
        } else {
          updateEnd[s][w.index] = clock[s];
        }
        r.events.push_back({s, w.kind, w.index, start, clock[s]});
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < S; ++s)
    if (next[s] != order[s].size())
      throw std::logic_error("schedule simulation deadlocked at stage " + std::to_string(s));
  r.makespan = *std::max_element(clock.begin(), clock.end());
  for (int s = 0; s < S; ++s) {
    r.idle.push_back(r.makespan > 0 ? 1 - busy[s] / r.makespan : 0);
    r.peakMemory.push_back(stages[s].state + stages[s].stash * double(peakInFlight[s]));
  }
  auto stepEnd = [&](int64_t k) {
    double t = 0;
    for (int s = 0; s < S; ++s)
      t = std::max(t, updateEnd[s][k]);
    return t;
  };
  if (sched == Sched::Flush || steps < 2) {
    r.stepTime = r.makespan / double(steps);
  } else {
    // Steady state: the steps between the first and the last quarter (the
    // schedule is periodic once the pipeline has filled, and the last
    // steps drain it).
    int64_t a = steps / 4, b = std::max(a + 1, steps - 1 - steps / 4);
    r.stepTime = (stepEnd(b) - stepEnd(a)) / double(b - a);
  }
  return r;
}

std::string stretto::tune::timelineSvg(const SimResult &sim,
                                       const std::vector<std::string> &laneNames,
                                       const std::string &title) {
  const int lanes = int(laneNames.size());
  const double width = 960, left = 210, laneH = 28, top = 40;
  const double height = top + lanes * laneH + 40;
  double scale = sim.makespan > 0 ? (width - left - 20) / sim.makespan : 1;
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"monospace\" font-size=\"12\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"10\" y=\"20\">",
                width, height);
  out += buf;
  for (char c : title)
    out += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
  out += "</text>\n";
  for (int s = 0; s < lanes; ++s) {
    std::snprintf(buf, sizeof buf, "<text x=\"10\" y=\"%.1f\">", top + s * laneH + 18);
    out += buf;
    out += laneNames[s];
    out += "</text>\n";
  }
  for (const SimEvent &e : sim.events) {
    if (e.end <= e.start)
      continue;
    const char *fill = e.kind == 'F' ? "#4e79a7" : e.kind == 'B' ? "#f28e2b" : "#59a14f";
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                  "stroke=\"white\" stroke-width=\"0.5\"><title>%c%lld %.3f-%.3f ms</title></rect>\n",
                  left + e.start * scale, top + e.stage * laneH + 4, (e.end - e.start) * scale,
                  laneH - 8, fill, e.kind, (long long)e.index, e.start * 1e3, e.end * 1e3);
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.0f\" y=\"%.1f\">0</text><text x=\"%.0f\" y=\"%.1f\" "
                "text-anchor=\"end\">%.1f ms</text>\n"
                "<text x=\"%.0f\" y=\"%.1f\"><tspan fill=\"#4e79a7\">&#9632; forward</tspan> "
                "<tspan fill=\"#f28e2b\">&#9632; backward (+ sends)</tspan> "
                "<tspan fill=\"#59a14f\">&#9632; update</tspan></text>\n</svg>\n",
                left, top + lanes * laneH + 14, width - 20, top + lanes * laneH + 14,
                sim.makespan * 1e3, left, top + lanes * laneH + 32);
  out += buf;
  return out;
}

Pick stretto::tune::pickWinner(const std::vector<Choice> &choices) {
  Pick pick;
  int fastest = -1;
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i].measured && (fastest < 0 || choices[i].median < choices[size_t(fastest)].median))
      fastest = int(i);
  if (fastest < 0)
    return pick;
  const Choice &w = choices[size_t(fastest)];
  // Beats its even split by more than the noise of either measurement.
  auto clearsEven = [&](size_t i) {
    const Choice &c = choices[i];
    if (c.even < 0 || size_t(c.even) == i || !choices[size_t(c.even)].measured)
      return false;
    if (c.vsEven > 0)
      return c.vsEven > 1 + c.vsEvenNoise;
    const Choice &e = choices[size_t(c.even)];
    return e.median > c.median * (1 + std::max(c.noise, e.noise));
  };
  const bool fastestClears = clearsEven(size_t(fastest));
  pick.index = size_t(fastest);
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice &c = choices[i];
    if (!c.measured || c.stages != w.stages ||
        c.median > w.median * (1 + std::max(c.noise, w.noise)))
      continue;
    if (int(i) == fastest)
      break;
    if (fastestClears && !clearsEven(i)) {
      if (pick.passedOver < 0)
        pick.passedOver = int(i);
      continue;
    }
    pick.index = i;
    pick.tieToPrediction = true;
    break;
  }
  return pick;
}
