train.model @optimizer_ops {
  train.step {
    %g = train.input "g" : tensor<4x8xf32>
    %o = train.newton_schulz %g : tensor<4x8xf32>
    %o3 = train.newton_schulz %g {steps = 3 : i64, a = 2.0 : f64, b = -1.5 : f64, c = 0.5 : f64} : tensor<4x8xf32>
    %o5 = train.newton_schulz %g {steps = 5 : i64, a = 3.4445 : f64, b = -4.7750 : f64, c = 2.0315 : f64} : tensor<4x8xf32>
    %l = train.reduce_sum %o [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
