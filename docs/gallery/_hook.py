"""mkdocs hook: publish the demo's figures in the site's gallery.

``make demo`` writes its figures to ``demo_output/figures/*.png`` (and ``gradflow demo --full-weights`` to
``demo_output/full_weights/figures/*.png``). This hook adds each of them to the built site as
``gallery/<name>.png`` (``gallery/full_weights/<name>.png``) (unless a file of that name already sits in ``docs/gallery/``),
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
    # the demo's second part (gradflow demo --full-weights) writes beside the first: OUT/full_weights/figures
    for folder, prefix in ((source, "gallery/"), (source.parent / "full_weights" / "figures", "gallery/full_weights/")):
        if not folder.is_dir():
            continue
        for png in sorted(folder.glob("*.png")):
            uri = f"{prefix}{png.name}"
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files
