"""MkDocs hooks: the benchmark plots are published from where the benchmarks write them.

`benchmarks/results/*.png` lives outside `docs/`; the site serves each one as
`assets/benchmarks/NAME.png`, so docs/benchmarks.md embeds the committed plots without a copy.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for plot in sorted(RESULTS.glob("*.png")):
        files.append(
            File.generated(config, f"assets/benchmarks/{plot.name}", abs_src_path=str(plot))
        )
    return files
