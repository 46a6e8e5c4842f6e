"""Evaluation: every method of the results contract on a benchmark or a user's registry
(:mod:`.runner`, :mod:`.methods`, :mod:`.registry_eval`, the baselines), and the comparison of
two results files (:mod:`.compare`). The paper's tables and figures, built from these runs,
are :mod:`riskrank.experiments`'."""
