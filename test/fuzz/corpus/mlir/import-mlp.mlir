module {
  train.model @mlp attributes {classes = 10 : i64, data = {format = "synthetic", val_fraction = 1.000000e-01 : f64}, trainer = {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, checkpoint_interval = 0 : i64, eps = 1.000000e-08 : f64, eval_batches = 8 : i64, eval_interval = 50 : i64, grad_clip = 0.000000e+00 : f64, log_interval = 10 : i64, lr = 5.000000e-02 : f64, micro_batches = 1 : i64, min_lr_ratio = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, muon_lr = 2.000000e-02 : f64, muon_momentum = 0.94999999999999996 : f64, muon_scale = "shape", optimizer = "sgd", replicas = 1 : i64, schedule = "constant", seed = 1337 : i64, stages = 1 : i64, sync = "sync", total_steps = 200 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64}} {
    train.param @fc0.w : tensor<32x64xf32> = normal(2.500000e-01) {layer = 0 : i64, role = "matrix"}
    train.param @fc0.b : tensor<64xf32> = zeros {layer = 0 : i64, role = "bias"}
    train.param @fc1.w : tensor<64x64xf32> = normal(0.17677669529663689) {layer = 1 : i64, role = "matrix"}
    train.param @fc1.b : tensor<64xf32> = zeros {layer = 1 : i64, role = "bias"}
    train.param @out.w : tensor<64x10xf32> = normal(1.250000e-01) {role = "head"}
    train.param @out.b : tensor<10xf32> = zeros {role = "bias"}
    train.step {
      %0 = train.input "x" : tensor<64x32xf32>
      %1 = train.input "y" : tensor<64xi32>
      %2 = train.read @fc0.w : tensor<32x64xf32>
      %3 = train.matmul %0, %2 : tensor<64x32xf32>, tensor<32x64xf32> -> tensor<64x64xf32>
      %4 = train.read @fc0.b : tensor<64xf32>
      %5 = train.add %3, %4 : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
      %6 = train.relu %5 : tensor<64x64xf32>
      %7 = train.read @fc1.w : tensor<64x64xf32>
      %8 = train.matmul %6, %7 : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
      %9 = train.read @fc1.b : tensor<64xf32>
      %10 = train.add %8, %9 : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
      %11 = train.relu %10 : tensor<64x64xf32>
      %12 = train.read @out.w : tensor<64x10xf32>
      %13 = train.matmul %11, %12 : tensor<64x64xf32>, tensor<64x10xf32> -> tensor<64x10xf32>
      %14 = train.read @out.b : tensor<10xf32>
      %15 = train.add %13, %14 : tensor<64x10xf32>, tensor<10xf32> -> tensor<64x10xf32>
      %16 = train.cross_entropy %15, %1 : tensor<64x10xf32>, tensor<64xi32> -> tensor<f32>
      train.yield %16 : tensor<f32>
    }
  }
}
