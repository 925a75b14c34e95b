"""Grading as the reference grades: the prompt, the grader and its settings, one graded sample, pure scoring
and aggregation, HealthBench Professional's official configuration, and the meta-evaluation's agreement figures."""
