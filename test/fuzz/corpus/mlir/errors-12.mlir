train.model @m attributes {trainer = {warmup_steps = 0, stages = 0}} {
}
