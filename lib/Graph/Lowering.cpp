//===- Lowering.cpp - `train` IR to Graph --------------------------------===//
//
// The only bridge from IR to the MLIR-free world (reference executor now,
// runtime plans later). A table maps each op to its OpKind; the few ops with
// attributes copy them into ints/floats/flag as Graph.h documents.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Dialect/Kernel/KernelOps.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace stretto;
using namespace stretto::train;

static DType toDType(Type t) {
  Type e = cast<ShapedType>(t).getElementType();
  if (e.isBF16())
    return DType::BF16;
  if (e.isF64())
    return DType::F64;
  if (e.isInteger(32))
    return DType::I32;
  return DType::F32;
}

static std::string locString(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (auto fl = dyn_cast<FileLineColLoc>(loc))
    os << fl.getFilename().getValue() << ":" << fl.getLine() << ":" << fl.getColumn();
  else
    os << loc;
  return s;
}

static Shape shapeOf(Type t) {
  auto s = cast<RankedTensorType>(t).getShape();
  return Shape(s.begin(), s.end());
}

static std::optional<OpKind> kindOf(Operation *op) {
  // A train op is the Graph node of the same name (the op table,
  // stretto/Ops.def).
  if (op->getDialect() && op->getDialect()->getNamespace() == "train") {
    OpKind k;
    if (opKindFromName(op->getName().stripDialect().str(), k) && k != OpKind::Kernel &&
        k != OpKind::Gemm)
      return k;
    if (isa<NewtonSchulzBatchOp>(op)) // (the node of k operands: [k, m, n])
      return OpKind::NewtonSchulz;
    return std::nullopt;
  }
  return llvm::TypeSwitch<Operation *, std::optional<OpKind>>(op)
      .Case([](kernel::ElementwiseOp op) -> std::optional<OpKind> {
        // Compiled path: one result and a `symbol` given by compileKernels.
        if (op->getNumResults() != 1 || !op->hasAttr("symbol"))
          return std::nullopt;
        return OpKind::Kernel;
      })
      .Case<kernel::RowsOp>([](Operation *op) -> std::optional<OpKind> {
        if (!op->hasAttr("symbol"))
          return std::nullopt;
        return OpKind::Kernel;
      })
      .Case([](kernel::ReduceOp op) -> std::optional<OpKind> {
        if (!op->hasAttr("symbol"))
          return std::nullopt;
        return OpKind::Kernel;
      })
      .Case([](kernel::GemmOp) { return OpKind::Gemm; })
      // (kernel-attention-layout: the packed forms, one operand fewer)
      .Case([](kernel::AttentionOp) { return OpKind::Attention; })
      .Case([](kernel::AttentionGradOp) { return OpKind::AttentionGrad; })
      .Default([](Operation *) { return std::nullopt; });
}

static StateDecl declOf(StringRef name, RankedTensorType type, train::InitKind init, double scale,
                        bool isParam) {
  StateDecl d;
  d.name = name.str();
  d.shape = shapeOf(type);
  d.dtype = toDType(type);
  d.scale = scale;
  d.isParam = isParam;
  switch (init) {
  case train::InitKind::zeros: d.init = stretto::InitKind::Zeros; break;
  case train::InitKind::ones: d.init = stretto::InitKind::Ones; break;
  case train::InitKind::normal: d.init = stretto::InitKind::Normal; break;
  case train::InitKind::uniform: d.init = stretto::InitKind::Uniform; break;
  }
  return d;
}

static int stageOf(Operation *op) {
  if (auto s = op->getAttrOfType<IntegerAttr>("stage"))
    return static_cast<int>(s.getInt());
  return -1;
}

/// Lowers the ops of one phase's block into `g`'s list for that phase.
static LogicalResult lowerPhase(Block &block, Phase phase, Graph &g) {
  DenseMap<Value, int> ids;
  for (Operation &op : block) {
    if (isa<YieldOp>(op) && op.getNumOperands() == 0)
      continue;
    std::optional<OpKind> kind = kindOf(&op);
    if (!kind)
      return op.emitError() << "'" << op.getName() << "' has no lowering to the runtime graph";
    Node n;
    n.kind = *kind;
    n.loc = locString(op.getLoc());
    n.stage = stageOf(&op);
    for (Value v : op.getOperands())
      n.operands.push_back(ids.lookup(v));
    if (op.getNumResults() == 1) {
      n.shape = shapeOf(op.getResult(0).getType());
      n.dtype = toDType(op.getResult(0).getType());
    }
    llvm::TypeSwitch<Operation *>(&op)
        .Case([&](InputOp o) { n.name = o.getName().str(); })
        .Case([&](ReadOp o) { n.name = o.getVar().str(); })
        .Case([&](AccumulatedGradOp o) { n.name = o.getVar().str(); })
        .Case([&](TransferOp o) {
          n.ints = {static_cast<int64_t>(o.getFrom()), static_cast<int64_t>(o.getTo())};
        })
        .Case<kernel::ElementwiseOp, kernel::ReduceOp, kernel::RowsOp>([&](Operation *o) {
          n.name = o->getAttrOfType<StringAttr>("symbol").getValue().str();
          if (auto r = dyn_cast<kernel::ReduceOp>(o))
            n.ints = {1, r.reducesTrailing() ? 1 : 0};
          if (isa<kernel::RowsOp>(o))
            n.ints = {2};
          // Stored in bf16 (kernel-bf16-storage): the node's dtype says so.
          if (auto e = dyn_cast<kernel::ElementwiseOp>(o); e && e.getStoreBf16())
            n.dtype = DType::BF16;
          if (auto r = dyn_cast<kernel::RowsOp>(o); r && r.getStoreBf16())
            n.dtype = DType::BF16;
        })
        .Case([&](kernel::GemmOp o) {
          n.ints = {o.getTransposeA() ? 1 : 0, o.getTransposeB() ? 1 : 0};
          if (o.getDgelu()) // the third operand is DGELU's input, not a bias
            n.ints.push_back(1);
          if (o.getBiasGrad()) // a last row of op(b)'s column sums
            n.ints.push_back(2);
          if (o.getGeluAux()) // [2, ...]: gelu(sum), then the sum
            n.ints.push_back(3);
          n.floats = {o.getAlpha().convertToDouble()};
          if (o.getStoreBf16()) // rounded to bf16 (kernel-bf16-storage)
            n.dtype = DType::BF16;
        })
        .Case<kernel::AttentionOp, kernel::AttentionGradOp>([&](Operation *o) {
          n.floats = {o->getAttrOfType<FloatAttr>("scale").getValueAsDouble()};
          n.flag = o->hasAttr("causal");
          if (o->hasAttr("bf16")) // P and dS rounded to bf16 (train-mixed-precision)
            n.ints = {1};
          if (o->hasAttr("store_bf16")) // rounded to bf16 (kernel-bf16-storage)
            n.dtype = DType::BF16;
        })
        .Case([&](WriteOp o) { n.name = o.getVar().str(); })
        .Case([&](GradOp o) { n.name = o.getVar().str(); })
        .Case([&](ConstantOp o) {
          auto dense = cast<DenseElementsAttr>(o.getValue());
          if (isa<FloatType>(dense.getElementType())) {
            for (const APFloat &v : dense.getValues<APFloat>()) {
              n.data.push_back(v.convertToDouble());
              if (dense.isSplat())
                break;
            }
          } else {
            for (const APInt &v : dense.getValues<APInt>()) {
              n.data.push_back(static_cast<double>(v.getSExtValue()));
              if (dense.isSplat())
                break;
            }
          }
        })
        .Case([&](TransposeOp o) { n.ints.assign(o.getPerm().begin(), o.getPerm().end()); })
        .Case([&](ReduceSumOp o) { n.ints.assign(o.getDims().begin(), o.getDims().end()); })
        .Case([&](SliceOp o) {
          n.ints = {static_cast<int64_t>(o.getAxis()), static_cast<int64_t>(o.getOffset())};
        })
        .Case([&](PadOp o) {
          n.ints = {static_cast<int64_t>(o.getAxis()), static_cast<int64_t>(o.getOffset())};
        })
        .Case([&](SoftmaxOp o) { n.flag = o.getCausal(); })
        .Case([&](LayerNormOp o) { n.floats = {o.getEps().convertToDouble()}; })
        .Case([&](RmsNormOp o) { n.floats = {o.getEps().convertToDouble()}; })
        .Case([&](NormGradOp o) {
          n.floats = {o.getEps().convertToDouble()};
          n.flag = o.getCentered();
          if (o->hasAttr("kernel.store_bf16")) // rows rounded (kernel-norm-grad-epilogue)
            n.dtype = DType::BF16;
        })
        .Case([&](AttentionOp o) {
          n.floats = {o.getScale().convertToDouble()};
          n.flag = o.getCausal();
          if (o.getBf16())
            n.ints = {1};
          if (o->hasAttr("kernel.store_bf16")) // rounded to bf16 (kernel-bf16-storage)
            n.dtype = DType::BF16;
        })
        .Case([&](AttentionGradOp o) {
          n.floats = {o.getScale().convertToDouble()};
          n.flag = o.getCausal();
          if (o.getBf16())
            n.ints = {1};
          if (o->hasAttr("kernel.store_bf16"))
            n.dtype = DType::BF16;
        })
        .Case([&](GossipMixOp o) { n.floats = {o.getAlpha().convertToDouble()}; })
        .Case([&](NewtonSchulzOp o) {
          n.ints = {static_cast<int64_t>(o.getSteps())};
          n.floats = {o.getA().convertToDouble(), o.getB().convertToDouble(),
                      o.getC().convertToDouble()};
          n.flag = o.getBf16(); // its matrices rounded to bf16 (train-mixed-precision)
        })
        .Case([&](NewtonSchulzBatchOp o) {
          n.ints = {static_cast<int64_t>(o.getSteps())};
          n.floats = {o.getA().convertToDouble(), o.getB().convertToDouble(),
                      o.getC().convertToDouble()};
          n.flag = o.getBf16();
        });
    int id = g.add(std::move(n), phase);
    if (op.getNumResults() == 1)
      ids[op.getResult(0)] = id;
  }
  return success();
}

FailureOr<Graph> stretto::lowerToGraph(ModelOp model) {
  Graph g;
  for (Operation &op : model.getBody().front()) {
    StateDecl d;
    if (auto p = dyn_cast<ParamOp>(op))
      d = declOf(p.getSymName(), p.getTensorType(), p.getInit(),
                 p.getScale().convertToDouble(), true);
    else if (auto s = dyn_cast<StateOp>(op))
      d = declOf(s.getSymName(), s.getTensorType(), s.getInit(),
                 s.getScale().convertToDouble(), false);
    else
      continue;
    if (auto c = op.getAttrOfType<FlatSymbolRefAttr>("copy_of"))
      d.copyOf = c.getValue().str();
    if (auto o = op.getAttrOfType<FlatSymbolRefAttr>("of"))
      d.of = o.getValue().str();
    if (auto aliases = op.getAttrOfType<ArrayAttr>("aliases"))
      for (Attribute a : aliases)
        if (auto s = dyn_cast<StringAttr>(a))
          d.aliases.push_back(s.getValue().str());
    d.stage = stageOf(&op);
    g.states.push_back(std::move(d));
  }
  if (!model.getStep())
    return model.emitError() << "has no 'train.step' to run";
  if (failed(lowerPhase(model.getStep().getBody().front(), Phase::Step, g)))
    return failure();
  if (UpdateOp u = model.getUpdate())
    if (failed(lowerPhase(u.getBody().front(), Phase::Update, g)))
      return failure();
  if (OuterOp o = model.getOuter()) {
    if (failed(lowerPhase(o.getBody().front(), Phase::Outer, g)))
      return failure();
    // The local-step loop of train-gossip (verified by train.gossip_mix).
    g.outerLoop.replicas = 1;
    if (auto r = o->getAttrOfType<IntegerAttr>("replicas"))
      g.outerLoop.replicas = r.getInt();
    if (auto h = o->getAttrOfType<DenseI64ArrayAttr>("local_steps"))
      g.outerLoop.localSteps.assign(h.asArrayRef().begin(), h.asArrayRef().end());
    if (auto t = o->getAttrOfType<StringAttr>("topology"))
      g.outerLoop.topology = t.getValue().str();
    if (auto s = o->getAttrOfType<IntegerAttr>("gossip_seed"))
      g.outerLoop.seed = static_cast<uint64_t>(s.getInt());
  }
  return g;
}
