"""clawrig: run Claw-style agent benchmarks for real.

Task files (WildClawBench Markdown, four-folder sample sets, DataClawBench) -> an isolated
bubblewrap sandbox per trial -> an OpenClaw-compatible agent -> the task's own grader, an LLM
judge and process metrics -> parallel, resumable, budget-capped jobs.
"""

__version__ = "0.1.0"
