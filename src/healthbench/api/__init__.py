"""The network seam: request shapes (`wire`), the one client of an OpenAI-compatible endpoint (`client`,
built from `endpoint` settings), rate limits (`ratesignals`, `pacing`) and the Batch API (`batch`)."""
