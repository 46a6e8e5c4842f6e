"""Experiments: the evaluation runner shared by ``riskrank evaluate`` and ``riskrank
reproduce``, and one module per table/figure of the paper."""
