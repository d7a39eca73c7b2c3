//===- Sampler.cpp - safetensors export and text sampling ----------------===//
#include "stretto/Trainer.h"
#include "stretto/PlanExecutor.h"

#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>

using namespace stretto;

void stretto::saveSafetensors(const std::string &path,
                              const std::map<std::string, HostTensor> &tensors) {
  std::ostringstream header;
  header << "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"stretto\"}";
  uint64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    uint64_t bytes = t.data.size() * sizeof(float);
    header << ",\"" << name << "\":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      header << (d ? "," : "") << t.shape[d];
    header << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    offset += bytes;
  }
  header << "}";
  std::string h = header.str();
  while (h.size() % 8)
    h += ' '; // the format allows trailing spaces; keeps data 8-aligned
  std::string out;
  uint64_t len = h.size();
  out.append(reinterpret_cast<const char *>(&len), 8);
  out += h;
  for (const auto &[name, t] : tensors)
    for (double v : t.data) {
      float f = static_cast<float>(v);
      out.append(reinterpret_cast<const char *>(&f), 4);
    }
  writeFileAtomically(path, out);
}

std::string stretto::sampleText(const Graph &forward,
                                const std::map<std::string, HostTensor> &params,
                                const std::string &prompt, int64_t count, double temperature,
                                uint64_t seed) {
  int logitsNode = -1, tokensNode = -1;
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const Node &n = forward.nodes[i];
    if (n.kind == OpKind::CrossEntropy)
      logitsNode = n.operands[0];
    if (n.kind == OpKind::Input && n.name == "tokens")
      tokensNode = static_cast<int>(i);
  }
  if (logitsNode < 0 || tokensNode < 0)
    throw std::runtime_error("sampling needs a language model (tokens input, cross-entropy loss)");
  const Shape &ts = forward.nodes[tokensNode].shape;
  const Shape &ls = forward.nodes[logitsNode].shape;
  int64_t B = ts[0], T = ts[1], V = ls.back();
  // The compiled runtime's own ops run the forward graph (no kernels needed)
  // and evaluate only what the logits need; the reference where it cannot.
  std::unique_ptr<Executor> exec;
  std::string why;
  if (PlanExecutor::supports(forward, why))
    exec = std::make_unique<PlanExecutor>(forward, std::map<std::string, PlanExecutor::KernelFn>{});
  else
    exec = std::make_unique<RefExecutor>(forward, Precision::F32);
  Executor &ex = *exec;
  ex.initialize(0);
  for (const StateDecl &s : forward.states) {
    auto it = params.find(s.name);
    if (it == params.end())
      throw std::runtime_error("the checkpoint has no parameter '" + s.name + "'");
    ex.setState(s.name, it->second);
  }
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  std::string generated;
  for (int64_t k = 0; k < count; ++k) {
    int64_t n = std::min<int64_t>(T, static_cast<int64_t>(text.size()));
    HostTensor tokens{{B, T}, std::vector<double>(B * T, 0.0)};
    for (int64_t t = 0; t < n; ++t)
      tokens.data[t] = static_cast<unsigned char>(text[text.size() - n + t]) % V;
    HostTensor targets{{B, T}, std::vector<double>(B * T, 0.0)};
    StepResult r = ex.evaluate({{"tokens", tokens}, {"targets", targets}}, {logitsNode});
    const std::vector<double> &logits = r.probes.at(logitsNode).data;
    const double *row = logits.data() + (n - 1) * V; // batch row 0
    int64_t next = 0;
    if (temperature <= 0) {
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[next])
          next = v;
    } else {
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v)
        mx = std::max(mx, row[v]);
      std::vector<double> p(V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v)
        sum += p[v] = std::exp((row[v] - mx) / temperature);
      double u = unitOpenClosed(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(k)))) * sum;
      for (next = 0; next < V - 1 && (u -= p[next]) > 0; ++next) {
      }
    }
    text += static_cast<char>(next);
    generated += static_cast<char>(next);
  }
  return generated;
}
