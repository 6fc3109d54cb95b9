"""The judgement of a run: evidence in, verdicts and the report out. Pure and torch-free.

- `evidence`: what the run gathered, as records (case results, blame, problems, golden checks).
- `retest`: how a failing case behaved when re-run on its unit and on a peer.
- `verdict`: the rules that weigh the evidence into each unit's verdict and the run's.
- `wording`: the one place those records become sentences (reasons, findings, next steps).
- `assemble`: results and their judgement -> the report (`sdcscan.report.document`).
"""
