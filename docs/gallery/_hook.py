"""mkdocs hook: publish the demo's figures in the site's gallery.

``make demo`` writes its figures to ``demo_output/figures/*.png``. This hook adds each of them to the
built site as ``gallery/<name>.png`` (unless a file of that name already sits in ``docs/gallery/``),
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
    if not source.is_dir():
        return files
    for png in sorted(source.glob("*.png")):
        uri = f"gallery/{png.name}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files
