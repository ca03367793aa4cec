"""What the families' pipelines share (the demos, and ``gradflow compare`` of a built-in task): the steps into an
output folder (``_steps``), the reports' common text (``_report``), and :class:`Pipeline` with its :class:`Demo`,
found by :func:`pipeline_of` where a family names it. The pipelines themselves are the families'
(``gradflow/_<family>/_pipeline.py``); the command line finds them through the registry."""

from ._pipelines import Demo as Demo
from ._pipelines import Pipeline as Pipeline
from ._pipelines import pipeline_of as pipeline_of
