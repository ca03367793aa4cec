"""The family kit: what every model family builds on, below the families and beside the solver kit. The
interface a family implements (``_family``), the greedy stage loop and tolerances (``_greedy``), comparison windows
and rates (``_comparison``), the run protocols (``_trajectory``), tables (``_report``) and figures (``_plots``),
input checks (``_checks``) and the ``AssumptionWarning`` (``_assumptions``). It imports no family."""
