// RUN: stretto-opt %s -verify-diagnostics --train-autodiff | FileCheck %s

// A parameter that does not reach the loss — never read, or read only for a
// metric — gets a warning at its declaration and no train.grad; the others
// are differentiated as usual.
// CHECK-LABEL: train.model @unreached
// CHECK:         %[[X:.*]] = train.input "x" : tensor<3xf32>
// CHECK:         %[[G:.*]] = train.broadcast %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DW:.*]] = train.mul %[[G]], %[[X]] : tensor<3xf32>
// CHECK-NOT:     train.grad %{{.*}} for @unused
// CHECK-NOT:     train.grad %{{.*}} for @metric
// CHECK:         train.grad %[[DW]] for @w : tensor<3xf32>
// CHECK-NOT:     train.grad
// CHECK:         train.yield
train.model @unreached {
  // expected-warning @+1 {{does not reach the loss; it gets no gradient}}
  train.param @unused : tensor<3xf32> = zeros
  train.param @w : tensor<3xf32> = zeros
  // expected-warning @+1 {{does not reach the loss; it gets no gradient}}
  train.param @metric : tensor<3xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %w = train.read @w : tensor<3xf32>
    %m = train.read @metric : tensor<3xf32>
    %y = train.mul %w, %x : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    %ml = train.reduce_sum %m [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l, %ml : tensor<f32>, tensor<f32>
  }
}
