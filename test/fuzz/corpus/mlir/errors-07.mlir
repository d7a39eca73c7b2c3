train.model @m attributes {trainer = {muon_scale = "spectral"}} {
}
