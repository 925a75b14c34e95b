"""What finished runs become: a run's HTML report, `compare` of two runs, and the leaderboard of several."""
