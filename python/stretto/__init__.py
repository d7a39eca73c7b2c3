"""Stretto's Python side: the PyTorch exporter.

    python3 -m stretto.export my_model.py:build --out runs/mine
    from stretto.export import export, load_builder      # the same from Python

Training needs no Python: this package only turns a PyTorch model into the
`train` dialect MLIR and safetensors weights that stretto-train reads
(docs/guide/own-models.md).
"""
