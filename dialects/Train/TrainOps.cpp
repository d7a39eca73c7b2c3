//===- TrainOps.cpp - verifiers, formats and folders of `train` ops -------===//
//
// Every verifier message names the operands involved and their types, so a
// shape error in a 300-op model points at the op and says what disagreed.
//
//===----------------------------------------------------------------------===//
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Dialect/Train/TrainerOptions.h"
#include "stretto/Support/Broadcast.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace stretto::train;

#include "Train/TrainEnums.cpp.inc"
#include "Train/TrainInterfaces.cpp.inc"

namespace {
RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }
ArrayRef<int64_t> shapeOf(Value v) { return tensorType(v).getShape(); }
Type elemOf(Value v) { return tensorType(v).getElementType(); }

// Shapes print as MLIR types, the form people read in the IR.
std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

// Element count, or nullopt when it does not fit in int64 (user IR may
// declare absurd shapes; getNumElements would overflow).
std::optional<int64_t> safeNumElements(RankedTensorType t) {
  int64_t n = 1;
  for (int64_t d : t.getShape())
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

LogicalResult sameElementType(Operation *op, ValueRange values, StringRef what) {
  Type first;
  for (Value v : values) {
    Type e = cast<ShapedType>(v.getType()).getElementType();
    if (!first)
      first = e;
    else if (e != first)
      return op->emitOpError() << what << " must share one element type, got "
                               << first << " and " << e;
  }
  return success();
}
} // namespace

// Broadcasting helpers

bool stretto::train::isBroadcastableTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  return stretto::broadcastsTo(from, to);
}

static std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                           ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Type stretto::train::broadcastResultType(Type lhs, Type rhs) {
  auto l = cast<RankedTensorType>(lhs), r = cast<RankedTensorType>(rhs);
  auto shape = broadcastShapes(l.getShape(), r.getShape());
  assert(shape && "operands are not broadcast-compatible");
  return RankedTensorType::get(*shape, l.getElementType());
}

// Binary ops: `%c = train.add %a, %b : T` or `: A, B -> C` when they differ.

ParseResult stretto::train::parseBinaryOp(OpAsmParser &p, OperationState &st) {
  OpAsmParser::UnresolvedOperand lhs, rhs;
  Type lt, rt, resT;
  if (p.parseOperand(lhs) || p.parseComma() || p.parseOperand(rhs) ||
      p.parseOptionalAttrDict(st.attributes) || p.parseColon() || p.parseType(lt))
    return failure();
  if (succeeded(p.parseOptionalComma())) {
    if (p.parseType(rt) || p.parseArrow() || p.parseType(resT))
      return failure();
  } else {
    rt = resT = lt;
  }
  st.addTypes(resT);
  return p.resolveOperands({lhs, rhs}, {lt, rt}, p.getNameLoc(), st.operands);
}

void stretto::train::printBinaryOp(OpAsmPrinter &p, Operation *op) {
  Type lt = op->getOperand(0).getType(), rt = op->getOperand(1).getType(),
       resT = op->getResult(0).getType();
  p << ' ' << op->getOperand(0) << ", " << op->getOperand(1);
  p.printOptionalAttrDict(op->getAttrs());
  p << " : " << lt;
  if (lt != rt || lt != resT)
    p << ", " << rt << " -> " << resT;
}

LogicalResult stretto::train::verifyBinaryOp(Operation *op) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  if (failed(sameElementType(op, {lhs, rhs, op->getResult(0)}, "operands and result")))
    return failure();
  auto shape = broadcastShapes(shapeOf(lhs), shapeOf(rhs));
  if (!shape)
    return op->emitOpError() << "operands are not broadcast-compatible: lhs "
                             << lhs.getType() << ", rhs " << rhs.getType();
  if (ArrayRef<int64_t>(*shape) != shapeOf(op->getResult(0)))
    return op->emitOpError() << "result " << op->getResult(0).getType()
                             << " is not the broadcast of lhs " << lhs.getType()
                             << " and rhs " << rhs.getType();
  return success();
}

static bool isSplatOf(Value v, double x) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return false;
  if (!isa<FloatType>(attr.getElementType()))
    return false;
  return attr.getSplatValue<APFloat>().convertToDouble() == x;
}

// The value x when `root`'s add tree (adds of its own type) sums pads of
// slices of x that tile it along one axis, each window padded back where it
// was cut: pad(slice(x, a, o_i), a, o_i) for windows o_i covering dim a
// once. That is the backward of splitting x into parts (attention's fused
// q/k/v gradients stacked by train.attention_grad, then split and
// restacked). The sum adds only zeros to each element, so x is the same
// value (up to the sign of a zero).
static Value tiledSum(AddOp root) {
  SmallVector<Value> leaves, work{root.getLhs(), root.getRhs()};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    auto add = v.getDefiningOp<AddOp>();
    if (add && add.getType() == root.getType()) {
      work.push_back(add.getLhs());
      work.push_back(add.getRhs());
    } else {
      leaves.push_back(v);
    }
  }
  Value x;
  int64_t axis = -1;
  SmallVector<std::pair<int64_t, int64_t>> windows; // (offset, size) along axis
  for (Value leaf : leaves) {
    auto pad = leaf.getDefiningOp<PadOp>();
    auto slice = pad ? pad.getInput().getDefiningOp<SliceOp>() : SliceOp();
    if (!slice || pad.getType() != root.getType() ||
        slice.getInput().getType() != root.getType() || pad.getAxis() != slice.getAxis() ||
        pad.getOffset() != slice.getOffset() || (x && slice.getInput() != x) ||
        (axis >= 0 && static_cast<int64_t>(slice.getAxis()) != axis))
      return {};
    x = slice.getInput();
    axis = slice.getAxis();
    windows.push_back({static_cast<int64_t>(slice.getOffset()),
                       cast<RankedTensorType>(slice.getType()).getDimSize(axis)});
  }
  llvm::sort(windows);
  int64_t next = 0;
  for (auto [offset, size] : windows) {
    if (offset != next)
      return {};
    next = offset + size;
  }
  return next == cast<RankedTensorType>(root.getType()).getDimSize(axis) ? x : Value();
}

OpFoldResult AddOp::fold(FoldAdaptor) {
  // x + 0 -> x, when no broadcast changes x's type.
  if (isSplatOf(getRhs(), 0.0) && getLhs().getType() == getType())
    return getLhs();
  if (isSplatOf(getLhs(), 0.0) && getRhs().getType() == getType())
    return getRhs();
  if (Value x = tiledSum(*this))
    return x;
  return {};
}

OpFoldResult MulOp::fold(FoldAdaptor) {
  if (isSplatOf(getRhs(), 1.0) && getLhs().getType() == getType())
    return getLhs();
  if (isSplatOf(getLhs(), 1.0) && getRhs().getType() == getType())
    return getRhs();
  return {};
}

// Model and state

namespace {
enum class OptionKind { Float, Int, String, Ranges, IntList, Units };
struct TrainerOption {
  const char *key;
  OptionKind kind;
  std::initializer_list<const char *> choices;
};
// The trainer dictionary's schema; docs/TrainDialect.md lists the same keys.
const TrainerOption kTrainerOptions[] = {
    {"optimizer", OptionKind::String, {"sgd", "adamw", "muon"}},
    {"lr", OptionKind::Float, {}},
    {"muon_lr", OptionKind::Float, {}},
    {"weight_decay", OptionKind::Float, {}},
    {"beta1", OptionKind::Float, {}},
    {"beta2", OptionKind::Float, {}},
    {"eps", OptionKind::Float, {}},
    {"momentum", OptionKind::Float, {}},
    {"muon_momentum", OptionKind::Float, {}},
    {"muon_scale", OptionKind::String, {"shape", "rms"}},
    {"grad_clip", OptionKind::Float, {}},
    {"schedule", OptionKind::String, {"constant", "cosine", "linear"}},
    {"warmup_steps", OptionKind::Int, {}},
    {"total_steps", OptionKind::Int, {}},
    {"min_lr_ratio", OptionKind::Float, {}},
    {"micro_batches", OptionKind::Int, {}},
    {"stages", OptionKind::Int, {}},
    {"replicas", OptionKind::Int, {}},
    {"sync", OptionKind::String, {"sync", "2bw", "diloco", "gossip"}},
    {"stage_ranges", OptionKind::Ranges, {}}, // [[first, end), ...] layers per stage
    {"stage_units", OptionKind::Units, {}},   // ["embed..block1", "block2..head"] units per stage
    {"ef_lambda", OptionKind::Float, {}},
    {"precision", OptionKind::String, {"f32", "bf16"}}, // bf16: train-mixed-precision
    // --- decentralized data parallelism: train-gossip and its runtime -------
    {"local_steps", OptionKind::IntList, {}}, // H, or H_r per replica (>= 0)
    {"outer_rounds", OptionKind::Int, {}},
    {"outer_lr", OptionKind::Float, {}},
    {"outer_momentum", OptionKind::Float, {}},
    {"gossip_alpha", OptionKind::Float, {}},
    {"topology", OptionKind::String, {"complete", "ring", "exponential", "one-peer", "two-peer"}},
    {"gamma_placement", OptionKind::String, {"before-mixing", "after-mixing"}},
    {"gossip_seed", OptionKind::Int, {}},
    {"net_step_time", OptionKind::Float, {}},           // simulated s per local step
    {"net_bandwidth", OptionKind::Float, {}},           // bytes/s per link
    {"net_latency", OptionKind::Float, {}},             // s per message
    {"net_slow_links", OptionKind::Float, {}},          // fraction of links
    {"net_slow_link_factor", OptionKind::Float, {}},    // their bandwidth divisor
    {"net_slow_replicas", OptionKind::Float, {}},       // fraction of replicas
    {"net_slow_replica_factor", OptionKind::Float, {}}, // their step-time factor
    // --- end decentralized data parallelism --------------------------------
    // Run settings the trainer reads.
    {"seed", OptionKind::Int, {}},
    {"log_interval", OptionKind::Int, {}},
    {"eval_interval", OptionKind::Int, {}},
    {"eval_batches", OptionKind::Int, {}},
    {"checkpoint_interval", OptionKind::Int, {}},
};
} // namespace

namespace {
/// A number's allowed interval: [lo, hi], open at an end when asked.
struct NumberRange {
  const char *key;
  double lo, hi;
  bool loOpen, hiOpen;
};
constexpr double kInf = std::numeric_limits<double>::infinity();
// Out of these, training diverges silently or the simulated clock runs
// backwards: refused, with the range in the message.
const NumberRange kNumberRanges[] = {
    {"lr", 0, kInf, true, false},
    {"muon_lr", 0, kInf, true, false},
    {"weight_decay", 0, kInf, false, false},
    {"beta1", 0, 1, false, true},
    {"beta2", 0, 1, false, true},
    {"eps", 0, kInf, true, false},
    {"momentum", 0, 1, false, true},
    {"muon_momentum", 0, 1, false, true},
    {"grad_clip", 0, kInf, false, false},
    {"min_lr_ratio", 0, 1, false, false},
    {"ef_lambda", 0, kInf, false, false},
    {"outer_lr", 0, kInf, true, false},
    {"outer_momentum", 0, 1, false, true},
    {"gossip_alpha", 0, 1, true, false},
    {"net_step_time", 0, kInf, true, false},
    {"net_bandwidth", 0, kInf, true, false},
    {"net_latency", 0, kInf, false, false},
    {"net_slow_links", 0, 1, false, false},
    {"net_slow_link_factor", 1, kInf, false, false},
    {"net_slow_replicas", 0, 1, false, false},
    {"net_slow_replica_factor", 1, kInf, false, false},
};
} // namespace

std::optional<std::string> stretto::train::checkTrainerNumber(StringRef key, double value) {
  const NumberRange *r = llvm::find_if(kNumberRanges, [&](const NumberRange &n) {
    return key == n.key;
  });
  if (r == std::end(kNumberRanges))
    return std::nullopt;
  bool ok = std::isfinite(value) && (r->loOpen ? value > r->lo : value >= r->lo) &&
            (r->hiOpen ? value < r->hi : value <= r->hi);
  if (ok)
    return std::nullopt;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::string range = r->hi == kInf
                          ? std::string(r->loOpen ? "> " : ">= ") + num(r->lo)
                          : std::string("in ") + (r->loOpen ? "(" : "[") + num(r->lo) + ", " +
                                num(r->hi) + (r->hiOpen ? ")" : "]");
  return "must be " + range + ", got " + num(value);
}

std::optional<int64_t> stretto::train::maxTrainerInteger(StringRef key) {
  if (key == "stages")
    return kMaxStages;
  if (key == "replicas")
    return kMaxReplicas;
  return std::nullopt;
}

LogicalResult ModelOp::verify() {
  unsigned steps = 0, updates = 0, outers = 0;
  for (Operation &op : getBody().front()) {
    if (isa<StepOp>(op))
      ++steps;
    else if (isa<UpdateOp>(op))
      ++updates;
    else if (isa<OuterOp>(op))
      ++outers;
    else if (!isa<ParamOp, StateOp>(op))
      return op.emitOpError() << "is not allowed directly in 'train.model' (only train.param, "
                                 "train.state, train.step, train.update and train.outer)";
  }
  if (steps > 1)
    return emitOpError() << "has " << steps << " 'train.step' ops; expected at most one";
  if (updates > 1 || outers > 1)
    return emitOpError() << "has more than one 'train.update' or 'train.outer'";
  if (!getTrainerAttr())
    return success();
  for (NamedAttribute entry : getTrainerAttr()) {
    StringRef key = entry.getName().getValue();
    const TrainerOption *opt = llvm::find_if(
        kTrainerOptions, [&](const TrainerOption &o) { return key == o.key; });
    if (opt == std::end(kTrainerOptions))
      return emitOpError() << "unknown trainer option '" << key << "'";
    Attribute v = entry.getValue();
    switch (opt->kind) {
    case OptionKind::Float: {
      if (!isa<FloatAttr, IntegerAttr>(v) || isa<BoolAttr>(v))
        return emitOpError() << "trainer option '" << key << "' must be a number, got " << v;
      double x = isa<FloatAttr>(v) ? cast<FloatAttr>(v).getValueAsDouble()
                                   : double(cast<IntegerAttr>(v).getInt());
      if (std::optional<std::string> why = checkTrainerNumber(key, x))
        return emitOpError() << "trainer option '" << key << "' " << *why;
      break;
    }
    case OptionKind::Int: {
      auto i = dyn_cast<IntegerAttr>(v);
      if (!i || isa<BoolAttr>(v))
        return emitOpError() << "trainer option '" << key << "' must be an integer, got " << v;
      int64_t minimum =
          (key == "warmup_steps" || key == "seed" || key == "checkpoint_interval" ||
           key == "gossip_seed")
              ? 0
              : 1;
      if (i.getInt() < minimum)
        return emitOpError() << "trainer option '" << key << "' must be >= " << minimum
                             << ", got " << i.getInt();
      if (std::optional<int64_t> maximum = maxTrainerInteger(key); maximum && i.getInt() > *maximum)
        return emitOpError() << "trainer option '" << key << "' must be <= " << *maximum
                             << ", got " << i.getInt();
      break;
    }
    case OptionKind::Ranges: {
      auto arr = dyn_cast<ArrayAttr>(v);
      bool ok = arr && !arr.empty();
      for (Attribute e : arr ? arr.getValue() : ArrayRef<Attribute>()) {
        auto pair = dyn_cast<ArrayAttr>(e);
        ok &= pair && pair.size() == 2 &&
              llvm::all_of(pair, [](Attribute x) { return isa<IntegerAttr>(x); });
      }
      if (!ok)
        return emitOpError() << "trainer option '" << key
                             << "' must be a list of [first, end) layer pairs, got " << v;
      break;
    }
    case OptionKind::Units: { // a non-empty list of "first..last" / "unit" strings
      auto arr = dyn_cast<ArrayAttr>(v);
      bool ok = arr && !arr.empty() &&
                llvm::all_of(arr, [](Attribute x) {
                  auto s = dyn_cast<StringAttr>(x);
                  return s && !s.getValue().empty();
                });
      if (!ok)
        return emitOpError() << "trainer option '" << key
                             << "' must be a list of \"first..last\" unit names, one per stage, got "
                             << v;
      break;
    }
    case OptionKind::IntList: { // an integer, or an array of them (one per replica)
      SmallVector<int64_t> values;
      if (auto i = dyn_cast<IntegerAttr>(v); i && !isa<BoolAttr>(v))
        values.push_back(i.getInt());
      else if (auto d = dyn_cast<DenseI64ArrayAttr>(v))
        values.assign(d.asArrayRef().begin(), d.asArrayRef().end());
      else
        return emitOpError() << "trainer option '" << key
                             << "' must be an integer or an array<i64>, got " << v;
      for (int64_t x : values)
        if (x < 0)
          return emitOpError() << "trainer option '" << key << "' must hold integers >= 0, got "
                               << x;
      break;
    }
    case OptionKind::String: {
      auto s = dyn_cast<StringAttr>(v);
      if (!s)
        return emitOpError() << "trainer option '" << key << "' must be a string, got " << v;
      if (!llvm::is_contained(opt->choices, s.getValue())) {
        auto diag = emitOpError() << "trainer option '" << key << "' is '" << s.getValue()
                                  << "'; expected one of:";
        for (const char *c : opt->choices)
          diag << " " << c;
        return diag;
      }
      break;
    }
    }
  }
  return success();
}

StepOp ModelOp::getStep() {
  for (Operation &op : getBody().front())
    if (auto s = dyn_cast<StepOp>(op))
      return s;
  return nullptr;
}

UpdateOp ModelOp::getUpdate() {
  for (Operation &op : getBody().front())
    if (auto u = dyn_cast<UpdateOp>(op))
      return u;
  return nullptr;
}

OuterOp ModelOp::getOuter() {
  for (Operation &op : getBody().front())
    if (auto o = dyn_cast<OuterOp>(op))
      return o;
  return nullptr;
}

Attribute ModelOp::getTrainerOption(StringRef key) {
  return getTrainerAttr() ? getTrainerAttr().get(key) : Attribute();
}

double ModelOp::getTrainerFloat(StringRef key, double fallback) {
  Attribute a = getTrainerOption(key);
  if (auto f = dyn_cast_or_null<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto i = dyn_cast_or_null<IntegerAttr>(a))
    return static_cast<double>(i.getInt());
  return fallback;
}

int64_t ModelOp::getTrainerInt(StringRef key, int64_t fallback) {
  if (auto i = dyn_cast_or_null<IntegerAttr>(getTrainerOption(key)))
    return i.getInt();
  return fallback;
}

StringRef ModelOp::getTrainerString(StringRef key, StringRef fallback) {
  if (auto s = dyn_cast_or_null<StringAttr>(getTrainerOption(key)))
    return s.getValue();
  return fallback;
}

static LogicalResult verifyVar(Operation *op, RankedTensorType type, InitKind init,
                               double scale) {
  if (!type.hasStaticShape() || !safeNumElements(type))
    return op->emitOpError() << "needs a static shape with a 64-bit element count, got " << type;
  if ((init == InitKind::normal || init == InitKind::uniform) && !(scale > 0.0))
    return op->emitOpError() << "initializer '" << stringifyInitKind(init)
                             << "' needs a positive scale, got " << scale;
  return success();
}

LogicalResult ParamOp::verify() {
  if (failed(verifyVar(*this, getTensorType(), getInit(), getScale().convertToDouble())))
    return failure();
  if (auto role = (*this)->getAttrOfType<StringAttr>("role")) {
    static const char *roles[] = {"embedding", "head", "matrix", "bias", "norm"};
    if (!llvm::is_contained(roles, role.getValue()))
      return emitOpError() << "unknown role '" << role.getValue()
                           << "'; expected embedding, head, matrix, bias or norm";
  }
  if (Attribute layout = (*this)->getAttr("layout")) {
    auto s = dyn_cast<StringAttr>(layout);
    if (!s || s.getValue() != "out_in" || getTensorType().getRank() != 2)
      return emitOpError() << "'layout' must be \"out_in\" on a 2-D parameter (a matrix held "
                              "[out, in], as PyTorch's nn.Linear holds it)";
  }
  if (Attribute aliases = (*this)->getAttr("aliases")) {
    auto list = dyn_cast<ArrayAttr>(aliases);
    if (!list || !llvm::all_of(list, [](Attribute a) {
          auto s = dyn_cast<StringAttr>(a);
          return s && !s.getValue().empty();
        }))
      return emitOpError() << "'aliases' must be an array of non-empty names (the other names "
                              "of a tied parameter)";
    for (Attribute a : list)
      if (SymbolTable::lookupSymbolIn((*this)->getParentOp(), cast<StringAttr>(a)))
        return emitOpError() << "alias '" << cast<StringAttr>(a).getValue()
                             << "' is also the name of a parameter or state";
  }
  return success();
}

LogicalResult StateOp::verify() {
  if (failed(verifyVar(*this, getTensorType(), getInit(), getScale().convertToDouble())))
    return failure();
  // copy_of: starts as a copy of another variable's initial value (weight
  // versions, anchors).
  if (Attribute a = (*this)->getAttr("copy_of")) {
    auto ref = dyn_cast<FlatSymbolRefAttr>(a);
    if (!ref)
      return emitOpError() << "copy_of must be a symbol reference, got " << a;
    Operation *src = SymbolTable::lookupSymbolIn((*this)->getParentOp(), ref);
    auto param = dyn_cast_or_null<ParamOp>(src);
    if (!param)
      return emitOpError() << "copy_of " << ref << " is not a train.param of the model";
    if (param.getTensorType() != getTensorType())
      return emitOpError() << "type " << getTensorType() << " differs from copy_of " << ref
                           << " of type " << param.getTensorType();
  }
  return success();
}

LogicalResult YieldOp::verify() {
  if (isa<StepOp>((*this)->getParentOp()) && getValues().empty())
    return emitOpError() << "needs the loss as its first operand";
  return success();
}

// read/write/grad: the symbol must be a param or state of the enclosing model
// with exactly the value's type.
static LogicalResult verifyVarUse(Operation *op, SymbolTableCollection &tables,
                                  FlatSymbolRefAttr ref, Type valueType,
                                  bool paramOnly) {
  auto model = op->getParentOfType<ModelOp>();
  Operation *target = tables.lookupSymbolIn(model, ref);
  if (!target)
    return op->emitOpError() << "refers to " << ref << ", which is not declared in @"
                             << model.getSymName();
  RankedTensorType declared;
  if (auto p = dyn_cast<ParamOp>(target))
    declared = p.getTensorType();
  else if (auto s = dyn_cast<StateOp>(target)) {
    if (paramOnly)
      return op->emitOpError() << "needs a parameter, but " << ref << " is a train.state";
    declared = s.getTensorType();
  } else
    return op->emitOpError() << ref << " is not a train.param or train.state";
  if (declared != valueType)
    return op->emitOpError() << "type " << valueType << " differs from " << ref
                             << " declared as " << declared;
  return success();
}

LogicalResult ReadOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyVarUse(*this, tables, getVarAttr(), getType(), false);
}
LogicalResult WriteOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyVarUse(*this, tables, getVarAttr(), getValue().getType(), false);
}
LogicalResult GradOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyVarUse(*this, tables, getVarAttr(), getValue().getType(), true);
}
LogicalResult AccumulatedGradOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyVarUse(*this, tables, getVarAttr(), getType(), true);
}

// Constant

void ConstantOp::build(OpBuilder &b, OperationState &st, Type type, double splat) {
  auto t = cast<RankedTensorType>(type);
  Attribute elem;
  if (auto ft = dyn_cast<FloatType>(t.getElementType()))
    elem = FloatAttr::get(ft, splat);
  else
    elem = IntegerAttr::get(t.getElementType(), static_cast<int64_t>(splat));
  build(b, st, t, DenseElementsAttr::get(t, elem));
}

ParseResult ConstantOp::parse(OpAsmParser &p, OperationState &st) {
  Attribute value;
  if (p.parseOptionalAttrDict(st.attributes) || p.parseAttribute(value))
    return failure();
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements)
    return p.emitError(p.getNameLoc(), "expected a dense elements attribute");
  st.addAttribute("value", elements);
  st.addTypes(elements.getType());
  return success();
}

void ConstantOp::print(OpAsmPrinter &p) {
  p.printOptionalAttrDict((*this)->getAttrs(), {"value"});
  p << ' ' << getValue();
}

LogicalResult ConstantOp::verify() {
  if (getValue().getType() != getType())
    return emitOpError() << "value type " << getValue().getType()
                         << " differs from result type " << getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

// Layout ops

void MatmulOp::build(OpBuilder &b, OperationState &st, Value lhs, Value rhs) {
  SmallVector<int64_t> shape(shapeOf(lhs).drop_back());
  shape.push_back(shapeOf(rhs).back());
  build(b, st, RankedTensorType::get(shape, elemOf(lhs)), lhs, rhs);
}

LogicalResult MatmulOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getLhs()), b = shapeOf(getRhs());
  auto mismatch = [&](StringRef why) {
    return emitOpError() << why << ": lhs " << getLhs().getType() << ", rhs "
                         << getRhs().getType();
  };
  if (failed(sameElementType(*this, {getLhs(), getRhs(), getResult()}, "operands and result")))
    return failure();
  if (a.size() < 2 || b.size() < 2)
    return mismatch("operands must have rank >= 2");
  if (a.back() != b[b.size() - 2])
    return mismatch("contraction dims differ (lhs K = " + std::to_string(a.back()) +
                    ", rhs K = " + std::to_string(b[b.size() - 2]) + ")");
  if (b.size() > 2 && (b.size() != a.size() || a.drop_back(2) != b.drop_back(2)))
    return mismatch("batch dims differ");
  SmallVector<int64_t> expected(a.drop_back());
  expected.push_back(b.back());
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result " << getType() << " should have shape ["
                         << llvm::make_range(expected.begin(), expected.end()) << "] for lhs "
                         << getLhs().getType() << " and rhs " << getRhs().getType();
  return success();
}

void TransposeOp::build(OpBuilder &b, OperationState &st, Value input,
                        ArrayRef<int64_t> perm) {
  ArrayRef<int64_t> in = shapeOf(input);
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(in[p]);
  build(b, st, RankedTensorType::get(shape, elemOf(input)), input,
        b.getDenseI64ArrayAttr(perm));
}

Value TransposeOp::swapLastTwo(OpBuilder &b, Location loc, Value v) {
  int64_t rank = shapeOf(v).size();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 1], perm[rank - 2]);
  return b.create<TransposeOp>(loc, v, perm);
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), perm = getPerm();
  if (perm.size() != in.size())
    return emitOpError() << "permutation has " << perm.size() << " entries for input "
                         << getInput().getType();
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t p : perm)
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || !seen.insert(p).second)
      return emitOpError() << "[" << llvm::make_range(perm.begin(), perm.end())
                           << "] is not a permutation of the dims of " << getInput().getType();
  if (shapeOf(getResult()).size() != perm.size())
    return emitOpError() << "result " << getType() << " has rank "
                         << shapeOf(getResult()).size() << ", the permutation "
                         << perm.size();
  for (size_t d = 0; d < perm.size(); ++d)
    if (shapeOf(getResult())[d] != in[perm[d]])
      return emitOpError() << "result " << getType() << " is not input "
                           << getInput().getType() << " permuted by ["
                           << llvm::make_range(perm.begin(), perm.end()) << "]";
  if (elemOf(getInput()) != elemOf(getResult()))
    return emitOpError() << "changes the element type from input " << getInput().getType()
                         << " to result " << getType();
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  ArrayRef<int64_t> perm = getPerm();
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return getInput();
  // transpose(transpose(x, p), q) = transpose(x, p∘q).
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    SmallVector<int64_t> composed;
    for (int64_t q : perm)
      composed.push_back(inner.getPerm()[q]);
    if (llvm::equal(composed, llvm::seq<int64_t>(0, composed.size())))
      return inner.getInput();
    getInputMutable().assign(inner.getInput());
    setPerm(composed);
    return getResult();
  }
  return {};
}

LogicalResult ReshapeOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getResult());
  for (RankedTensorType t : {in, out})
    if (!safeNumElements(t))
      return emitOpError() << "type " << t << " has more elements than fit in 64 bits";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << in << " (" << in.getNumElements()
                         << " elements) to " << out << " (" << out.getNumElements()
                         << " elements)";
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "changes the element type from " << in.getElementType()
                         << " to " << out.getElementType();
  return success();
}

OpFoldResult RoundBf16Op::fold(FoldAdaptor) {
  // Rounding is idempotent.
  if (getInput().getDefiningOp<RoundBf16Op>())
    return getInput();
  return {};
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  return {};
}

LogicalResult BroadcastOp::verify() {
  if (elemOf(getInput()) != elemOf(getResult()))
    return emitOpError() << "changes the element type from input " << getInput().getType()
                         << " to result " << getType();
  if (!isBroadcastableTo(shapeOf(getInput()), shapeOf(getResult())))
    return emitOpError() << "input " << getInput().getType()
                         << " does not broadcast to " << getType();
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

void ReduceSumOp::build(OpBuilder &b, OperationState &st, Value input,
                        ArrayRef<int64_t> dims) {
  ArrayRef<int64_t> in = shapeOf(input);
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d)
    if (!llvm::is_contained(dims, d))
      shape.push_back(in[d]);
  build(b, st, RankedTensorType::get(shape, elemOf(input)), input,
        b.getDenseI64ArrayAttr(dims));
}

LogicalResult ReduceSumOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), dims = getDims();
  int64_t prev = -1;
  for (int64_t d : dims) {
    if (d <= prev || d >= static_cast<int64_t>(in.size()))
      return emitOpError() << "dims [" << llvm::make_range(dims.begin(), dims.end())
                           << "] must be increasing dims of " << getInput().getType();
    prev = d;
  }
  SmallVector<int64_t> expected;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d)
    if (!llvm::is_contained(dims, d))
      expected.push_back(in[d]);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected) ||
      elemOf(getResult()) != elemOf(getInput()))
    return emitOpError() << "result " << getType() << " is not " << getInput().getType()
                         << " with dims [" << llvm::make_range(dims.begin(), dims.end())
                         << "] removed";
  return success();
}

// slice and pad are inverse windows: `small` sits at `offset` along `axis`
// of `big`, every other dim equal.
static LogicalResult verifyWindow(Operation *op, Value small, Value big, int64_t axis,
                                  int64_t offset) {
  ArrayRef<int64_t> s = shapeOf(small), l = shapeOf(big);
  if (elemOf(small) != elemOf(big))
    return op->emitOpError() << "changes the element type from input "
                             << op->getOperand(0).getType() << " to result "
                             << op->getResult(0).getType();
  if (s.size() != l.size() || axis < 0 || axis >= static_cast<int64_t>(s.size()))
    return op->emitOpError() << "axis " << axis << " is not a dim of both "
                             << small.getType() << " and " << big.getType();
  for (size_t d = 0; d < s.size(); ++d)
    if (static_cast<int64_t>(d) != axis && s[d] != l[d])
      return op->emitOpError() << small.getType() << " and " << big.getType()
                               << " differ in dim " << d << ", not only along axis " << axis;
  // offset > l - s rather than offset + s > l: offsets come from user IR and
  // may be near INT64_MAX.
  if (offset < 0 || offset > l[axis] - s[axis])
    return op->emitOpError() << "window of " << s[axis] << " at offset " << offset
                             << " along axis " << axis << " is outside " << big.getType();
  return success();
}

LogicalResult SliceOp::verify() {
  return verifyWindow(*this, getResult(), getInput(), getAxis(), getOffset());
}
LogicalResult PadOp::verify() {
  return verifyWindow(*this, getInput(), getResult(), getAxis(), getOffset());
}

// Model ops

LogicalResult SoftmaxOp::verify() {
  ArrayRef<int64_t> s = shapeOf(getInput());
  if (s.empty())
    return emitOpError() << "needs rank >= 1, got " << getInput().getType();
  if (getCausal() && (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2]))
    return emitOpError() << "causal softmax needs [..., T, T], got " << getInput().getType();
  return success();
}

static LogicalResult verifyNormParam(Operation *op, Value x, Value p, StringRef name) {
  ArrayRef<int64_t> s = shapeOf(x);
  if (s.empty())
    return op->emitOpError() << "input must have rank >= 1, got " << x.getType();
  if (shapeOf(p) != ArrayRef<int64_t>{s.back()})
    return op->emitOpError() << name << " " << p.getType() << " must have shape ["
                             << s.back() << "] to match the last dim of input " << x.getType();
  return success();
}

// Input and result types are equal by AllTypesMatch; the parameters and eps
// are checked here.
static LogicalResult verifyEps(Operation *op, APFloat eps) {
  if (!(eps.convertToDouble() > 0))
    return op->emitOpError() << "eps must be positive, got " << eps.convertToDouble();
  return success();
}

LogicalResult LayerNormOp::verify() {
  if (failed(sameElementType(*this, {getInput(), getGamma(), getBeta(), getResult()},
                             "input, gamma, beta and result")) ||
      failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(verifyNormParam(*this, getInput(), getBeta(), "beta")))
    return failure();
  return verifyEps(*this, getEps());
}

LogicalResult RmsNormOp::verify() {
  if (failed(sameElementType(*this, {getInput(), getGamma(), getResult()},
                             "input, gamma and result")) ||
      failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")))
    return failure();
  return verifyEps(*this, getEps());
}

LogicalResult AttentionOp::verify() {
  if (shapeOf(getQ()).size() != 4)
    return emitOpError() << "q must be [B, H, T, D], got " << getQ().getType();
  if (getK().getType() != getQ().getType() || getV().getType() != getQ().getType() ||
      getType() != getQ().getType())
    return emitOpError() << "q, k, v and result must share one type, got q "
                         << getQ().getType() << ", k " << getK().getType() << ", v "
                         << getV().getType() << ", result " << getType();
  return success();
}

LogicalResult NormGradOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  if (x.empty())
    return emitOpError() << "input must have rank >= 1, got " << getInput().getType();
  const int64_t d = x.back();
  if (RankedTensorType::get(shapeOf(getGamma()), elemOf(getInput())).getNumElements() != d ||
      elemOf(getGamma()) != elemOf(getInput()))
    return emitOpError() << "gamma " << getGamma().getType() << " must hold the " << d
                         << " features of " << getInput().getType();
  const int64_t rows = d ? RankedTensorType::get(x, elemOf(getInput())).getNumElements() / d : 0;
  SmallVector<int64_t> expected{rows + (getCentered() ? 2 : 1), d};
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected) ||
      elemOf(getResult()) != elemOf(getInput()))
    return emitOpError() << "result " << getType() << " should stack " << rows
                         << " rows of dx, dgamma" << (getCentered() ? " and dbeta" : "")
                         << " as " << RankedTensorType::get(expected, elemOf(getInput()));
  if (getAddend() && getAddend().getType() != getInput().getType())
    return emitOpError() << "addend " << getAddend().getType() << " must have the input's type "
                         << getInput().getType();
  return success();
}

LogicalResult AttentionGradOp::verify() {
  ArrayRef<int64_t> q = shapeOf(getQ());
  if (q.size() != 4)
    return emitOpError() << "q must be [B, H, T, D], got " << getQ().getType();
  SmallVector<int64_t> expected{3};
  expected.append(q.begin(), q.end());
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected) ||
      elemOf(getResult()) != elemOf(getQ()))
    return emitOpError() << "result " << getType() << " should stack dq, dk and dv of "
                         << getQ().getType() << " as "
                         << RankedTensorType::get(expected, elemOf(getQ()));
  return success();
}

LogicalResult EmbeddingOp::verify() {
  ArrayRef<int64_t> t = shapeOf(getTable());
  if (t.size() != 2)
    return emitOpError() << "table must be [V, D], got " << getTable().getType();
  SmallVector<int64_t> expected(shapeOf(getIds()));
  expected.push_back(t[1]);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected) ||
      elemOf(getResult()) != elemOf(getTable()))
    return emitOpError() << "result " << getType() << " should be ids " << getIds().getType()
                         << " with a trailing dim of " << t[1] << " from table "
                         << getTable().getType();
  return success();
}

LogicalResult ScatterRowsOp::verify() {
  ArrayRef<int64_t> r = shapeOf(getResult()), u = shapeOf(getUpdates());
  SmallVector<int64_t> expected(shapeOf(getIds()));
  if (r.size() != 2)
    return emitOpError() << "result must be [V, D], got " << getType();
  expected.push_back(r[1]);
  if (u != ArrayRef<int64_t>(expected) || elemOf(getResult()) != elemOf(getUpdates()))
    return emitOpError() << "updates " << getUpdates().getType() << " should be ids "
                         << getIds().getType() << " with a trailing dim of " << r[1];
  return success();
}

LogicalResult OneHotOp::verify() {
  ArrayRef<int64_t> r = shapeOf(getResult()), ids = shapeOf(getIds());
  if (r.size() != ids.size() + 1 || r.drop_back() != ids)
    return emitOpError() << "result " << getType() << " should be ids "
                         << getIds().getType() << " with one trailing class dim";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  ArrayRef<int64_t> l = shapeOf(getLogits()), t = shapeOf(getTargets());
  if (l.empty() || l.drop_back() != t)
    return emitOpError() << "targets " << getTargets().getType()
                         << " must be logits " << getLogits().getType()
                         << " without the class dim";
  if (elemOf(getResult()) != elemOf(getLogits()))
    return emitOpError() << "result " << getType() << " must have the element type of logits "
                         << getLogits().getType();
  return success();
}

LogicalResult TransferOp::verify() {
  if (getFrom() < 0 || getTo() < 0 || getFrom() == getTo())
    return emitOpError() << "needs two different non-negative stages, got from " << getFrom()
                         << " to " << getTo();
  return success();
}

LogicalResult StageSumOp::verify() {
  // At least one partial: SameOperandsAndResultType's verifier says so.
  if (!shapeOf(getResult()).empty())
    return emitOpError() << "sums scalars: the result must be a rank-0 tensor, got "
                         << getResult().getType();
  for (Value v : getPartials())
    if (v.getType() != getResult().getType())
      return emitOpError() << "partial " << v.getType() << " must have the result's type "
                           << getResult().getType();
  return success();
}

LogicalResult DescendOp::verify() {
  if (elemOf(getLr()) != elemOf(getParam()))
    return emitOpError() << "lr " << getLr().getType() << " must have the element type of param "
                         << getParam().getType();
  return success();
}

LogicalResult NewtonSchulzOp::verify() {
  if (shapeOf(getInput()).size() != 2)
    return emitOpError() << "needs a matrix, got " << getInput().getType();
  if (getSteps() < 1)
    return emitOpError() << "needs steps >= 1, got " << getSteps();
  return success();
}

LogicalResult NewtonSchulzBatchOp::verify() {
  if (getInputs().size() < 2)
    return emitOpError() << "needs at least two matrices, got " << getInputs().size();
  Type first = getInputs().front().getType();
  for (auto [i, v] : llvm::enumerate(getInputs()))
    if (v.getType() != first)
      return emitOpError() << "needs matrices of one type: input " << i << " is " << v.getType()
                           << ", input 0 " << first;
  if (shapeOf(getInputs().front()).size() != 2)
    return emitOpError() << "needs matrices, got " << first;
  auto in = cast<RankedTensorType>(first);
  auto out = cast<RankedTensorType>(getResult().getType());
  SmallVector<int64_t> want{static_cast<int64_t>(getInputs().size()), in.getDimSize(0),
                            in.getDimSize(1)};
  if (out.getShape() != ArrayRef<int64_t>(want) || out.getElementType() != in.getElementType())
    return emitOpError() << "result must be the " << want[0] << " matrices stacked, "
                         << RankedTensorType::get(want, in.getElementType()) << ", got " << out;
  if (getSteps() < 1)
    return emitOpError() << "needs steps >= 1, got " << getSteps();
  return success();
}

// Gossip ops

// The gossip round is described by discardable attributes of the enclosing
// train.outer (written by train-gossip, read by the runtime): `replicas`,
// `local_steps` (one per replica, or one for all), `topology` and
// `gossip_seed`. They are checked here, where the exchange is declared.
static LogicalResult verifyGossipRound(GossipMixOp mix) {
  Operation *outer = mix->getParentOp();
  int64_t replicas = 1;
  if (Attribute a = outer->getAttr("replicas")) {
    auto i = dyn_cast<IntegerAttr>(a);
    if (!i || i.getInt() < 1)
      return outer->emitOpError() << "attribute 'replicas' must be an integer >= 1, got " << a;
    replicas = i.getInt();
  }
  if (Attribute a = outer->getAttr("local_steps")) {
    auto steps = dyn_cast<DenseI64ArrayAttr>(a);
    if (!steps)
      return outer->emitOpError() << "attribute 'local_steps' must be an array<i64>, got " << a;
    if (steps.size() != 1 && steps.size() != replicas)
      return outer->emitOpError() << "attribute 'local_steps' has " << steps.size()
                                  << " entries; expected 1 or one per replica (" << replicas
                                  << ")";
    for (int64_t h : steps.asArrayRef())
      if (h < 0)
        return outer->emitOpError() << "attribute 'local_steps' holds " << h
                                    << "; local steps must be >= 0";
  }
  if (Attribute a = outer->getAttr("topology")) {
    static const char *kTopologies[] = {"complete", "ring", "exponential", "one-peer",
                                        "two-peer"};
    auto t = dyn_cast<StringAttr>(a);
    if (!t || !llvm::is_contained(kTopologies, t.getValue()))
      return outer->emitOpError() << "attribute 'topology' is " << a
                                  << "; expected one of: complete ring exponential one-peer "
                                     "two-peer";
  }
  return success();
}

LogicalResult GossipMixOp::verify() {
  double alpha = getAlpha().convertToDouble();
  if (!(alpha > 0.0 && alpha <= 1.0)) {
    char text[32]; // 1.5, not 1.500000e+00
    std::snprintf(text, sizeof text, "%g", alpha);
    return emitOpError() << "alpha must be in (0, 1], got " << text << " (mixing "
                         << getInput().getType() << ")";
  }
  return verifyGossipRound(*this);
}

#define GET_OP_CLASSES
#include "Train/TrainOps.cpp.inc"
