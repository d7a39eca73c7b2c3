// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-norm-grad-epilogue))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-norm-grad-epilogue))' | stretto-opt | FileCheck %s

// f32: the kernel adding the residual's gradient to norm_grad's dx rows
// goes; the norm_grad adds it (plus %r) and its readers read the rows.
// CHECK-LABEL: train.model @f32
// CHECK:      %[[G:.*]] = train.norm_grad %{{.*}}, %{{.*}}, %{{.*}} plus %[[R:[^ ]*]] : tensor<2x2x8xf32> centered {eps = 1.000000e-05 : f64} :
// CHECK-NEXT: %[[S:.*]] = train.slice %[[G]] axis = 0 offset = 0
// CHECK-NEXT: %[[V:.*]] = train.reshape %[[S]]
// CHECK-NOT:  kernel.elementwise
// CHECK:      kernel.gemm %[[V]], %{{.*}}
train.model @f32 {
  train.step {
    %x = train.input "x" : tensor<2x2x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %dy = train.input "dy" : tensor<2x2x8xf32>
    %r = train.input "r" : tensor<2x2x8xf32>
    %w = train.input "w" : tensor<8x8xf32>
    %n = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<2x2x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %dx = train.slice %n axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %v = train.reshape %dx : tensor<4x8xf32> -> tensor<2x2x8xf32>
    %sum = kernel.elementwise(%v, %r) : tensor<2x2x8xf32>, tensor<2x2x8xf32> -> tensor<2x2x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.add %a, %b : f32
      kernel.yield %0 : f32
    }
    %y = kernel.gemm %sum, %w : tensor<2x2x8xf32>, tensor<8x8xf32> -> tensor<2x2x8xf32>
    %dg = train.slice %n axis = 0 offset = 4 : tensor<6x8xf32> -> tensor<1x8xf32>
    %l = train.reduce_sum %y [0, 1, 2] : tensor<2x2x8xf32> -> tensor<f32>
    %l2 = train.reduce_sum %dg [0, 1] : tensor<1x8xf32> -> tensor<f32>
    train.yield %l, %l2 : tensor<f32>, tensor<f32>
  }
}

// bf16: bf16(r + bf16(dx)) stored in two bytes (the residual first in the
// kernel's inputs, the add's operands either way round), and bf16(dx)
// alone (after a final norm): the norm_grad rounds its rows
// (kernel.store_bf16) and adds r where there is one.
// CHECK-LABEL: train.model @bf16
// CHECK:      %[[G1:.*]] = train.norm_grad %{{.*}}, %{{.*}}, %{{.*}} plus %{{[^ ]*}} : tensor<4x8xf32> centered {eps = 1.000000e-05 : f64, kernel.store_bf16} :
// CHECK-NEXT: %[[S1:.*]] = train.slice %[[G1]] axis = 0 offset = 0
// CHECK-NOT:  kernel.elementwise
// CHECK:      kernel.gemm %[[S1]], %{{.*}}
// CHECK:      %[[G2:.*]] = train.norm_grad %{{.*}}, %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64, kernel.store_bf16} :
// CHECK-NEXT: %[[S2:.*]] = train.slice %[[G2]] axis = 0 offset = 0
// CHECK-NOT:  kernel.elementwise
// CHECK:      kernel.gemm %[[S2]], %{{.*}}
train.model @bf16 {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %dy = train.input "dy" : tensor<4x8xf32>
    %r = train.input "r" : tensor<4x8xf32>
    %w = train.input "w" : tensor<8x8xf32>
    %n = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %dx = train.slice %n axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %sum = kernel.elementwise(%r, %dx) {store_bf16} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.round_bf16 %b : f32
      %1 = kernel.add %0, %a : f32
      %2 = kernel.round_bf16 %1 : f32
      kernel.yield %2 : f32
    }
    %y = kernel.gemm %sum, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %m = train.norm_grad %x, %g, %dy {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<5x8xf32>
    %mx = train.slice %m axis = 0 offset = 0 : tensor<5x8xf32> -> tensor<4x8xf32>
    %mr = kernel.elementwise(%mx) {store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.round_bf16 %a : f32
      kernel.yield %0 : f32
    }
    %y2 = kernel.gemm %mr, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l2 = train.reduce_sum %y2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l, %l2 : tensor<f32>, tensor<f32>
  }
}

// Left as they are: an addend made after the norm_grad (it could not
// read it), rows with a second reader, a body of another form (a
// product), a bf16 sum not stored in two bytes (a reader wants four: the
// rows would be), an f32 sum stored in two, and an addend of another
// shape (broadcast).
// CHECK-LABEL: train.model @kept
// CHECK:      train.norm_grad %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} centered {eps = 1.000000e-05 : f64} :
// CHECK:      kernel.elementwise
// CHECK:      train.norm_grad %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} centered {eps = 1.000000e-05 : f64} :
// CHECK:      kernel.elementwise
// CHECK:      train.norm_grad %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} centered {eps = 1.000000e-05 : f64} :
// CHECK:      kernel.elementwise
// CHECK:      train.norm_grad %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} centered {eps = 1.000000e-05 : f64} :
// CHECK:      kernel.elementwise
// CHECK:      train.norm_grad %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} centered {eps = 1.000000e-05 : f64} :
// CHECK:      kernel.elementwise
// CHECK:      train.norm_grad %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} centered {eps = 1.000000e-05 : f64} :
// CHECK:      kernel.elementwise
train.model @kept {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %dy = train.input "dy" : tensor<4x8xf32>
    %b8 = train.input "b8" : tensor<8xf32>
    %n1 = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %late = train.input "late" : tensor<4x8xf32>
    %d1 = train.slice %n1 axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %k1 = kernel.elementwise(%d1, %late) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.add %a, %b : f32
      kernel.yield %0 : f32
    }
    %n2 = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %d2 = train.slice %n2 axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %k2 = kernel.elementwise(%d2, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.add %a, %b : f32
      kernel.yield %0 : f32
    }
    %s2 = train.reduce_sum %d2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %n3 = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %d3 = train.slice %n3 axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %k3 = kernel.elementwise(%d3, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.mul %a, %b : f32
      kernel.yield %0 : f32
    }
    %n4 = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %d4 = train.slice %n4 axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %k4 = kernel.elementwise(%d4, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.round_bf16 %a : f32
      %1 = kernel.add %b, %0 : f32
      %2 = kernel.round_bf16 %1 : f32
      kernel.yield %2 : f32
    }
    %n5 = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %d5 = train.slice %n5 axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %k5 = kernel.elementwise(%d5, %x) {store_bf16} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.add %a, %b : f32
      kernel.yield %0 : f32
    }
    %n6 = train.norm_grad %x, %g, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %d6 = train.slice %n6 axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %k6 = kernel.elementwise(%d6, %b8) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.add %a, %b : f32
      kernel.yield %0 : f32
    }
    %l1 = train.reduce_sum %k1 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l2 = train.reduce_sum %k2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l3 = train.reduce_sum %k3 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l4 = train.reduce_sum %k4 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l5 = train.reduce_sum %k5 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l6 = train.reduce_sum %k6 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l1, %l2, %l3, %l4, %l5, %l6, %s2 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
