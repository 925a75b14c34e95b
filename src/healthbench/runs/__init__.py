"""A run in an output folder: the policy under evaluation, the store of replies and verdicts, the runner, one
session of a run, the run folder's files, baselines, the meta-evaluation's run, prices and the dry run."""
