"""mkdocs hook: publish the demo's figures in the site's gallery.

``make demo`` writes its figures to ``demo_output/figures/*.png`` (and its full-weight part, ``gradflow demo
--full-weights --paper-size``, to ``demo_output/full_weights_paper/figures/*.png``; without ``--paper-size``, to
``demo_output/full_weights/figures/*.png``, taken where the paper-size folder is missing). This hook adds each of them
to the built site as ``gallery/<name>.png`` (``gallery/full_weights/<name>.png``) (unless a file of that name already
sits in ``docs/gallery/``),
so ``make docs`` after ``make demo`` shows them without copying anything into the source tree. Set
``GRADFLOW_GALLERY_DIR`` to take the figures from another folder. Without figures the gallery page
still builds (its images are plain HTML, not checked links) and says how to produce them.
"""

from __future__ import annotations

import os
from pathlib import Path

from mkdocs.structure.files import File


def on_files(files, config):
    root = Path(config.config_file_path).resolve().parent
    source = Path(os.environ.get("GRADFLOW_GALLERY_DIR", root / "demo_output" / "figures"))
    # the demo's second part writes beside the first: OUT/full_weights_paper/figures (make demo's, at the paper's
    # size), else OUT/full_weights/figures (gradflow demo --full-weights)
    parts = [source.parent / name / "figures" for name in ("full_weights_paper", "full_weights")]
    full = next((folder for folder in parts if folder.is_dir()), parts[-1])
    for folder, prefix in ((source, "gallery/"), (full, "gallery/full_weights/")):
        if not folder.is_dir():
            continue
        for png in sorted(folder.glob("*.png")):
            uri = f"{prefix}{png.name}"
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files
