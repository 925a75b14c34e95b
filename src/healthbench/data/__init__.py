"""HealthBench's data: row schemas, loading with errors that name the line, the official files and their
cache, HealthBench Professional from the Hugging Face Hub, fixed replies, and the tag families."""
