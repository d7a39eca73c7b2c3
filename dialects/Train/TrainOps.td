//===- TrainOps.td - ops of the `train` dialect ------------*- tablegen -*-===//
#ifndef STRETTO_TRAIN_OPS
#define STRETTO_TRAIN_OPS

include "TrainDialect.td"
include "TrainInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Train_FloatTensor : RankedTensorOf<[F32, BF16, F64]>;
def Train_IdTensor : RankedTensorOf<[I32]>;
def Train_AnyTensor : RankedTensorOf<[F32, BF16, F64, I32]>;
def Train_Scalar : 0DTensorOf<[F32, BF16, F64]>;

def Differentiable : DeclareOpInterfaceMethods<Train_DifferentiableOpInterface>;
// Ops that may sit directly in any of the three phases of a model.
def InPhase : ParentOneOf<["StepOp", "UpdateOp", "OuterOp"]>;

// Structure and state

def Train_ModelOp : Train_Op<"model", [Symbol, SymbolTable, IsolatedFromAbove,
    NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "a model, its persistent state and its training step";
  let description = [{
    Holds `train.param` and `train.state` declarations and one `train.step`.
    The optional `trainer` dictionary describes the training recipe:

    ```mlir
    train.model @gpt attributes {trainer = {
        optimizer = "adamw", lr = 3.0e-3, weight_decay = 0.1,
        beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, grad_clip = 1.0,
        schedule = "cosine", warmup_steps = 20, total_steps = 600, min_lr_ratio = 0.1,
        micro_batches = 1, stages = 1, replicas = 1, sync = "sync"}} {
      train.param @wte : tensor<256x128xf32> = normal(2.000000e-02)
      train.step { ... }
    }
    ```
    Unknown trainer keys and keys of the wrong type are verifier errors.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<DictionaryAttr>:$trainer);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The model's phases, or null where absent.
    StepOp getStep();
    UpdateOp getUpdate();
    OuterOp getOuter();
    /// A trainer option, or null.
    ::mlir::Attribute getTrainerOption(::llvm::StringRef key);
    double getTrainerFloat(::llvm::StringRef key, double fallback);
    int64_t getTrainerInt(::llvm::StringRef key, int64_t fallback);
    ::llvm::StringRef getTrainerString(::llvm::StringRef key, ::llvm::StringRef fallback);
  }];
}

class Train_VarOp<string mnemonic> : Train_Op<mnemonic,
    [Symbol, HasParent<"ModelOp">]> {
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Train_FloatTensor>:$type,
                       Train_InitKind:$init,
                       DefaultValuedAttr<F64Attr, "0.0">:$scale);
  let assemblyFormat = "$sym_name `:` $type `=` $init (`(` $scale^ `)`)? attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Train_ParamOp : Train_VarOp<"param"> {
  let summary = "a trainable parameter with its initializer";
  let description = [{
    Declares a parameter by a stable name, its type and initializer:
    `normal(s)` draws N(0, s²), `uniform(s)` U(-s, s), `zeros`/`ones` ignore s.
    Optional discardable attributes: `role` ("embedding", "head", "matrix",
    "bias", "norm") which the optimizer pass uses to assign parameter groups,
    `layer` (the block index, for partitioning), `layout = "out_in"` for a
    matrix held as PyTorch's nn.Linear holds it (`[out, in]`, used as
    `x·Wᵀ`; Muon's fan-in/fan-out scale reads it), and `aliases` (the other
    names of a tied parameter, e.g. `["lm_head.weight"]`, which
    model.safetensors also writes so that PyTorch's `load_state_dict` finds
    every name).

    ```mlir
    train.param @h0.attn.qkv.w : tensor<128x384xf32> = normal(2.000000e-02) {role = "matrix"}
    ```
  }];
}

def Train_StateOp : Train_VarOp<"state"> {
  let summary = "persistent non-trainable state (optimizer moments, versions)";
  let description = [{
    Declares state that passes add: optimizer moments, weight versions,
    error-feedback memory. `of` names the parameter it belongs to.

    ```mlir
    train.state @wte.adam_m : tensor<256x128xf32> = zeros(0.000000e+00) {of = @wte}
    ```
  }];
}

def Train_StepOp : Train_Op<"step", [HasParent<"ModelOp">, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, NoRegionArguments]> {
  let summary = "the body run once per micro-batch";
  let description = [{
    Ops run in order. Before `train-autodiff` it computes the loss of one
    micro-batch; afterwards it also computes gradients (`train.grad`, which
    accumulate over the micro-batches of a step).
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Train_UpdateOp : Train_Op<"update", [HasParent<"ModelOp">, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, NoRegionArguments]> {
  let summary = "the body run once per optimizer step, after its micro-batches";
  let description = [{
    Added by `train-optimizer`: reads the mean gradient of the step's
    micro-batches (`train.accumulated_grad`) and writes the new parameters
    and optimizer state. A runtime runs `train.step` m times (the trainer's
    `micro_batches`), then `train.update` once.
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Train_OuterOp : Train_Op<"outer", [HasParent<"ModelOp">, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, NoRegionArguments]> {
  let summary = "the body run once per outer round (local-step methods)";
  let description = [{
    Added by `train-gossip`: after each replica's local steps, the outer
    update of DiLoCo / gossip, with its exchange between replicas.
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Train_AccumulatedGradOp : Train_Op<"accumulated_grad", [HasParent<"UpdateOp">,
    MemoryEffects<[MemRead]>, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the mean over the step's micro-batches of a parameter's train.grad";
  let arguments = (ins FlatSymbolRefAttr:$var);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$var attr-dict `:` type($result)";
}

def Train_YieldOp : Train_Op<"yield", [Terminator, Pure,
    ParentOneOf<["StepOp", "UpdateOp", "OuterOp"]>]> {
  let summary = "ends the step: the loss first, then other scalar metrics";
  let arguments = (ins Variadic<Train_Scalar>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
  let hasVerifier = 1;
}

def Train_InputOp : Train_Op<"input", [HasParent<"StepOp">]> {
  let summary = "a per-step input fed by the data loader";
  let description = [{
    `tokens`/`targets` for language models, `x`/`y` for classifiers.
    ```mlir
    %tok = train.input "tokens" : tensor<16x64xi32>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Train_AnyTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Train_ReadOp : Train_Op<"read", [InPhase, MemoryEffects<[MemRead]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads the current value of a parameter or state";
  let arguments = (ins FlatSymbolRefAttr:$var);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$var attr-dict `:` type($result)";
}

def Train_WriteOp : Train_Op<"write", [InPhase, MemoryEffects<[MemWrite]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "overwrites a parameter or state; later reads see the new value";
  let arguments = (ins Train_FloatTensor:$value, FlatSymbolRefAttr:$var);
  let assemblyFormat = "$value `to` $var attr-dict `:` type($value)";
}

def Train_GradOp : Train_Op<"grad", [HasParent<"StepOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the gradient of the loss with respect to a parameter";
  let description = [{
    Produced by `train-autodiff`. Summed over the micro-batches of a step;
    `train.accumulated_grad` in `train.update` reads the mean. The reference
    executor reports these values, which is how gradients are tested.
  }];
  let arguments = (ins Train_FloatTensor:$value, FlatSymbolRefAttr:$var);
  let assemblyFormat = "$value `for` $var attr-dict `:` type($value)";
}

def Train_ConstantOp : Train_Op<"constant", [ConstantLike, Pure]> {
  let summary = "a constant tensor";
  let description = [{
    ```mlir
    %c = train.constant dense<1.000000e+00> : tensor<f32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Train_AnyTensor:$result);
  let hasCustomAssemblyFormat = 1;
  let hasFolder = 1;
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Type":$type, "double":$splat)>,
  ];
}

def Train_StepCountOp : Train_Op<"step_count", [InPhase]> {
  let summary = "the optimizer step t, counting from 1";
  let results = (outs Train_Scalar:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

// Elementwise

class Train_BinaryOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat([Pure], traits)> {
  let description = [{
    Elementwise with NumPy broadcasting: operand dims align at the right and
    each must equal the result dim or be 1. Printed with one type when both
    operands and the result share it.
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs);
  let results = (outs Train_FloatTensor:$result);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs), [{
    build($_builder, $_state, broadcastResultType(lhs.getType(), rhs.getType()), lhs, rhs);
  }]>];
  let extraClassDefinition = [{
    ::mlir::ParseResult $cppClass::parse(::mlir::OpAsmParser &p, ::mlir::OperationState &st) {
      return parseBinaryOp(p, st);
    }
    void $cppClass::print(::mlir::OpAsmPrinter &p) { printBinaryOp(p, *this); }
    ::mlir::LogicalResult $cppClass::verify() { return verifyBinaryOp(*this); }
  }];
}

def Train_AddOp : Train_BinaryOp<"add", [Commutative, Differentiable]> {
  let summary = "elementwise a + b";
  let hasFolder = 1;
}
def Train_SubOp : Train_BinaryOp<"sub", [Differentiable]> { let summary = "elementwise a - b"; }
def Train_MulOp : Train_BinaryOp<"mul", [Commutative, Differentiable]> {
  let summary = "elementwise a * b";
  let hasFolder = 1;
}
def Train_DivOp : Train_BinaryOp<"div", [Differentiable]> { let summary = "elementwise a / b"; }
def Train_MaxOp : Train_BinaryOp<"max", [Commutative, Differentiable]> {
  let summary = "elementwise max(a, b); the gradient goes to a on ties";
}
def Train_MinOp : Train_BinaryOp<"min", [Commutative, Differentiable]> {
  let summary = "elementwise min(a, b); the gradient goes to a on ties";
}
def Train_PowOp : Train_BinaryOp<"pow", [Differentiable]> { let summary = "elementwise a ^ b"; }
def Train_GtOp : Train_BinaryOp<"gt"> {
  let summary = "1 where a > b, else 0 (not differentiable)";
}

class Train_UnaryOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat([Pure, SameOperandsAndResultType], traits)> {
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Train_NegOp : Train_UnaryOp<"neg", [Differentiable]> { let summary = "-x"; }
def Train_ExpOp : Train_UnaryOp<"exp", [Differentiable]> { let summary = "e^x"; }
def Train_LogOp : Train_UnaryOp<"log", [Differentiable]> { let summary = "natural log"; }
def Train_SqrtOp : Train_UnaryOp<"sqrt", [Differentiable]> { let summary = "square root"; }
def Train_RsqrtOp : Train_UnaryOp<"rsqrt", [Differentiable]> { let summary = "1/sqrt(x)"; }
def Train_TanhOp : Train_UnaryOp<"tanh", [Differentiable]> { let summary = "tanh"; }
def Train_CosOp : Train_UnaryOp<"cos", [Differentiable]> { let summary = "cosine"; }
def Train_GeluOp : Train_UnaryOp<"gelu", [Differentiable]> {
  let summary = "GELU, tanh form: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))";
}
def Train_GeluGradOp : Train_UnaryOp<"gelu_grad"> {
  let summary = "d/dx gelu(x), the tanh form's derivative (gelu's VJP)";
  let description = [{
    `0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)`, `t = tanh(u)`:
    the derivative of `train.gelu`, one op so that the backward kernel
    shares gelu's exponential (Support/KernelMath.inc). Not differentiable.
  }];
}
def Train_ReluOp : Train_UnaryOp<"relu", [Differentiable]> { let summary = "max(x, 0)"; }
def Train_SiluOp : Train_UnaryOp<"silu", [Differentiable]> {
  let summary = "SiLU (swish): x * sigmoid(x) = x / (1 + e^-x)";
}
def Train_ErfOp : Train_UnaryOp<"erf", [Differentiable]> {
  let summary = "the error function erf(x) = 2/sqrt(pi) * integral_0^x e^(-t^2) dt";
  let description = [{
    GELU's exact (PyTorch's default, `approximate="none"`) form is
    `0.5 x (1 + erf(x / sqrt(2)))`; the PyTorch exporter composes it from
    this op. It cannot be composed from the others to f32 accuracy.
    The VJP is `g * 2/sqrt(pi) * exp(-x^2)`.
  }];
}

def Train_RoundBf16Op : Train_UnaryOp<"round_bf16", [Differentiable]> {
  let summary = "rounds to the nearest bf16 (ties to even), kept in the element type";
  let description = [{
    The value a bf16 store would hold: `train-mixed-precision` puts one
    after each producer whose result is stored in bf16 (activations, their
    gradients, the per-step bf16 copy of a GEMM's weight), so that every
    executor rounds at exactly these points. NaN stays NaN, past the largest
    bf16 gives infinity. The VJP passes the gradient through unchanged (a
    cast's gradient, as in PyTorch's `.to(torch.bfloat16)`). Rounding twice
    is rounding once: `round_bf16(round_bf16(x))` folds.
  }];
  let hasFolder = 1;
}

// Layout and reductions

def Train_MatmulOp : Train_Op<"matmul", [Pure, Differentiable]> {
  let summary = "(batched) matrix product";
  let description = [{
    `lhs [..., M, K] x rhs [K, N] -> [..., M, N]` (rhs shared by the batch) or
    `lhs [..., M, K] x rhs [..., K, N]` with equal batch dims.
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs)>];
}

def Train_TransposeOp : Train_Op<"transpose", [Pure, Differentiable]> {
  let summary = "permutes dims: result dim d is input dim perm[d]";
  let arguments = (ins Train_FloatTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input $perm attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$input, "::llvm::ArrayRef<int64_t>":$perm)>];
  let extraClassDeclaration = [{
    /// Swap of the last two dims (the transpose GEMM backward needs).
    static ::mlir::Value swapLastTwo(::mlir::OpBuilder &b, ::mlir::Location loc, ::mlir::Value v);
  }];
}

def Train_ReshapeOp : Train_Op<"reshape", [Pure, Differentiable]> {
  let summary = "row-major reshape to the result type (same element count)";
  let arguments = (ins Train_AnyTensor:$input);
  let results = (outs Train_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Train_BroadcastOp : Train_Op<"broadcast", [Pure, Differentiable]> {
  let summary = "broadcasts (NumPy rules) to the result type";
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Train_ReduceSumOp : Train_Op<"reduce_sum", [Pure, Differentiable]> {
  let summary = "sums over `dims` and removes them";
  let arguments = (ins Train_FloatTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input $dims attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$input, "::llvm::ArrayRef<int64_t>":$dims)>];
}

def Train_SliceOp : Train_Op<"slice", [Pure, Differentiable]> {
  let summary = "the result-sized window at `offset` along `axis`";
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$axis, I64Attr:$offset);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `axis` `=` $axis `offset` `=` $offset attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_PadOp : Train_Op<"pad", [Pure, Differentiable]> {
  let summary = "zeros of the result type with the input placed at `offset` along `axis`";
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$axis, I64Attr:$offset);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `axis` `=` $axis `offset` `=` $offset attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

// Model ops

def Train_SoftmaxOp : Train_Op<"softmax", [Pure, SameOperandsAndResultType, Differentiable]> {
  let summary = "softmax over the last dim, optionally causal";
  let description = [{
    With `causal`, the input is `[..., T, T]` and entry (i, j) with j > i gets
    probability 0.
  }];
  let arguments = (ins Train_FloatTensor:$input, UnitAttr:$causal);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input (`causal` $causal^)? attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_LayerNormOp : Train_Op<"layer_norm", [Pure, Differentiable,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "LayerNorm over the last dim (biased variance)";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       Train_FloatTensor:$beta, DefaultValuedAttr<F64Attr, "1.0e-5">:$eps);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $gamma `,` $beta attr-dict `:` type($input) `,` type($gamma) `,` type($beta)";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$input, "::mlir::Value":$gamma, "::mlir::Value":$beta, "double":$eps), [{
    build($_builder, $_state, input.getType(), input, gamma, beta, ::llvm::APFloat(eps));
  }]>];
}

def Train_RmsNormOp : Train_Op<"rms_norm", [Pure, Differentiable,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * gamma";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$eps);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $gamma attr-dict `:` type($input) `,` type($gamma)";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$input, "::mlir::Value":$gamma, "double":$eps), [{
    build($_builder, $_state, input.getType(), input, gamma, ::llvm::APFloat(eps));
  }]>];
}

def Train_AttentionOp : Train_Op<"attention", [Pure, Differentiable,
    AllTypesMatch<["q", "k", "v", "result"]>]> {
  let summary = "scaled dot-product attention over [B, H, T, D]";
  let description = [{
    `softmax(q kᵀ · scale [causal]) v`; q, k and v are `[B, H, T, D]`.

    `bf16` (set by `train-mixed-precision`): the weights are rounded to
    bf16 before they multiply v, where FlashAttention's online softmax
    makes them: over each query row's keys 32 at a time (chunks from key
    0), with m_c the running max of the scores up to chunk c, a key j of
    chunk c weighs bf16(e^(s_j − m_c)) · e^(m_c − m_last) / l, where
    l = Σ_c e^(m_c − m_last) Σ_{j in c} e^(s_j − m_c) is not rounded.
  }];
  let arguments = (ins Train_FloatTensor:$q, Train_FloatTensor:$k, Train_FloatTensor:$v,
                       F64Attr:$scale, UnitAttr:$causal, UnitAttr:$bf16);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$q `,` $k `,` $v (`causal` $causal^)? attr-dict `:` type($q)";
  let hasVerifier = 1;
}

def Train_NormGradOp : Train_Op<"norm_grad", [Pure, AllTypesMatch<["input", "grad"]>]> {
  let summary = "the gradients of train.layer_norm / train.rms_norm, fused and stacked";
  let description = [{
    The vector-Jacobian product of `train.layer_norm` (`centered`) or
    `train.rms_norm` (same `eps`) at `input` [..., D] with gain `gamma` for
    the result gradient `grad`. With R = numel(input) / D rows, the result
    `[R + 2, D]` (RmsNorm: `[R + 1, D]`) stacks dx (R rows), dgamma and,
    for LayerNorm, dbeta:

        xhat = (x - mean) rstd,  rstd = 1 / sqrt(var + eps),  a = grad gamma
        dx     = rstd (a - mean(a) - xhat mean(a xhat))   (RmsNorm: no mean(a))
        dgamma = sum over rows of grad xhat,  dbeta = sum over rows of grad

    Autodiff emits it so that the executors run one pass over the rows (the
    row's statistics recomputed, as the forward computes them) and one over
    column blocks, instead of a dozen element-wise and reduction passes.

    With `plus %addend` (of `input`'s type; `kernel-norm-grad-epilogue`
    sets it) the dx rows are `dx + addend`: the residual stream's gradient
    added in the same pass over the rows, not by a kernel of its own. With
    the discardable attribute `kernel.store_bf16` (the same pass) the rows
    are rounded to bf16, and with an addend `bf16(addend + bf16(dx))`;
    dgamma and dbeta stay f32. The CUDA runtime then keeps the rows in two
    bytes an element.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       Train_FloatTensor:$grad, Optional<Train_FloatTensor>:$addend,
                       F64Attr:$eps, UnitAttr:$centered);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $gamma `,` $grad (`plus` $addend^ `:` type($addend))? (`centered` $centered^)? attr-dict `:` type($input) `,` type($gamma) `->` type($result)";
  let hasVerifier = 1;
}

def Train_AttentionGradOp : Train_Op<"attention_grad", [Pure,
    AllTypesMatch<["q", "k", "v", "grad"]>]> {
  let summary = "the gradients of train.attention, fused: [dq, dk, dv] stacked";
  let description = [{
    The vector-Jacobian product of `train.attention` (same `scale`,
    `causal`) at `q`, `k`, `v` for the result gradient `grad`, all
    `[B, H, T, D]`. The result `[3, B, H, T, D]` stacks dq, dk and dv:

        P  = softmax(q kᵀ · scale [causal])      (recomputed)
        dP = grad vᵀ
        dS = P ∘ (dP − rowsum(P ∘ dP)) · scale
        dq = dS k,  dk = dSᵀ q,  dv = Pᵀ grad

    Autodiff emits it for `train.attention` so that the executors can run
    one (batch, head) block at a time with P, dP and dS in a block-sized
    scratch, instead of materialising four `[B, H, T, T]` tensors.

    `bf16` (set by `train-mixed-precision`): P and dS are rounded to bf16
    (each to the nearest, ties to even) before the three products they are
    operands of, as a bf16 plan's GEMM operands are; q, k, v, grad, dP, the
    row sums and the products' sums stay as they are.
  }];
  let arguments = (ins Train_FloatTensor:$q, Train_FloatTensor:$k, Train_FloatTensor:$v,
                       Train_FloatTensor:$grad, F64Attr:$scale, UnitAttr:$causal,
                       UnitAttr:$bf16);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$q `,` $k `,` $v `,` $grad (`causal` $causal^)? attr-dict `:` type($q) `->` type($result)";
  let hasVerifier = 1;
}

def Train_EmbeddingOp : Train_Op<"embedding", [Pure, Differentiable]> {
  let summary = "gathers rows of a [V, D] table by i32 ids";
  let arguments = (ins Train_FloatTensor:$table, Train_IdTensor:$ids);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$table `[` $ids `]` attr-dict `:` type($table) `,` type($ids) `->` type($result)";
  let hasVerifier = 1;
}

def Train_ScatterRowsOp : Train_Op<"scatter_rows", [Pure]> {
  let summary = "sums rows of g [..., D] into a [V, D] result by ids (embedding backward)";
  let arguments = (ins Train_IdTensor:$ids, Train_FloatTensor:$updates);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$updates `into` `rows` `[` $ids `]` attr-dict `:` type($updates) `,` type($ids) `->` type($result)";
  let hasVerifier = 1;
}

def Train_OneHotOp : Train_Op<"one_hot", [Pure]> {
  let summary = "i32 ids [...] to a float [..., C] one-hot tensor";
  let arguments = (ins Train_IdTensor:$ids);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$ids attr-dict `:` type($ids) `->` type($result)";
  let hasVerifier = 1;
}

def Train_CrossEntropyOp : Train_Op<"cross_entropy", [Pure, Differentiable]> {
  let summary = "mean negative log-likelihood of targets under softmax(logits)";
  let arguments = (ins Train_FloatTensor:$logits, Train_IdTensor:$targets);
  let results = (outs Train_Scalar:$result);
  let assemblyFormat = "$logits `,` $targets attr-dict `:` type($logits) `,` type($targets) `->` type($result)";
  let hasVerifier = 1;
}

// Pipeline ops

def Train_TransferOp : Train_Op<"transfer", [Pure, SameOperandsAndResultType, Differentiable]> {
  let summary = "moves a value from one pipeline stage to another";
  let description = [{
    Inserted by `train-partition` where an op of stage `to` uses a value of
    stage `from`. Numerically the identity; its VJP is the transfer of the
    cotangent back, so autodiff makes the backward transfers explicit too.
    ```mlir
    %a1 = train.transfer %a0 from 0 to 1 : tensor<4x64x128xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$from, I64Attr:$to);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `from` $from `to` $to attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_StageSumOp : Train_Op<"stage_sum", [Pure, SameOperandsAndResultType]> {
  let summary = "sums per-stage partial scalars across the pipeline's stages";
  let description = [{
    `train-optimizer` emits it for global-norm clipping (`grad_clip`) of a
    partitioned model: operand i is the sum of squared gradients of one
    stage's parameters, and the result (the squared global norm) is their
    sum. Unstaged, so every stage gets the result. Executed on one whole
    graph it adds its operands; the pipeline runtime gives each stage only
    its own operand and sums it over the stages with an all-reduce of the
    stages' communicator.
    ```mlir
    %sq = train.stage_sum %sq0, %sq1 : tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$partials);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$partials attr-dict `:` type($result)";
  let hasVerifier = 1;
}

// Optimizer ops

def Train_DescendOp : Train_Op<"descend", [Pure,
    AllTypesMatch<["param", "direction", "result"]>]> {
  let summary = "p - lr * direction: the last step of every optimizer update";
  let description = [{
    `train-optimizer` ends each parameter's update with this op so that
    passes acting on the update direction (`train-delay-ef`) find it.
    ```mlir
    %new = train.descend %p, %dir, %lr : tensor<128x384xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$direction,
                       Train_Scalar:$lr);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$param `,` $direction `,` $lr attr-dict `:` type($param) `,` type($lr)";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$param, "::mlir::Value":$direction, "::mlir::Value":$lr), [{
    build($_builder, $_state, param.getType(), param, direction, lr);
  }]>];
}

def Train_NewtonSchulzOp : Train_Op<"newton_schulz", [Pure, SameOperandsAndResultType]> {
  let summary = "Muon's quintic Newton-Schulz orthogonalisation of a matrix";
  let description = [{
    X = G / (‖G‖_F + 1e-7), transposed when rows > cols; `steps` times:
    A = X Xᵀ, B = b·A + c·A², X = a·X + B·X; transposed back. Muon uses
    (a, b, c) = (3.4445, −4.7750, 2.0315) and 5 steps (Jordan et al., 2024).

    `bf16` (set by `train-mixed-precision`): the iteration's matrices are
    stored in bf16, as Muon's reference implementation runs it on bf16
    tensor cores: X, A, B and each step's X are rounded to the nearest
    bf16 (ties to even) where they are made, the GEMMs' products summed in
    f32, B's two terms added in f32 before its rounding. The result is the
    last X, bf16 values in an f32 tensor.
  }];
  let arguments = (ins Train_FloatTensor:$input,
                       DefaultValuedAttr<I64Attr, "5">:$steps,
                       DefaultValuedAttr<F64Attr, "3.4445">:$a,
                       DefaultValuedAttr<F64Attr, "-4.7750">:$b,
                       DefaultValuedAttr<F64Attr, "2.0315">:$c,
                       UnitAttr:$bf16);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_NewtonSchulzBatchOp : Train_Op<"newton_schulz_batch", [Pure]> {
  let summary = "train.newton_schulz of several matrices of one shape, stacked";
  let description = [{
    The k inputs, matrices of one type [m, n], each orthogonalised exactly
    as `train.newton_schulz` with the same attributes orthogonalises it on
    its own; the results stacked as [k, m, n], result i the i-th input's.
    Made by `train-batch-newton-schulz`, so that a GPU runs the k
    iterations' GEMMs as batched GEMMs (one launch a product for all k
    matrices, not one a matrix).
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$inputs,
                       DefaultValuedAttr<I64Attr, "5">:$steps,
                       DefaultValuedAttr<F64Attr, "3.4445">:$a,
                       DefaultValuedAttr<F64Attr, "-4.7750">:$b,
                       DefaultValuedAttr<F64Attr, "2.0315">:$c,
                       UnitAttr:$bf16);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

// Gossip ops (decentralized data parallelism; added by `train-gossip`)

def Train_GossipMixOp : Train_Op<"gossip_mix", [HasParent<"OuterOp">,
    SameOperandsAndResultType]> {
  let summary = "mixes a value with the same value of this round's gossip peers";
  let description = [{
    The exchange of a gossip outer round (GASLoC, Cagnasso, Belilovsky and
    Oyallon, arXiv 2606.11081): replica i replaces its value z_i by

      z_i − α·Σ_{j ∈ N_t(i)} λ_ij·(z_i − z_j)

    where N_t(i) are the peers the runtime draws for round t from the
    topology recorded on the enclosing `train.outer` (`topology`,
    `replicas`, `gossip_seed`), and λ_ij are Metropolis–Hastings weights
    1 / (1 + max(deg_i, deg_j)) — symmetric, so the mean over replicas is
    preserved. With α = 1 a pairwise matching is exact pair averaging and
    the complete graph is the exact mean over replicas (an all-reduce,
    i.e. DiLoCo's averaging). With one replica it is the identity.

    The op says only "mix this value with the peers of this round"; which
    peers, and how the bytes travel, is the runtime's business. Each op of
    an outer round is one exchange of one tensor with every peer.

    ```mlir
    %m = train.gossip_mix %z {alpha = 1.000000e+00 : f64} : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // STRETTO_TRAIN_OPS
