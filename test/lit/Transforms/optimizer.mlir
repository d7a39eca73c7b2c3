// RUN: stretto-opt %s -split-input-file --train-autodiff --train-optimizer | FileCheck %s

// SGD with momentum: one zero-initialised state @w.momentum of the parameter's
// type, b <- mu*b + g written back, then w <- w - lr*b; every train.grad is
// consumed and no weight decay is added when weight_decay is 0.
// CHECK-LABEL: train.model @sgd
// CHECK-NEXT:    train.param @w : tensor<4x2xf32> = normal(1.000000e-01)
// CHECK-NEXT:    train.state @w.momentum : tensor<4x2xf32> = zeros {of = @w}
// CHECK-NOT:     train.state
// CHECK:         %[[DW:.*]] = train.matmul %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK:         %[[P:.*]] = train.read @w : tensor<4x2xf32>
// CHECK-NEXT:    %[[BUF:.*]] = train.read @w.momentum : tensor<4x2xf32>
// CHECK-NEXT:    %[[MU:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[MB:.*]] = train.mul %[[MU]], %[[BUF]] : tensor<f32>, tensor<4x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %[[NB:.*]] = train.add %[[MB]], %[[DW]] : tensor<4x2xf32>
// CHECK-NEXT:    train.write %[[NB]] to @w.momentum : tensor<4x2xf32>
// CHECK-NEXT:    %[[STEP:.*]] = train.mul %[[LR]], %[[NB]] : tensor<f32>, tensor<4x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %[[NEW:.*]] = train.sub %[[P]], %[[STEP]] : tensor<4x2xf32>
// CHECK-NEXT:    train.write %[[NEW]] to @w : tensor<4x2xf32>
// CHECK-NEXT:    train.yield
// CHECK-NOT:     train.grad
train.model @sgd attributes {trainer = {optimizer = "sgd", lr = 0.5, momentum = 0.75}} {
  train.param @w : tensor<4x2xf32> = normal(0.1)
  train.step {
    %x = train.input "x" : tensor<3x4xf32>
    %w = train.read @w : tensor<4x2xf32>
    %y = train.matmul %x, %w : tensor<3x4xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<3x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// AdamW (the default optimizer): states adam_m and adam_v per parameter; the
// bias corrections 1 - beta^t come from pow of step_count and are built once
// for all parameters; decoupled weight decay only for the rank-2 weight, not
// the bias.
// CHECK-LABEL: train.model @adamw
// CHECK-NEXT:    train.param @w : tensor<2x3xf32>
// CHECK-NEXT:    train.param @b : tensor<3xf32>
// CHECK-NEXT:    train.state @w.adam_m : tensor<2x3xf32> = zeros {of = @w}
// CHECK-NEXT:    train.state @w.adam_v : tensor<2x3xf32> = zeros {of = @w}
// CHECK-NEXT:    train.state @b.adam_m : tensor<3xf32> = zeros {of = @b}
// CHECK-NEXT:    train.state @b.adam_v : tensor<3xf32> = zeros {of = @b}
// CHECK-NEXT:    train.step
// CHECK-DAG:     %[[DB:.*]] = train.reduce_sum %{{.*}} [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-DAG:     %[[DW:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK:         %[[T:.*]] = train.step_count : tensor<f32>
// CHECK:         %[[LR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %{{.*}} : tensor<f32>
//                 -- @w --
// CHECK:         %[[W:.*]] = train.read @w : tensor<2x3xf32>
// CHECK-NEXT:    %[[B1:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[B1T:.*]] = train.pow %[[B1]], %[[T]] : tensor<f32>
// CHECK-NEXT:    %[[ONE1:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[BC1:.*]] = train.sub %[[ONE1]], %[[B1T]] : tensor<f32>
// CHECK-NEXT:    %[[B2:.*]] = train.constant dense<8.750000e-01> : tensor<f32>
// CHECK-NEXT:    %[[B2T:.*]] = train.pow %[[B2]], %[[T]] : tensor<f32>
// CHECK-NEXT:    %[[ONE2:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[BC2:.*]] = train.sub %[[ONE2]], %[[B2T]] : tensor<f32>
// CHECK-NEXT:    %[[M:.*]] = train.read @w.adam_m : tensor<2x3xf32>
// CHECK-NEXT:    %[[V:.*]] = train.read @w.adam_v : tensor<2x3xf32>
// CHECK-NEXT:    %[[C1:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[G1:.*]] = train.mul %[[C1]], %[[DW]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[C2:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[M1:.*]] = train.mul %[[C2]], %[[M]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[MN:.*]] = train.add %[[M1]], %[[G1]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[GG:.*]] = train.mul %[[DW]], %[[DW]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[C3:.*]] = train.constant dense<1.250000e-01> : tensor<f32>
// CHECK-NEXT:    %[[G2:.*]] = train.mul %[[C3]], %[[GG]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[C4:.*]] = train.constant dense<8.750000e-01> : tensor<f32>
// CHECK-NEXT:    %[[V1:.*]] = train.mul %[[C4]], %[[V]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[VN:.*]] = train.add %[[V1]], %[[G2]] : tensor<2x3xf32>
// CHECK-NEXT:    train.write %[[MN]] to @w.adam_m : tensor<2x3xf32>
// CHECK-NEXT:    train.write %[[VN]] to @w.adam_v : tensor<2x3xf32>
// CHECK-NEXT:    %[[EPS:.*]] = train.constant dense<6.250000e-02> : tensor<f32>
// CHECK-NEXT:    %[[VH:.*]] = train.div %[[VN]], %[[BC2]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[SV:.*]] = train.sqrt %[[VH]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[DEN:.*]] = train.add %[[SV]], %[[EPS]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[MH:.*]] = train.div %[[MN]], %[[BC1]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[DIR:.*]] = train.div %[[MH]], %[[DEN]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[WD:.*]] = train.constant dense<1.250000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DECAY:.*]] = train.mul %[[WD]], %[[W]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[DIRW:.*]] = train.add %[[DIR]], %[[DECAY]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[STEPW:.*]] = train.mul %[[LR]], %[[DIRW]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[NEWW:.*]] = train.sub %[[W]], %[[STEPW]] : tensor<2x3xf32>
// CHECK-NEXT:    train.write %[[NEWW]] to @w : tensor<2x3xf32>
//                 -- @b: same corrections, no decay --
// CHECK-NEXT:    %[[B:.*]] = train.read @b : tensor<3xf32>
// CHECK-NOT:     train.pow
// CHECK:         train.write %{{.*}} to @b.adam_v : tensor<3xf32>
// CHECK:         train.div %{{.*}}, %[[BC2]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK:         train.div %{{.*}}, %[[BC1]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DIRB:.*]] = train.div %{{.*}}, %{{.*}} : tensor<3xf32>
// CHECK-NEXT:    %[[STEPB:.*]] = train.mul %[[LR]], %[[DIRB]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[NEWB:.*]] = train.sub %[[B]], %[[STEPB]] : tensor<3xf32>
// CHECK-NEXT:    train.write %[[NEWB]] to @b : tensor<3xf32>
// CHECK-NEXT:    train.yield
train.model @adamw attributes {trainer = {lr = 0.5, beta1 = 0.75, beta2 = 0.875, eps = 0.0625, weight_decay = 0.125}} {
  train.param @w : tensor<2x3xf32> = normal(0.1)
  train.param @b : tensor<3xf32> = zeros {role = "bias"}
  train.step {
    %w = train.read @w : tensor<2x3xf32>
    %b = train.read @b : tensor<3xf32>
    %y = train.add %w, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Muon for 2-D matrix parameters (role "matrix" or no role): state muon_m,
// M <- mu*M + (1-mu)*g, U = mu*M + (1-mu)*g (Nesterov), newton_schulz(U)
// scaled by sqrt(max(1, fan_out/fan_in)) (weights are [in, out]): 1 for 18x2 and 4 for 2x32,
// decoupled weight decay, muon_lr. AdamW for the embedding, the head, the
// bias and a rank-3 "matrix".
// CHECK-LABEL: train.model @muon
// CHECK:         train.state @tall.muon_m : tensor<18x2xf32> = zeros {of = @tall}
// CHECK-NEXT:    train.state @wide.muon_m : tensor<2x32xf32> = zeros {of = @wide}
// CHECK-NEXT:    train.state @wte.adam_m : tensor<8x4xf32> = zeros {of = @wte}
// CHECK-NEXT:    train.state @wte.adam_v : tensor<8x4xf32> = zeros {of = @wte}
// CHECK-NEXT:    train.state @head.adam_m : tensor<4x8xf32> = zeros {of = @head}
// CHECK-NEXT:    train.state @head.adam_v : tensor<4x8xf32> = zeros {of = @head}
// CHECK-NEXT:    train.state @b.adam_m : tensor<4xf32> = zeros {of = @b}
// CHECK-NEXT:    train.state @b.adam_v : tensor<4xf32> = zeros {of = @b}
// CHECK-NEXT:    train.state @cube.adam_m : tensor<2x2x2xf32> = zeros {of = @cube}
// CHECK-NEXT:    train.state @cube.adam_v : tensor<2x2x2xf32> = zeros {of = @cube}
// CHECK-NEXT:    train.step
// CHECK-DAG:     %[[GWIDE:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x32xf32>
// CHECK-DAG:     %[[GTALL:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<18x2xf32>
// CHECK:         %[[MULT:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[ALR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[ALR:.*]] = train.mul %[[ALR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    %[[MLR0:.*]] = train.constant dense<1.250000e-01> : tensor<f32>
// CHECK-NEXT:    %[[MLR:.*]] = train.mul %[[MLR0]], %[[MULT]] : tensor<f32>
//                 -- @tall [in 18, out 2]: Muon, scale sqrt(max(1, 2/18)) = 1 --
// CHECK-NEXT:    %[[P:.*]] = train.read @tall : tensor<18x2xf32>
// CHECK-NEXT:    %[[MOM:.*]] = train.read @tall.muon_m : tensor<18x2xf32>
// CHECK-NEXT:    %[[K1:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[KG:.*]] = train.mul %[[K1]], %[[GTALL]] : tensor<f32>, tensor<18x2xf32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[K2:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[KM:.*]] = train.mul %[[K2]], %[[MOM]] : tensor<f32>, tensor<18x2xf32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[MN:.*]] = train.add %[[KM]], %[[KG]] : tensor<18x2xf32>
// CHECK-NEXT:    train.write %[[MN]] to @tall.muon_m : tensor<18x2xf32>
// CHECK-NEXT:    %[[K3:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[UG:.*]] = train.mul %[[K3]], %[[GTALL]] : tensor<f32>, tensor<18x2xf32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[K4:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[UM:.*]] = train.mul %[[K4]], %[[MN]] : tensor<f32>, tensor<18x2xf32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[U:.*]] = train.add %[[UM]], %[[UG]] : tensor<18x2xf32>
// CHECK-NEXT:    %[[O:.*]] = train.newton_schulz %[[U]] : tensor<18x2xf32>
// CHECK-NEXT:    %[[SC:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[OS:.*]] = train.mul %[[O]], %[[SC]] : tensor<18x2xf32>, tensor<f32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[WD:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DEC:.*]] = train.mul %[[WD]], %[[P]] : tensor<f32>, tensor<18x2xf32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[DIR:.*]] = train.add %[[OS]], %[[DEC]] : tensor<18x2xf32>
// CHECK-NEXT:    %[[STEP:.*]] = train.mul %[[MLR]], %[[DIR]] : tensor<f32>, tensor<18x2xf32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[NEW:.*]] = train.sub %[[P]], %[[STEP]] : tensor<18x2xf32>
// CHECK-NEXT:    train.write %[[NEW]] to @tall : tensor<18x2xf32>
//                 -- @wide [in 2, out 32] (no role): Muon, scale sqrt(32/2) = 4 --
// CHECK-NEXT:    train.read @wide : tensor<2x32xf32>
// CHECK-NEXT:    train.read @wide.muon_m : tensor<2x32xf32>
// CHECK:         train.newton_schulz %{{.*}} : tensor<2x32xf32>
// CHECK-NEXT:    %[[SC1:.*]] = train.constant dense<4.000000e+00> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[SC1]] : tensor<2x32xf32>, tensor<f32> -> tensor<2x32xf32>
// CHECK:         train.mul %[[MLR]], %{{.*}} : tensor<f32>, tensor<2x32xf32> -> tensor<2x32xf32>
// CHECK:         train.write %{{.*}} to @wide : tensor<2x32xf32>
//                 -- the others: AdamW with the Adam learning rate --
// CHECK-NOT:     train.newton_schulz
// CHECK:         train.read @wte.adam_m
// CHECK:         train.mul %[[ALR]], %{{.*}} : tensor<f32>, tensor<8x4xf32> -> tensor<8x4xf32>
// CHECK:         train.write %{{.*}} to @wte : tensor<8x4xf32>
// CHECK:         train.read @head.adam_m
// CHECK:         train.mul %[[ALR]], %{{.*}} : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK:         train.write %{{.*}} to @head : tensor<4x8xf32>
// CHECK:         train.read @b.adam_m
// CHECK:         train.write %{{.*}} to @b : tensor<4xf32>
// CHECK:         train.read @cube.adam_m
// CHECK:         train.write %{{.*}} to @cube : tensor<2x2x2xf32>
// CHECK-NOT:     train.newton_schulz
train.model @muon attributes {trainer = {optimizer = "muon", lr = 0.5, muon_lr = 0.125, muon_momentum = 0.75, beta1 = 0.75, beta2 = 0.875, eps = 0.0625, weight_decay = 0.25}} {
  train.param @tall : tensor<18x2xf32> = normal(0.02) {role = "matrix"}
  train.param @wide : tensor<2x32xf32> = normal(0.02)
  train.param @wte : tensor<8x4xf32> = normal(0.02) {role = "embedding"}
  train.param @head : tensor<4x8xf32> = normal(0.02) {role = "head"}
  train.param @b : tensor<4xf32> = zeros {role = "bias"}
  train.param @cube : tensor<2x2x2xf32> = normal(0.02) {role = "matrix"}
  train.step {
    %0 = train.read @tall : tensor<18x2xf32>
    %1 = train.read @wide : tensor<2x32xf32>
    %2 = train.read @wte : tensor<8x4xf32>
    %3 = train.read @head : tensor<4x8xf32>
    %4 = train.read @b : tensor<4xf32>
    %5 = train.read @cube : tensor<2x2x2xf32>
    %l0 = train.reduce_sum %0 [0, 1] : tensor<18x2xf32> -> tensor<f32>
    %l1 = train.reduce_sum %1 [0, 1] : tensor<2x32xf32> -> tensor<f32>
    %l2 = train.reduce_sum %2 [0, 1] : tensor<8x4xf32> -> tensor<f32>
    %l3 = train.reduce_sum %3 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l4 = train.reduce_sum %4 [0] : tensor<4xf32> -> tensor<f32>
    %l5 = train.reduce_sum %5 [0, 1, 2] : tensor<2x2x2xf32> -> tensor<f32>
    %s0 = train.add %l0, %l1 : tensor<f32>
    %s1 = train.add %s0, %l2 : tensor<f32>
    %s2 = train.add %s1, %l3 : tensor<f32>
    %s3 = train.add %s2, %l4 : tensor<f32>
    %s4 = train.add %s3, %l5 : tensor<f32>
    train.yield %s4 : tensor<f32>
  }
}

// -----

// The trainer's muon_scale = "rms" scales by 0.2 * sqrt(max(rows, cols)):
// 0.2 * sqrt(18) = 0.848528137, 0.848528147 in f32, for 18x2.
// CHECK-LABEL: train.model @muon_rms_from_trainer
// CHECK:         train.newton_schulz %{{.*}} : tensor<18x2xf32>
// CHECK-NEXT:    train.constant dense<0.848528147> : tensor<f32>
train.model @muon_rms_from_trainer attributes {trainer = {optimizer = "muon", muon_scale = "rms"}} {
  train.param @tall : tensor<18x2xf32> = normal(0.02)
  train.step {
    %0 = train.read @tall : tensor<18x2xf32>
    %l = train.reduce_sum %0 [0, 1] : tensor<18x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Global-norm clipping: sq = 0 + sum(ga^2) + sum(gb^2) over every gradient,
// scale = min(1, clip / (sqrt(sq) + 1e-6)), and each gradient is multiplied by
// it before its update.
// CHECK-LABEL: train.model @grad_clip
// CHECK-DAG:     %[[GB:.*]] = train.reduce_sum %{{.*}} [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-DAG:     %[[GA:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK:         %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SQA:.*]] = train.mul %[[GA]], %[[GA]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[SA:.*]] = train.reduce_sum %[[SQA]] [0, 1] : tensor<2x3xf32> -> tensor<f32>
// CHECK-NEXT:    %[[ACC1:.*]] = train.add %[[Z]], %[[SA]] : tensor<f32>
// CHECK-NEXT:    %[[SQB:.*]] = train.mul %[[GB]], %[[GB]] : tensor<3xf32>
// CHECK-NEXT:    %[[SB:.*]] = train.reduce_sum %[[SQB]] [0] : tensor<3xf32> -> tensor<f32>
// CHECK-NEXT:    %[[ACC2:.*]] = train.add %[[ACC1]], %[[SB]] : tensor<f32>
// CHECK-NEXT:    %[[TINY:.*]] = train.constant dense<9.99999997E-7> : tensor<f32>
// CHECK-NEXT:    %[[NORM:.*]] = train.sqrt %[[ACC2]] : tensor<f32>
// CHECK-NEXT:    %[[DEN:.*]] = train.add %[[NORM]], %[[TINY]] : tensor<f32>
// CHECK-NEXT:    %[[CLIP:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[RATIO:.*]] = train.div %[[CLIP]], %[[DEN]] : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SCALE:.*]] = train.min %[[ONE]], %[[RATIO]] : tensor<f32>
// CHECK:         %[[CA:.*]] = train.mul %[[GA]], %[[SCALE]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK:         train.add %{{.*}}, %[[CA]] : tensor<2x3xf32>
// CHECK:         train.write %{{.*}} to @a : tensor<2x3xf32>
// CHECK-NEXT:    %[[CB:.*]] = train.mul %[[GB]], %[[SCALE]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK:         train.add %{{.*}}, %[[CB]] : tensor<3xf32>
// CHECK:         train.write %{{.*}} to @b : tensor<3xf32>
train.model @grad_clip attributes {trainer = {optimizer = "sgd", grad_clip = 2.0}} {
  train.param @a : tensor<2x3xf32> = zeros
  train.param @b : tensor<3xf32> = zeros
  train.step {
    %a = train.read @a : tensor<2x3xf32>
    %b = train.read @b : tensor<3xf32>
    %y = train.add %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Warm-up then cosine: mult = min(1, t/10) * (0.25 + 0.75 * 0.5 * (1 + cos(pi * p))),
// p = clamp((t - 10) / (110 - 10), 0, 1); both learning rates use it.
// CHECK-LABEL: train.model @cosine
// CHECK:         %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[W:.*]] = train.constant dense<1.000000e+01> : tensor<f32>
// CHECK-NEXT:    %[[TW:.*]] = train.div %[[T]], %[[W]] : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[WARM:.*]] = train.min %[[ONE]], %[[TW]] : tensor<f32>
// CHECK-NEXT:    %[[SPAN:.*]] = train.constant dense<1.000000e+02> : tensor<f32>
// CHECK-NEXT:    %[[W2:.*]] = train.constant dense<1.000000e+01> : tensor<f32>
// CHECK-NEXT:    %[[TS:.*]] = train.sub %[[T]], %[[W2]] : tensor<f32>
// CHECK-NEXT:    %[[PR:.*]] = train.div %[[TS]], %[[SPAN]] : tensor<f32>
// CHECK-NEXT:    %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PR0:.*]] = train.max %[[Z]], %[[PR]] : tensor<f32>
// CHECK-NEXT:    %[[ONE2:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PR1:.*]] = train.min %[[ONE2]], %[[PR0]] : tensor<f32>
// CHECK-NEXT:    %[[PI:.*]] = train.constant dense<3.14159274> : tensor<f32>
// CHECK-NEXT:    %[[ANG:.*]] = train.mul %[[PI]], %[[PR1]] : tensor<f32>
// CHECK-NEXT:    %[[COS:.*]] = train.cos %[[ANG]] : tensor<f32>
// CHECK-NEXT:    %[[ONE3:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[OPC:.*]] = train.add %[[ONE3]], %[[COS]] : tensor<f32>
// CHECK-NEXT:    %[[HALF:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[SHAPE:.*]] = train.mul %[[HALF]], %[[OPC]] : tensor<f32>
// CHECK-NEXT:    %[[RANGE:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[RS:.*]] = train.mul %[[RANGE]], %[[SHAPE]] : tensor<f32>
// CHECK-NEXT:    %[[MIN:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DECAY:.*]] = train.add %[[MIN]], %[[RS]] : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.mul %[[WARM]], %[[DECAY]] : tensor<f32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<2.000000e-02> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MULT]] : tensor<f32>
// CHECK:         train.mul %[[LR]], %{{.*}} : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
train.model @cosine attributes {trainer = {optimizer = "sgd", lr = 0.5, schedule = "cosine", warmup_steps = 10, total_steps = 110, min_lr_ratio = 0.25}} {
  train.param @a : tensor<3xf32> = zeros
  train.step {
    %a = train.read @a : tensor<3xf32>
    %l = train.reduce_sum %a [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Linear decay without warm-up: mult = 1 * (0.1 + 0.9 * (1 - p)), p = clamp(t / 8, 0, 1), no cos.
// CHECK-LABEL: train.model @linear
// CHECK:         %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SPAN:.*]] = train.constant dense<8.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[W:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[TS:.*]] = train.sub %[[T]], %[[W]] : tensor<f32>
// CHECK-NEXT:    %[[PR:.*]] = train.div %[[TS]], %[[SPAN]] : tensor<f32>
// CHECK:         %[[PR1:.*]] = train.min %{{.*}}, %{{.*}} : tensor<f32>
// CHECK-NEXT:    %[[ONE2:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SHAPE:.*]] = train.sub %[[ONE2]], %[[PR1]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<0.899999976> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[SHAPE]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<1.000000e-01> : tensor<f32>
// CHECK-NEXT:    train.add
// CHECK-NEXT:    train.mul %[[ONE]], %{{.*}} : tensor<f32>
// CHECK-NOT:     train.cos
train.model @linear attributes {trainer = {optimizer = "sgd", schedule = "linear", total_steps = 8}} {
  train.param @a : tensor<3xf32> = zeros
  train.step {
    %a = train.read @a : tensor<3xf32>
    %l = train.reduce_sum %a [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A constant schedule with warm-up only: mult = min(1, t / 4), no decay.
// CHECK-LABEL: train.model @warmup_only
// CHECK:         %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[W:.*]] = train.constant dense<4.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[TW:.*]] = train.div %[[T]], %[[W]] : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.min %[[ONE]], %[[TW]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<1.000000e-03> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MULT]] : tensor<f32>
// CHECK-NOT:     train.cos
train.model @warmup_only attributes {trainer = {optimizer = "sgd", warmup_steps = 4}} {
  train.param @a : tensor<3xf32> = zeros
  train.step {
    %a = train.read @a : tensor<3xf32>
    %l = train.reduce_sum %a [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A bf16 model gets bf16 optimizer state, step count and constants.
// CHECK-LABEL: train.model @bf16
// CHECK:         train.state @w.adam_m : tensor<2x2xbf16> = zeros {of = @w}
// CHECK:         train.state @w.adam_v : tensor<2x2xbf16> = zeros {of = @w}
// CHECK:         %[[T:.*]] = train.step_count : tensor<bf16>
// CHECK:         train.pow %{{.*}}, %[[T]] : tensor<bf16>
// CHECK:         train.write %{{.*}} to @w : tensor<2x2xbf16>
train.model @bf16 {
  train.param @w : tensor<2x2xbf16> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x2xbf16>
    %l = train.reduce_sum %w [0, 1] : tensor<2x2xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}
