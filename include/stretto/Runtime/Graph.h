//===- Graph.h - MLIR-free training-step graph -----------------*- C++ -*-===//
//
// The form in which a training step reaches code that must not link MLIR:
// the reference executor (the numerical oracle) and, later, the runtime plan.
// It is a flat SSA list: node i may only use nodes < i. Every node kind is
// one `train` dialect op (same name, same semantics, see docs/TrainDialect.md)
// and lib/Graph/Lowering.cpp is the only producer from IR.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_GRAPH_H
#define STRETTO_GRAPH_H

#include <cstdint>
#include <string>
#include <vector>

namespace stretto {

enum class DType { F32, BF16, F64, I32 };

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape &shape);
std::string shapeToString(const Shape &shape);
const char *dtypeName(DType t);

// Node kinds, from the op table (stretto/Ops.def: name, arity, class).
// Semantics (all element-wise ops broadcast numpy-style: operand dims align
// at the right, each operand dim equals the result dim or is 1):
//  State and I/O:
//    Input:      name: per-step input fed by the caller (tokens, targets, x, y)
//    Read:       name: current value of state `name`
//    Write:      name, operands {v}: state `name` := v (takes effect at once)
//    Grad:       name, operands {g}: gradient of parameter `name` (sink);
//                summed over the micro-batches of a step
//    AccumulatedGrad: name: mean of `name`'s Grad over the step (update phase)
//    Constant:   data: row-major values; data.size()==1 means splat
//    StepCount:  scalar: optimizer step t, 1-based (1 on the first step)
//    Yield:      operands {loss, ...}: the step's results, loss first
//  Element-wise binary:
//    Add, Sub, Mul, Div, Max, Min, Pow
//    Gt:         1 where a > b else 0
//  Element-wise unary:
//    Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Cos
//    Gelu:       tanh form: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
//    GeluGrad:   d/dx Gelu (Gelu's VJP is g * GeluGrad(x))
//    Relu, Silu, Erf
//    RoundBf16:  the nearest bf16 (ties to even), kept in f32/f64 (what a
//                bf16 store holds; the mixed-precision pass's rounding points)
//  Layout:
//    Matmul:     lhs [..., M, K] x rhs [K, N] or [..., K, N] -> [..., M, N]
//    Transpose:  ints: permutation; out[i_perm...] : out dim d = in dim perm[d]
//    Reshape:    row-major reinterpretation to `shape`
//    Broadcast:  operand broadcast to `shape`
//    ReduceSum:  ints: dims summed and removed (sorted, unique)
//    Slice:      ints {axis, offset}: out = in[..., offset:offset+shape[axis], ...]
//    Pad:        ints {axis, offset}: zeros of `shape` with in placed at offset
//  Fused model ops:
//    Softmax:    last axis; flag=causal: over [..., T, T], j > i gets prob 0
//    LayerNorm:  operands {x, gamma, beta}; floats {eps}; biased variance
//    RmsNorm:    operands {x, gamma}; floats {eps}
//    NormGrad:   operands {x, gamma, dy} or {x, gamma, dy, addend}; floats
//                {eps}; flag=centered (LayerNorm, else RmsNorm): [R + 2
//                (RmsNorm: 1), D] stacking dx (+ addend, of x's shape) as
//                R = numel(x) / D rows, then dgamma (and dbeta); dtype BF16
//                (kernel-norm-grad-epilogue): the R rows rounded to bf16 (with
//                an addend: bf16(addend + bf16(dx))), dgamma and dbeta f32
//    Attention:  operands {q, k, v} [B, H, T, D]; floats {scale}; flag=causal;
//                or {qkv} [B, T, 3, H, D] (kernel-attention-layout: q, k, v
//                its parts, read in place) -> [B, T, H, D]
//    AttentionGrad: operands {q, k, v, g} -> [3, B, H, T, D] (dq, dk, dv);
//                or {qkv, g [B, T, H, D]} -> [B, T, 3, H, D]
//    Embedding:  operands {table [V, D], ids [...]} -> [..., D]
//    ScatterRows:operands {ids [...], g [..., D]} -> `shape` [V, D], rows summed
//    OneHot:     operands {ids [...]} -> [..., C], C = shape.back()
//    CrossEntropy: operands {logits [..., C], targets [...]} -> scalar mean NLL
//  Pipeline:
//    Transfer:   operands {x}; ints {from, to}: x moved between stages
//  Optimizer:
//    NewtonSchulz: operands {G [m, n]}; ints {steps}; floats {a, b, c};
//                flag=bf16: X, A, B and each step's X rounded to bf16;
//                or operands {G_0, ..., G_k-1}, k >= 2 matrices [m, n]:
//                each one's result, stacked [k, m, n] (a batch)
//    Descend:    operands {p, dir, lr}: p - lr * dir
//    StageSum:   operands {x_0, ..., x_k} scalars: their sum; ints {1} (a
//                pipeline stage's copy, planStages): plus the other stages'
//                values, through the executor's collective hook
//  Gossip (decentralized data parallelism):
//    GossipMix:  operands {z}; floats {alpha}: z_i - alpha * sum_j lambda_ij (z_i - z_j)
//                over this round's peers, through the executor's collective hook
//  Compiled kernels (kernel dialect):
//    Kernel:     name: a compiled fused kernel; operands are its inputs; ints
//                {1, trailing} when it sums its values over dims (kernel.reduce;
//                trailing=1: row sums, 0: column sums), {2} for a row kernel
//                (kernel.rows), else elementwise
//    Gemm:       operands {a, b}, {a, b, bias} or {a, b, x}; ints {transpose_a,
//                transpose_b} ({.., 1} with x, {.., 2} for the bias gradient);
//                floats {alpha}; bias [N] added to every row of the product,
//                or the product multiplied by gelu'(x) (x of the result's
//                shape), before the result is rounded or stored; with the
//                bias gradient the result is [M + 1, N], its last row the
//                column sums of op(b); with GELU's auxiliary output ({.., 3},
//                a bias or none) the result is [2, ...product]: gelu(sum)
//                then the sum itself (kernel-gemm-epilogue; GemmEpilogue)
enum class OpKind {
#define STRETTO_OP(Kind, name, arity, cls, fn) Kind,
#include "stretto/Ops.def"
#undef STRETTO_OP
};

/// The op table's classes: Binary and Unary are the element-wise ops.
enum class OpClass { Io, Binary, Unary, Layout, Fused, Pipeline, Optimizer, Gossip, Compiled };

namespace detail {
inline constexpr OpClass kOpClass[] = {
#define STRETTO_OP(Kind, name, arity, cls, fn) OpClass::cls,
#include "stretto/Ops.def"
#undef STRETTO_OP
};
} // namespace detail

/// The op's class in the table.
constexpr OpClass opClass(OpKind k) { return detail::kOpClass[static_cast<int>(k)]; }
/// The op's place among the ops of its class, in table order: the CUDA
/// runtime's element-wise op code (ST_OP_<Kind> in RuntimeOps.cu).
constexpr int opCode(OpKind k) {
  int code = 0;
  for (int i = 0; i < static_cast<int>(k); ++i)
    code += detail::kOpClass[i] == opClass(k);
  return code;
}

/// When a list of nodes runs: once per micro-batch (Step), once per
/// optimizer step after its micro-batches (Update), once per outer round of
/// a local-step method (Outer).
enum class Phase { Step, Update, Outer };

/// From the op table: the plan-file spelling and the operand count (-1: one
/// or more).
const char *opKindName(OpKind k);
int opArity(OpKind k);
/// The kind spelled `name`; false when there is none.
bool opKindFromName(const std::string &name, OpKind &kind);
/// Every kind, in table order.
const std::vector<OpKind> &allOpKinds();
constexpr bool isElementwise(OpKind k) {
  return opClass(k) == OpClass::Binary || opClass(k) == OpClass::Unary;
}

struct Node {
  OpKind kind;
  std::vector<int> operands;  // indices of earlier nodes
  Shape shape;                // result shape (empty = scalar); unused for sinks
  DType dtype = DType::F32;   // result element type
  std::string name;           // Input / Read / Write / Grad
  std::vector<int64_t> ints;  // see OpKind
  std::vector<double> floats; // see OpKind
  std::vector<double> data;   // Constant
  bool flag = false;          // causal for Softmax / Attention
  std::string loc;            // source location, for error messages
  int stage = -1;             // pipeline stage; -1: every stage (scalars)
};

/// What a Gemm node makes of its product before the result is rounded or
/// stored (kernel-gemm-epilogue): nothing (two operands), a bias (a third
/// operand, ints {ta, tb}), DGELU (a third operand x of the result's
/// shape, ints {ta, tb, 1}: the product times gelu'(x)), or the bias
/// gradient (two operands, ints {ta, tb, 2}: a result [M + 1, N] whose last
/// row holds the column sums of op(b)), or GELU with its auxiliary output
/// (ints {ta, tb, 3}, a bias as third operand or none: a result [2, ...]
/// of two products' shapes, gelu(sum) and then the sum, where sum is the
/// product plus the bias).
enum class GemmEpilogue { None, Bias, DGelu, BiasGrad, GeluAux };
inline GemmEpilogue gemmEpilogue(const Node &n) {
  const int64_t e = n.ints.size() > 2 ? n.ints[2] : 0;
  if (e == 2)
    return GemmEpilogue::BiasGrad;
  if (e == 3)
    return GemmEpilogue::GeluAux;
  if (n.operands.size() < 3)
    return GemmEpilogue::None;
  return e == 1 ? GemmEpilogue::DGelu : GemmEpilogue::Bias;
}

enum class InitKind { Zeros, Ones, Normal, Uniform };

// A piece of persistent state: a parameter or an optimizer/pipeline state.
struct StateDecl {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  InitKind init = InitKind::Zeros;
  double scale = 0.0;  // Normal: std; Uniform: U(-scale, scale)
  bool isParam = false;
  std::string copyOf;  // non-empty: starts as a copy of this parameter
  std::string of;      // the parameter this state belongs to, if any
  int stage = -1;      // pipeline stage owning it; -1: not partitioned
  std::vector<std::string> aliases; // a tied parameter's other names (saved too)
};

// The local-step loop around the Outer phase (train-gossip's attributes of
// train.outer): R replicas, H_r local steps each, the peer topology and the
// seed of its per-round draw. replicas == 0: no outer loop.
struct OuterLoop {
  int64_t replicas = 0;
  std::vector<int64_t> localSteps; // one for all, or one per replica
  std::string topology;            // complete | ring | exponential | one-peer | two-peer
  uint64_t seed = 0;
};

struct Graph {
  std::vector<StateDecl> states;
  OuterLoop outerLoop; // meaningful when `outer` is non-empty
  std::vector<Node> nodes;  // Phase::Step
  std::vector<Node> update; // Phase::Update
  std::vector<Node> outer;  // Phase::Outer

  std::vector<Node> &phase(Phase p) {
    return p == Phase::Step ? nodes : p == Phase::Update ? update : outer;
  }
  const std::vector<Node> &phase(Phase p) const {
    return const_cast<Graph *>(this)->phase(p);
  }
  int add(Node n, Phase p = Phase::Step) {
    std::vector<Node> &list = phase(p);
    list.push_back(std::move(n));
    return static_cast<int>(list.size()) - 1;
  }
  const StateDecl *findState(const std::string &name) const;
  // Throws std::runtime_error naming the node and its location when an
  // operand index, arity or shape is inconsistent.
  void validate() const;
};

// Deterministic initial value of element `index` of a state, the same on every
// device: counter-based (splitmix64 of seed, name hash and index), Box-Muller
// for Normal.
double initialValue(const StateDecl &s, uint64_t seed, int64_t index);

// Counter-based randomness shared by initialisation and data sampling.
uint64_t splitmix64(uint64_t x);
uint64_t fnv1a64(const std::string &s);
// 53 random bits -> (0, 1].
double unitOpenClosed(uint64_t bits);

// Round a float to the nearest bfloat16 (ties to even) and back.
float roundToBF16(float x);

} // namespace stretto

#endif // STRETTO_GRAPH_H
