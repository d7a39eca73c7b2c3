train.model @m attributes {trainer = {warmup_steps = -1}} {
}
