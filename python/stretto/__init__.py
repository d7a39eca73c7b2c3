"""Stretto's Python side: the PyTorch exporter (`python3 -m stretto.export`).

Training needs no Python; this package only turns a PyTorch model into the
`train` dialect MLIR and safetensors weights that stretto-train reads.
"""
__all__ = ["export", "ExportError"]


def export(*args, **kwargs):
    """stretto.export.export (imported on use: it needs torch)."""
    from .export import export as run
    return run(*args, **kwargs)


def __getattr__(name):
    if name == "ExportError":
        from ._lower import ExportError
        return ExportError
    raise AttributeError(name)
