"""The network seam: request shapes (`wire`), the call graders and policies make (`completer`), the one client of
an OpenAI-compatible endpoint (`client`, built from `endpoint` settings), rate limits (`ratesignals`, `pacing`, one
gate per key: `keygates`) and the Batch API (`batch`)."""
