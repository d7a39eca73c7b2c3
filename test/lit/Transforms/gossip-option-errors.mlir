// Pass options are checked like the trainer dictionary; each RUN line gives
// one bad option.
// RUN: not stretto-opt %s --train-gossip="topology=star" 2>&1 | FileCheck %s --check-prefix=TOPO
// TOPO: error: unknown topology 'star'; expected complete, ring, exponential, one-peer or two-peer
// RUN: not stretto-opt %s --train-gossip="local-steps=4,x" 2>&1 | FileCheck %s --check-prefix=STEPS
// STEPS: error: local-steps '4,x' must be one integer >= 0 or a comma list of them, one per replica
// RUN: not stretto-opt %s --train-gossip="local-steps=-1" 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: local-steps '-1' must be one integer >= 0
// RUN: not stretto-opt %s --train-gossip="replicas=-2" 2>&1 | FileCheck %s --check-prefix=REPL
// REPL: error: replicas must be >= 1, got -2
// RUN: not stretto-opt %s --train-gossip="gamma-placement=middle" 2>&1 | FileCheck %s --check-prefix=PLACE
// PLACE: error: unknown gamma-placement 'middle'; expected before-mixing or after-mixing
// RUN: not stretto-opt %s --train-gossip="alpha=1.5" 2>&1 | FileCheck %s --check-prefix=ALPHA
// ALPHA: error: alpha must be in (0, 1], got 1.5
// RUN: not stretto-opt %s --train-gossip="momentum=1.2" 2>&1 | FileCheck %s --check-prefix=GAMMA
// GAMMA: error: momentum (outer acceleration γ) must be in [0, 1), got 1.2
// RUN: not stretto-opt %s --train-gossip="replicas=4 local-steps=1,2,3" 2>&1 | FileCheck %s --check-prefix=COUNT
// COUNT: error: local-steps has 3 entries for 4 replicas
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}
