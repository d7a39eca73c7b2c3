"builtin.module"() ({
  "train.model"() <{sym_name = "mlp", trainer = {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, checkpoint_interval = 0 : i64, eps = 1.000000e-08 : f64, eval_batches = 8 : i64, eval_interval = 50 : i64, grad_clip = 0.000000e+00 : f64, log_interval = 10 : i64, lr = 5.000000e-02 : f64, micro_batches = 1 : i64, min_lr_ratio = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, muon_lr = 2.000000e-02 : f64, muon_momentum = 0.94999999999999996 : f64, muon_scale = "shape", optimizer = "sgd", replicas = 1 : i64, schedule = "constant", seed = 1337 : i64, stages = 1 : i64, sync = "sync", total_steps = 200 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64}}> ({
    "train.param"() <{init = 2 : i32, scale = 0.81649658092772603 : f64, sym_name = "fc0.w", type = tensor<3x4xf32>}> {layer = 0 : i64, role = "matrix"} : () -> ()
    "train.param"() <{init = 0 : i32, scale = 0.000000e+00 : f64, sym_name = "fc0.b", type = tensor<4xf32>}> {layer = 0 : i64, role = "bias"} : () -> ()
    "train.param"() <{init = 2 : i32, scale = 5.000000e-01 : f64, sym_name = "out.w", type = tensor<4x2xf32>}> {role = "head"} : () -> ()
    "train.param"() <{init = 0 : i32, scale = 0.000000e+00 : f64, sym_name = "out.b", type = tensor<2xf32>}> {role = "bias"} : () -> ()
    "train.step"() ({
      %0 = "train.input"() <{name = "x"}> : () -> tensor<64x3xf32>
      %1 = "train.input"() <{name = "y"}> : () -> tensor<64xi32>
      %2 = "train.read"() <{var = @fc0.w}> : () -> tensor<3x4xf32>
      %3 = "train.matmul"(%0, %2) : (tensor<64x3xf32>, tensor<3x4xf32>) -> tensor<64x4xf32>
      %4 = "train.read"() <{var = @fc0.b}> : () -> tensor<4xf32>
      %5 = "train.add"(%3, %4) : (tensor<64x4xf32>, tensor<4xf32>) -> tensor<64x4xf32>
      %6 = "train.relu"(%5) : (tensor<64x4xf32>) -> tensor<64x4xf32>
      %7 = "train.read"() <{var = @out.w}> : () -> tensor<4x2xf32>
      %8 = "train.matmul"(%6, %7) : (tensor<64x4xf32>, tensor<4x2xf32>) -> tensor<64x2xf32>
      %9 = "train.read"() <{var = @out.b}> : () -> tensor<2xf32>
      %10 = "train.add"(%8, %9) : (tensor<64x2xf32>, tensor<2xf32>) -> tensor<64x2xf32>
      %11 = "train.cross_entropy"(%10, %1) : (tensor<64x2xf32>, tensor<64xi32>) -> tensor<f32>
      "train.yield"(%11) : (tensor<f32>) -> ()
    }) : () -> ()
  }) {classes = 2 : i64, data = {format = "synthetic", val_fraction = 1.000000e-01 : f64}} : () -> ()
}) : () -> ()

