// RUN: stretto-opt %s -split-input-file --canonicalize | FileCheck %s

// x + 0 and 0 + x fold to x when the zero (here a broadcast scalar) does not
// change x's type.
// CHECK-LABEL: train.model @add_zero
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3xf32>
// CHECK-NOT:     train.add
// CHECK:         train.reduce_sum %[[X]] [0, 1]
// CHECK-NOT:     train.add
train.model @add_zero {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %z = train.constant dense<0.0> : tensor<f32>
    %a = train.add %x, %z : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %b = train.add %z, %a : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %b [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A zero of the same shape as x also folds, on either side.
// CHECK-LABEL: train.model @add_zero_same_shape
// CHECK:         %[[X:.*]] = train.input "x" : tensor<4xbf16>
// CHECK-NOT:     train.add
// CHECK:         train.reduce_sum %[[X]] [0] : tensor<4xbf16> -> tensor<bf16>
train.model @add_zero_same_shape {
  train.step {
    %x = train.input "x" : tensor<4xbf16>
    %z = train.constant dense<0.0> : tensor<4xbf16>
    %a = train.add %z, %x : tensor<4xbf16>
    %b = train.add %a, %z : tensor<4xbf16>
    %l = train.reduce_sum %b [0] : tensor<4xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}

// -----

// x + 0 must not fold when the zero broadcasts x to a bigger shape: the
// result has a different type than x.
// CHECK-LABEL: train.model @add_zero_broadcasts
// CHECK-DAG:     %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<2x4xf32>
// CHECK-DAG:     %[[X:.*]] = train.input "x" : tensor<4xf32>
// CHECK:         %[[A:.*]] = train.add %[[X]], %[[Z]] : tensor<4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
// Commutative ops put the constant on the right; the broadcast is still not folded.
// CHECK:         %[[B:.*]] = train.add %[[X]], %[[Z]] : tensor<4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK:         train.add %[[A]], %[[B]] : tensor<2x4xf32>
train.model @add_zero_broadcasts {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %z = train.constant dense<0.0> : tensor<2x4xf32>
    %a = train.add %x, %z : tensor<4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %b = train.add %z, %x : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %c = train.add %a, %b : tensor<2x4xf32>
    %l = train.reduce_sum %c [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// x + c with c a non-zero or non-splat constant does not fold.
// CHECK-LABEL: train.model @add_nonzero
// CHECK-DAG:     %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-DAG:     %[[MIX:.*]] = train.constant dense<[0.000000e+00, 1.000000e+00]> : tensor<2xf32>
// CHECK-DAG:     %[[X:.*]] = train.input "x" : tensor<2xf32>
// CHECK:         %[[A:.*]] = train.add %[[X]], %[[ONE]] : tensor<2xf32>, tensor<f32> -> tensor<2xf32>
// CHECK:         train.add %[[A]], %[[MIX]] : tensor<2xf32>
train.model @add_nonzero {
  train.step {
    %x = train.input "x" : tensor<2xf32>
    %one = train.constant dense<1.0> : tensor<f32>
    %mix = train.constant dense<[0.0, 1.0]> : tensor<2xf32>
    %a = train.add %x, %one : tensor<2xf32>, tensor<f32> -> tensor<2xf32>
    %b = train.add %a, %mix : tensor<2xf32>
    %l = train.reduce_sum %b [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// x * 1 and 1 * x fold to x when the one does not change x's type.
// CHECK-LABEL: train.model @mul_one
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3x4xf32>
// CHECK-NOT:     train.mul
// CHECK:         train.reduce_sum %[[X]] [0, 1, 2]
train.model @mul_one {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %one = train.constant dense<1.0> : tensor<4xf32>
    %s = train.constant dense<1.0> : tensor<f32>
    %a = train.mul %x, %one : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>
    %b = train.mul %s, %a : tensor<f32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
    %l = train.reduce_sum %b [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// x * 1 must not fold when the one broadcasts x; x * 0 and x + 1 are not folded.
// CHECK-LABEL: train.model @mul_one_broadcasts
// CHECK-DAG:     %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK-DAG:     %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-DAG:     %[[X:.*]] = train.input "x" : tensor<4xf32>
// CHECK:         %[[A:.*]] = train.mul %[[X]], %[[ONE]] : tensor<4xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
// CHECK:         train.mul %[[A]], %[[Z]] : tensor<3x4xf32>, tensor<f32> -> tensor<3x4xf32>
train.model @mul_one_broadcasts {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %one = train.constant dense<1.0> : tensor<3x4xf32>
    %z = train.constant dense<0.0> : tensor<f32>
    %a = train.mul %x, %one : tensor<4xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
    %b = train.mul %a, %z : tensor<3x4xf32>, tensor<f32> -> tensor<3x4xf32>
    %l = train.reduce_sum %b [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A transpose by the identity permutation folds away.
// CHECK-LABEL: train.model @transpose_identity
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3xf32>
// CHECK-NOT:     train.transpose
// CHECK:         train.reduce_sum %[[X]] [0]
train.model @transpose_identity {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %t = train.transpose %x [0, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
    %r = train.reduce_sum %t [0] : tensor<2x3xf32> -> tensor<3xf32>
    %l = train.reduce_sum %r [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A transpose of its inverse is the identity: both fold away.
// CHECK-LABEL: train.model @transpose_inverse
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3x4xf32>
// CHECK-NOT:     train.transpose
// CHECK:         train.reduce_sum %[[X]] [1, 2] : tensor<2x3x4xf32> -> tensor<2xf32>
train.model @transpose_inverse {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %t1 = train.transpose %x [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
    %t2 = train.transpose %t1 [2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
    %r = train.reduce_sum %t2 [1, 2] : tensor<2x3x4xf32> -> tensor<2xf32>
    %l = train.reduce_sum %r [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Two transposes compose into one: result dim d is x dim inner[outer[d]],
// here [1, 2, 0] then [2, 1, 0] gives [0, 2, 1].
// CHECK-LABEL: train.model @transpose_compose
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3x4xf32>
// CHECK-NEXT:    %[[T:.*]] = train.transpose %[[X]] [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
// CHECK-NOT:     train.transpose
// CHECK:         train.reduce_sum %[[T]] [1, 2] : tensor<2x4x3xf32> -> tensor<2xf32>
train.model @transpose_compose {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %t1 = train.transpose %x [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
    %t2 = train.transpose %t1 [2, 1, 0] : tensor<3x4x2xf32> -> tensor<2x4x3xf32>
    %r = train.reduce_sum %t2 [1, 2] : tensor<2x4x3xf32> -> tensor<2xf32>
    %l = train.reduce_sum %r [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A chain of three transposes composes into one.
// CHECK-LABEL: train.model @transpose_chain
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3x4x5xf32>
// CHECK-NEXT:    %[[T:.*]] = train.transpose %[[X]] [3, 1, 0, 2] : tensor<2x3x4x5xf32> -> tensor<5x3x2x4xf32>
// CHECK-NOT:     train.transpose
train.model @transpose_chain {
  train.step {
    %x = train.input "x" : tensor<2x3x4x5xf32>
    %t1 = train.transpose %x [1, 0, 2, 3] : tensor<2x3x4x5xf32> -> tensor<3x2x4x5xf32>
    %t2 = train.transpose %t1 [3, 0, 1, 2] : tensor<3x2x4x5xf32> -> tensor<5x3x2x4xf32>
    %t3 = train.transpose %t2 [0, 1, 2, 3] : tensor<5x3x2x4xf32> -> tensor<5x3x2x4xf32>
    %l = train.reduce_sum %t3 [0, 1, 2, 3] : tensor<5x3x2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A transpose whose input is used elsewhere still composes; the inner one stays for its other user.
// CHECK-LABEL: train.model @transpose_compose_shared
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3xf32>
// CHECK-DAG:     %[[T1:.*]] = train.transpose %[[X]] [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
// CHECK-DAG:     train.reduce_sum %[[T1]] [0, 1] : tensor<3x2xf32> -> tensor<f32>
// CHECK-DAG:     train.reduce_sum %[[X]] [0, 1] : tensor<2x3xf32> -> tensor<f32>
train.model @transpose_compose_shared {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %t1 = train.transpose %x [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
    %t2 = train.transpose %t1 [1, 0] : tensor<3x2xf32> -> tensor<2x3xf32>
    %a = train.reduce_sum %t1 [0, 1] : tensor<3x2xf32> -> tensor<f32>
    %b = train.reduce_sum %t2 [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %a, %b : tensor<f32>, tensor<f32>
  }
}

// -----

// A reshape to the same type folds away.
// CHECK-LABEL: train.model @reshape_identity
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3xi32>
// CHECK-NOT:     train.reshape
// CHECK:         train.one_hot %[[X]] : tensor<2x3xi32> -> tensor<2x3x4xf32>
train.model @reshape_identity {
  train.step {
    %x = train.input "x" : tensor<2x3xi32>
    %r = train.reshape %x : tensor<2x3xi32> -> tensor<2x3xi32>
    %h = train.one_hot %r : tensor<2x3xi32> -> tensor<2x3x4xf32>
    %l = train.reduce_sum %h [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A reshape of a reshape is one reshape of the original input.
// CHECK-LABEL: train.model @reshape_reshape
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3x4xf32>
// CHECK-NEXT:    %[[R:.*]] = train.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<4x6xf32>
// CHECK-NOT:     train.reshape
// CHECK:         train.reduce_sum %[[R]] [0] : tensor<4x6xf32> -> tensor<6xf32>
train.model @reshape_reshape {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %r1 = train.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
    %r2 = train.reshape %r1 : tensor<24xf32> -> tensor<2x12xf32>
    %r3 = train.reshape %r2 : tensor<2x12xf32> -> tensor<4x6xf32>
    %r = train.reduce_sum %r3 [0] : tensor<4x6xf32> -> tensor<6xf32>
    %l = train.reduce_sum %r [0] : tensor<6xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A reshape chain that comes back to the input type folds away entirely.
// CHECK-LABEL: train.model @reshape_roundtrip
// CHECK:         %[[X:.*]] = train.input "x" : tensor<2x3xf32>
// CHECK-NOT:     train.reshape
// CHECK:         train.reduce_sum %[[X]] [1] : tensor<2x3xf32> -> tensor<2xf32>
train.model @reshape_roundtrip {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %r1 = train.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
    %r2 = train.reshape %r1 : tensor<6xf32> -> tensor<2x3xf32>
    %r = train.reduce_sum %r2 [1] : tensor<2x3xf32> -> tensor<2xf32>
    %l = train.reduce_sum %r [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A broadcast to the input's own type folds away; a real broadcast stays.
// CHECK-LABEL: train.model @broadcast_identity
// CHECK:         %[[X:.*]] = train.input "x" : tensor<3xf32>
// CHECK-NEXT:    %[[B:.*]] = train.broadcast %[[X]] : tensor<3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    train.add %[[B]], %[[X]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
// CHECK-NOT:     train.broadcast
train.model @broadcast_identity {
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %same = train.broadcast %x : tensor<3xf32> -> tensor<3xf32>
    %big = train.broadcast %x : tensor<3xf32> -> tensor<2x3xf32>
    %s = train.add %big, %same : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %s [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A broadcast that only adds a leading 1 changes the type and is kept.
// CHECK-LABEL: train.model @broadcast_leading_one
// CHECK:         train.broadcast %{{.*}} : tensor<3xf32> -> tensor<1x3xf32>
train.model @broadcast_leading_one {
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %b = train.broadcast %x : tensor<3xf32> -> tensor<1x3xf32>
    %l = train.reduce_sum %b [0, 1] : tensor<1x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A sum of pads of slices that tile x along one axis, each padded back where
// it was cut, is x (attention_grad's stacked dq/dk/dv, split and restacked by
// the backward of the q/k/v split); the order of the terms does not matter.
// CHECK-LABEL: train.model @pads_tiling_one_value
// CHECK:         %[[X:.*]] = train.input "x" : tensor<3x2x4xf32>
// CHECK-NOT:     train.pad
// CHECK-NOT:     train.add
// CHECK:         train.reduce_sum %[[X]] [0, 1, 2]
train.model @pads_tiling_one_value {
  train.step {
    %x = train.input "x" : tensor<3x2x4xf32>
    %a = train.slice %x axis = 0 offset = 0 : tensor<3x2x4xf32> -> tensor<1x2x4xf32>
    %b = train.slice %x axis = 0 offset = 1 : tensor<3x2x4xf32> -> tensor<2x2x4xf32>
    %pa = train.pad %a axis = 0 offset = 0 : tensor<1x2x4xf32> -> tensor<3x2x4xf32>
    %pb = train.pad %b axis = 0 offset = 1 : tensor<2x2x4xf32> -> tensor<3x2x4xf32>
    %s = train.add %pb, %pa : tensor<3x2x4xf32>
    %l = train.reduce_sum %s [0, 1, 2] : tensor<3x2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Not a tiling, so no fold: a window missing (0 and 2 of 3), a window padded
// to another place than it was cut from, two slices of different values.
// CHECK-LABEL: train.model @pads_not_tiling
// CHECK-COUNT-3: train.add
train.model @pads_not_tiling {
  train.step {
    %x = train.input "x" : tensor<3x4xf32>
    %y = train.input "y" : tensor<3x4xf32>
    %a = train.slice %x axis = 0 offset = 0 : tensor<3x4xf32> -> tensor<1x4xf32>
    %c = train.slice %x axis = 0 offset = 2 : tensor<3x4xf32> -> tensor<1x4xf32>
    %pa = train.pad %a axis = 0 offset = 0 : tensor<1x4xf32> -> tensor<3x4xf32>
    %pc = train.pad %c axis = 0 offset = 2 : tensor<1x4xf32> -> tensor<3x4xf32>
    %gap = train.add %pa, %pc : tensor<3x4xf32>
    %b = train.slice %x axis = 0 offset = 1 : tensor<3x4xf32> -> tensor<2x4xf32>
    %pb1 = train.pad %b axis = 0 offset = 0 : tensor<2x4xf32> -> tensor<3x4xf32>
    %pc1 = train.pad %c axis = 0 offset = 0 : tensor<1x4xf32> -> tensor<3x4xf32>
    %moved = train.add %pb1, %pc1 : tensor<3x4xf32>
    %yb = train.slice %y axis = 0 offset = 1 : tensor<3x4xf32> -> tensor<2x4xf32>
    %pyb = train.pad %yb axis = 0 offset = 1 : tensor<2x4xf32> -> tensor<3x4xf32>
    %mixed = train.add %pa, %pyb : tensor<3x4xf32>
    %l1 = train.reduce_sum %gap [0, 1] : tensor<3x4xf32> -> tensor<f32>
    %l2 = train.reduce_sum %moved [0, 1] : tensor<3x4xf32> -> tensor<f32>
    %l3 = train.reduce_sum %mixed [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l1, %l2, %l3 : tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// -----

// Rounding to bf16 twice is rounding once.
// CHECK-LABEL: train.model @round_twice
// CHECK:         %[[R:.*]] = train.round_bf16 %{{.*}} : tensor<4xf32>
// CHECK-NOT:     train.round_bf16
// CHECK:         train.reduce_sum %[[R]] [0]
train.model @round_twice {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %a = train.round_bf16 %x : tensor<4xf32>
    %b = train.round_bf16 %a : tensor<4xf32>
    %l = train.reduce_sum %b [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
