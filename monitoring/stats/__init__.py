"""Monitoring's pure statistics: no Django, nothing of the project but other pure modules. Intervals
(``Interval``, ``EstimateChoice``), stopping rules and win rates (stopping), prediction-powered
estimates (ppi), the over-optimisation peak fit (peak), and the judging template and verdict parser
(judging). Usable from a notebook."""
