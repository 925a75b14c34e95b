"""Keys that share one limit: the gates of every key at one endpoint, and when two of them start pacing together.

OpenAI's limits belong to an organization (and a model), not to a key: every key of an organization spends the one
limit. An eval whose policy and grader have keys of their own, one organization's, is two paces that know nothing
of each other against one limiter: each paces to the whole limit, the two together overrun it, and each key's 429s
are the other key's doing. Cutting each pace cannot cure it in time (issue 47's timeline, the plainest limiter, a
policy key and a grader key): each key started some 50 requests a second, half of them refused; a key's own starts
were under its pace, so its cuts by a tenth a second bound only seconds later, and where refused requests count they
kept the bucket empty: some 50 answers a second for five seconds. The policy done, the grader's pace, cut for the
policy's starts, took twenty seconds to regrow to the limit it now had to itself: 82% of the limit by the worst
seed, 8.4% refused. Paced through one state, as one key's clients are, the two keys send at one pace, whichever
starts, and one key has the whole of it while the other sends nothing.

The evidence that two keys share a limit (`share_a_limit`), each piece of it what limits of one key each cannot show:
- each key was refused by a limit (one its 429 names: its message's numbers, a limiter's own retry hint, headers
  showing it spent) within one window of the other, limits of the same dimension and size, although this
  process's starts of it over the window before its refused one, widened by `_LATE` for a start's way to the
  limiter, were under `_OWN` of a window's worth of that limit. A limit that counts one key refuses it only once its
  starts have filled its budget: a bucket once they have spent it, a sliding log or a fixed window once the window
  holds a budget's worth. In the pace's simulation (eval's shape, twelve limiter kinds with 429s at once or 300 ms
  late, three seeds each) the first such refusal of two keys sharing the limit came at 80-93% of the window's worth
  on the plainest limiter, 36-97% over all kinds (70 of 72 runs joined); keys with limits of their own were refused
  at no less than 98% of it (none of 72 runs joined). Both keys, not one: a key that a sender this process cannot
  see spends too (another process using it, a notebook) is refused short of its limit as well; taken alone, that
  joined it to a key refused at a limit of its own beside it in 41 of 90 simulated runs (the plainest, the hard, a
  sliding-log and a fixed-window limiter, 20-60 requests a second unseen), asked of both keys in none;
- nor had either key started, since its first start, more than the most generous limit of that size lets through
  (its rate since then, and a whole window's worth to start with): a key whose own burst ran a limit into debt is
  refused for a while with few starts of its own in the window (the hard limiter at 500 requests a minute, after
  the first window of twenty);
- the two keys' starts together over the window before the refused one reach the limit (`AT_PACE_MIN` of a
  window's worth).

Two keys that show it pace through one state from then on, the one of the key whose slot sorts first (the same
choice in every process). Keys whose paces other processes share through a store (the store has seen other
processes use them lately) are never joined: this process sees only its own starts of them, not the key's. Keys
wrongly taken to share a limit (two keys that senders this process cannot see each spend, refused together) are
paced together under one: slower, never refused, as two models on one key are (`keygates`).
"""

from __future__ import annotations

import weakref
from typing import Generic, Protocol, TypeVar

from healthbench.api.pacing.pacer import Pacer, Refused
from healthbench.api.pacing.state import AT_PACE_MIN, WINDOW

S = TypeVar("S")

_OWN = 0.9  # of a window's worth of a limit: a key's own starts under this did not fill it
_LATE = 0.1  # seconds a start may take to reach the limiter (a loaded client, a network): it counts a window late


class Member(Protocol[S]):
    """A key's gate at the endpoint, as far as its siblings see it: its pacer, and the state it paces through
    (replaced when it joins another key's)."""

    pacer: Pacer
    state: S


def share_a_limit(one: Pacer, other: Pacer) -> bool:
    """Whether the key of `one`, just refused by a limit, and the key of `other` share that limit (see the module
    docstring)."""
    refused, theirs = one.refused_by, other.refused_by
    if refused is None or theirs is None or refused.shared or theirs.shared or abs(refused.at - theirs.at) >= WINDOW:
        return False
    if (refused.dimension, refused.per_minute) != (theirs.dimension, theirs.per_minute):
        return False
    budget = refused.per_minute / 60 * WINDOW
    since, until = refused.started - WINDOW - _LATE, refused.started
    both = one.started_between(since, until, refused.dimension) + other.started_between(since, until, refused.dimension)
    return _short(one, refused) and _short(other, theirs) and both >= AT_PACE_MIN * budget


def _short(pacer: Pacer, refused: Refused) -> bool:
    """Whether `pacer`'s key was refused as `refused` says with its own starts short of the limit: under `_OWN` of
    a window's worth over the window before the refused one, and not past what the limit lets through since its
    first start."""
    budget = refused.per_minute / 60 * WINDOW
    own = pacer.started_between(refused.started - WINDOW - _LATE, refused.started, refused.dimension)
    return own < _OWN * budget and pacer.started_alone(refused.at, refused.per_minute, refused.dimension) < 1


class Siblings(Generic[S]):
    """The gates of every key at one endpoint (through one pace store, or none), held weakly: see the module
    docstring."""

    def __init__(self) -> None:
        self._members: weakref.WeakKeyDictionary[Member[S], str] = weakref.WeakKeyDictionary()

    def add(self, member: Member[S], slot: str) -> None:
        """A key's gate, by its slot (a digest of the endpoint and the key: what orders the paces kept)."""
        self._members[member] = slot

    def refused(self, member: Member[S]) -> bool:
        """`member`'s key was just refused by a limit: join its pace with another key's if the two share that
        limit. Returns whether it did."""
        for other, slot in list(self._members.items()):
            if other.state is not member.state and share_a_limit(member.pacer, other.pacer):
                first, second = (other, member) if slot < self._members[member] else (member, other)
                kept, left = first.state, second.state
                for each in list(self._members):
                    if each.state is left:
                        each.state = kept
                return True
        return False
