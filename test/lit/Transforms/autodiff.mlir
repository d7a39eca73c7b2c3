// RUN: stretto-opt %s -split-input-file --train-autodiff | FileCheck %s

// Rank-2 matmul: dA = G Bᵀ and dB = Aᵀ G, seeded by a loss cotangent of 1
// broadcast through reduce_sum; forward ops are kept unchanged.
// CHECK-LABEL: train.model @matmul
// CHECK:         %[[A:.*]] = train.read @a : tensor<2x3xf32>
// CHECK:         %[[B:.*]] = train.read @b : tensor<3x4xf32>
// CHECK:         %[[Y:.*]] = train.matmul %[[A]], %[[B]] : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
// CHECK:         %[[L:.*]] = train.reduce_sum %[[Y]] [0, 1] : tensor<2x4xf32> -> tensor<f32>
// CHECK:         %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK:         %[[ONEK:.*]] = train.reshape %[[ONE]] : tensor<f32> -> tensor<1x1xf32>
// CHECK:         %[[G:.*]] = train.broadcast %[[ONEK]] : tensor<1x1xf32> -> tensor<2x4xf32>
// CHECK:         %[[BT:.*]] = train.transpose %[[B]] [1, 0] : tensor<3x4xf32> -> tensor<4x3xf32>
// CHECK:         %[[DA:.*]] = train.matmul %[[G]], %[[BT]] : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
// CHECK:         %[[AT:.*]] = train.transpose %[[A]] [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
// CHECK:         %[[DB:.*]] = train.matmul %[[AT]], %[[G]] : tensor<3x2xf32>, tensor<2x4xf32> -> tensor<3x4xf32>
// CHECK:         train.grad %[[DA]] for @a : tensor<2x3xf32>
// CHECK-NEXT:    train.grad %[[DB]] for @b : tensor<3x4xf32>
// CHECK-NEXT:    train.yield %[[L]] : tensor<f32>
train.model @matmul {
  train.param @a : tensor<2x3xf32> = normal(0.1)
  train.param @b : tensor<3x4xf32> = normal(0.1)
  train.step {
    %a = train.read @a : tensor<2x3xf32>
    %b = train.read @b : tensor<3x4xf32>
    %y = train.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A batched lhs with a shared rank-2 rhs: the batch folds into the rows, so
// dW = reshape(X, [10, 4])ᵀ reshape(G, [10, 3]); the input x gets no gradient.
// CHECK-LABEL: train.model @matmul_shared_rhs
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x5x4xf32>
// CHECK:         %[[W:.*]] = train.read @w : tensor<4x3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1x1xf32> -> tensor<2x5x3xf32>
// CHECK-NOT:     train.matmul %[[G]]
// CHECK:         %[[X2:.*]] = train.reshape %[[X]] : tensor<2x5x4xf32> -> tensor<10x4xf32>
// CHECK:         %[[G2:.*]] = train.reshape %[[G]] : tensor<2x5x3xf32> -> tensor<10x3xf32>
// CHECK:         %[[X2T:.*]] = train.transpose %[[X2]] [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
// CHECK:         %[[DW:.*]] = train.matmul %[[X2T]], %[[G2]] : tensor<4x10xf32>, tensor<10x3xf32> -> tensor<4x3xf32>
// CHECK:         train.grad %[[DW]] for @w : tensor<4x3xf32>
train.model @matmul_shared_rhs {
  train.param @w : tensor<4x3xf32> = normal(0.1)
  train.step {
    %x = train.input "x" : tensor<2x5x4xf32>
    %w = train.read @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<2x5x4xf32>, tensor<4x3xf32> -> tensor<2x5x3xf32>
    %l = train.reduce_sum %y [0, 1, 2] : tensor<2x5x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A batched lhs whose own gradient flows back: dX = G Wᵀ keeps the batch dims.
// CHECK-LABEL: train.model @matmul_batched_lhs_grad
// CHECK:         %[[X:.*]] = train.read @x : tensor<2x5x4xf32>
// CHECK:         %[[W:.*]] = train.input "w" : tensor<4x3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1x1xf32> -> tensor<2x5x3xf32>
// CHECK:         %[[WT:.*]] = train.transpose %[[W]] [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK:         %[[DX:.*]] = train.matmul %[[G]], %[[WT]] : tensor<2x5x3xf32>, tensor<3x4xf32> -> tensor<2x5x4xf32>
// CHECK:         train.grad %[[DX]] for @x : tensor<2x5x4xf32>
train.model @matmul_batched_lhs_grad {
  train.param @x : tensor<2x5x4xf32> = normal(0.1)
  train.step {
    %x = train.read @x : tensor<2x5x4xf32>
    %w = train.input "w" : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<2x5x4xf32>, tensor<4x3xf32> -> tensor<2x5x3xf32>
    %l = train.reduce_sum %y [0, 1, 2] : tensor<2x5x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A batched matmul with a batched rhs: both gradients are batched matmuls
// with the last two dims swapped, no reshape.
// CHECK-LABEL: train.model @matmul_batched
// CHECK:         %[[A:.*]] = train.read @a : tensor<2x3x4xf32>
// CHECK:         %[[B:.*]] = train.read @b : tensor<2x4x5xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} -> tensor<2x3x5xf32>
// CHECK-NOT:     train.reshape
// CHECK:         %[[BT:.*]] = train.transpose %[[B]] [0, 2, 1] : tensor<2x4x5xf32> -> tensor<2x5x4xf32>
// CHECK:         %[[DA:.*]] = train.matmul %[[G]], %[[BT]] : tensor<2x3x5xf32>, tensor<2x5x4xf32> -> tensor<2x3x4xf32>
// CHECK:         %[[AT:.*]] = train.transpose %[[A]] [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
// CHECK:         %[[DB:.*]] = train.matmul %[[AT]], %[[G]] : tensor<2x4x3xf32>, tensor<2x3x5xf32> -> tensor<2x4x5xf32>
// CHECK:         train.grad %[[DA]] for @a
// CHECK:         train.grad %[[DB]] for @b
train.model @matmul_batched {
  train.param @a : tensor<2x3x4xf32> = normal(0.1)
  train.param @b : tensor<2x4x5xf32> = normal(0.1)
  train.step {
    %a = train.read @a : tensor<2x3x4xf32>
    %b = train.read @b : tensor<2x4x5xf32>
    %y = train.matmul %a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32> -> tensor<2x3x5xf32>
    %l = train.reduce_sum %y [0, 1, 2] : tensor<2x3x5xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Broadcasting add/sub: the cotangent is summed over the broadcast dims —
// the leading dim for a [3] bias, dim 1 (kept as size 1) for a [2, 1] column —
// and sub negates its rhs contribution.
// CHECK-LABEL: train.model @add_broadcast
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK:         %[[NEG:.*]] = train.neg %[[G]] : tensor<2x3xf32>
// CHECK:         %[[RC:.*]] = train.reduce_sum %[[NEG]] [1] : tensor<2x3xf32> -> tensor<2xf32>
// CHECK:         %[[DC:.*]] = train.reshape %[[RC]] : tensor<2xf32> -> tensor<2x1xf32>
// CHECK:         %[[DB:.*]] = train.reduce_sum %[[G]] [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK:         train.grad %[[DB]] for @b : tensor<3xf32>
// CHECK:         train.grad %[[DC]] for @c : tensor<2x1xf32>
train.model @add_broadcast {
  train.param @b : tensor<3xf32> = zeros
  train.param @c : tensor<2x1xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %b = train.read @b : tensor<3xf32>
    %c = train.read @c : tensor<2x1xf32>
    %y = train.add %x, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %z = train.sub %y, %c : tensor<2x3xf32>, tensor<2x1xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A broadcast scalar parameter sums over every dim.
// CHECK-LABEL: train.model @add_scalar_param
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK:         %[[DS:.*]] = train.reduce_sum %[[G]] [0, 1] : tensor<2x3xf32> -> tensor<f32>
// CHECK:         train.grad %[[DS]] for @s : tensor<f32>
train.model @add_scalar_param {
  train.param @s : tensor<f32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %s = train.read @s : tensor<f32>
    %y = train.add %x, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Fan-out: a value used twice gets one gradient, the sum of both contributions.
// CHECK-LABEL: train.model @fanout
// CHECK:         %[[W:.*]] = train.read @w : tensor<3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[C1:.*]] = train.mul %[[G]], %[[W]] : tensor<3xf32>
// CHECK-NEXT:    %[[C2:.*]] = train.mul %[[G]], %[[W]] : tensor<3xf32>
// CHECK-NEXT:    %[[SUM:.*]] = train.add %[[C1]], %[[C2]] : tensor<3xf32>
// CHECK-NEXT:    train.grad %[[SUM]] for @w : tensor<3xf32>
// CHECK-NOT:     train.grad
train.model @fanout {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %y = train.mul %w, %w : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Two reads of one parameter: their gradients are summed into one train.grad.
// CHECK-LABEL: train.model @two_reads
// CHECK:         %[[X:.*]] = train.input "x" : tensor<3xf32>
// CHECK:         %[[E:.*]] = train.exp %{{.*}} : tensor<3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// CHECK:         %[[DEXP:.*]] = train.mul %[[G]], %[[E]] : tensor<3xf32>
// CHECK:         %[[DMUL:.*]] = train.mul %[[G]], %[[X]] : tensor<3xf32>
// CHECK:         %[[SUM:.*]] = train.add %[[DEXP]], %[[DMUL]] : tensor<3xf32>
// CHECK:         train.grad %[[SUM]] for @w : tensor<3xf32>
// CHECK-NOT:     train.grad
train.model @two_reads {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %w1 = train.read @w : tensor<3xf32>
    %a = train.mul %w1, %x : tensor<3xf32>
    %w2 = train.read @w : tensor<3xf32>
    %b = train.exp %w2 : tensor<3xf32>
    %y = train.add %a, %b : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// cross_entropy backward is (softmax(logits) - one_hot(targets)) / N with
// N = 6 positions; embedding backward scatters the rows back by token id.
// CHECK-LABEL: train.model @embedding_cross_entropy
// CHECK:         %[[TOK:.*]] = train.input "tokens" : tensor<2x3xi32>
// CHECK:         %[[TGT:.*]] = train.input "targets" : tensor<2x3xi32>
// CHECK:         %[[X:.*]] = train.embedding %{{.*}}[%[[TOK]]] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
// CHECK:         %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK:         %[[P:.*]] = train.softmax %[[X]] : tensor<2x3x4xf32>
// CHECK:         %[[OH:.*]] = train.one_hot %[[TGT]] : tensor<2x3xi32> -> tensor<2x3x4xf32>
// CHECK:         %[[INVN:.*]] = train.constant dense<0.166666672> : tensor<f32>
// CHECK:         %[[SCALE:.*]] = train.mul %[[ONE]], %[[INVN]] : tensor<f32>
// CHECK:         %[[DIFF:.*]] = train.sub %[[P]], %[[OH]] : tensor<2x3x4xf32>
// CHECK:         %[[DX:.*]] = train.mul %[[DIFF]], %[[SCALE]] : tensor<2x3x4xf32>, tensor<f32> -> tensor<2x3x4xf32>
// CHECK:         %[[DT:.*]] = train.scatter_rows %[[DX]] into rows[%[[TOK]]] : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<8x4xf32>
// CHECK:         train.grad %[[DT]] for @wte : tensor<8x4xf32>
train.model @embedding_cross_entropy {
  train.param @wte : tensor<8x4xf32> = normal(0.02) {role = "embedding"}
  train.step {
    %tok = train.input "tokens" : tensor<2x3xi32>
    %tgt = train.input "targets" : tensor<2x3xi32>
    %e = train.read @wte : tensor<8x4xf32>
    %x = train.embedding %e[%tok] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
    %l = train.cross_entropy %x, %tgt : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// layer_norm: one train.norm_grad (centered, the op's eps) stacks dx's 2
// rows, dgamma and dbeta as [4, 4]; dgamma and dbeta are its rows 2 and 3
// (dx, of an input, is not taken).
// CHECK-LABEL: train.model @layer_norm_params
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x4xf32>
// CHECK:         %[[GAMMA:.*]] = train.read @g : tensor<4xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %[[ALL:.*]] = train.norm_grad %[[X]], %[[GAMMA]], %[[G]] centered {eps = 1.000000e-03 : f64} : tensor<2x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    %[[S1:.*]] = train.slice %[[ALL]] axis = 0 offset = 2 : tensor<4x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT:    %[[DGAMMA:.*]] = train.reshape %[[S1]] : tensor<1x4xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[S2:.*]] = train.slice %[[ALL]] axis = 0 offset = 3 : tensor<4x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT:    %[[DBETA:.*]] = train.reshape %[[S2]] : tensor<1x4xf32> -> tensor<4xf32>
// CHECK-NEXT:    train.grad %[[DGAMMA]] for @g : tensor<4xf32>
// CHECK-NEXT:    train.grad %[[DBETA]] for @b : tensor<4xf32>
train.model @layer_norm_params {
  train.param @g : tensor<4xf32> = ones
  train.param @b : tensor<4xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.read @g : tensor<4xf32>
    %b = train.read @b : tensor<4xf32>
    %y = train.layer_norm %x, %g, %b {eps = 1.0e-3 : f64} : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// layer_norm input gradient: rows 0 and 1 of train.norm_grad, with the
// default eps 1e-5.
// CHECK-LABEL: train.model @layer_norm_input
// CHECK:         %[[X:.*]] = train.read @w : tensor<2x4xf32>
// CHECK:         %[[GAMMA:.*]] = train.input "gamma" : tensor<4xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %[[ALL:.*]] = train.norm_grad %[[X]], %[[GAMMA]], %[[G]] centered {eps = 1.000000e-05 : f64} : tensor<2x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    %[[S:.*]] = train.slice %[[ALL]] axis = 0 offset = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK:         train.grad %[[S]] for @w : tensor<2x4xf32>
train.model @layer_norm_input {
  train.param @w : tensor<2x4xf32> = normal(1.0)
  train.step {
    %x = train.read @w : tensor<2x4xf32>
    %gamma = train.input "gamma" : tensor<4xf32>
    %y = train.layer_norm %x, %gamma, %gamma : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// rms_norm: train.norm_grad without `centered` stacks dx's 2 rows and
// dgamma as [3, 4].
// CHECK-LABEL: train.model @rms_norm
// CHECK:         %[[X:.*]] = train.read @w : tensor<2x4xf32>
// CHECK:         %[[GAMMA:.*]] = train.read @g : tensor<4xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %[[ALL:.*]] = train.norm_grad %[[X]], %[[GAMMA]], %[[G]] {eps = 2.500000e-01 : f64} : tensor<2x4xf32>, tensor<4xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %[[S0:.*]] = train.slice %[[ALL]] axis = 0 offset = 0 : tensor<3x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %[[S1:.*]] = train.slice %[[ALL]] axis = 0 offset = 2 : tensor<3x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT:    %[[DGAMMA:.*]] = train.reshape %[[S1]] : tensor<1x4xf32> -> tensor<4xf32>
// CHECK-NEXT:    train.grad %[[S0]] for @w : tensor<2x4xf32>
// CHECK-NEXT:    train.grad %[[DGAMMA]] for @g : tensor<4xf32>
train.model @rms_norm {
  train.param @w : tensor<2x4xf32> = normal(1.0)
  train.param @g : tensor<4xf32> = ones
  train.step {
    %x = train.read @w : tensor<2x4xf32>
    %g = train.read @g : tensor<4xf32>
    %y = train.rms_norm %x, %g {eps = 0.25 : f64} : tensor<2x4xf32>, tensor<4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// softmax: dx = y * (g - sum_last(g * y)), using the forward result y (causal
// or not: masked entries have y = 0).
// CHECK-LABEL: train.model @softmax
// CHECK:         %[[Y:.*]] = train.softmax %{{.*}} causal : tensor<3x3xf32>
// CHECK:         %[[T:.*]] = train.input "t" : tensor<3x3xf32>
// CHECK:         %[[G1:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<3x3xf32>
// CHECK:         %[[G:.*]] = train.mul %[[G1]], %[[T]] : tensor<3x3xf32>
// CHECK:         %[[GY:.*]] = train.mul %[[G]], %[[Y]] : tensor<3x3xf32>
// CHECK:         %[[S:.*]] = train.reduce_sum %[[GY]] [1] : tensor<3x3xf32> -> tensor<3xf32>
// CHECK:         %[[SK:.*]] = train.reshape %[[S]] : tensor<3xf32> -> tensor<3x1xf32>
// CHECK:         %[[D:.*]] = train.sub %[[G]], %[[SK]] : tensor<3x3xf32>, tensor<3x1xf32> -> tensor<3x3xf32>
// CHECK:         %[[DX:.*]] = train.mul %[[Y]], %[[D]] : tensor<3x3xf32>
// CHECK:         train.grad %[[DX]] for @w : tensor<3x3xf32>
train.model @softmax {
  train.param @w : tensor<3x3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    %y = train.softmax %w causal : tensor<3x3xf32>
    %t = train.input "t" : tensor<3x3xf32>
    %z = train.mul %y, %t : tensor<3x3xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// attention's gradient is one fused train.attention_grad (P recomputed per
// block inside it) whose [3, ...] result stacks dq, dk and dv; each is a
// slice of it, reshaped back to q's type.
// CHECK-LABEL: train.model @attention
// CHECK:         %[[Q:.*]] = train.read @q : tensor<1x2x3x4xf32>
// CHECK:         %[[K:.*]] = train.read @k : tensor<1x2x3x4xf32>
// CHECK:         %[[V:.*]] = train.read @v : tensor<1x2x3x4xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1x1x1xf32> -> tensor<1x2x3x4xf32>
// CHECK:         %[[ALL:.*]] = train.attention_grad %[[Q]], %[[K]], %[[V]], %[[G]] causal {scale = 5.000000e-01 : f64} : tensor<1x2x3x4xf32> -> tensor<3x1x2x3x4xf32>
// CHECK:         %[[S0:.*]] = train.slice %[[ALL]] axis = 0 offset = 0 : tensor<3x1x2x3x4xf32> -> tensor<1x1x2x3x4xf32>
// CHECK:         %[[DQ:.*]] = train.reshape %[[S0]] : tensor<1x1x2x3x4xf32> -> tensor<1x2x3x4xf32>
// CHECK:         %[[S1:.*]] = train.slice %[[ALL]] axis = 0 offset = 1 : tensor<3x1x2x3x4xf32> -> tensor<1x1x2x3x4xf32>
// CHECK:         %[[DK:.*]] = train.reshape %[[S1]] : tensor<1x1x2x3x4xf32> -> tensor<1x2x3x4xf32>
// CHECK:         %[[S2:.*]] = train.slice %[[ALL]] axis = 0 offset = 2 : tensor<3x1x2x3x4xf32> -> tensor<1x1x2x3x4xf32>
// CHECK:         %[[DV:.*]] = train.reshape %[[S2]] : tensor<1x1x2x3x4xf32> -> tensor<1x2x3x4xf32>
// CHECK-NOT:     train.softmax
// CHECK:         train.grad %[[DQ]] for @q : tensor<1x2x3x4xf32>
// CHECK-NEXT:    train.grad %[[DK]] for @k : tensor<1x2x3x4xf32>
// CHECK-NEXT:    train.grad %[[DV]] for @v : tensor<1x2x3x4xf32>
train.model @attention {
  train.param @q : tensor<1x2x3x4xf32> = normal(1.0)
  train.param @k : tensor<1x2x3x4xf32> = normal(1.0)
  train.param @v : tensor<1x2x3x4xf32> = normal(1.0)
  train.step {
    %q = train.read @q : tensor<1x2x3x4xf32>
    %k = train.read @k : tensor<1x2x3x4xf32>
    %v = train.read @v : tensor<1x2x3x4xf32>
    %o = train.attention %q, %k, %v causal {scale = 0.5 : f64} : tensor<1x2x3x4xf32>
    %l = train.reduce_sum %o [0, 1, 2, 3] : tensor<1x2x3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Non-causal attention: a non-causal attention_grad with the same scale;
// q, k and v being one value, its three gradients are summed.
// CHECK-LABEL: train.model @attention_noncausal
// CHECK:         train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64}
// CHECK:         train.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64} : tensor<1x1x2x2xf32> -> tensor<3x1x1x2x2xf32>
// CHECK-NOT:     causal
// CHECK:         train.add
// CHECK:         train.add
train.model @attention_noncausal {
  train.param @q : tensor<1x1x2x2xf32> = normal(1.0)
  train.step {
    %q = train.read @q : tensor<1x1x2x2xf32>
    %o = train.attention %q, %q, %q {scale = 0.25 : f64} : tensor<1x1x2x2xf32>
    %l = train.reduce_sum %o [0, 1, 2, 3] : tensor<1x1x2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// gelu: y' is one op, train.gelu_grad (the tanh form's derivative,
// 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)), so the backward
// kernel shares gelu's exponential; dx = g * gelu_grad(x).
// CHECK-LABEL: train.model @gelu
// CHECK:         %[[X:.*]] = train.read @w : tensor<3xf32>
// CHECK:         %[[Y:.*]] = train.gelu %[[X]] : tensor<3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[D:.*]] = train.gelu_grad %[[X]] : tensor<3xf32>
// CHECK-NEXT:    %[[DX:.*]] = train.mul %[[G]], %[[D]] : tensor<3xf32>
// CHECK-NEXT:    train.grad %[[DX]] for @w : tensor<3xf32>
train.model @gelu {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %y = train.gelu %w : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// relu: the cotangent is masked by x > 0.
// CHECK-LABEL: train.model @relu
// CHECK:         %[[X:.*]] = train.read @w : tensor<3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[MASK:.*]] = train.gt %[[X]], %[[Z]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DX:.*]] = train.mul %[[G]], %[[MASK]] : tensor<3xf32>
// CHECK-NEXT:    train.grad %[[DX]] for @w : tensor<3xf32>
train.model @relu {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %y = train.relu %w : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Layout ops invert in reverse order: pad -> slice, slice -> pad (same axis
// and offset), transpose -> transpose by the inverse permutation, reshape ->
// reshape to the input type.
// CHECK-LABEL: train.model @layout
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<7x3xf32>
// CHECK-NEXT:    %[[D1:.*]] = train.slice %[[G]] axis = 0 offset = 1 : tensor<7x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT:    %[[D2:.*]] = train.pad %[[D1]] axis = 1 offset = 2 : tensor<4x3xf32> -> tensor<4x6xf32>
// CHECK-NEXT:    %[[D3:.*]] = train.transpose %[[D2]] [1, 0] : tensor<4x6xf32> -> tensor<6x4xf32>
// CHECK-NEXT:    %[[D4:.*]] = train.reshape %[[D3]] : tensor<6x4xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    train.grad %[[D4]] for @w : tensor<2x3x4xf32>
train.model @layout {
  train.param @w : tensor<2x3x4xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x3x4xf32>
    %r = train.reshape %w : tensor<2x3x4xf32> -> tensor<6x4xf32>
    %t = train.transpose %r [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
    %s = train.slice %t axis = 1 offset = 2 : tensor<4x6xf32> -> tensor<4x3xf32>
    %p = train.pad %s axis = 0 offset = 1 : tensor<4x3xf32> -> tensor<7x3xf32>
    %l = train.reduce_sum %p [0, 1] : tensor<7x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A rank-3 transpose [1, 2, 0] is undone by its inverse [2, 0, 1]; an explicit
// broadcast is undone by a reduce_sum over the added dim.
// CHECK-LABEL: train.model @transpose_broadcast
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1x1x1xf32> -> tensor<5x3x4x2xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.reduce_sum %[[G]] [0] : tensor<5x3x4x2xf32> -> tensor<3x4x2xf32>
// CHECK-NEXT:    %[[DT:.*]] = train.transpose %[[DB]] [2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    train.grad %[[DT]] for @w : tensor<2x3x4xf32>
train.model @transpose_broadcast {
  train.param @w : tensor<2x3x4xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x3x4xf32>
    %t = train.transpose %w [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
    %b = train.broadcast %t : tensor<3x4x2xf32> -> tensor<5x3x4x2xf32>
    %l = train.reduce_sum %b [0, 1, 2, 3] : tensor<5x3x4x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// pow with a constant exponent p: d/da = p * a^(p-1); the exponent's own
// gradient (a^p log a) is dropped. div: d/db (x/b) = -(x/b)/b. max sends the
// cotangent to the side that wins (rhs only where rhs > lhs). cos: -sin(x)
// written as -cos(pi/2 - x).
// CHECK-LABEL: train.model @elementwise
// CHECK:         %[[W:.*]] = train.read @w : tensor<3xf32>
// CHECK:         %[[TWO:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         %[[P:.*]] = train.pow %[[W]], %[[TWO]]
// CHECK:         %[[D:.*]] = train.div %{{.*}}, %[[W]] : tensor<3xf32>
// CHECK:         %[[M:.*]] = train.max %[[P]], %[[D]] : tensor<3xf32>
// CHECK:         %[[HALFPI:.*]] = train.constant dense<1.57079637> : tensor<f32>
// CHECK-NEXT:    %[[SHIFT:.*]] = train.sub %[[HALFPI]], %[[M]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[SIN:.*]] = train.cos %[[SHIFT]] : tensor<3xf32>
// CHECK-NEXT:    %[[GS:.*]] = train.mul %{{.*}}, %[[SIN]] : tensor<3xf32>
// CHECK-NEXT:    %[[GM:.*]] = train.neg %[[GS]] : tensor<3xf32>
// CHECK-NEXT:    %[[RW:.*]] = train.gt %[[D]], %[[P]] : tensor<3xf32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[LW:.*]] = train.sub %[[ONE]], %[[RW]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[GP:.*]] = train.mul %[[GM]], %[[LW]] : tensor<3xf32>
// CHECK-NEXT:    %[[GD:.*]] = train.mul %[[GM]], %[[RW]] : tensor<3xf32>
// CHECK-NEXT:    %[[GDD:.*]] = train.mul %[[GD]], %[[D]] : tensor<3xf32>
// CHECK-NEXT:    %[[Q:.*]] = train.div %[[GDD]], %[[W]] : tensor<3xf32>
// CHECK-NEXT:    %[[DWD:.*]] = train.neg %[[Q]] : tensor<3xf32>
// CHECK-NEXT:    %[[ONE2:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PM1:.*]] = train.sub %[[TWO]], %[[ONE2]] : tensor<f32>
// CHECK-NEXT:    %[[APM1:.*]] = train.pow %[[W]], %[[PM1]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DA:.*]] = train.mul %[[TWO]], %[[APM1]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DWP:.*]] = train.mul %[[GP]], %[[DA]] : tensor<3xf32>
// CHECK-NEXT:    %[[SUM:.*]] = train.add %[[DWD]], %[[DWP]] : tensor<3xf32>
// CHECK-NEXT:    train.grad %[[SUM]] for @w : tensor<3xf32>
// CHECK-NOT:     train.log
train.model @elementwise {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %x = train.input "x" : tensor<3xf32>
    %two = train.constant dense<2.0> : tensor<f32>
    %p = train.pow %w, %two : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
    %d = train.div %x, %w : tensor<3xf32>
    %m = train.max %p, %d : tensor<3xf32>
    %c = train.cos %m : tensor<3xf32>
    %l = train.reduce_sum %c [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Gradients come out in parameter declaration order, not read order; state
// reads and metrics (extra yield operands) get no cotangent.
// CHECK-LABEL: train.model @grad_order
// CHECK:         %[[A:.*]] = train.read @a : tensor<3xf32>
// CHECK:         %[[B:.*]] = train.read @b : tensor<3xf32>
// CHECK:         %[[M:.*]] = train.read @m : tensor<3xf32>
// CHECK:         %[[L:.*]] = train.reduce_sum %{{.*}} [0] : tensor<3xf32> -> tensor<f32>
// CHECK:         %[[ML:.*]] = train.reduce_sum %[[M]] [0] : tensor<3xf32> -> tensor<f32>
// CHECK:         %[[DA:.*]] = train.mul %{{.*}}, %[[B]] : tensor<3xf32>
// CHECK:         %[[DB:.*]] = train.mul %{{.*}}, %[[A]] : tensor<3xf32>
// CHECK-NEXT:    train.grad %[[DB]] for @b : tensor<3xf32>
// CHECK-NEXT:    train.grad %[[DA]] for @a : tensor<3xf32>
// CHECK-NEXT:    train.yield %[[L]], %[[ML]] : tensor<f32>, tensor<f32>
train.model @grad_order {
  train.param @b : tensor<3xf32> = zeros
  train.param @a : tensor<3xf32> = zeros
  train.state @m : tensor<3xf32> = zeros
  train.step {
    %a = train.read @a : tensor<3xf32>
    %b = train.read @b : tensor<3xf32>
    %m = train.read @m : tensor<3xf32>
    %y = train.mul %a, %b : tensor<3xf32>
    %z = train.add %y, %m : tensor<3xf32>
    %l = train.reduce_sum %z [0] : tensor<3xf32> -> tensor<f32>
    %ml = train.reduce_sum %m [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l, %ml : tensor<f32>, tensor<f32>
  }
}

// -----

// A bf16 model gets bf16 cotangents and constants throughout.
// CHECK-LABEL: train.model @bf16
// CHECK:         %[[W:.*]] = train.read @w : tensor<2x2xbf16>
// CHECK:         train.constant dense<1.000000e+00> : tensor<bf16>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1x1xbf16> -> tensor<2x2xbf16>
// CHECK:         %[[DW:.*]] = train.mul %[[G]], %{{.*}} : tensor<2x2xbf16>
// CHECK:         train.grad %[[DW]] for @w : tensor<2x2xbf16>
train.model @bf16 {
  train.param @w : tensor<2x2xbf16> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x2xbf16>
    %e = train.exp %w : tensor<2x2xbf16>
    %l = train.reduce_sum %e [0, 1] : tensor<2x2xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}
