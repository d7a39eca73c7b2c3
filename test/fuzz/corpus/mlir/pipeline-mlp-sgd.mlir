module {
  train.model @mlp attributes {classes = 2 : i64, data = {format = "synthetic", val_fraction = 1.000000e-01 : f64}, trainer = {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, checkpoint_interval = 0 : i64, eps = 1.000000e-08 : f64, eval_batches = 8 : i64, eval_interval = 50 : i64, grad_clip = 0.000000e+00 : f64, log_interval = 10 : i64, lr = 5.000000e-02 : f64, micro_batches = 1 : i64, min_lr_ratio = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, muon_lr = 2.000000e-02 : f64, muon_momentum = 0.94999999999999996 : f64, muon_scale = "shape", optimizer = "sgd", replicas = 1 : i64, schedule = "constant", seed = 1337 : i64, stages = 1 : i64, sync = "sync", total_steps = 200 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64}} {
    train.param @out.w : tensor<3x2xf32> = normal(0.57735026918962573) {role = "head"}
    train.param @out.b : tensor<2xf32> = zeros {role = "bias"}
    train.state @out.w.momentum : tensor<3x2xf32> = zeros {of = @out.w}
    train.state @out.b.momentum : tensor<2xf32> = zeros {of = @out.b}
    train.step {
      %0 = train.input "x" : tensor<64x3xf32>
      %1 = train.input "y" : tensor<64xi32>
      %2 = train.read @out.w : tensor<3x2xf32>
      %3 = train.matmul %0, %2 : tensor<64x3xf32>, tensor<3x2xf32> -> tensor<64x2xf32>
      %4 = train.read @out.b : tensor<2xf32>
      %5 = train.add %3, %4 : tensor<64x2xf32>, tensor<2xf32> -> tensor<64x2xf32>
      %6 = train.cross_entropy %5, %1 : tensor<64x2xf32>, tensor<64xi32> -> tensor<f32>
      %7 = train.constant dense<1.000000e+00> : tensor<f32>
      %8 = train.softmax %5 : tensor<64x2xf32>
      %9 = train.one_hot %1 : tensor<64xi32> -> tensor<64x2xf32>
      %10 = train.constant dense<1.562500e-02> : tensor<f32>
      %11 = train.mul %7, %10 : tensor<f32>
      %12 = train.sub %8, %9 : tensor<64x2xf32>
      %13 = train.mul %12, %11 : tensor<64x2xf32>, tensor<f32> -> tensor<64x2xf32>
      %14 = train.reduce_sum %13 [0] : tensor<64x2xf32> -> tensor<2xf32>
      %15 = train.transpose %0 [1, 0] : tensor<64x3xf32> -> tensor<3x64xf32>
      %16 = train.matmul %15, %13 : tensor<3x64xf32>, tensor<64x2xf32> -> tensor<3x2xf32>
      %17 = train.step_count : tensor<f32>
      %18 = train.constant dense<1.000000e+00> : tensor<f32>
      %19 = train.constant dense<5.000000e-02> : tensor<f32>
      %20 = train.mul %19, %18 : tensor<f32>
      %21 = train.constant dense<2.000000e-02> : tensor<f32>
      %22 = train.mul %21, %18 : tensor<f32>
      %23 = train.read @out.w : tensor<3x2xf32>
      %24 = train.read @out.w.momentum : tensor<3x2xf32>
      %25 = train.constant dense<0.899999976> : tensor<f32>
      %26 = train.mul %25, %24 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
      %27 = train.add %26, %16 : tensor<3x2xf32>
      train.write %27 to @out.w.momentum : tensor<3x2xf32>
      %28 = train.mul %20, %27 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
      %29 = train.sub %23, %28 : tensor<3x2xf32>
      train.write %29 to @out.w : tensor<3x2xf32>
      %30 = train.read @out.b : tensor<2xf32>
      %31 = train.read @out.b.momentum : tensor<2xf32>
      %32 = train.constant dense<0.899999976> : tensor<f32>
      %33 = train.mul %32, %31 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
      %34 = train.add %33, %14 : tensor<2xf32>
      train.write %34 to @out.b.momentum : tensor<2xf32>
      %35 = train.mul %20, %34 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
      %36 = train.sub %30, %35 : tensor<2xf32>
      train.write %36 to @out.b : tensor<2xf32>
      train.yield %6 : tensor<f32>
    }
  }
}

