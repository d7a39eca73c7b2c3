// RUN: not stretto-opt %s -split-input-file 2>&1 | FileCheck %s

// Element-type and eps errors name the types (or the value) involved, as
// every verifier message must.

// CHECK: error: 'train.transpose' op {{.*}}f32{{.*}}bf16
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.transpose %a [1, 0] : tensor<2x3xf32> -> tensor<3x2xbf16>
  }
}

// -----

// CHECK: error: 'train.broadcast' op {{.*}}f32{{.*}}bf16
train.model @m {
  train.step {
    %a = train.input "a" : tensor<3xf32>
    %c = train.broadcast %a : tensor<3xf32> -> tensor<2x3xbf16>
  }
}

// -----

// CHECK: error: 'train.slice' op {{.*}}f32{{.*}}bf16
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %c = train.slice %a axis = 1 offset = 0 : tensor<2x4xf32> -> tensor<2x2xbf16>
  }
}

// -----

// CHECK: error: 'train.pad' op {{.*}}f32{{.*}}bf16
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2xf32>
    %c = train.pad %a axis = 1 offset = 0 : tensor<2x2xf32> -> tensor<2x4xbf16>
  }
}

// -----

// CHECK: error: 'train.cross_entropy' op {{.*}}bf16{{.*}}f32
train.model @m {
  train.step {
    %l = train.input "l" : tensor<2x5xf32>
    %t = train.input "t" : tensor<2xi32>
    %c = train.cross_entropy %l, %t : tensor<2x5xf32>, tensor<2xi32> -> tensor<bf16>
  }
}

// -----

// The eps message should give the offending value.
// CHECK: error: 'train.layer_norm' op eps must be positive{{.*}}0.0
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %c = train.layer_norm %x, %g, %g {eps = 0.0 : f64} : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
  }
}

// -----

// CHECK: error: 'train.rms_norm' op eps must be positive{{.*}}-1.0
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %c = train.rms_norm %x, %g {eps = -1.0e-5 : f64} : tensor<2x4xf32>, tensor<4xf32>
  }
}
