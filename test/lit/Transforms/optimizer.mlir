// RUN: stretto-opt %s -split-input-file --train-autodiff --train-optimizer | FileCheck %s

// SGD with momentum: the step still ends with its train.grad, and a
// train.update after it, from the accumulated gradient g, declares one
// zero-initialised state @w.momentum of the parameter's type, writes back
// b <- mu*b + g, then w <- descend(w, b, lr) = w - lr*b; no weight decay is
// added when weight_decay is 0.
// CHECK-LABEL: train.model @sgd
// CHECK-NEXT:    train.param @w : tensor<4x2xf32> = normal(1.000000e-01)
// CHECK-NEXT:    train.state @w.momentum : tensor<4x2xf32> = zeros {of = @w}
// CHECK-NEXT:    train.step {
// CHECK-NOT:     train.write
// CHECK:         %[[DW:.*]] = train.matmul %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    train.grad %[[DW]] for @w : tensor<4x2xf32>
// CHECK-NEXT:    train.yield %{{.*}} : tensor<f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[G:.*]] = train.accumulated_grad @w : tensor<4x2xf32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<2.000000e-02> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MULT]] : tensor<f32>
// CHECK-NEXT:    %[[P:.*]] = train.read @w : tensor<4x2xf32>
// CHECK-NEXT:    %[[BUF:.*]] = train.read @w.momentum : tensor<4x2xf32>
// CHECK-NEXT:    %[[MU:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[MB:.*]] = train.mul %[[MU]], %[[BUF]] : tensor<f32>, tensor<4x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %[[NB:.*]] = train.add %[[MB]], %[[G]] : tensor<4x2xf32>
// CHECK-NEXT:    train.write %[[NB]] to @w.momentum : tensor<4x2xf32>
// CHECK-NEXT:    %[[NEW:.*]] = train.descend %[[P]], %[[NB]], %[[LR]] : tensor<4x2xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEW]] to @w : tensor<4x2xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }
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

// Gradient accumulation: with micro_batches = 4 every train.grad stays at the
// end of the step (which neither writes nor descends), and a train.update
// after the step reads each parameter's micro-batch mean through
// train.accumulated_grad, in the order of the grads, and ends each
// parameter's update with accumulated_grad -> descend -> write; no train.grad
// is outside the step and the mean gradient enters the update unscaled.
// CHECK-LABEL: train.model @grads_stay
// CHECK:         train.step {
// CHECK-NOT:     train.write
// CHECK-NOT:     train.descend
// CHECK-NOT:     train.accumulated_grad
// CHECK:         train.grad %{{.*}} for @w : tensor<4x2xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @b : tensor<2xf32>
// CHECK-NEXT:    train.yield %{{.*}} : tensor<f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  train.update {
// CHECK-NOT:     train.grad
// CHECK:         %[[AW:.*]] = train.accumulated_grad @w : tensor<4x2xf32>
// CHECK-NEXT:    %[[AB:.*]] = train.accumulated_grad @b : tensor<2xf32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<1.000000e-03> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %{{.*}} : tensor<f32>
// CHECK:         %[[PW:.*]] = train.read @w : tensor<4x2xf32>
// CHECK-NEXT:    train.read @w.momentum : tensor<4x2xf32>
// CHECK-NEXT:    train.constant dense<0.899999976> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %{{.*}} : tensor<f32>, tensor<4x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %[[DIRW:.*]] = train.add %{{.*}}, %[[AW]] : tensor<4x2xf32>
// CHECK-NEXT:    train.write %[[DIRW]] to @w.momentum : tensor<4x2xf32>
// CHECK-NEXT:    %[[NW:.*]] = train.descend %[[PW]], %[[DIRW]], %[[LR]] : tensor<4x2xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NW]] to @w : tensor<4x2xf32>
// CHECK-NEXT:    %[[PB:.*]] = train.read @b : tensor<2xf32>
// CHECK-NEXT:    train.read @b.momentum : tensor<2xf32>
// CHECK-NEXT:    train.constant dense<0.899999976> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %{{.*}} : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT:    %[[DIRB:.*]] = train.add %{{.*}}, %[[AB]] : tensor<2xf32>
// CHECK-NEXT:    train.write %[[DIRB]] to @b.momentum : tensor<2xf32>
// CHECK-NEXT:    %[[NB:.*]] = train.descend %[[PB]], %[[DIRB]], %[[LR]] : tensor<2xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NB]] to @b : tensor<2xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }
// CHECK-NOT:     train.grad
train.model @grads_stay attributes {trainer = {optimizer = "sgd", micro_batches = 4}} {
  train.param @w : tensor<4x2xf32> = normal(0.1)
  train.param @b : tensor<2xf32> = zeros {role = "bias"}
  train.step {
    %x = train.input "x" : tensor<3x4xf32>
    %w = train.read @w : tensor<4x2xf32>
    %b = train.read @b : tensor<2xf32>
    %y = train.matmul %x, %w : tensor<3x4xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
    %z = train.add %y, %b : tensor<3x2xf32>, tensor<2xf32> -> tensor<3x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<3x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// AdamW (the default optimizer): states adam_m and adam_v per parameter; the
// bias corrections 1 - beta^t come from pow of step_count and are built once
// for all parameters; decoupled weight decay only for the rank-2 weight, not
// the bias; both read their accumulated gradient.
// CHECK-LABEL: train.model @adamw
// CHECK-NEXT:    train.param @w : tensor<2x3xf32>
// CHECK-NEXT:    train.param @b : tensor<3xf32>
// CHECK-NEXT:    train.state @w.adam_m : tensor<2x3xf32> = zeros {of = @w}
// CHECK-NEXT:    train.state @w.adam_v : tensor<2x3xf32> = zeros {of = @w}
// CHECK-NEXT:    train.state @b.adam_m : tensor<3xf32> = zeros {of = @b}
// CHECK-NEXT:    train.state @b.adam_v : tensor<3xf32> = zeros {of = @b}
// CHECK-NEXT:    train.step {
// CHECK-DAG:     %[[DB:.*]] = train.reduce_sum %{{.*}} [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-DAG:     %[[DW:.*]] = train.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK:         train.grad %[[DW]] for @w : tensor<2x3xf32>
// CHECK-NEXT:    train.grad %[[DB]] for @b : tensor<3xf32>
// CHECK-NEXT:    train.yield %{{.*}} : tensor<f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[GW:.*]] = train.accumulated_grad @w : tensor<2x3xf32>
// CHECK-NEXT:    %[[GB:.*]] = train.accumulated_grad @b : tensor<3xf32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<2.000000e-02> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MULT]] : tensor<f32>
//                 -- bias corrections, shared by every Adam parameter --
// CHECK-NEXT:    %[[B1:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[B1T:.*]] = train.pow %[[B1]], %[[T]] : tensor<f32>
// CHECK-NEXT:    %[[ONE1:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[BC1:.*]] = train.sub %[[ONE1]], %[[B1T]] : tensor<f32>
// CHECK-NEXT:    %[[B2:.*]] = train.constant dense<8.750000e-01> : tensor<f32>
// CHECK-NEXT:    %[[B2T:.*]] = train.pow %[[B2]], %[[T]] : tensor<f32>
// CHECK-NEXT:    %[[ONE2:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[BC2:.*]] = train.sub %[[ONE2]], %[[B2T]] : tensor<f32>
//                 -- @w --
// CHECK-NEXT:    %[[W:.*]] = train.read @w : tensor<2x3xf32>
// CHECK-NEXT:    %[[M:.*]] = train.read @w.adam_m : tensor<2x3xf32>
// CHECK-NEXT:    %[[V:.*]] = train.read @w.adam_v : tensor<2x3xf32>
// CHECK-NEXT:    %[[C1:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[G1:.*]] = train.mul %[[C1]], %[[GW]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[C2:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[M1:.*]] = train.mul %[[C2]], %[[M]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[MN:.*]] = train.add %[[M1]], %[[G1]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[GG:.*]] = train.mul %[[GW]], %[[GW]] : tensor<2x3xf32>
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
// CHECK-NEXT:    %[[NEWW:.*]] = train.descend %[[W]], %[[DIRW]], %[[LR]] : tensor<2x3xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEWW]] to @w : tensor<2x3xf32>
//                 -- @b: same corrections (no second pow), no decay --
// CHECK-NEXT:    %[[B:.*]] = train.read @b : tensor<3xf32>
// CHECK-NEXT:    %[[BM:.*]] = train.read @b.adam_m : tensor<3xf32>
// CHECK-NEXT:    %[[BV:.*]] = train.read @b.adam_v : tensor<3xf32>
// CHECK-NEXT:    %[[D1:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[BG1:.*]] = train.mul %[[D1]], %[[GB]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[D2:.*]] = train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[BM1:.*]] = train.mul %[[D2]], %[[BM]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[BMN:.*]] = train.add %[[BM1]], %[[BG1]] : tensor<3xf32>
// CHECK-NEXT:    %[[BGG:.*]] = train.mul %[[GB]], %[[GB]] : tensor<3xf32>
// CHECK-NEXT:    %[[D3:.*]] = train.constant dense<1.250000e-01> : tensor<f32>
// CHECK-NEXT:    %[[BG2:.*]] = train.mul %[[D3]], %[[BGG]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[D4:.*]] = train.constant dense<8.750000e-01> : tensor<f32>
// CHECK-NEXT:    %[[BV1:.*]] = train.mul %[[D4]], %[[BV]] : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[BVN:.*]] = train.add %[[BV1]], %[[BG2]] : tensor<3xf32>
// CHECK-NEXT:    train.write %[[BMN]] to @b.adam_m : tensor<3xf32>
// CHECK-NEXT:    train.write %[[BVN]] to @b.adam_v : tensor<3xf32>
// CHECK-NEXT:    %[[BEPS:.*]] = train.constant dense<6.250000e-02> : tensor<f32>
// CHECK-NEXT:    %[[BVH:.*]] = train.div %[[BVN]], %[[BC2]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[BSV:.*]] = train.sqrt %[[BVH]] : tensor<3xf32>
// CHECK-NEXT:    %[[BDEN:.*]] = train.add %[[BSV]], %[[BEPS]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[BMH:.*]] = train.div %[[BMN]], %[[BC1]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DIRB:.*]] = train.div %[[BMH]], %[[BDEN]] : tensor<3xf32>
// CHECK-NEXT:    %[[NEWB:.*]] = train.descend %[[B]], %[[DIRB]], %[[LR]] : tensor<3xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEWB]] to @b : tensor<3xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }
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
// decoupled weight decay, muon_lr. AdamW with the Adam learning rate for the
// embedding, the head, the bias and a rank-3 "matrix", with weight decay on
// all but the rank-1 bias; every update reads its accumulated gradient.
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
// CHECK-NEXT:    train.step {
// CHECK-NOT:     train.newton_schulz
// CHECK:         train.grad %{{.*}} for @tall : tensor<18x2xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @wide : tensor<2x32xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @wte : tensor<8x4xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @head : tensor<4x8xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @b : tensor<4xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @cube : tensor<2x2x2xf32>
// CHECK-NEXT:    train.yield %{{.*}} : tensor<f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[GTALL:.*]] = train.accumulated_grad @tall : tensor<18x2xf32>
// CHECK-NEXT:    %[[GWIDE:.*]] = train.accumulated_grad @wide : tensor<2x32xf32>
// CHECK-NEXT:    %[[GWTE:.*]] = train.accumulated_grad @wte : tensor<8x4xf32>
// CHECK-NEXT:    %[[GHEAD:.*]] = train.accumulated_grad @head : tensor<4x8xf32>
// CHECK-NEXT:    %[[GB:.*]] = train.accumulated_grad @b : tensor<4xf32>
// CHECK-NEXT:    %[[GCUBE:.*]] = train.accumulated_grad @cube : tensor<2x2x2xf32>
// CHECK-NEXT:    %[[ALR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[ALR:.*]] = train.mul %[[ALR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    %[[MLR0:.*]] = train.constant dense<1.250000e-01> : tensor<f32>
// CHECK-NEXT:    %[[MLR:.*]] = train.mul %[[MLR0]], %[[MULT]] : tensor<f32>
//                 -- Adam bias corrections for the AdamW group, built once up front --
// CHECK-NEXT:    train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    train.pow %{{.*}}, %[[T]] : tensor<f32>
// CHECK:         train.pow %{{.*}}, %[[T]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    train.sub
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
// CHECK-NEXT:    %[[NEW:.*]] = train.descend %[[P]], %[[DIR]], %[[MLR]] : tensor<18x2xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEW]] to @tall : tensor<18x2xf32>
//                 -- @wide [in 2, out 32] (no role): Muon, scale sqrt(32/2) = 4 --
// CHECK-NEXT:    %[[P1:.*]] = train.read @wide : tensor<2x32xf32>
// CHECK-NEXT:    %[[MOM1:.*]] = train.read @wide.muon_m : tensor<2x32xf32>
// CHECK-NEXT:    train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[GWIDE]] : tensor<f32>, tensor<2x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT:    train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MOM1]] : tensor<f32>, tensor<2x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT:    %[[MN1:.*]] = train.add %{{.*}}, %{{.*}} : tensor<2x32xf32>
// CHECK-NEXT:    train.write %[[MN1]] to @wide.muon_m : tensor<2x32xf32>
// CHECK-NEXT:    train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[GWIDE]] : tensor<f32>, tensor<2x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT:    train.constant dense<7.500000e-01> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MN1]] : tensor<f32>, tensor<2x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT:    %[[U1:.*]] = train.add %{{.*}}, %{{.*}} : tensor<2x32xf32>
// CHECK-NEXT:    %[[O1:.*]] = train.newton_schulz %[[U1]] : tensor<2x32xf32>
// CHECK-NEXT:    %[[SC1:.*]] = train.constant dense<4.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[OS1:.*]] = train.mul %[[O1]], %[[SC1]] : tensor<2x32xf32>, tensor<f32> -> tensor<2x32xf32>
// CHECK-NEXT:    %[[WD1:.*]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DEC1:.*]] = train.mul %[[WD1]], %[[P1]] : tensor<f32>, tensor<2x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT:    %[[DIR1:.*]] = train.add %[[OS1]], %[[DEC1]] : tensor<2x32xf32>
// CHECK-NEXT:    %[[NEW1:.*]] = train.descend %[[P1]], %[[DIR1]], %[[MLR]] : tensor<2x32xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEW1]] to @wide : tensor<2x32xf32>
//                 -- the others: AdamW with the Adam learning rate, decay for rank >= 2 --
// CHECK-NOT:     train.newton_schulz
// CHECK:         %[[PE:.*]] = train.read @wte : tensor<8x4xf32>
// CHECK-NEXT:    train.read @wte.adam_m : tensor<8x4xf32>
// CHECK:         train.mul %{{.*}}, %[[GWTE]] : tensor<f32>, tensor<8x4xf32> -> tensor<8x4xf32>
// CHECK:         %[[DE:.*]] = train.div %{{.*}}, %{{.*}} : tensor<8x4xf32>{{$}}
// CHECK-NEXT:    train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DECE:.*]] = train.mul %{{.*}}, %[[PE]] : tensor<f32>, tensor<8x4xf32> -> tensor<8x4xf32>
// CHECK-NEXT:    %[[DIRE:.*]] = train.add %[[DE]], %[[DECE]] : tensor<8x4xf32>
// CHECK-NEXT:    %[[NEWE:.*]] = train.descend %[[PE]], %[[DIRE]], %[[ALR]] : tensor<8x4xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEWE]] to @wte : tensor<8x4xf32>
// CHECK-NEXT:    %[[PH:.*]] = train.read @head : tensor<4x8xf32>
// CHECK-NEXT:    train.read @head.adam_m : tensor<4x8xf32>
// CHECK-NOT:     train.pow
// CHECK:         train.mul %{{.*}}, %[[GHEAD]] : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK:         %[[DH:.*]] = train.div %{{.*}}, %{{.*}} : tensor<4x8xf32>{{$}}
// CHECK-NEXT:    train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DECH:.*]] = train.mul %{{.*}}, %[[PH]] : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[DIRH:.*]] = train.add %[[DH]], %[[DECH]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[NEWH:.*]] = train.descend %[[PH]], %[[DIRH]], %[[ALR]] : tensor<4x8xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEWH]] to @head : tensor<4x8xf32>
// CHECK-NEXT:    %[[PB:.*]] = train.read @b : tensor<4xf32>
// CHECK-NEXT:    train.read @b.adam_m : tensor<4xf32>
// CHECK:         train.mul %{{.*}}, %[[GB]] : tensor<f32>, tensor<4xf32> -> tensor<4xf32>
// CHECK:         %[[DB:.*]] = train.div %{{.*}}, %{{.*}} : tensor<4xf32>{{$}}
// CHECK-NEXT:    %[[NEWB:.*]] = train.descend %[[PB]], %[[DB]], %[[ALR]] : tensor<4xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEWB]] to @b : tensor<4xf32>
// CHECK-NEXT:    %[[PC:.*]] = train.read @cube : tensor<2x2x2xf32>
// CHECK-NEXT:    train.read @cube.adam_m : tensor<2x2x2xf32>
// CHECK:         train.mul %{{.*}}, %[[GCUBE]] : tensor<f32>, tensor<2x2x2xf32> -> tensor<2x2x2xf32>
// CHECK:         %[[DC:.*]] = train.div %{{.*}}, %{{.*}} : tensor<2x2x2xf32>{{$}}
// CHECK-NEXT:    train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DECC:.*]] = train.mul %{{.*}}, %[[PC]] : tensor<f32>, tensor<2x2x2xf32> -> tensor<2x2x2xf32>
// CHECK-NEXT:    %[[DIRC:.*]] = train.add %[[DC]], %[[DECC]] : tensor<2x2x2xf32>
// CHECK-NEXT:    %[[NEWC:.*]] = train.descend %[[PC]], %[[DIRC]], %[[ALR]] : tensor<2x2x2xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEWC]] to @cube : tensor<2x2x2xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }
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
// 0.2 * sqrt(18) = 0.848528137, 0.848528147 in f32, for 18x2; with no weight
// decay the scaled direction goes straight to descend with the Muon rate.
// CHECK-LABEL: train.model @muon_rms_from_trainer
// CHECK:         train.update {
// CHECK:         %[[MLR0:.*]] = train.constant dense<2.000000e-02> : tensor<f32>
// CHECK-NEXT:    %[[MLR:.*]] = train.mul %[[MLR0]], %{{.*}} : tensor<f32>
// CHECK:         %[[P:.*]] = train.read @tall : tensor<18x2xf32>
// CHECK:         %[[O:.*]] = train.newton_schulz %{{.*}} : tensor<18x2xf32>
// CHECK-NEXT:    %[[SC:.*]] = train.constant dense<0.848528147> : tensor<f32>
// CHECK-NEXT:    %[[OS:.*]] = train.mul %[[O]], %[[SC]] : tensor<18x2xf32>, tensor<f32> -> tensor<18x2xf32>
// CHECK-NEXT:    %[[NEW:.*]] = train.descend %[[P]], %[[OS]], %[[MLR]] : tensor<18x2xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NEW]] to @tall : tensor<18x2xf32>
train.model @muon_rms_from_trainer attributes {trainer = {optimizer = "muon", muon_scale = "rms"}} {
  train.param @tall : tensor<18x2xf32> = normal(0.02)
  train.step {
    %0 = train.read @tall : tensor<18x2xf32>
    %l = train.reduce_sum %0 [0, 1] : tensor<18x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Global-norm clipping over the accumulated gradients (not the step's
// train.grad values): sq = 0 + sum(ga^2) + sum(gb^2) over every one,
// scale = min(1, clip / (sqrt(sq) + 1e-6)), and each accumulated gradient is
// multiplied by it before its update.
// CHECK-LABEL: train.model @grad_clip
// CHECK:         train.step {
// CHECK-NOT:     train.min
// CHECK:         train.grad %{{.*}} for @a : tensor<2x3xf32>
// CHECK-NEXT:    train.grad %{{.*}} for @b : tensor<3xf32>
// CHECK-NEXT:    train.yield %{{.*}} : tensor<f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  train.update {
// CHECK-NEXT:    train.step_count : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[GA:.*]] = train.accumulated_grad @a : tensor<2x3xf32>
// CHECK-NEXT:    %[[GB:.*]] = train.accumulated_grad @b : tensor<3xf32>
// CHECK-NEXT:    %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
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
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<1.000000e-03> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<2.000000e-02> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MULT]] : tensor<f32>
// CHECK-NEXT:    %[[CA:.*]] = train.mul %[[GA]], %[[SCALE]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[PA:.*]] = train.read @a : tensor<2x3xf32>
// CHECK-NEXT:    train.read @a.momentum : tensor<2x3xf32>
// CHECK-NEXT:    train.constant dense<0.899999976> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %{{.*}} : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[BA:.*]] = train.add %{{.*}}, %[[CA]] : tensor<2x3xf32>
// CHECK-NEXT:    train.write %[[BA]] to @a.momentum : tensor<2x3xf32>
// CHECK-NEXT:    %[[NA:.*]] = train.descend %[[PA]], %[[BA]], %[[LR]] : tensor<2x3xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NA]] to @a : tensor<2x3xf32>
// CHECK-NEXT:    %[[CB:.*]] = train.mul %[[GB]], %[[SCALE]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[PB:.*]] = train.read @b : tensor<3xf32>
// CHECK-NEXT:    train.read @b.momentum : tensor<3xf32>
// CHECK-NEXT:    train.constant dense<0.899999976> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %{{.*}} : tensor<f32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[BB:.*]] = train.add %{{.*}}, %[[CB]] : tensor<3xf32>
// CHECK-NEXT:    train.write %[[BB]] to @b.momentum : tensor<3xf32>
// CHECK-NEXT:    %[[NB:.*]] = train.descend %[[PB]], %[[BB]], %[[LR]] : tensor<3xf32>, tensor<f32>
// CHECK-NEXT:    train.write %[[NB]] to @b : tensor<3xf32>
// CHECK-NEXT:  }
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

// Warm-up then cosine, at the top of train.update: mult = min(1, t/10) * (0.25 + 0.75 * 0.5 * (1 + cos(pi * p))),
// p = clamp((t - 10) / (110 - 10), 0, 1); both learning rates use it.
// CHECK-LABEL: train.model @cosine
// CHECK:         train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
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
// CHECK-NEXT:    %[[G:.*]] = train.accumulated_grad @a : tensor<3xf32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK-NEXT:    train.constant dense<2.000000e-02> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[MULT]] : tensor<f32>
// CHECK:         train.add %{{.*}}, %[[G]] : tensor<3xf32>
// CHECK:         train.descend %{{.*}}, %{{.*}}, %[[LR]] : tensor<3xf32>, tensor<f32>
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
// CHECK:         train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SPAN:.*]] = train.constant dense<8.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[W:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[TS:.*]] = train.sub %[[T]], %[[W]] : tensor<f32>
// CHECK-NEXT:    %[[PR:.*]] = train.div %[[TS]], %[[SPAN]] : tensor<f32>
// CHECK-NEXT:    %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PR0:.*]] = train.max %[[Z]], %[[PR]] : tensor<f32>
// CHECK-NEXT:    %[[ONE1:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PR1:.*]] = train.min %[[ONE1]], %[[PR0]] : tensor<f32>
// CHECK-NEXT:    %[[ONE2:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SHAPE:.*]] = train.sub %[[ONE2]], %[[PR1]] : tensor<f32>
// CHECK-NEXT:    %[[RANGE:.*]] = train.constant dense<0.899999976> : tensor<f32>
// CHECK-NEXT:    %[[RS:.*]] = train.mul %[[RANGE]], %[[SHAPE]] : tensor<f32>
// CHECK-NEXT:    %[[MIN:.*]] = train.constant dense<1.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[DECAY:.*]] = train.add %[[MIN]], %[[RS]] : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.mul %[[ONE]], %[[DECAY]] : tensor<f32>
// CHECK-NEXT:    train.accumulated_grad @a : tensor<3xf32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<1.000000e-03> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK:         train.descend %{{.*}}, %{{.*}}, %[[LR]] : tensor<3xf32>, tensor<f32>
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
// CHECK:         train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<f32>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[W:.*]] = train.constant dense<4.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[TW:.*]] = train.div %[[T]], %[[W]] : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[MULT:.*]] = train.min %[[ONE]], %[[TW]] : tensor<f32>
// CHECK-NEXT:    train.accumulated_grad @a : tensor<3xf32>
// CHECK-NEXT:    %[[LR0:.*]] = train.constant dense<1.000000e-03> : tensor<f32>
// CHECK-NEXT:    %[[LR:.*]] = train.mul %[[LR0]], %[[MULT]] : tensor<f32>
// CHECK:         train.descend %{{.*}}, %{{.*}}, %[[LR]] : tensor<3xf32>, tensor<f32>
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

// A bf16 model gets bf16 optimizer state, step count, accumulated gradient,
// constants and learning rate.
// CHECK-LABEL: train.model @bf16
// CHECK:         train.state @w.adam_m : tensor<2x2xbf16> = zeros {of = @w}
// CHECK:         train.state @w.adam_v : tensor<2x2xbf16> = zeros {of = @w}
// CHECK:         train.grad %{{.*}} for @w : tensor<2x2xbf16>
// CHECK:         train.update {
// CHECK-NEXT:    %[[T:.*]] = train.step_count : tensor<bf16>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<bf16>
// CHECK-NEXT:    train.accumulated_grad @w : tensor<2x2xbf16>
// CHECK:         train.pow %{{.*}}, %[[T]] : tensor<bf16>
// CHECK:         %[[NEW:.*]] = train.descend %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x2xbf16>, tensor<bf16>
// CHECK-NEXT:    train.write %[[NEW]] to @w : tensor<2x2xbf16>
train.model @bf16 {
  train.param @w : tensor<2x2xbf16> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x2xbf16>
    %l = train.reduce_sum %w [0, 1] : tensor<2x2xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}
