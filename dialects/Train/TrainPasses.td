//===- TrainPasses.td - passes over the `train` dialect ----*- tablegen -*-===//
#ifndef STRETTO_TRAIN_PASSES
#define STRETTO_TRAIN_PASSES

include "mlir/Pass/PassBase.td"

def TrainAutodiff : Pass<"train-autodiff", "::stretto::train::ModelOp"> {
  let summary = "Reverse-mode differentiation of the loss w.r.t. every parameter";
  let description = [{
    Walks `train.step` backwards from the loss (first `train.yield` operand),
    asks each op for its VJP through `DifferentiableOpInterface`, sums the
    contributions of values used more than once, and ends every parameter's
    chain in a `train.grad`. A parameter that reaches the loss through an op
    with no VJP is an error at that op.

    Before:
    ```mlir
    %w = train.read @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.cross_entropy %y, %t : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
    ```
    After (abridged): the forward, then
    ```mlir
    %dy = ... softmax(y) - one_hot(t), scaled by 1/2 ...
    %xt = train.transpose %x [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %dw = train.matmul %xt, %dy : tensor<4x2xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
    train.grad %dw for @w : tensor<4x3xf32>
    train.yield %l : tensor<f32>
    ```
  }];
}

def TrainOptimizer : Pass<"train-optimizer", "::stretto::train::ModelOp"> {
  let summary = "Adds the update phase: SGD, AdamW or Muon from the step's gradients";
  let description = [{
    Appends `train.update`, run once per step after its micro-batches: for
    every `train.grad` of the step it reads the micro-batch mean
    (`train.accumulated_grad`), clips by global norm, computes the learning
    rate schedule from `train.step_count`, declares the optimizer state as
    `train.state` symbols and writes the updated parameters and state; each
    update ends in `train.descend`. Ops get the stage of their parameter.
    Options default to the `trainer` dictionary of the model; a pass option
    given explicitly wins.

    Muon (Jordan et al., 2024) for 2-D `matrix` parameters: M ← βM + (1−β)g,
    U = (1−β)g + βM (Nesterov), O = NewtonSchulz5(U), scaled by
    sqrt(max(1, fan_out/fan_in)) — weights are stored [in, out], so that is
    sqrt(max(1, cols/rows)) — or by 0.2·sqrt(max(rows, cols)) with
    `muon-scale=rms`; decoupled weight decay. All parameters must share one
    element type; decaying schedules need `total_steps`. Embeddings, the head and
    parameters with fewer than 2 dims use AdamW (Loshchilov & Hutter, 2019).
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"\"",
           "sgd | adamw | muon (default: the model's trainer.optimizer, else adamw)">,
    Option<"muonScale", "muon-scale", "std::string", "\"\"",
           "shape (sqrt(max(1,fan_out/fan_in))) | rms (0.2*sqrt(max(rows,cols)))">,
  ];
}

def TrainPartition : Pass<"train-partition", "::stretto::train::ModelOp"> {
  let summary = "Splits a model into pipeline stages with explicit transfers";
  let description = [{
    Runs on the model-level step, before `train-autodiff`. Every op gets a
    `stage` attribute: the layers of parameters (`layer` attribute) map to
    stages through explicit ranges (`stage_ranges` in the trainer, or the
    `ranges` option) or, by default, a partition of the layers into
    contiguous groups that minimises the largest stage cost (FLOPs plus bytes
    of activations, per layer). Embeddings belong to the first stage; the
    head and the loss to the last.

    Partition units make the embedding and the head separable: `embed` (the
    embeddings), `block<l>` (layer l) and `head` (final norm, head, loss).
    `stage_units = ["embed..block1", "block2..head"]` in the trainer (or the
    `units` option) gives each stage's first and last unit (one name for a
    one-unit stage); `unit-costs` gives a measured cost per unit, and the
    balanced split is then over units (stretto-tune's DP). The chosen units
    are recorded on the model as `stage_units`. Where an op of stage s uses a value of
    stage r != s, a `train.transfer` from r to s is inserted. Autodiff then
    gives every VJP op the stage of its forward op, and the transfer's VJP
    sends the cotangent back, so the backward transfers are explicit too.

    ```mlir
    %h = train.add %x, %o {stage = 0 : i64} : tensor<4x8x16xf32>
    %h1 = train.transfer %h from 0 to 1 {stage = 1 : i64} : tensor<4x8x16xf32>
    %n = train.layer_norm %h1, %g, %b {stage = 1 : i64} : ...
    ```
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "0",
           "Number of stages (default: the trainer's stages)">,
    ListOption<"ranges", "ranges", "int64_t",
               "Flattened [first, end) layer pairs, one per stage">,
    ListOption<"unitsOption", "units", "std::string",
               "Partition units per stage, 'first..last' or 'unit' "
               "(units: embed, block<l>, head)">,
    ListOption<"unitCosts", "unit-costs", "double",
               "Measured cost of every partition unit, in order: the balanced "
               "split is over units instead of layers">,
  ];
}

def TrainTwoBufferWeights : Pass<"train-2bw", "::stretto::train::ModelOp"> {
  let summary = "PipeDream-2BW: two weight versions, one-step-delayed gradients";
  let description = [{
    Runs after `train-optimizer`. For every parameter p it declares the
    second version `@p.prev` (starting as a copy of p), makes the step's
    forward and backward read `@p.prev`, and makes the update rotate the
    versions: `@p.prev` takes x(t) and `@p` takes x(t+1). The result is the
    update of record x(t+1) = x(t) − γ·Opt(g(x(t−1))) (Narayanan et al.,
    ICML 2021), whatever the number of stages; a runtime can run the next
    step's micro-batches before this step's update because each micro-batch
    reads the version it needs.

    ```mlir
    train.step { %w = train.read @w.prev ... }
    train.update {
      %cur = train.read @w
      %new = train.descend %cur, %dir, %lr
      train.write %cur to @w.prev
      train.write %new to @w
    }
    ```
  }];
}

def TrainDelayErrorFeedback : Pass<"train-delay-ef", "::stretto::train::ModelOp"> {
  let summary = "Error-feedback correction of the one-step-delayed update";
  let description = [{
    Runs after `train-optimizer` (typically with `train-2bw`). For every
    `train.descend %p, %u, %lr` it keeps u(t−1) in `@p.ef_u` and descends
    along u(t) + λ·(u(t) − u(t−1)) instead, with u(−1) = u(0) (no correction
    on the first step). Optimizer-agnostic: u is whatever direction the base
    optimizer produced (seed: Zmushko et al., ICML 2026, "one-step delay is
    not a barrier"). λ defaults to the trainer's `ef_lambda`.
  }];
  let options = [
    Option<"lambda", "lambda", "double", "-1.0",
           "Correction strength in [0, 1] (default: trainer.ef_lambda, else 1)">,
  ];
}

def TrainGossip : Pass<"train-gossip", "::stretto::train::ModelOp"> {
  let summary = "Local steps plus a gossip outer optimizer (DiLoCo on the complete graph)";
  let description = [{
    Runs after `train-optimizer`. Adds the `train.outer` phase that R
    replicas run after their local steps: replica i takes H_i local steps
    (`train.step` × micro-batches, then `train.update`), then one outer round.
    The round is the gossip outer optimizer of docs/design.md §4.6 (seed: GASLoC,
    Cagnasso, Belilovsky and Oyallon, arXiv 2606.11081), per parameter θ,
    with the anchor θ_i and the previous iterate y_i(t−1) kept as
    `train.state` (`copy_of` the parameter, so y_i(−1) = θ_i(0)):

      g_i = θ_i^local − θ_i                  (drift of the local steps)
      y_i = θ_i + η·g_i                      (post-local-update iterate)
      z_i = y_i + γ·(y_i − y_i(t−1))         (acceleration)
      θ_i(t+1) = gossip_mix(z_i)             (`train.gossip_mix`)

    and the parameter restarts from the new anchor. With
    `gamma-placement=after-mixing` (the published update as transcribed, our
    reading) γ is applied after the exchange instead:
    θ_i(t+1) = gossip_mix(y_i) + γ·(y_i − y_i(t−1)).

    The replicas, their local steps, the topology and the seed of the peer
    draw are recorded as attributes of `train.outer`; the runtime runs the
    local loop and draws N_t(i) each round: `complete` (every replica: the
    exchange is an all-reduce to the exact mean, and the round is DiLoCo with
    Nesterov outer SGD, μ = γ — Douillard et al., 2023), `ring`,
    `exponential` (peers i ± 2^k), `one-peer` / `two-peer` (one or two
    random perfect matchings drawn anew each round). Options default to the
    model's trainer dictionary (`replicas`, `local_steps`, `topology`,
    `outer_lr`, `outer_momentum`, `gossip_alpha`, `gamma_placement`,
    `gossip_seed`); an option given explicitly wins. Without a trainer
    topology, `sync = "diloco"` means `complete`, anything else `one-peer`.
    γ defaults to 0.9 on the complete graph (DiLoCo's μ) and to 0.5
    elsewhere (the value docs/design.md §4.6 says measured best on small models); η to 0.7.

    Before (after `train-optimizer`, abridged):
    ```mlir
    train.model @m attributes {trainer = {replicas = 4, sync = "gossip"}} {
      train.param @w : tensor<4x3xf32> = normal(2.000000e-02)
      train.step { ... }
      train.update { ... train.write %new to @w : tensor<4x3xf32> }
    }
    ```
    After `train-gossip{topology=ring local-steps=20 outer-lr=0.7 momentum=0.5}`:
    ```mlir
    train.state @w.gossip_anchor : tensor<4x3xf32> = zeros {copy_of = @w, of = @w}
    train.state @w.gossip_y_prev : tensor<4x3xf32> = zeros {copy_of = @w, of = @w}
    ...
    train.outer attributes {gossip_seed = 0 : i64, local_steps = array<i64: 20>,
                            replicas = 4 : i64, topology = "ring"} {
      %local = train.read @w : tensor<4x3xf32>
      %anchor = train.read @w.gossip_anchor : tensor<4x3xf32>
      %g = train.sub %local, %anchor : tensor<4x3xf32>
      %y = train.add %anchor, (0.7 · %g)
      %prev = train.read @w.gossip_y_prev : tensor<4x3xf32>
      %z = train.add %y, (0.5 · (%y − %prev))
      train.write %y to @w.gossip_y_prev : tensor<4x3xf32>
      %m = train.gossip_mix %z {alpha = 1.000000e+00 : f64} : tensor<4x3xf32>
      train.write %m to @w.gossip_anchor : tensor<4x3xf32>
      train.write %m to @w : tensor<4x3xf32>
    }
    ```
  }];
  let options = [
    Option<"replicas", "replicas", "int64_t", "0",
           "Number of replicas R (default: trainer.replicas, else 1)">,
    Option<"localSteps", "local-steps", "std::string", "\"\"",
           "Local steps per round: one H for all, or H_0,H_1,... one per replica "
           "(default: trainer.local_steps, else 1)">,
    Option<"topology", "topology", "std::string", "\"\"",
           "complete | ring | exponential | one-peer | two-peer">,
    Option<"outerLr", "outer-lr", "double", "-1.0",
           "Outer learning rate η > 0 (default: trainer.outer_lr, else 0.7)">,
    Option<"momentum", "momentum", "double", "-1.0",
           "Outer acceleration γ in [0, 1) (default: trainer.outer_momentum, else 0.9 "
           "on the complete graph and 0.5 elsewhere)">,
    Option<"alpha", "alpha", "double", "-1.0",
           "Gossip step α in (0, 1]; 1 is exact averaging (default: trainer.gossip_alpha, else 1)">,
    Option<"gammaPlacement", "gamma-placement", "std::string", "\"\"",
           "before-mixing (the spec of record) | after-mixing (the published transcription)">,
    Option<"seed", "seed", "int64_t", "-1",
           "Seed of the runtime's peer draw (default: trainer.gossip_seed, else trainer.seed, else 0)">,
  ];
}

def TrainBatchNewtonSchulz : Pass<"train-batch-newton-schulz", "::stretto::train::ModelOp"> {
  let summary = "Orthogonalises Muon's matrices of one shape together, as one batch";
  let description = [{
    Runs after `train-optimizer` (and `train-mixed-precision`, whose `bf16`
    it keeps). Replaces the `train.newton_schulz` ops of one block that
    agree on their matrix type, steps, coefficients, `bf16` and pipeline
    stage by one `train.newton_schulz_batch` of their inputs and a
    `train.slice` + `train.reshape` per result, so that a GPU runs each
    product of the iteration for all of them as one batched GEMM (a
    12-layer GPT's 48 Muon matrices: 4 batches, not 48 iterations). The
    batch sits before the first reader of any of its results; an input
    made later is moved there with the ops it needs (state reads and
    writes keep their order per state; nothing that reads one of the
    batch's results is moved). An op that cannot join a batch so stays as
    it is. Each result is the same values `train.newton_schulz` makes: the
    batch changes where the work runs, not what it computes. A batch holds
    at most `max-elements` elements of input.

    ```mlir
    %o0 = train.newton_schulz %u0 : tensor<64x256xf32>
    %o1 = train.newton_schulz %u1 : tensor<64x256xf32>
    // becomes
    %b = train.newton_schulz_batch %u0, %u1 : tensor<64x256xf32>, tensor<64x256xf32> -> tensor<2x64x256xf32>
    %s0 = train.slice %b axis = 0 offset = 0 : tensor<2x64x256xf32> -> tensor<1x64x256xf32>
    %o0 = train.reshape %s0 : tensor<1x64x256xf32> -> tensor<64x256xf32>
    ```
  }];
  let options = [
    Option<"maxElements", "max-elements", "int64_t", /*default=*/"int64_t(1) << 26",
           "The most input elements one batch holds (its scratch on a GPU is "
           "about four f32 copies of them)">,
  ];
}

def TrainMixedPrecision : Pass<"train-mixed-precision", "::stretto::train::ModelOp"> {
  let summary = "Stores activations, their gradients and GEMM operands in bf16";
  let description = [{
    Runs after `train-autodiff` and `train-optimizer`. Puts a
    `train.round_bf16` after every step value that is stored in bf16, so
    that every executor rounds at the same points: the results of compute
    ops that depend on the batch (activations and their gradients), and one
    bf16 copy per step of each weight a matmul reads. Parameters, optimizer
    states, the update and outer phases, reductions (reduce_sum,
    scatter_rows, cross_entropy, norm_grad's gain and bias rows), scalars
    and the values handed to `train.grad`/`train.write`/`train.yield` stay
    f32; the fused ops keep their statistics in f32. A matmul whose every
    reader adds a vector of its columns (a linear layer's bias) is not
    rounded itself: the sum is, once, as a GEMM with a bias epilogue makes
    it (`kernel-gemm-epilogue`). Likewise a matmul whose every reader
    multiplies it by a `train.gelu_grad` (a GELU's backward), and that
    gelu_grad: their product is rounded once, as a GEMM with a DGELU
    epilogue makes it. A `train.gelu` of a linear layer's output (the
    product, or its bias sum) reads it unrounded and only its result is
    rounded, as a GEMM with a GELU_AUX epilogue makes it; the output's
    other readers (the GELU's backward) read it rounded. Arithmetic stays
    f32.
    Marks every `train.newton_schulz` (Muon's orthogonalisation, in the
    update) `bf16`: its matrices are rounded to bf16 and its GEMMs run on
    bf16 operands, as Muon's reference implementation does.
    Sets the trainer's `precision` to `bf16`. Running it twice changes
    nothing more.
  }];
}

#endif // STRETTO_TRAIN_PASSES
