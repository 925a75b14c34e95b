"""Pacing: each key at each endpoint has one pace that keeps request starts under its account's rate limits.

`pacer.Pacer` is what one process sees (answers, 429s, the server's reported budget) and makes of it;
`state.PaceState` is the part every process using the key shares (limits, the pace of each, a 429's hold), kept
in this process (`state.LocalPace`) or in Redis (`store.PaceStore`); `gate.Gate` runs the two for the client;
`siblings` joins the paces of two keys at one endpoint once it sees them spend one limit.
"""

from healthbench.api.pacing.gate import Gate
from healthbench.api.pacing.pacer import Pace, Pacer
from healthbench.api.pacing.state import BURST, Effects, LocalPace, PaceState

__all__ = ["BURST", "Effects", "Gate", "LocalPace", "Pace", "PaceState", "Pacer"]
