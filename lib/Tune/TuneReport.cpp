//===- TuneReport.cpp - stretto-tune's table, winner and report files ----===//
#include "TunerInternals.h"

#include "stretto/Support/Text.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

using namespace stretto;
using namespace stretto::tune;
using namespace stretto::tune::internal;

namespace {

std::string sLabel(const TuneResult &r, const TuneRow &row) {
  return r.manyM ? std::to_string(row.S) + ",m=" + std::to_string(row.m) : std::to_string(row.S);
}

const TuneRow *evenOf(const TuneResult &r, int S) {
  for (const TuneRow &e : r.rows)
    if (e.even && e.S == S && e.m == r.baseM)
      return &e;
  return nullptr;
}

void printRow(const TuneResult &r, size_t i) {
  const TuneRow &row = r.rows[i];
  std::string compute, xfer, mem;
  for (const StageEstimate &e : row.cand.stages) {
    compute +=
        (compute.empty() ? "" : "/") + ms(double(row.m) * (e.forward + e.backward) + e.update);
    xfer += (xfer.empty() ? "" : "/") + ms(double(row.m) * (e.sendForward + e.sendBackward));
    std::string b = formatBytes(e.memory);
    mem += (mem.empty() ? "" : "/") + b.substr(0, b.find(' ') + 2);
  }
  std::string label = std::string(row.dpPick ? "*" : "") + (row.even ? "=" : "");
  std::string meas = row.measured ? ms(row.measured->median) : "-";
  std::string err = "-", vs = "-";
  if (row.measured) {
    char b[32];
    std::snprintf(b, sizeof b, "%+.1f%%",
                  100 * (row.sim.stepTime - row.measured->median) / row.measured->median);
    err = b;
    const TuneRow *ev = evenOf(r, row.S);
    if (ev && ev->measured) {
      std::snprintf(b, sizeof b, "%.2fx", pairedSpeedup(*row.measured, *ev->measured).first);
      vs = b;
    }
  }
  std::printf("%-3s %-2s %-34s %-22s %-11s %-19s %9s %9s %7s %8s\n",
              (std::to_string(i + 1) + label).c_str(), sLabel(r, row).c_str(),
              joinUnits(row.stageUnits).c_str(), compute.c_str(), xfer.c_str(), mem.c_str(),
              ms(row.sim.stepTime).c_str(), meas.c_str(), err.c_str(), vs.c_str());
}

/// The candidate table, its legend, the infeasible partitions and the note
/// on other load.
void printTable(const TuneResult &r) {
  std::printf("\n%-3s %-2s %-34s %-22s %-11s %-19s %9s %9s %7s %8s\n", "#", "S", "stage units",
              "pred compute ms/stage", "xfer ms", "memory/stage", "pred ms", "meas ms", "err",
              "vs even");
  size_t shown = 0;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const TuneRow &row = r.rows[i];
    if (!row.measured && !row.even && !row.dpPick && (r.autoStages || shown >= 12))
      continue; // --stages auto: per stage count, its DP pick, even split and measured ones
    ++shown;
    printRow(r, i);
  }
  const char *sched = r.twoBW ? "2BW (steady state)" : "1F1B flush";
  if (r.manyM)
    std::printf("(* the DP's pick, = the even split; pred: simulated step time of the %s "
                "schedule with the row's m micro-batches; vs even: against the even split with "
                "%lld, the median of the interleaved rounds' ratios)\n",
                sched, (long long)r.baseM);
  else
    std::printf("(* the DP's pick, = the even split; pred: simulated step time of the %s "
                "schedule with %lld micro-batches; vs even: the median of the interleaved "
                "rounds' ratios)\n",
                sched, (long long)r.microBatches);
  size_t listed = 0;
  for (const std::string &why : r.infeasible)
    if (listed++ < 12)
      std::printf("infeasible: %s\n", why.c_str());
  if (r.infeasible.size() > 12)
    std::printf("infeasible: ... and %zu more\n", r.infeasible.size() - 12);
  if (r.otherShare > 0.1)
    std::printf("note: other processes used %.0f%% of this machine's CPU time during the "
                "measured runs; measured times then include waiting for a core, which the "
                "prediction (a core per stage) does not model\n",
                100 * r.otherShare);
}

/// Each measured candidate's compute per stage, predicted and measured.
void printComputeTable(const TuneResult &r) {
  bool anyCompute = false;
  for (const TuneRow &row : r.rows)
    anyCompute |= row.measured && !row.measured->stageCompute.empty();
  if (!anyCompute)
    return;
  std::printf("\ncompute ms/stage per step, predicted -> measured by the runtime (busy time, "
              "not waiting):\n");
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const TuneRow &row = r.rows[i];
    if (!row.measured || row.measured->stageCompute.empty())
      continue;
    std::string line;
    for (size_t s = 0; s < row.cand.stages.size(); ++s) {
      const StageEstimate &e = row.cand.stages[s];
      double pred = double(row.m) * (e.forward + e.backward) + e.update;
      double meas = s < row.measured->stageCompute.size() ? row.measured->stageCompute[s] : 0;
      char b[64];
      std::snprintf(b, sizeof b, "%s%s -> %s", line.empty() ? "" : "   ", ms(pred).c_str(),
                    ms(meas).c_str());
      line += b;
    }
    std::printf("%-4zu %-34s %s\n", i + 1, joinUnits(row.stageUnits).c_str(), line.c_str());
  }
}

/// Why the pick is what it is, the DP's pick, the winner and its speedup.
void printWinner(const TuneResult &r) {
  const TuneRow *winner = &r.winner();
  if (r.pick.passedOver >= 0) {
    const TuneRow &p = r.rows[size_t(r.pick.passedOver)];
    std::printf("\n%s is within the noise of the fastest (%s ms vs %s ms) and predicted "
                "faster, but its lead over the even split is within the noise: the "
                "measured-fastest wins\n",
                joinUnits(p.stageUnits).c_str(), ms(p.measured->median).c_str(),
                ms(winner->measured->median).c_str());
  }
  if (r.pick.tieToPrediction) {
    double fastest = winner->measured->median;
    for (const TuneRow &row : r.rows)
      if (row.measured)
        fastest = std::min(fastest, row.measured->median);
    std::printf("\nmeasured within the noise of the fastest (%s ms vs %s ms): the tie "
                "goes to the better prediction\n",
                ms(winner->measured->median).c_str(), ms(fastest).c_str());
  }
  const TuneRow *dp = nullptr;
  for (const TuneRow &row : r.rows)
    if (row.dpPick && row.S == winner->S && row.m == winner->m)
      dp = &row;
  std::printf("\nDP pick (S=%s): %s, predicted %s ms/step\n", sLabel(r, *dp).c_str(),
              joinUnits(dp->stageUnits).c_str(), ms(dp->sim.stepTime).c_str());
  std::printf("winner: %s (S=%s)\n", joinUnits(winner->stageUnits).c_str(),
              sLabel(r, *winner).c_str());
  const TuneRow *even = evenOf(r, winner->S);
  if (winner->measured && even && even->measured) {
    auto [speedup, noise] = pairedSpeedup(*winner->measured, *even->measured);
    std::printf("%.2fx over even (measured %s vs %s ms/step; the median of %zu interleaved "
                "rounds' ratios, run-to-run noise +-%.1f%%)\n",
                speedup, ms(winner->measured->median).c_str(), ms(even->measured->median).c_str(),
                winner->measured->runs.size(), 100 * noise);
  } else if (even) {
    std::printf("%.2fx over even (predicted: %s vs %s ms/step; not measured)\n",
                even->sim.stepTime / winner->sim.stepTime, ms(winner->sim.stepTime).c_str(),
                ms(even->sim.stepTime).c_str());
  }
}

/// The winner in the trainer's TOML form.
std::string tomlLines(const TuneResult &r) {
  const TuneRow &w = r.winner();
  std::string toml = "stages = " + std::to_string(w.S);
  if (w.m != r.microBatches)
    toml += "\nmicro_batches = " + std::to_string(w.m);
  if (w.S > 1) {
    toml += "\nstage_units = [";
    for (size_t i = 0; i < w.stageUnits.size(); ++i)
      toml += (i ? ", \"" : "\"") + w.stageUnits[i] + "\"";
    toml += "]";
  }
  return toml;
}

void writeCsv(const TuneResult &r, const std::string &path) {
  std::ofstream csv(path);
  csv << "rank,stages,stage_units,dp_pick,even,predicted_ms,measured_ms,noise_pct,error_pct,"
         "feasible,memory_bytes,micro_batches\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const TuneRow &row = r.rows[i];
    const std::optional<Measured> &m = row.measured;
    std::string mem;
    for (const StageEstimate &e : row.cand.stages)
      mem += (mem.empty() ? "" : ";") + std::to_string((long long)e.memory);
    csv << i + 1 << "," << row.S << ",\"" << joinUnits(row.stageUnits) << "\"," << row.dpPick
        << "," << row.even << "," << row.sim.stepTime * 1e3 << ","
        << (m ? std::to_string(m->median * 1e3) : "") << ","
        << (m ? std::to_string(100 * m->noise) : "") << ","
        << (m ? std::to_string(100 * (row.sim.stepTime - m->median) / m->median) : "") << ",1,"
        << mem << "," << row.m << "\n";
  }
}

void writeJson(const TuneResult &r, const std::string &path) {
  const TuneRow &w = r.winner();
  std::ofstream json(path);
  json << "{\n  \"config\": " << jsonString(r.configPath) << ",\n  \"schedule\": \""
       << (r.twoBW ? "2bw" : "flush") << "\",\n  \"micro_batches\": " << r.microBatches
       << ",\n  \"device\": " << jsonString(r.device) << ",\n  \"threads_per_stage\": "
       << r.threadsPerStage << ",\n  \"winner\": {\"stages\": " << w.S << ", \"stage_units\": [";
  for (size_t i = 0; i < w.stageUnits.size(); ++i)
    json << (i ? ", " : "") << jsonString(w.stageUnits[i]);
  json << "], \"override\": " << jsonString(unitsOverride(w.stageUnits)) << "},\n"
       << "  \"candidates\": [\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const TuneRow &row = r.rows[i];
    json << "    {\"stages\": " << row.S << ", \"micro_batches\": " << row.m
         << ", \"stage_units\": " << jsonString(joinUnits(row.stageUnits))
         << ", \"dp_pick\": " << (row.dpPick ? "true" : "false")
         << ", \"even\": " << (row.even ? "true" : "false")
         << ", \"predicted_s\": " << row.sim.stepTime
         << ", \"objective_s\": " << row.cand.objective;
    if (row.measured) {
      json << ", \"measured_s\": " << row.measured->median
           << ", \"noise\": " << row.measured->noise << ", \"runs_s\": [";
      for (size_t k = 0; k < row.measured->runs.size(); ++k)
        json << (k ? ", " : "") << row.measured->runs[k];
      json << "]";
    }
    json << "}" << (i + 1 < r.rows.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
}

/// The winner's schedule: two steps, one lane per stage.
void writeTimeline(const TuneResult &r, const std::string &path) {
  const TuneRow &w = r.winner();
  SimResult sim = simulate(w.cand.stages, w.m, 2, r.twoBW ? Sched::TwoBW : Sched::Flush);
  std::vector<std::string> lanes;
  for (int s = 0; s < w.S; ++s)
    lanes.push_back("stage " + std::to_string(s) + ": " + w.stageUnits[s]);
  std::string title = "stretto-tune " + llvm::sys::path::filename(r.configPath).str() + ": " +
                      joinUnits(w.stageUnits) + ", " + (r.twoBW ? "2BW" : "1F1B flush") +
                      ", m=" + std::to_string(w.m) + ", 2 steps (predicted)";
  std::ofstream(path) << timelineSvg(sim, lanes, title);
}

} // namespace

std::string tune::overrideLine(const TuneResult &r) {
  const TuneRow &w = r.winner();
  std::string line = "train.stages=" + std::to_string(w.S);
  if (w.S > 1)
    line += " '" + unitsOverride(w.stageUnits) + "'";
  if (w.m != r.microBatches)
    line += " train.micro_batches=" + std::to_string(w.m);
  return line;
}

void tune::printTuneReport(const TuneResult &r) {
  printTable(r);
  printComputeTable(r);
  printWinner(r);
  std::printf("override: %s\n[train] lines:\n%s\n", overrideLine(r).c_str(),
              tomlLines(r).c_str());
}

void tune::writeTuneReports(const TuneResult &r, const std::string &dir) {
  llvm::sys::fs::create_directories(dir);
  std::ofstream(dir + "/override.txt") << overrideLine(r) << "\n";
  writeCsv(r, dir + "/tune.csv");
  writeJson(r, dir + "/tune.json");
  writeTimeline(r, dir + "/timeline.svg");
}
