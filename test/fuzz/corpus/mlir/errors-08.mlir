train.model @m attributes {trainer = {schedule = "step"}} {
}
