train.model @recipe attributes {trainer = {
    optimizer = "muon", lr = 3.0e-3, muon_lr = 0.02, weight_decay = 0.1,
    beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, momentum = 0.9, muon_momentum = 0.95,
    muon_scale = "rms", grad_clip = 1.0, schedule = "cosine", warmup_steps = 0,
    total_steps = 600, min_lr_ratio = 0.1, micro_batches = 2, stages = 1,
    replicas = 4, sync = "gossip"}} {
  train.param @wte : tensor<8x4xf32> = normal(0.02) {role = "embedding", layer = 0 : i64}
  train.param @w : tensor<4x4xbf16> = uniform(0.5) {role = "matrix"}
  train.param @g : tensor<4xf64> = ones(0.0) {role = "norm"}
  train.param @b : tensor<4xf32> = zeros {role = "bias"}
  train.param @h : tensor<4x8xf32> = zeros(0.25) {role = "head"}
  train.state @w.muon_m : tensor<4x4xbf16> = zeros(0.0) {of = @w}
  train.state @wte.v1 : tensor<8x4xf32> = normal(1.0) {of = @wte}
}
