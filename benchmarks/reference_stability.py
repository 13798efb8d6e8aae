"""How far each zoo model moves from itself when its inputs change by one part in a million
(edge_export.validators.stability, measured by a failed parity): PyTorch against PyTorch on the
inputs the tool's parity check uses (the example input and 7 seeded standard-normal ones).

    python benchmarks/reference_stability.py [--models levit_128s,vit_4l]

Prints, per model, the output's SQNR on the example input and on each random one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def stability(name: str) -> list[float]:
    import torch

    import zoo_models
    from edge_export.validators.stability import perturbed_samples, reference_stability

    model, example = zoo_models.build(name)
    generator = torch.Generator().manual_seed(0)
    samples = [example] + [
        tuple(torch.randn(e.shape, generator=generator) if e.dtype.is_floating_point else e for e in example) for _ in range(7)
    ]
    changed = perturbed_samples(samples)
    if changed is None:
        return []
    values = []
    with torch.no_grad():
        for sample, moved in zip(samples, changed):
            ref, out = model(*sample), model(*moved)
            ref, out = (ref[0], out[0]) if isinstance(ref, tuple) else (ref, out)
            result = reference_stability([[ref.float().numpy()]], [[out.float().numpy()]], ["output"])
            values.append(result.outputs[0].sqnr_db)
    return values


def main() -> None:
    import torch

    import zoo_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo_models.MODELS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.models.split(","):
        values = stability(name)
        shown = ["NaN" if v is None else f"{v:.1f}" for v in values]
        print(name, "example", shown[:1], "random", shown[1:], flush=True)


if __name__ == "__main__":
    main()
