// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse,train-batch-newton-schulz))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse,train-mixed-precision,train-batch-newton-schulz))' | FileCheck %s --check-prefix=BF16

// Muon's update as train-optimizer writes it, parameter by parameter: the
// three 16x32 matrices' iterations become one batch before the first
// reader of a's result (b's and d's momenta read before it, their writes
// after it), the 32x16 one stays. In a bf16 plan the batch keeps train-mixed-precision's bf16.
// CHECK-LABEL: train.model @muon
// CHECK:       train.update {
// CHECK:         train.read @a.muon_m
// CHECK:         train.write %{{.*}} to @a.muon_m
// CHECK:         train.read @b.muon_m
// CHECK-NOT:     train.write
// CHECK:         train.read @d.muon_m
// CHECK-NOT:     train.write
// CHECK:         %[[B:.*]] = train.newton_schulz_batch %{{.*}}, %{{.*}}, %{{.*}} : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32> -> tensor<3x16x32xf32>
// CHECK:         train.write %{{.*}} to @a :
// CHECK:         train.write %{{.*}} to @b.muon_m
// CHECK:         train.write %{{.*}} to @b :
// CHECK:         train.newton_schulz %{{.*}} : tensor<32x16xf32>
// CHECK:         train.write %{{.*}} to @c :
// CHECK:         train.write %{{.*}} to @d.muon_m
// CHECK:         train.write %{{.*}} to @d :
// BF16-LABEL:  train.model @muon
// BF16:        train.newton_schulz_batch %{{.*}}, %{{.*}}, %{{.*}} {bf16} : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32> -> tensor<3x16x32xf32>
// BF16:        train.newton_schulz %{{.*}} {bf16} : tensor<32x16xf32>
train.model @muon attributes {trainer = {optimizer = "muon", lr = 0.02 : f64}} {
  train.param @a : tensor<16x32xf32> = normal(0.1) {role = "matrix"}
  train.param @b : tensor<16x32xf32> = normal(0.1) {role = "matrix"}
  train.param @c : tensor<32x16xf32> = normal(0.1) {role = "matrix"}
  train.param @d : tensor<16x32xf32> = normal(0.1) {role = "matrix"}
  train.step {
    %x = train.input "x" : tensor<2x16xf32>
    %a = train.read @a : tensor<16x32xf32>
    %b = train.read @b : tensor<16x32xf32>
    %c = train.read @c : tensor<32x16xf32>
    %d = train.read @d : tensor<16x32xf32>
    %h0 = train.matmul %x, %a : tensor<2x16xf32>, tensor<16x32xf32> -> tensor<2x32xf32>
    %h1 = train.matmul %h0, %c : tensor<2x32xf32>, tensor<32x16xf32> -> tensor<2x16xf32>
    %h2 = train.matmul %h1, %b : tensor<2x16xf32>, tensor<16x32xf32> -> tensor<2x32xf32>
    %h3 = train.matmul %h1, %d : tensor<2x16xf32>, tensor<16x32xf32> -> tensor<2x32xf32>
    %h = train.add %h2, %h3 : tensor<2x32xf32>
    %l = train.reduce_sum %h [0, 1] : tensor<2x32xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
