// RUN: stretto-opt %s -split-input-file --pass-pipeline='builtin.module(train.model(train-batch-newton-schulz))' | FileCheck %s
// RUN: stretto-opt %s -split-input-file --pass-pipeline='builtin.module(train.model(train-batch-newton-schulz{max-elements=64}))' | FileCheck %s --check-prefix=CAP

// Three iterations of one matrix type become one batch before the first
// reader of any of their results; the second and third inputs, made after
// that reader, move there with the reads and products they need, and the
// writes stay where they were. The 8x4 matrix is another type: it stays.
// With at most 64 elements a batch (two 4x8 matrices), the third stays
// on its own.
// CHECK-LABEL: train.model @three
// CHECK:       train.update {
// CHECK:         %[[G0:.*]] = train.read @a.m
// CHECK:         %[[U0:.*]] = train.mul %[[G0]]
// CHECK-NEXT:    %[[G1:.*]] = train.read @b.m
// CHECK-NEXT:    %[[U1:.*]] = train.mul %[[G1]]
// CHECK-NEXT:    %[[G2:.*]] = train.read @d.m
// CHECK-NEXT:    %[[U2:.*]] = train.mul %[[G2]]
// CHECK-NEXT:    %[[B:.*]] = train.newton_schulz_batch %[[U0]], %[[U1]], %[[U2]] {steps = 3 : i64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<3x4x8xf32>
// CHECK-NEXT:    %[[S0:.*]] = train.slice %[[B]] axis = 0 offset = 0 : tensor<3x4x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT:    %[[O0:.*]] = train.reshape %[[S0]] : tensor<1x4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[S1:.*]] = train.slice %[[B]] axis = 0 offset = 1
// CHECK-NEXT:    %[[O1:.*]] = train.reshape %[[S1]]
// CHECK-NEXT:    %[[S2:.*]] = train.slice %[[B]] axis = 0 offset = 2
// CHECK-NEXT:    %[[O2:.*]] = train.reshape %[[S2]]
// CHECK-NEXT:    train.write %[[O0]] to @a
// CHECK-NEXT:    train.write %[[U1]] to @b.m
// CHECK-NEXT:    train.write %[[O1]] to @b
// CHECK-NEXT:    %[[GC:.*]] = train.read @c.m
// CHECK-NEXT:    %[[OC:.*]] = train.newton_schulz %[[GC]] {steps = 3 : i64} : tensor<8x4xf32>
// CHECK-NEXT:    train.write %[[OC]] to @c
// CHECK-NEXT:    train.write %[[O2]] to @d
// CHECK-NOT:     train.newton_schulz
// CAP-LABEL:   train.model @three
// CAP:         train.newton_schulz_batch %{{.*}}, %{{.*}} {steps = 3 : i64} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
// CAP:         train.newton_schulz %{{.*}} {steps = 3 : i64} : tensor<8x4xf32>
// CAP:         train.newton_schulz %{{.*}} {steps = 3 : i64} : tensor<4x8xf32>
// CAP-NEXT:    train.write %{{.*}} to @d
train.model @three {
  train.param @a : tensor<4x8xf32> = normal(0.1)
  train.param @b : tensor<4x8xf32> = normal(0.1)
  train.param @c : tensor<8x4xf32> = normal(0.1)
  train.param @d : tensor<4x8xf32> = normal(0.1)
  train.state @a.m : tensor<4x8xf32> = zeros
  train.state @b.m : tensor<4x8xf32> = zeros
  train.state @c.m : tensor<8x4xf32> = zeros
  train.state @d.m : tensor<4x8xf32> = zeros
  train.step {
    %x = train.read @a : tensor<4x8xf32>
    %l = train.reduce_sum %x [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
    %two = train.constant dense<2.0> : tensor<f32>
    %g0 = train.read @a.m : tensor<4x8xf32>
    %u0 = train.mul %g0, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %o0 = train.newton_schulz %u0 {steps = 3 : i64} : tensor<4x8xf32>
    train.write %o0 to @a : tensor<4x8xf32>
    %g1 = train.read @b.m : tensor<4x8xf32>
    %u1 = train.mul %g1, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    train.write %u1 to @b.m : tensor<4x8xf32>
    %o1 = train.newton_schulz %u1 {steps = 3 : i64} : tensor<4x8xf32>
    train.write %o1 to @b : tensor<4x8xf32>
    %gc = train.read @c.m : tensor<8x4xf32>
    %oc = train.newton_schulz %gc {steps = 3 : i64} : tensor<8x4xf32>
    train.write %oc to @c : tensor<8x4xf32>
    %g2 = train.read @d.m : tensor<4x8xf32>
    %u2 = train.mul %g2, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %o2 = train.newton_schulz %u2 {steps = 3 : i64} : tensor<4x8xf32>
    train.write %o2 to @d : tensor<4x8xf32>
  }
}

// -----

// An input read from a state that the first result's reader writes: the
// read cannot move before that write, so nothing is batched.
// CHECK-LABEL: train.model @state_order
// CHECK:       train.update {
// CHECK-NEXT:    %[[G0:.*]] = train.read @x
// CHECK-NEXT:    %[[O0:.*]] = train.newton_schulz %[[G0]] : tensor<4x8xf32>
// CHECK-NEXT:    train.write %[[O0]] to @s
// CHECK-NEXT:    %[[G1:.*]] = train.read @s
// CHECK-NEXT:    %[[O1:.*]] = train.newton_schulz %[[G1]] : tensor<4x8xf32>
// CHECK-NOT:     newton_schulz_batch
train.model @state_order {
  train.param @x : tensor<4x8xf32> = normal(0.1)
  train.state @s : tensor<4x8xf32> = zeros
  train.state @y : tensor<4x8xf32> = zeros
  train.step {
    %x = train.read @x : tensor<4x8xf32>
    %l = train.reduce_sum %x [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
    %g0 = train.read @x : tensor<4x8xf32>
    %o0 = train.newton_schulz %g0 : tensor<4x8xf32>
    train.write %o0 to @s : tensor<4x8xf32>
    %g1 = train.read @s : tensor<4x8xf32>
    %o1 = train.newton_schulz %g1 : tensor<4x8xf32>
    train.write %o1 to @y : tensor<4x8xf32>
  }
}

// -----

// An input made from another iteration's result is not independent of
// it: no batch. Iterations of different pipeline stages or coefficients
// are not batched either; the two of stage 1 are, before their first
// reader, the batch and its slices on stage 1.
// CHECK-LABEL: train.model @dependent
// CHECK:       train.update {
// CHECK:         %[[O0:.*]] = train.newton_schulz %{{.*}} : tensor<4x8xf32>
// CHECK-NEXT:    %[[T:.*]] = train.mul %[[O0]], %[[O0]]
// CHECK-NEXT:    train.newton_schulz %[[T]] : tensor<4x8xf32>
// CHECK-NEXT:    train.newton_schulz %{{.*}} {stage = 0 : i64} : tensor<4x8xf32>
// CHECK-NEXT:    train.newton_schulz %{{.*}} {a = 3.000000e+00 : f64} : tensor<4x8xf32>
// CHECK:         train.write %{{.*}} to @y
// CHECK-NEXT:    %[[B:.*]] = train.newton_schulz_batch %{{.*}}, %{{.*}} {stage = 1 : i64} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT:    train.slice %[[B]] axis = 0 offset = 0 {stage = 1 : i64}
// CHECK-NEXT:    train.reshape %{{.*}} {stage = 1 : i64}
// CHECK-NEXT:    train.slice %[[B]] axis = 0 offset = 1 {stage = 1 : i64}
// CHECK-NEXT:    train.reshape %{{.*}} {stage = 1 : i64}
// CHECK-NOT:     newton_schulz_batch
train.model @dependent {
  train.param @x : tensor<4x8xf32> = normal(0.1)
  train.state @y : tensor<4x8xf32> = zeros
  train.state @z : tensor<4x8xf32> = zeros
  train.step {
    %x = train.read @x : tensor<4x8xf32>
    %l = train.reduce_sum %x [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
    %g0 = train.read @x : tensor<4x8xf32>
    %o0 = train.newton_schulz %g0 : tensor<4x8xf32>
    %t = train.mul %o0, %o0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %o1 = train.newton_schulz %t : tensor<4x8xf32>
    %o2 = train.newton_schulz %g0 {stage = 0 : i64} : tensor<4x8xf32>
    %o3 = train.newton_schulz %g0 {a = 3.0 : f64} : tensor<4x8xf32>
    %o4 = train.newton_schulz %g0 {stage = 1 : i64} : tensor<4x8xf32>
    %o5 = train.newton_schulz %t {stage = 1 : i64} : tensor<4x8xf32>
    %s0 = train.add %o1, %o2 : tensor<4x8xf32>
    %s1 = train.add %s0, %o3 : tensor<4x8xf32>
    train.write %s1 to @y : tensor<4x8xf32>
    %s2 = train.add %o4, %o5 : tensor<4x8xf32>
    train.write %s2 to @z : tensor<4x8xf32>
  }
}
