"""What the families' pipelines share (the demos, and ``gradflow compare`` of a built-in task): the steps into an
output folder (``_steps``), the reports' common text (``_report``) and :class:`Pipeline`, found by
:func:`pipeline_of` where a family names it. The pipelines themselves are the families' (``gradflow/_diagonal/
_pipeline.py``: the paper's toy task, Figures 6–10; ``gradflow/_factorized/_pipeline.py``: the attention head with
full weights, Figure 2 d–f); their names are re-exported here."""

from .._diagonal._pipeline import PAPER_ALPHAS as PAPER_ALPHAS
from .._diagonal._pipeline import PAPER_LOG_ALPHAS as PAPER_LOG_ALPHAS
from .._diagonal._pipeline import QUICK as QUICK
from .._diagonal._pipeline import DemoConfig as DemoConfig
from .._diagonal._pipeline import run_demo as run_demo
from .._factorized._pipeline import FIGURE2_ALPHAS as FIGURE2_ALPHAS
from .._factorized._pipeline import PAPER_FULL as PAPER_FULL
from .._factorized._pipeline import QUICK_FULL as QUICK_FULL
from .._factorized._pipeline import RankDemoConfig as RankDemoConfig
from .._factorized._pipeline import run_rank_demo as run_rank_demo
from ._pipelines import Demo as Demo
from ._pipelines import Pipeline as Pipeline
from ._pipelines import pipeline_of as pipeline_of
