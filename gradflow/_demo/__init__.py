"""The demos: the paper's toy task with diagonal weights (Figures 6–10) and the attention head with full weights
(Figure 2 d–f), each run into an output folder, reusing finished parts; and the pipeline each family's
``gradflow compare`` runs (the family names it: :func:`pipeline_of`)."""

from ._diagonal import PAPER_ALPHAS as PAPER_ALPHAS
from ._diagonal import PAPER_LOG_ALPHAS as PAPER_LOG_ALPHAS
from ._diagonal import QUICK as QUICK
from ._diagonal import DemoConfig as DemoConfig
from ._diagonal import run_demo as run_demo
from ._full_weights import FIGURE2_ALPHAS as FIGURE2_ALPHAS
from ._full_weights import PAPER_FULL as PAPER_FULL
from ._full_weights import QUICK_FULL as QUICK_FULL
from ._full_weights import RankDemoConfig as RankDemoConfig
from ._full_weights import run_rank_demo as run_rank_demo
from ._pipelines import Pipeline as Pipeline
from ._pipelines import pipeline_of as pipeline_of
