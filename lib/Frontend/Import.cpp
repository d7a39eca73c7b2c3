//===- Import.cpp - TOML model configs to `train` IR ---------------------===//
//
// Two model families, expanded with OpBuilder into one `train.model`:
//  - gpt: the reference GPT of docs/design.md §1 (pre-norm, byte vocabulary,
//    learned token and position embeddings, fused-QKV causal attention, a
//    GELU MLP of width mlp_ratio·d with biases everywhere but the untied
//    head, or with mlp = "swiglu" a bias-free SwiGLU MLP, Llama-style);
//  - llama: Llama-style blocks (RMSNorm, rotary position embeddings,
//    grouped-query causal attention, SwiGLU MLP, no biases, optionally a
//    head tied to the token embedding), with Meta's llama parameter names
//    and PyTorch's [out, in] matrices, so that its PyTorch twin
//    (examples/pytorch/llama.py) loads model.safetensors as it is;
//  - mlp: a classifier, matmul + bias + activation layers, softmax CE.
// Every config error is one line naming file, line and column of the key.
// Sizes are bounded (see "Size limits") so that an absurd config is an error
// naming the key, not hours of IR building or int64 overflow in shapes.
//
//===----------------------------------------------------------------------===//
#include "stretto/Frontend/Import.h"
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Dialect/Train/TrainerOptions.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <toml++/toml.h>

using namespace mlir;
using namespace stretto;
using namespace stretto::train;

namespace {

/// A config error: where and what. Thrown inside the importer only, turned
/// into the one-line message at the API boundary. `override` is set when a
/// `key=value` override caused it (its text, instead of a line and column).
struct ConfigError {
  int line = 0, column = 0;
  std::string message;
  std::string override;
};

/// Values that came from overrides are parsed with this prefix before the
/// override's text as their source path, so an error can name the override.
constexpr std::string_view kOverrideSource = "\x01override:";
/// An override made from a command-line flag ends in this separator and the
/// flag (overrideFromFlag), so that messages name the flag.
constexpr char kFlagSeparator = '\x01';

// Size limits. A config can ask for any integer; these bounds turn absurd
// sizes into an error naming the key instead of hours of IR building (layers
// and hidden widths expand into ops), int64 overflow in shapes, or tensors no
// machine this targets can hold.
/// (kMaxLayers, kMaxTensorElements and kMaxParameters: Import.h.)
/// Token ids and class labels are i32.
constexpr int64_t kMaxIds = std::numeric_limits<int32_t>::max();

/// Size arithmetic saturates here, far above every limit, so it never
/// overflows int64 (sums of two saturated values included).
constexpr int64_t kSaturated = int64_t(1) << 61;
int64_t satMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return 0;
  return a > kSaturated / b ? kSaturated : std::min(a * b, kSaturated);
}
int64_t satAdd(int64_t a, int64_t b) { return std::min(a + b, kSaturated); }
std::string countStr(int64_t n) {
  return n >= kSaturated ? "more than 2^61" : std::to_string(n);
}

/// User text inside a message, made printable so the error stays one line.
std::string quoted(std::string_view text) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char ch : text) {
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\r')
      out += "\\r";
    else if (ch == '\t')
      out += "\\t";
    else if (ch < 0x20 || ch == 0x7f) {
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else
      out += static_cast<char>(ch);
  }
  return out;
}

[[noreturn]] void failAt(const toml::source_region &at, std::string message) {
  ConfigError e;
  e.line = static_cast<int>(at.begin.line);
  e.column = static_cast<int>(at.begin.column);
  e.message = std::move(message);
  if (at.path && at.path->rfind(kOverrideSource, 0) == 0)
    e.override = at.path->substr(kOverrideSource.size());
  throw e;
}

[[noreturn]] void fail(const toml::node *at, std::string message) {
  if (at)
    failAt(at->source(), std::move(message));
  throw ConfigError{0, 0, std::move(message)};
}

/// Reads typed keys from one table and rejects keys nobody asked for.
class Section {
public:
  Section(toml::table *table, std::string name) : table(table), name(std::move(name)) {}

  bool present() const { return table != nullptr; }
  const toml::node *node(const std::string &key) {
    known.insert(key);
    return table ? table->get(key) : nullptr;
  }
  int64_t integer(const std::string &key, std::optional<int64_t> fallback, int64_t minimum,
                  int64_t maximum = std::numeric_limits<int64_t>::max()) {
    const toml::node *n = node(key);
    if (!n) {
      if (!fallback)
        fail(table, "[" + name + "] needs the key '" + key + "'");
      return *fallback;
    }
    // is_integer() first: toml++'s value<int64_t>() of a float out of
    // int64 range is undefined behaviour (found by fuzz-smoke).
    std::optional<int64_t> v;
    if (n->is_integer())
      v = n->value<int64_t>();
    if (!v)
      fail(n, "'" + name + "." + key + "' must be an integer");
    if (*v < minimum)
      fail(n, "'" + name + "." + key + "' must be >= " + std::to_string(minimum) +
                  ", got " + std::to_string(*v));
    if (*v > maximum)
      fail(n, "'" + name + "." + key + "' must be <= " + std::to_string(maximum) +
                  ", got " + std::to_string(*v));
    return *v;
  }
  double number(const std::string &key, double fallback) {
    const toml::node *n = node(key);
    if (!n)
      return fallback;
    if (!n->is_number())
      fail(n, "'" + name + "." + key + "' must be a number");
    double v = *n->value<double>();
    if (!std::isfinite(v))
      fail(n, "'" + name + "." + key + "' must be a finite number, got " +
                  (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
    // The trainer dictionary's ranges (lr > 0, beta in [0, 1), ...), the
    // same the train.model verifier applies to an .mlir model.
    if (name == "train")
      if (std::optional<std::string> why = train::checkTrainerNumber(key, v))
        fail(n, "'" + name + "." + key + "' " + *why);
    return v;
  }
  std::string string(const std::string &key, const std::string &fallback,
                     std::initializer_list<const char *> choices = {}) {
    const toml::node *n = node(key);
    if (!n)
      return fallback;
    if (!n->is_string())
      fail(n, "'" + name + "." + key + "' must be a string");
    std::string v = *n->value<std::string>();
    if (choices.size() && std::find(choices.begin(), choices.end(), v) == choices.end()) {
      std::string all;
      for (const char *c : choices)
        all += std::string(all.empty() ? "" : ", ") + c;
      fail(n, "'" + name + "." + key + "' is \"" + quoted(v) + "\"; expected one of " + all);
    }
    return v;
  }
  bool boolean(const std::string &key, bool fallback) {
    const toml::node *n = node(key);
    if (!n)
      return fallback;
    if (!n->is_boolean())
      fail(n, "'" + name + "." + key + "' must be true or false");
    return *n->value<bool>();
  }
  std::vector<int64_t> integers(const std::string &key, std::vector<int64_t> fallback,
                                size_t maxLength) {
    const toml::node *n = node(key);
    if (!n)
      return fallback;
    const toml::array *a = n->as_array();
    if (!a)
      fail(n, "'" + name + "." + key + "' must be an array of integers");
    if (a->size() > maxLength)
      fail(n, "'" + name + "." + key + "' may have at most " + std::to_string(maxLength) +
                  " entries, got " + std::to_string(a->size()));
    std::vector<int64_t> out;
    for (const toml::node &e : *a) {
      std::optional<int64_t> v;
      if (e.is_integer())
        v = e.value<int64_t>();
      if (!v || *v < 1)
        fail(&e, "'" + name + "." + key + "' must hold positive integers");
      out.push_back(*v);
    }
    return out;
  }
  /// Call after reading: any key not read is a typo or unsupported.
  void rejectUnknown() {
    if (!table)
      return;
    for (auto &[k, v] : *table)
      if (!known.count(std::string(k.str())))
        // A key an override added has no source of its own; its value does.
        failAt(k.source().begin.line ? k.source() : v.source(),
               "unknown key '" + name + "." + quoted(k.str()) + "'");
  }

private:
  toml::table *table;
  std::string name;
  llvm::StringSet<> known;
};

/// One factor of a tensor's element count: a config key's value (blamed when
/// the tensor is too large) or a constant (`at` and `label` empty).
struct Factor {
  int64_t value;
  const toml::node *at = nullptr;
  std::string label; // e.g. 'model.d_model'
};
Factor key(Section &s, const char *name, int64_t value) {
  return {value, s.node(name), std::string("'model.") + name + "'"};
}

/// Fails when the tensor `what` (shape text `shape`) would hold more than
/// kMaxTensorElements, blaming its largest config factor.
void checkTensor(const std::string &what, const std::string &shape,
                 std::initializer_list<Factor> factors) {
  int64_t n = 1;
  for (const Factor &f : factors)
    n = satMul(n, f.value);
  if (n <= kMaxTensorElements)
    return;
  const Factor *blame = nullptr;
  for (const Factor &f : factors)
    if (!f.label.empty() && (!blame || std::make_pair(f.at != nullptr, f.value) >
                                           std::make_pair(blame->at != nullptr, blame->value)))
      blame = &f; // the largest factor written in the config, else the largest
  fail(blame ? blame->at : nullptr,
       (blame ? blame->label + " (" + std::to_string(blame->value) + ") is too large: " : "") +
           what + " " + shape + " would hold " + countStr(n) +
           " elements; the limit is 2^31 per tensor");
}

void checkParameters(const toml::node *at, int64_t count, const std::string &reduce) {
  if (count > kMaxParameters)
    fail(at, "the model would have " + countStr(count) +
                 " parameters; the limit is 2^36 (" + std::to_string(kMaxParameters) +
                 "): reduce " + reduce);
}

Section section(toml::table &root, const char *name) {
  toml::node *n = root.get(name);
  if (n && !n->is_table())
    fail(n, std::string("'") + name + "' must be a table ([" + name + "])");
  return Section(n ? n->as_table() : nullptr, name);
}

/// Builds the IR of one model with stable parameter names and roles.
class ModelBuilder {
public:
  ModelBuilder(OpBuilder &b, Location loc, ModelOp model, StepOp step, Type elem)
      : b(b), loc(loc), model(model), step(step), elem(elem) {}

  RankedTensorType t(ArrayRef<int64_t> shape) { return RankedTensorType::get(shape, elem); }
  RankedTensorType ids(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, b.getI32Type());
  }

  /// Declares a parameter and reads it in the step.
  Value param(const std::string &name, ArrayRef<int64_t> shape, train::InitKind init,
              double scale, StringRef role, std::optional<int64_t> layer = std::nullopt) {
    return readOf(declare(name, shape, init, scale, role, layer));
  }
  ParamOp declare(const std::string &name, ArrayRef<int64_t> shape, train::InitKind init,
                  double scale, StringRef role, std::optional<int64_t> layer) {
    ParamOp p;
    {
      OpBuilder::InsertionGuard g(b);
      // Parameters go before the step (kept here: ModelOp::getStep scans
      // the body, which made building quadratic in the parameter count).
      b.setInsertionPoint(step);
      p = b.create<ParamOp>(loc, name, t(shape), init, APFloat(scale));
      p->setAttr("role", b.getStringAttr(role));
      if (layer)
        p->setAttr("layer", b.getI64IntegerAttr(*layer));
    }
    return p;
  }
  /// x Wᵀ for x [..., in] and W [out, in] (PyTorch's nn.Linear layout,
  /// marked `layout = "out_in"`), no bias.
  Value linearOutIn(Value x, const std::string &name, int64_t in, int64_t out, double std,
                    StringRef role, std::optional<int64_t> layer) {
    ParamOp p = declare(name, {out, in}, train::InitKind::normal, std, role, layer);
    p->setAttr("layout", b.getStringAttr("out_in"));
    return b.create<MatmulOp>(loc, x, TransposeOp::swapLastTwo(b, loc, readOf(p)));
  }
  Value readOf(ParamOp p) {
    return b.create<ReadOp>(loc, p.getTensorType(), FlatSymbolRefAttr::get(p.getSymNameAttr()));
  }
  /// x W + b for x [..., in], W [in, out], b [out].
  Value linear(Value x, const std::string &prefix, int64_t in, int64_t out, double std,
               bool bias, StringRef role, std::optional<int64_t> layer) {
    Value w = param(prefix + ".w", {in, out}, train::InitKind::normal, std, role, layer);
    Value y = b.create<MatmulOp>(loc, x, w);
    if (bias) {
      Value bv = param(prefix + ".b", {out}, train::InitKind::zeros, 0.0, "bias", layer);
      y = b.create<AddOp>(loc, y, bv);
    }
    return y;
  }
  Value layerNorm(Value x, const std::string &prefix, int64_t d, bool rms,
                  std::optional<int64_t> layer) {
    Value g = param(prefix + ".g", {d}, train::InitKind::ones, 0.0, "norm", layer);
    if (rms)
      return b.create<RmsNormOp>(loc, x, g, 1e-5);
    Value bb = param(prefix + ".b", {d}, train::InitKind::zeros, 0.0, "norm", layer);
    return b.create<LayerNormOp>(loc, x, g, bb, 1e-5);
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return b.create<ReshapeOp>(loc, t(shape), x);
  }

  OpBuilder &b;
  Location loc;
  ModelOp model;
  StepOp step;
  Type elem;
};

struct Common {
  int64_t batch;
  Type elem;
};

void buildGpt(ModelBuilder &mb, Section &m, const Common &c) {
  int64_t layers = m.integer("layers", std::nullopt, 1, kMaxLayers);
  const toml::node *headsNode = m.node("heads");
  int64_t heads = m.integer("heads", std::nullopt, 1);
  int64_t d = m.integer("d_model", std::nullopt, 1);
  // The MLP's hidden width is round(mlp_ratio * d_model): GELU MLPs
  // usually take 4; SwiGLU (three matrices instead of two) about 8/3 for
  // the same parameter count.
  const std::string mlp = m.string("mlp", "gelu", {"gelu", "swiglu"});
  const bool swiglu = mlp == "swiglu";
  double ratio = m.number("mlp_ratio", swiglu ? 8.0 / 3.0 : 4.0);
  int64_t vocab = m.integer("vocab", 256, 2, kMaxIds);
  int64_t seq = m.integer("seq_len", std::nullopt, 1);
  double std = m.number("init_std", 0.02);
  bool rms = m.string("norm", "layernorm", {"layernorm", "rmsnorm"}) == "rmsnorm";
  if (d % heads != 0)
    fail(headsNode, "'model.heads' (" + std::to_string(heads) + ") must divide 'model.d_model' (" +
                        std::to_string(d) + ")");
  if (!(std > 0))
    fail(m.node("init_std"), "'model.init_std' must be positive");
  if (!(ratio > 0) || ratio * static_cast<double>(d) > 9e15)
    fail(m.node("mlp_ratio"), "'model.mlp_ratio' must be positive (and mlp_ratio * d_model "
                              "a width), got " + std::to_string(ratio));
  const int64_t F = std::max<int64_t>(1, std::llround(ratio * static_cast<double>(d)));
  {
    Factor fb = key(m, "batch", c.batch), ft = key(m, "seq_len", seq),
           fd = key(m, "d_model", d), fr = key(m, "mlp_ratio", (F + d - 1) / d),
           fv = key(m, "vocab", vocab), three{3};
    checkTensor("the inputs", "[batch, seq_len]", {fb, ft});
    checkTensor("the parameter wte", "[vocab, d_model]", {fv, fd});
    checkTensor("the parameter wpe", "[seq_len, d_model]", {ft, fd});
    checkTensor("the parameter h*.attn.qkv.w", "[d_model, 3*d_model]", {fd, three, fd});
    checkTensor("the parameter h*.mlp.fc.w", "[d_model, mlp_ratio*d_model]", {fd, fr, fd});
    checkTensor("the activation qkv", "[batch, seq_len, 3*d_model]", {fb, ft, three, fd});
    checkTensor("the activation mlp.fc", "[batch, seq_len, mlp_ratio*d_model]", {fb, ft, fr, fd});
    checkTensor("the activation logits", "[batch, seq_len, vocab]", {fb, ft, fv});
  }
  int64_t B = c.batch, T = seq, H = heads, Dh = d / heads;
  {
    // Every product below is bounded by a checked tensor, so no overflow.
    int64_t norms = rms ? d : 2 * d;
    int64_t mlpParams = swiglu ? 3 * d * F : (d * F + F) + (F * d + d);
    int64_t perLayer = 2 * norms + (d * 3 * d + 3 * d) + (d * d + d) + mlpParams;
    int64_t count = satAdd(satAdd(vocab * d + T * d, satMul(layers, perLayer)), norms + d * vocab);
    checkParameters(m.node("layers"), count,
                    "'model.layers', 'model.d_model', 'model.mlp_ratio' or 'model.vocab'");
  }
  // GPT-2: residual projections scaled by 1/sqrt(2·layers).
  double residStd = std / std::sqrt(2.0 * layers);
  OpBuilder &b = mb.b;
  Location loc = mb.loc;

  Value tok = b.create<InputOp>(loc, mb.ids({B, T}), "tokens");
  Value tgt = b.create<InputOp>(loc, mb.ids({B, T}), "targets");
  Value wte = mb.param("wte", {vocab, d}, train::InitKind::normal, std, "embedding");
  Value wpe = mb.param("wpe", {T, d}, train::InitKind::normal, std, "embedding");
  Value x = b.create<EmbeddingOp>(loc, mb.t({B, T, d}), wte, tok);
  x = b.create<AddOp>(loc, x, wpe);
  for (int64_t l = 0; l < layers; ++l) {
    std::string p = "h" + std::to_string(l);
    Value h = mb.layerNorm(x, p + ".ln1", d, rms, l);
    Value qkv = mb.linear(h, p + ".attn.qkv", d, 3 * d, std, true, "matrix", l);
    // [B, T, 3D] -> [B, T, 3, H, Dh] -> [3, B, H, T, Dh], then q, k, v.
    qkv = mb.reshape(qkv, {B, T, 3, H, Dh});
    qkv = b.create<TransposeOp>(loc, qkv, ArrayRef<int64_t>{2, 0, 3, 1, 4});
    Value qkvParts[3];
    for (int64_t i = 0; i < 3; ++i) {
      Value s = b.create<SliceOp>(loc, mb.t({1, B, H, T, Dh}), qkv, /*axis=*/0, /*offset=*/i);
      qkvParts[i] = mb.reshape(s, {B, H, T, Dh});
    }
    Value a = b.create<AttentionOp>(loc, mb.t({B, H, T, Dh}), qkvParts[0], qkvParts[1],
                                    qkvParts[2], APFloat(1.0 / std::sqrt(double(Dh))),
                                    /*causal=*/true);
    a = b.create<TransposeOp>(loc, a, ArrayRef<int64_t>{0, 2, 1, 3});
    a = mb.reshape(a, {B, T, d});
    x = b.create<AddOp>(loc, x, mb.linear(a, p + ".attn.proj", d, d, residStd, true, "matrix", l));
    h = mb.layerNorm(x, p + ".ln2", d, rms, l);
    Value f;
    if (swiglu) {
      // SwiGLU (Shazeer, 2020): silu(h W_gate) * (h W_up), no biases.
      Value gate = mb.linear(h, p + ".mlp.gate", d, F, std, false, "matrix", l);
      Value up = mb.linear(h, p + ".mlp.up", d, F, std, false, "matrix", l);
      f = b.create<MulOp>(loc, b.create<SiluOp>(loc, gate), up);
    } else {
      f = b.create<GeluOp>(loc, mb.linear(h, p + ".mlp.fc", d, F, std, true, "matrix", l));
    }
    x = b.create<AddOp>(loc, x,
                        mb.linear(f, p + ".mlp.proj", F, d, residStd, !swiglu, "matrix", l));
  }
  x = mb.layerNorm(x, "ln_f", d, rms, std::nullopt);
  Value logits = mb.linear(x, "head", d, vocab, std, false, "head", std::nullopt);
  Value loss = b.create<CrossEntropyOp>(loc, RankedTensorType::get({}, c.elem), logits, tgt);
  b.create<YieldOp>(loc, ValueRange{loss});
  mb.model->setAttr("vocab", b.getI64IntegerAttr(vocab));
}

/// The sizes of a kind = "llama" model, read and checked.
struct LlamaSizes {
  int64_t layers, heads, kvHeads, d, hidden, vocab, seq;
  double std, eps, theta;
  bool tie;
};

LlamaSizes readLlama(Section &m, const Common &c) {
  LlamaSizes s;
  s.layers = m.integer("layers", std::nullopt, 1, kMaxLayers);
  const toml::node *headsNode = m.node("heads");
  s.heads = m.integer("heads", std::nullopt, 1);
  const toml::node *kvNode = m.node("kv_heads");
  s.kvHeads = m.integer("kv_heads", s.heads, 1);
  s.d = m.integer("d_model", std::nullopt, 1);
  s.vocab = m.integer("vocab", 256, 2, kMaxIds);
  s.seq = m.integer("seq_len", std::nullopt, 1);
  s.std = m.number("init_std", 0.02);
  s.eps = m.number("norm_eps", 1e-5);
  s.theta = m.number("rope_theta", 10000.0);
  s.tie = m.boolean("tie_embeddings", false);
  if (s.d % s.heads != 0)
    fail(headsNode, "'model.heads' (" + std::to_string(s.heads) +
                        ") must divide 'model.d_model' (" + std::to_string(s.d) + ")");
  if (s.heads % s.kvHeads != 0)
    fail(kvNode, "'model.kv_heads' (" + std::to_string(s.kvHeads) +
                     ") must divide 'model.heads' (" + std::to_string(s.heads) +
                     "): each K/V head serves heads / kv_heads query heads");
  if ((s.d / s.heads) % 2 != 0)
    fail(headsNode, "the head dimension d_model / heads (" + std::to_string(s.d / s.heads) +
                        ") must be even: rotary embeddings rotate pairs of dims");
  if (!(s.std > 0))
    fail(m.node("init_std"), "'model.init_std' must be positive");
  if (!(s.eps > 0))
    fail(m.node("norm_eps"), "'model.norm_eps' must be positive");
  if (!(s.theta > 1))
    fail(m.node("rope_theta"), "'model.rope_theta' must be > 1");
  // SwiGLU's hidden width: round(8/3 d) unless given (three matrices
  // instead of two, the parameter count of a 4d GELU MLP).
  s.hidden = m.integer("mlp_hidden", std::max<int64_t>(1, std::llround(8.0 * double(s.d) / 3.0)),
                       1);
  Factor fb = key(m, "batch", c.batch), ft = key(m, "seq_len", s.seq),
         fd = key(m, "d_model", s.d), fh = key(m, "mlp_hidden", s.hidden),
         fv = key(m, "vocab", s.vocab);
  checkTensor("the inputs", "[batch, seq_len]", {fb, ft});
  checkTensor("the parameter tok_embeddings.weight", "[vocab, d_model]", {fv, fd});
  checkTensor("the parameter layers.*.feed_forward.w1.weight", "[mlp_hidden, d_model]", {fh, fd});
  checkTensor("the activation of feed_forward.w1", "[batch, seq_len, mlp_hidden]", {fb, ft, fh});
  checkTensor("the activation logits", "[batch, seq_len, vocab]", {fb, ft, fv});
  checkTensor("the rotary tables", "[seq_len, d_model]", {ft, fd});
  int64_t kv = s.d / s.heads * s.kvHeads;
  int64_t perLayer = 2 * s.d + s.d * s.d * 2 + 2 * kv * s.d + 3 * s.d * s.hidden;
  int64_t count = satAdd(satMul(s.layers, perLayer), s.vocab * s.d * (s.tie ? 1 : 2) + s.d);
  checkParameters(m.node("layers"), count,
                  "'model.layers', 'model.d_model', 'model.mlp_hidden' or 'model.vocab'");
  return s;
}

/// A constant [rows, cols] table of the model's element type.
Value constantTable(ModelBuilder &mb, int64_t rows, int64_t cols,
                    const std::function<double(int64_t, int64_t)> &at) {
  auto type = mb.t({rows, cols});
  auto &sem = cast<FloatType>(mb.elem).getFloatSemantics();
  std::vector<APFloat> values;
  values.reserve(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      APFloat v(at(r, col));
      bool lost;
      v.convert(sem, APFloat::rmNearestTiesToEven, &lost);
      values.push_back(v);
    }
  return mb.b.create<ConstantOp>(mb.loc, type, DenseElementsAttr::get(type, values));
}

/// Rotary embedding of x [B, H, T, Dh] (rotate-half form, as Hugging Face's
/// Llama): x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1].
Value rotary(ModelBuilder &mb, Value x, Value cos, Value sin) {
  OpBuilder &b = mb.b;
  auto shape = cast<RankedTensorType>(x.getType()).getShape();
  SmallVector<int64_t> half(shape.begin(), shape.end());
  int64_t Dh = shape.back();
  half.back() = Dh / 2;
  // (Named steps: C++ leaves the order of nested create calls unspecified.)
  Value x1 = b.create<SliceOp>(mb.loc, mb.t(half), x, 3, 0);
  Value x2 = b.create<SliceOp>(mb.loc, mb.t(half), x, 3, Dh / 2);
  Value negX2 = b.create<PadOp>(mb.loc, x.getType(), b.create<NegOp>(mb.loc, x2), 3, 0);
  Value rot = b.create<AddOp>(mb.loc, negX2, b.create<PadOp>(mb.loc, x.getType(), x1, 3, Dh / 2));
  Value xCos = b.create<MulOp>(mb.loc, x, cos);
  return b.create<AddOp>(mb.loc, xCos, b.create<MulOp>(mb.loc, rot, sin));
}

/// One Llama block: x + attn(rms_norm(x)), then + swiglu(rms_norm(x)).
Value llamaBlock(ModelBuilder &mb, const LlamaSizes &s, int64_t B, Value x, Value cos, Value sin,
                 int64_t l) {
  OpBuilder &b = mb.b;
  Location loc = mb.loc;
  const int64_t T = s.seq, H = s.heads, G = s.kvHeads, Dh = s.d / s.heads;
  const double residStd = s.std / std::sqrt(2.0 * double(s.layers));
  const std::string p = "layers." + std::to_string(l) + ".";
  Value g = mb.param(p + "attention_norm.weight", {s.d}, train::InitKind::ones, 0.0, "norm", l);
  Value h = b.create<RmsNormOp>(loc, x, g, s.eps);
  auto heads = [&](const char *w, int64_t n) {
    Value y = mb.linearOutIn(h, p + "attention." + w + ".weight", s.d, n * Dh, s.std, "matrix", l);
    return b.create<TransposeOp>(loc, mb.reshape(y, {B, T, n, Dh}), ArrayRef<int64_t>{0, 2, 1, 3})
        .getResult();
  };
  Value q = rotary(mb, heads("wq", H), cos, sin);
  Value k = rotary(mb, heads("wk", G), cos, sin);
  Value v = heads("wv", G);
  if (G != H) { // grouped-query attention: K/V head j serves query heads j·H/G ..
    auto repeat = [&](Value t) {
      Value r = mb.reshape(t, {B, G, 1, T, Dh});
      r = b.create<BroadcastOp>(loc, mb.t({B, G, H / G, T, Dh}), r);
      return mb.reshape(r, {B, H, T, Dh});
    };
    k = repeat(k);
    v = repeat(v);
  }
  Value a = b.create<AttentionOp>(loc, mb.t({B, H, T, Dh}), q, k, v,
                                  APFloat(1.0 / std::sqrt(double(Dh))), /*causal=*/true);
  a = mb.reshape(b.create<TransposeOp>(loc, a, ArrayRef<int64_t>{0, 2, 1, 3}), {B, T, s.d});
  x = b.create<AddOp>(loc, x, mb.linearOutIn(a, p + "attention.wo.weight", s.d, s.d, residStd,
                                             "matrix", l));
  g = mb.param(p + "ffn_norm.weight", {s.d}, train::InitKind::ones, 0.0, "norm", l);
  h = b.create<RmsNormOp>(loc, x, g, s.eps);
  // SwiGLU (Shazeer, 2020): w2(silu(w1 h) * w3 h).
  Value gate = mb.linearOutIn(h, p + "feed_forward.w1.weight", s.d, s.hidden, s.std, "matrix", l);
  Value up = mb.linearOutIn(h, p + "feed_forward.w3.weight", s.d, s.hidden, s.std, "matrix", l);
  Value f = b.create<MulOp>(loc, b.create<SiluOp>(loc, gate), up);
  return b.create<AddOp>(loc, x, mb.linearOutIn(f, p + "feed_forward.w2.weight", s.hidden, s.d,
                                                residStd, "matrix", l));
}

void buildLlama(ModelBuilder &mb, Section &m, const Common &c) {
  const LlamaSizes s = readLlama(m, c);
  OpBuilder &b = mb.b;
  Location loc = mb.loc;
  const int64_t B = c.batch, T = s.seq, Dh = s.d / s.heads;
  Value tok = b.create<InputOp>(loc, mb.ids({B, T}), "tokens");
  Value tgt = b.create<InputOp>(loc, mb.ids({B, T}), "targets");
  ParamOp wte = mb.declare("tok_embeddings.weight", {s.vocab, s.d}, train::InitKind::normal, s.std,
                           "embedding", std::nullopt);
  Value table = mb.readOf(wte);
  Value x = b.create<EmbeddingOp>(loc, mb.t({B, T, s.d}), table, tok);
  // Rotary tables [T, Dh]: angle(t, i) = t / theta^(2i / Dh) for the pair
  // (i, i + Dh/2), as cat(freqs, freqs) in the rotate-half form.
  auto angle = [&](int64_t t, int64_t col) {
    int64_t i = col % (Dh / 2);
    return double(t) / std::pow(s.theta, double(2 * i) / double(Dh));
  };
  Value cos = constantTable(mb, T, Dh, [&](int64_t t, int64_t col) { return std::cos(angle(t, col)); });
  Value sin = constantTable(mb, T, Dh, [&](int64_t t, int64_t col) { return std::sin(angle(t, col)); });
  for (int64_t l = 0; l < s.layers; ++l)
    x = llamaBlock(mb, s, B, x, cos, sin, l);
  Value g = mb.param("norm.weight", {s.d}, train::InitKind::ones, 0.0, "norm");
  x = b.create<RmsNormOp>(loc, x, g, s.eps);
  Value logits;
  if (s.tie) {
    // One parameter; model.safetensors also names it output.weight, as the
    // tied PyTorch twin's state_dict does.
    wte->setAttr("aliases", b.getStrArrayAttr({"output.weight"}));
    logits = b.create<MatmulOp>(loc, x, TransposeOp::swapLastTwo(b, loc, table));
  } else {
    logits = mb.linearOutIn(x, "output.weight", s.d, s.vocab, s.std, "head", std::nullopt);
  }
  Value loss = b.create<CrossEntropyOp>(loc, RankedTensorType::get({}, c.elem), logits, tgt);
  b.create<YieldOp>(loc, ValueRange{loss});
  mb.model->setAttr("vocab", b.getI64IntegerAttr(s.vocab));
}

void buildMlp(ModelBuilder &mb, Section &m, const Common &c) {
  int64_t in = m.integer("inputs", std::nullopt, 1);
  std::vector<int64_t> hidden = m.integers("hidden", {64}, kMaxLayers);
  int64_t classes = m.integer("classes", std::nullopt, 2, kMaxIds);
  std::string act = m.string("activation", "relu", {"relu", "gelu"});
  double std = m.number("init_std", 0.0); // 0: Kaiming-style 1/sqrt(fan_in)
  {
    Factor fb = key(m, "batch", c.batch), fw = key(m, "inputs", in);
    checkTensor("the input x", "[batch, inputs]", {fb, fw});
    const toml::node *hiddenNode = m.node("hidden");
    const toml::array *hiddenArray = hiddenNode ? hiddenNode->as_array() : nullptr;
    int64_t count = 0;
    for (size_t i = 0; i < hidden.size(); ++i) {
      Factor fh{hidden[i], hiddenArray ? hiddenArray->get(i) : nullptr,
                "'model.hidden[" + std::to_string(i) + "]'"};
      std::string w = "fc" + std::to_string(i) + ".w";
      checkTensor("the parameter " + w, "[" + (i ? "hidden[" + std::to_string(i - 1) + "]" : std::string("inputs")) +
                                            ", hidden[" + std::to_string(i) + "]]",
                  {fw, fh});
      checkTensor("the activation of fc" + std::to_string(i), "[batch, hidden[" + std::to_string(i) + "]]",
                  {fb, fh});
      count = satAdd(count, fw.value * fh.value + fh.value);
      fw = fh;
    }
    Factor fc = key(m, "classes", classes);
    checkTensor("the parameter out.w", "[" + (hidden.empty() ? std::string("inputs") : "hidden[" + std::to_string(hidden.size() - 1) + "]") + ", classes]", {fw, fc});
    checkTensor("the activation logits", "[batch, classes]", {fb, fc});
    count = satAdd(count, fw.value * classes + classes);
    checkParameters(hiddenNode, count, "'model.hidden', 'model.inputs' or 'model.classes'");
  }
  OpBuilder &b = mb.b;
  Location loc = mb.loc;
  Value x = b.create<InputOp>(loc, mb.t({c.batch, in}), "x");
  Value y = b.create<InputOp>(loc, mb.ids({c.batch}), "y");
  int64_t width = in;
  for (size_t i = 0; i < hidden.size(); ++i) {
    double s = std > 0 ? std : std::sqrt(2.0 / double(width));
    x = mb.linear(x, "fc" + std::to_string(i), width, hidden[i], s, true, "matrix", int64_t(i));
    x = act == "relu" ? Value(b.create<ReluOp>(loc, x)) : Value(b.create<GeluOp>(loc, x));
    width = hidden[i];
  }
  double s = std > 0 ? std : std::sqrt(1.0 / double(width));
  Value logits = mb.linear(x, "out", width, classes, s, true, "head", std::nullopt);
  Value loss = b.create<CrossEntropyOp>(loc, RankedTensorType::get({}, c.elem), logits, y);
  b.create<YieldOp>(loc, ValueRange{loss});
  mb.model->setAttr("classes", b.getI64IntegerAttr(classes));
}

/// Where a key's value came from, for messages that involve several keys:
/// "at FILE:LINE", "from --steps 20 on the command line", "from the override
/// 'train.steps=20'", or "by default" (the key is absent).
std::string originOf(const toml::node *n, const std::string &file) {
  if (!n)
    return "by default";
  const toml::source_region &at = n->source();
  if (at.path && at.path->rfind(kOverrideSource, 0) == 0) {
    auto [kv, flag] = splitOverride(at.path->substr(kOverrideSource.size()));
    if (!flag.empty())
      return "from " + quoted(flag) + " on the command line";
    return "from the override '" + quoted(kv) + "'";
  }
  return "at " + file + ":" + std::to_string(at.begin.line);
}

/// A warm-up needs steps after it: name both keys and where each came from.
void checkSchedule(Section &t, const std::string &file) {
  std::string schedule = t.string("schedule", "constant", {"constant", "cosine", "linear"});
  int64_t warmup = t.integer("warmup_steps", 0, 0), steps = t.integer("steps", 100, 1);
  if (schedule == "constant" || steps > warmup)
    return;
  const toml::node *w = t.node("warmup_steps"), *s = t.node("steps");
  bool warmupFromFile = w && !(w->source().path &&
                               w->source().path->rfind(kOverrideSource, 0) == 0);
  fail(warmupFromFile ? w : s,
       "schedule '" + schedule + "' needs train.steps > train.warmup_steps, but train.steps = " +
           std::to_string(steps) + " (" + originOf(s, file) + ") and train.warmup_steps = " +
           std::to_string(warmup) + " (" + originOf(w, file) +
           "); raise the steps or lower train.warmup_steps");
}

/// [train] keys that become the model's trainer dictionary (name in config,
/// name in IR, kind).
void buildTrainer(OpBuilder &b, ModelOp model, Section &t, const std::string &file) {
  checkSchedule(t, file);
  SmallVector<NamedAttribute> attrs;
  auto str = [&](const char *key, const char *irKey, const char *fallback,
                 std::initializer_list<const char *> choices) {
    attrs.push_back(b.getNamedAttr(irKey, b.getStringAttr(t.string(key, fallback, choices))));
  };
  auto num = [&](const char *key, double fallback) {
    attrs.push_back(b.getNamedAttr(key, b.getF64FloatAttr(t.number(key, fallback))));
  };
  auto integer = [&](const char *key, const char *irKey, int64_t fallback, int64_t minimum) {
    attrs.push_back(b.getNamedAttr(irKey, b.getI64IntegerAttr(t.integer(key, fallback, minimum))));
  };
  str("optimizer", "optimizer", "adamw", {"sgd", "adamw", "muon"});
  num("lr", 1e-3);
  num("muon_lr", 0.02);
  num("weight_decay", 0.0);
  num("beta1", 0.9);
  num("beta2", 0.95);
  num("eps", 1e-8);
  num("momentum", 0.9);
  num("muon_momentum", 0.95);
  str("muon_scale", "muon_scale", "shape", {"shape", "rms"});
  num("grad_clip", 0.0);
  str("schedule", "schedule", "constant", {"constant", "cosine", "linear"});
  integer("warmup_steps", "warmup_steps", 0, 0);
  integer("steps", "total_steps", 100, 1);
  num("min_lr_ratio", 0.1);
  integer("micro_batches", "micro_batches", 1, 1);
  if (t.node("precision")) // only when given: the fingerprint of f32 models stays
    str("precision", "precision", "f32", {"f32", "bf16"});
  attrs.push_back(b.getNamedAttr(
      "stages", b.getI64IntegerAttr(t.integer("stages", 1, 1, kMaxStages))));
  attrs.push_back(b.getNamedAttr(
      "replicas", b.getI64IntegerAttr(t.integer("replicas", 1, 1, kMaxReplicas))));
  str("sync", "sync", "sync", {"sync", "2bw", "diloco", "gossip"});
  integer("seed", "seed", 1337, 0);
  integer("log_interval", "log_interval", 10, 1);
  integer("eval_interval", "eval_interval", 100, 1);
  integer("eval_batches", "eval_batches", 8, 1);
  integer("checkpoint_interval", "checkpoint_interval", 0, 0);
  if (t.node("ef_lambda"))
    num("ef_lambda", 0.0);
  // stage_ranges = [[0, 2], [2, 4]]: the layers [first, end) of each stage.
  if (const toml::node *n = t.node("stage_ranges")) {
    SmallVector<Attribute> ranges;
    const toml::array *outer = n->as_array();
    if (!outer || outer->empty())
      fail(n, "'train.stage_ranges' must be a list of [first, end) layer pairs");
    for (const toml::node &e : *outer) {
      const toml::array *pair = e.as_array();
      if (!pair || pair->size() != 2 || !(*pair)[0].is_integer() || !(*pair)[1].is_integer())
        fail(&e, "'train.stage_ranges' entries must be [first, end) integer pairs");
      ranges.push_back(b.getI64ArrayAttr({*(*pair)[0].value<int64_t>(),
                                          *(*pair)[1].value<int64_t>()}));
    }
    attrs.push_back(b.getNamedAttr("stage_ranges", b.getArrayAttr(ranges)));
  }
  // stage_units = ["embed..block1", "block2..head"]: partition units per
  // stage (train-partition checks the names against the model).
  if (const toml::node *n = t.node("stage_units")) {
    SmallVector<Attribute> units;
    const toml::array *outer = n->as_array();
    if (!outer || outer->empty())
      fail(n, "'train.stage_units' must be a list of \"first..last\" unit names, one per stage "
              "(units: embed, block0, block1, ..., head)");
    for (const toml::node &e : *outer) {
      if (!e.is_string() || e.value<std::string>()->empty())
        fail(&e, "'train.stage_units' entries must be strings such as \"embed..block1\" or "
                 "\"head\"");
      units.push_back(b.getStringAttr(*e.value<std::string>()));
    }
    attrs.push_back(b.getNamedAttr("stage_units", b.getArrayAttr(units)));
  }
  // --- decentralized data parallelism (train-gossip); only keys given -------
  // local_steps = 20 or [20, 20, 10] (one per replica).
  if (const toml::node *n = t.node("local_steps")) {
    if (n->is_array()) {
      std::vector<int64_t> steps;
      for (const toml::node &e : *n->as_array()) {
        std::optional<int64_t> v;
        if (e.is_integer())
          v = e.value<int64_t>();
        if (!v || *v < 0)
          fail(&e, "'train.local_steps' must hold integers >= 0");
        steps.push_back(*v);
      }
      if (steps.empty())
        fail(n, "'train.local_steps' must not be empty");
      attrs.push_back(b.getNamedAttr("local_steps", b.getDenseI64ArrayAttr(steps)));
    } else {
      integer("local_steps", "local_steps", 1, 0);
    }
  }
  if (t.node("outer_rounds"))
    integer("outer_rounds", "outer_rounds", 1, 1);
  if (t.node("topology"))
    str("topology", "topology", "one-peer",
        {"complete", "ring", "exponential", "one-peer", "two-peer"});
  if (t.node("gamma_placement"))
    str("gamma_placement", "gamma_placement", "before-mixing", {"before-mixing", "after-mixing"});
  if (t.node("gossip_seed"))
    integer("gossip_seed", "gossip_seed", 0, 0);
  for (const char *key : {"outer_lr", "outer_momentum", "gossip_alpha", "net_step_time",
                          "net_bandwidth", "net_latency", "net_slow_links", "net_slow_link_factor",
                          "net_slow_replicas", "net_slow_replica_factor"})
    if (t.node(key))
      num(key, 0.0);
  // --- end decentralized data parallelism ----------------------------------
  model.setTrainerAttr(b.getDictionaryAttr(attrs));
}

void buildData(OpBuilder &b, ModelOp model, Section &d) {
  SmallVector<NamedAttribute> attrs;
  std::string kind = d.string("format", d.present() ? "text" : "synthetic",
                              {"text", "bin", "synthetic"});
  attrs.push_back(b.getNamedAttr("format", b.getStringAttr(kind)));
  const toml::node *pathNode = d.node("path");
  std::string path = d.string("path", "");
  if (kind != "synthetic" && path.empty())
    fail(pathNode, "[data] with format \"" + kind + "\" needs 'data.path'");
  if (!path.empty())
    attrs.push_back(b.getNamedAttr("path", b.getStringAttr(path)));
  double val = d.number("val_fraction", 0.1);
  if (!(val > 0 && val < 1))
    fail(d.node("val_fraction"), "'data.val_fraction' must be in (0, 1)");
  attrs.push_back(b.getNamedAttr("val_fraction", b.getF64FloatAttr(val)));
  model->setAttr("data", b.getDictionaryAttr(attrs));
}

/// Applies `section.key=value` overrides; the value is parsed as TOML, and a
/// bare word that is not valid TOML is taken as a string.
void applyOverrides(toml::table &root, const std::vector<std::string> &overrides) {
  for (const std::string &o : overrides) {
    auto failHere = [&](std::string message) {
      ConfigError e;
      e.message = std::move(message);
      e.override = o;
      throw e;
    };
    const std::string kv = splitOverride(o).first;
    size_t eq = kv.find('=');
    size_t dot = kv.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      failHere("it must look like section.key=value (e.g. train.lr=3e-4)");
    std::string sec = kv.substr(0, dot), key = kv.substr(dot + 1, eq - dot - 1),
                value = kv.substr(eq + 1);
    // The value's source path names the override (see failAt).
    std::string source = std::string(kOverrideSource) + o;
    toml::table parsed;
    try {
      parsed = toml::parse("v = " + value, source);
    } catch (const toml::parse_error &) {
      parsed = toml::table{{"v", value}};
    }
    toml::node *v = parsed.get("v");
    if (v->source().begin.line == 0) {
      // A bare word taken as a string: give it the override as its source.
      parsed = toml::parse("v = \"\"", source);
      *parsed.get("v")->as_string() = value;
      v = parsed.get("v");
    }
    if (!root.contains(sec))
      root.insert(sec, toml::table{});
    toml::table *t = root[sec].as_table();
    if (!t)
      failHere("'" + quoted(sec) + "' is not a table");
    t->insert_or_assign(key, std::move(*v));
  }
}

OwningOpRef<ModuleOp> importTable(MLIRContext &ctx, toml::table &root, const std::string &file) {
  for (auto &[k, v] : root) {
    std::string key(k.str());
    if (key != "model" && key != "train" && key != "data")
      failAt(k.source(),
             "unknown section '" + quoted(key) + "'; expected [model], [train] and [data]");
  }
  Section m = section(root, "model");
  if (!m.present())
    fail(nullptr, "the config needs a [model] table");
  Section t = section(root, "train");
  Section d = section(root, "data");

  std::string kind = m.string("kind", "gpt", {"gpt", "llama", "mlp"});
  std::string name = m.string("name", kind);
  std::string dtype = m.string("dtype", "f32", {"f32", "bf16", "f64"});
  Common c;
  c.batch = m.integer("batch", std::nullopt, 1);
  // The step's tensors are one micro-batch: batch / micro_batches rows.
  if (int64_t micro = t.integer("micro_batches", 1, 1); micro > 1) {
    if (c.batch % micro != 0)
      fail(t.node("micro_batches"), "'train.micro_batches' (" + std::to_string(micro) +
                                        ") must divide 'model.batch' (" +
                                        std::to_string(c.batch) + ")");
    c.batch /= micro;
  }
  if (dtype == "bf16")
    c.elem = BFloat16Type::get(&ctx);
  else if (dtype == "f64")
    c.elem = Float64Type::get(&ctx);
  else
    c.elem = Float32Type::get(&ctx);

  ctx.getOrLoadDialect<TrainDialect>();
  Location loc = FileLineColLoc::get(&ctx, file, 1, 1);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(&ctx);
  b.setInsertionPointToEnd(module->getBody());
  // Symbol names must be identifiers; the config name may be anything.
  std::string sym;
  for (char ch : name)
    sym += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  if (sym.empty()) // an empty symbol prints as @<<INVALID EMPTY SYMBOL>>
    fail(m.node("name"), "'model.name' must not be empty");
  auto model = b.create<ModelOp>(loc, sym, DictionaryAttr());
  model.getBody().emplaceBlock();
  b.setInsertionPointToEnd(&model.getBody().front());
  auto step = b.create<StepOp>(loc);
  step.getBody().emplaceBlock();
  b.setInsertionPointToEnd(&step.getBody().front());

  ModelBuilder mb(b, loc, model, step, c.elem);
  if (kind == "gpt")
    buildGpt(mb, m, c);
  else if (kind == "llama")
    buildLlama(mb, m, c);
  else
    buildMlp(mb, m, c);
  m.rejectUnknown();
  buildTrainer(b, model, t, file);
  t.rejectUnknown();
  buildData(b, model, d);
  d.rejectUnknown();
  if (failed(verify(*module)))
    fail(nullptr, "internal error: the expanded model does not verify");
  return module;
}

std::string formatError(const std::string &file, const ConfigError &e) {
  if (!e.override.empty()) {
    auto [kv, flag] = splitOverride(e.override);
    if (!flag.empty())
      return quoted(flag) + ": error: " + e.message;
    return "override '" + quoted(kv) + "': error: " + e.message;
  }
  return file + ":" + std::to_string(std::max(e.line, 1)) + ":" +
         std::to_string(std::max(e.column, 1)) + ": error: " + e.message;
}

} // namespace

std::string stretto::overrideFromFlag(const std::string &keyValue, const std::string &flag) {
  return keyValue + kFlagSeparator + flag;
}

std::pair<std::string, std::string> stretto::splitOverride(const std::string &override) {
  // Only what overrideFromFlag makes is a flag's override: the separator, then
  // a printable flag that starts with "--". Any other text is a plain override,
  // so a stray separator byte in a user's override cannot forge a flag name.
  size_t at = override.find(kFlagSeparator);
  if (at == std::string::npos)
    return {override, ""};
  std::string flag = override.substr(at + 1);
  bool printable = std::all_of(flag.begin(), flag.end(),
                               [](char ch) { return ch >= 0x20 && ch < 0x7f; });
  if (flag.rfind("--", 0) != 0 || !printable)
    return {override, ""};
  return {override.substr(0, at), flag};
}

OwningOpRef<ModuleOp> stretto::importConfigString(MLIRContext &ctx, const std::string &toml,
                                                  const std::string &fileName,
                                                  const std::vector<std::string> &overrides,
                                                  std::string &error) {
  if (toml.find_first_not_of(" \t\r\n") == std::string::npos) {
    error = fileName + ":1:1: error: the config is empty";
    return nullptr;
  }
  try {
    toml::table root = toml::parse(toml, fileName);
    applyOverrides(root, overrides);
    return importTable(ctx, root, fileName);
  } catch (const toml::parse_error &e) {
    ConfigError ce{static_cast<int>(e.source().begin.line),
                   static_cast<int>(e.source().begin.column),
                   // toml++ quotes the offending text raw, newlines included.
                   quoted(e.description())};
    error = formatError(fileName, ce);
  } catch (const ConfigError &e) {
    error = formatError(fileName, e);
  }
  return nullptr;
}

OwningOpRef<ModuleOp> stretto::importConfigFile(MLIRContext &ctx, const std::string &path,
                                                const std::vector<std::string> &overrides,
                                                std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": error: cannot open the config file (" + std::strerror(errno) + ")";
    return nullptr;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return importConfigString(ctx, ss.str(), path, overrides, error);
}
