"""Where users already work: the OpenReward environment, the Inspect tasks and the verifiers environment, all
grading through `grading.sample` with `grading.settings.GradingOptions`."""
