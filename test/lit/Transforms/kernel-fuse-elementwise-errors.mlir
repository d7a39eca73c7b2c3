// RUN: stretto-opt %s -split-input-file --kernel-fuse-elementwise=max-ops=-1 -verify-diagnostics
// RUN: stretto-opt %s --kernel-fuse-elementwise=max-ops=2 | FileCheck %s --check-prefix=MAX2

// A negative kernel size bound is an error at the model.
// With max-ops=2 the chain of three ops is split: the root takes one
// producer, the first op is a kernel of its own.
// MAX2:       %[[A:.*]] = kernel.elementwise(%{{.*}}) : tensor<4xf32> -> tensor<4xf32> {
// MAX2-NEXT:  ^bb0
// MAX2-NEXT:    kernel.exp
// MAX2-NEXT:    kernel.yield
// MAX2:       kernel.elementwise(%[[A]]) : tensor<4xf32> -> tensor<4xf32> {
// MAX2-NEXT:  ^bb0
// MAX2-NEXT:    kernel.tanh
// MAX2-NEXT:    kernel.neg
// MAX2-NEXT:    kernel.yield
// expected-error @+1 {{kernel-fuse-elementwise: max-ops must be >= 0 (0: unbounded), got -1}}
train.model @m {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %a = train.exp %x : tensor<4xf32>
    %b = train.tanh %a : tensor<4xf32>
    %c = train.neg %b : tensor<4xf32>
    %l = train.reduce_sum %c [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
