"""diagnose: two runs (or targets) in, the guilty operator out, with its evidence (docs/DIAGNOSE.md).

``sides`` resolves what each side is and builds the capture jobs, ``stages`` runs them and the compares,
``rule`` judges a ranking (conclusive or not), ``region`` picks what stage 2 captures, ``evidence`` gathers the
culprit's figures and the per-module shares, ``disk`` measures what stage 2 wrote, ``engine`` joins them.
"""
