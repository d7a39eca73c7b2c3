"""Small versions of examples/pytorch/{llama,nanogpt}.py for the exporter's
end-to-end tests (train, pipeline, gossip, plans, load_state_dict)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..",
                                "examples", "pytorch"))
import llama  # noqa: E402
import nanogpt  # noqa: E402

B, T = 4, 16


def _inputs():
    idx = torch.zeros(B, T, dtype=torch.long)
    return idx, idx.clone()


def small_llama():
    torch.manual_seed(0)
    return llama.Llama(d=32, layers=2, heads=4, kv_heads=2, hidden=64, seq=T), _inputs()


def small_llama_tied():
    torch.manual_seed(0)
    return llama.Llama(d=32, layers=2, heads=4, kv_heads=2, hidden=64, seq=T, tie=True), _inputs()


def small_nanogpt():
    torch.manual_seed(0)
    return nanogpt.NanoGPT(d=32, layers=2, heads=4, seq=T), _inputs()


def load_back(spec, path):
    """Loads a Stretto model.safetensors into the PyTorch model, strictly."""
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                    "..", "bench", "parity"))
    import parity_common
    model, _ = globals()[spec]()
    tensors = {k: torch.from_numpy(np.array(v, dtype=np.float32))
               for k, v in parity_common.read_safetensors(path).items()}
    result = model.load_state_dict(tensors, strict=True)
    print("load_state_dict:", result)
    tied = [n for n, p in model.named_parameters(remove_duplicate=False)
            if any(p is q and n != m for m, q in model.named_parameters(remove_duplicate=False))]
    if tied:
        print("tied:", ", ".join(sorted(tied)))
    before = dict(globals()[spec]()[0].state_dict())
    changed = sum(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    print("tensors that differ from the initial weights: %d of %d" % (changed, len(before)))


if __name__ == "__main__":
    load_back(sys.argv[1], sys.argv[2])
