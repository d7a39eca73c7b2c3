// RUN: stretto-opt %s --train-autodiff --train-optimizer | FileCheck %s

// State is named `@<param>.<slot>`; when a user symbol already has that name
// the state gets a unique one, still tied to its parameter by `of`.
// CHECK-LABEL: train.model @collide
// CHECK:         train.param @w.adam_m : tensor<3xf32>
// CHECK-DAG:     train.state @[[M:w\.adam_m[^ ]+]] : tensor<3xf32> = zeros {of = @w}
// CHECK-DAG:     train.state @w.adam_v : tensor<3xf32> = zeros {of = @w}
// CHECK:         train.read @[[M]] : tensor<3xf32>
// CHECK:         train.write %{{.*}} to @[[M]] : tensor<3xf32>
train.model @collide {
  train.param @w : tensor<3xf32> = zeros
  train.param @w.adam_m : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %m = train.read @w.adam_m : tensor<3xf32>
    %y = train.mul %w, %m : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
