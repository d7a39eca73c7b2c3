//===- gossip_bench.cpp - sync DP vs DiLoCo vs gossip, one method per run ===//
//
//   stretto-gossip-bench CONFIG.toml METHOD OUT.csv [section.key=value ...]
//
// METHOD: sync | diloco | one-peer | ring | two-peer | exponential, or
// one-peer-adaptive: one-peer where the heterogeneous network's slow
// replicas take proportionally fewer local steps (GASLoC's H_i); its clock
// is only meaningful on the heterogeneous network.
// Compiles CONFIG (with train.replicas, train.local_steps, ...) with the
// training pipeline (+ train-gossip for the local-step methods), runs it on
// the reference executor and writes one CSV row per round (per step for
// sync) with the simulated wall-clock under two network models at once:
// homogeneous, and heterogeneous (a quarter of the replicas 2× slower, a
// quarter of the links 10× slower). The numerics do not depend on the
// network model, so one run gives both clocks. bench/gossip_experiment.py
// drives it.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Frontend/Import.h"
#include "stretto/Runtime/Gossip.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstdio>
#include <fstream>
#include <iostream>

using namespace stretto;

int main(int argc, char **argv) {
  if (argc < 4) {
    std::cerr << "usage: stretto-gossip-bench CONFIG.toml METHOD OUT.csv [section.key=value ...]\n";
    return 2;
  }
  std::string config = argv[1], method = argv[2], out = argv[3];
  std::vector<std::string> sets(argv + 4, argv + argc);
  bool sync = method == "sync";
  if (!sync) {
    sets.push_back(std::string("train.sync=") + (method == "diloco" ? "diloco" : "gossip"));
    std::string topo = method == "diloco"              ? "complete"
                       : method == "one-peer-adaptive" ? "one-peer"
                                                       : method;
    sets.push_back("train.topology=" + topo);
  }
  mlir::MLIRContext ctx;
  std::string error;
  auto module = importConfigFile(ctx, config, sets, error);
  if (!module) {
    std::cerr << error << "\n";
    return 1;
  }
  train::ModelOp model;
  module->walk([&](train::ModelOp m) { model = m; });
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm);
  if (!sync)
    pm.nest<train::ModelOp>().addPass(train::createTrainGossip());
  if (mlir::failed(pm.run(*module)))
    return 1;
  mlir::FailureOr<Graph> graph = lowerToGraph(model);
  if (mlir::failed(graph))
    return 1;

  int R = static_cast<int>(model.getTrainerInt("replicas", 8));
  int64_t H = model.getTrainerInt("local_steps", 20);
  if (auto list = llvm::dyn_cast_or_null<mlir::DenseI64ArrayAttr>(model.getTrainerOption("local_steps")))
    H = *std::max_element(list.asArrayRef().begin(), list.asArrayRef().end());
  int64_t steps = model.getTrainerInt("total_steps", 400);
  uint64_t seed = static_cast<uint64_t>(model.getTrainerInt("seed", 1337));

  DataConfig dc;
  dc.seed = seed;
  if (auto d = model->getAttrOfType<mlir::DictionaryAttr>("data"))
    if (auto p = d.getAs<mlir::StringAttr>("path"))
      dc.path = p.getValue().str();
  if (!dc.path.empty() && dc.path[0] != '/') { // relative to the config file
    size_t slash = config.rfind('/');
    dc.path = (slash == std::string::npos ? std::string(".") : config.substr(0, slash)) + "/" + dc.path;
  }
  auto data = makeDataSource(*graph, dc, 256);

  GossipOptions opt;
  opt.seed = seed;
  opt.evalBatches = model.getTrainerInt("eval_batches", 4);
  NetworkModel homo;
  homo.stepTime = model.getTrainerFloat("net_step_time", 0.1);
  homo.bandwidth = model.getTrainerFloat("net_bandwidth", 1e7);
  homo.latency = model.getTrainerFloat("net_latency", 0.01);
  NetworkModel het = NetworkModel::heterogeneous(R, 0.25, 2.0, 0.25, 10.0, seed);
  het.stepTime = homo.stepTime;
  het.bandwidth = homo.bandwidth;
  het.latency = homo.latency;
  opt.networks = {homo, het};
  int64_t evalEvery = model.getTrainerInt("eval_interval", 100);

  opt.onRound = [&](const RoundReport &r) {
    std::fprintf(stderr, "%s round %lld loss %.4f val %.4f sim %.1f/%.1f s\n", method.c_str(),
                 (long long)r.round + 1, r.loss, r.valLoss, r.simTime[0], r.simTime[1]);
  };
  GossipResult res;
  if (sync) {
    opt.evalInterval = evalEvery;
    res = runDataParallel(*graph, *data, R, steps, opt);
  } else {
    opt.rounds = steps / H;
    if (method == "one-peer-adaptive")
      for (int r = 0; r < R; ++r)
        opt.localSteps.push_back(static_cast<int64_t>(H / het.stepCost(r) * homo.stepTime + 0.5));
    opt.evalInterval = std::max<int64_t>(1, evalEvery / H);
    res = runGossip(*graph, *data, opt);
  }
  std::ofstream csv(out);
  csv << "method,round,steps_per_replica,loss,val_loss,consensus,sim_homogeneous_s,"
         "sim_heterogeneous_s,bytes_total\n";
  for (const RoundReport &r : res.rounds) {
    int64_t perReplica = sync ? r.round + 1 : (r.round + 1) * H;
    csv << method << "," << r.round + 1 << "," << perReplica << "," << r.loss << ","
        << (r.valLoss >= 0 ? std::to_string(r.valLoss) : "") << "," << r.consensus << ","
        << r.simTime[0] << "," << r.simTime[1] << "," << r.bytes << "\n";
  }
  return 0;
}
