"""Every error the package raises on purpose, under one base class: `except HealthBenchError` catches them all.

Library code raises these and returns values; only the command line turns them into messages and exit
statuses. They are grouped by the boundary they come from, each group under a base of its own:

- `DataError`: bad input, a data file that cannot be used (naming file, line and field);
- `SettingsError`: settings that cannot be used or cannot go together, and `MissingExtra`, a feature asked for
  whose optional dependencies are not installed;
- `EndpointError`: a model endpoint (the policy's or the grader's), its account or its shared pace;
- `NotGraded`: a task, rubric item, candidate or meta-eval row that got no score;
- `OutputError`: the output folder and the files in it;
- `ServeError`: a request to a served environment;
- `Interrupted`: the user stopped a run.

`DataError` and `SettingsError` are also `ValueError`s: pydantic turns them into its `ValidationError` when a
validator raises them, and code that takes any bad value catches them. A message is written once, in its
error's constructor (a classmethod where one error has several messages); callers pass the facts. What a
refused request said (the provider's error body) is read in `api.failures`, not here: this module holds only
exceptions.
"""

from __future__ import annotations

import importlib.util


class HealthBenchError(Exception):
    """The base of every error this package raises on purpose."""


def _holder(pid: int | None) -> str:
    """Who holds a run folder, as a message says it: the process, when its id is known."""
    return "another process" if pid is None else f"process {pid}"


def _clipped(text: str, most: int) -> str:
    """`text` shown in at most `most` characters, the last three an ellipsis where it is cut."""
    return text if len(text) <= most else text[: most - 3] + "..."


# --- bad input -------------------------------------------------------------------------------------------------


class DataError(HealthBenchError, ValueError):
    """A data file that cannot be used as HealthBench data; the message names file, line and field."""


class DownloadFailed(DataError):
    """An official file that could not be downloaded: what failed (the file, the URL, the cause), and the ways to
    work offline. The data layer names the one every command has (`HEALTHBENCH_DATA_DIR`); a caller that takes a
    data file of its own adds its way with `offering`."""

    def __init__(self, failure: str, ways: tuple[str, ...]) -> None:
        super().__init__(f"{failure}. To work offline, {', or '.join(ways)}.")
        self.failure = failure
        self.ways = ways

    def offering(self, way: str) -> DownloadFailed:
        """The same failure, with one more way to work offline."""
        return DownloadFailed(self.failure, (*self.ways, way))


class UnknownTask(DataError):
    """A task asked for by a prompt_id that a split of the rows at hand does not have (a reward asked for a task of
    another split or of other data, a task spec a client made up): the message names both, and the splits there
    are when the split itself is not one (`splits`: those there are, given when `split` may be none of them).
    `UnknownPromptId` is the same error, by the name the trainers' rewards first raised it under."""

    def __init__(self, prompt_id: object, split: object, *, splits: tuple[str, ...] = ()) -> None:
        said = f"prompt_id {prompt_id!r} is not in split {split!r}"
        if splits and split not in splits:
            shown = ", ".join(repr(name) for name in splits)
            said += f": there is no such split here (the splits are {shown})"
        super().__init__(said)
        self.prompt_id = prompt_id
        self.split = split


UnknownPromptId = UnknownTask


class NotAReply(DataError):
    """What a trainer's reward was given in place of a reply (None, a number, an empty list of messages, a message
    without text): which one of the step it is (its place, and its task) and what it was, refused before any grader
    call wherever a reward is asked for (TRL, verl, `/rewards`, `/openrlhf`)."""

    def __init__(self, index: int, prompt_id: object, given: object) -> None:
        super().__init__(
            f"reply {index} (task {prompt_id}) is not a reply: {_clipped(repr(given), 100)}; a reply is its text, or a "
            "conversation's messages whose last holds it as its content"
        )
        self.index = index
        self.prompt_id = prompt_id


class RunBeingWritten(DataError):
    """A run folder a live run holds, given to a command that reads runs: it is an unfinished run."""

    def __init__(self, path: object, pid: int | None) -> None:
        super().__init__(
            f"{path}: an unfinished run, being written now by {_holder(pid)}; read it once that run has ended"
        )
        self.path = path
        self.pid = pid


# --- settings --------------------------------------------------------------------------------------------------


class SettingsError(HealthBenchError, ValueError):
    """Settings that cannot go together or cannot be used (a length adjustment given by halves, say)."""


class MissingExtra(HealthBenchError, ImportError):
    """A feature asked for whose optional dependency (`module`, the package imported) is not installed: the message
    names the extra that installs it. An `ImportError` too, for code that catches those."""

    def __init__(self, feature: str, module: str, extra: str, *, how: str = "") -> None:
        also = f" ({how})" if how else ""
        super().__init__(
            f"{feature} needs the package's {extra} extra, and {module} is not installed: pip install -e "
            f"'.[{extra}]' in the clone{also}"
        )
        self.name = module
        self.package = module
        self.feature = feature
        self.extra = extra

    @classmethod
    def check(cls, module: str, feature: str, extra: str) -> None:
        """Raise for `feature` unless `module` can be imported (without importing it)."""
        if importlib.util.find_spec(module) is None:
            raise cls(feature, module, extra)


# --- a model endpoint ------------------------------------------------------------------------------------------


class EndpointError(HealthBenchError):
    """What a model endpoint, its account or its shared pace did: a request that failed, an answer that cannot be
    used, an account without quota, an endpoint no waiting can make usable."""


class RequestFailed(EndpointError):
    """A request that did not succeed within the retry bound, or failed in a way not worth retrying. A refusal
    keeps the HTTP status and whole body it came with; `api.failures.provider_error` reads what the body says."""

    def __init__(
        self, cause: str, attempts: int, *, status: int | None = None, body: bytes = b"", cut_short: bool = False
    ) -> None:
        super().__init__(f"{cause} (after {attempts} attempt{'s' if attempts != 1 else ''})")
        self.cause = cause
        self.attempts = attempts
        # The output cap ended the last answer before it could be used: a larger cap cures it, asking again does not.
        self.cut_short = cut_short
        self.status = status
        self.body = body

    @property
    def lasting(self) -> bool:
        """Whether the call fails again however often it is asked: its answers ran out of output tokens, or its
        host refused the request itself (a 4xx)."""
        return self.cut_short or self.status is not None


class InvalidResponse(EndpointError):
    """An answer arrived but cannot be used (broken body, empty content, no valid verdict): retried."""


class UnreadableAnswer(InvalidResponse):
    """An answer that is not the API's at all (not JSON, no choices, an HTML page, `{}`), as opposed to a readable
    one whose content cannot be used: an endpoint none of whose first answers can be read is unusable."""


class QuotaExhausted(EndpointError):
    """The account has no quota (credit) left, as a 429 with code `insufficient_quota` says: retrying cannot help.
    `endpoint` names the endpoint once a caller knows it, `store` where what was answered is kept once a run
    knows it."""

    def __init__(self, endpoint: str = "", store: str = "") -> None:
        said = f"{endpoint}: " if endpoint else ""
        message = f"{said}the account has no quota left (insufficient_quota)"
        if store:
            message += (
                f". Everything answered is kept in {store}: add credit (or use another key), then run the same "
                "command again to go on from there."
            )
        super().__init__(message)
        self.endpoint = endpoint
        self.store = store

    def at(self, endpoint: str) -> QuotaExhausted:
        """The same error, said of `endpoint`."""
        return QuotaExhausted(endpoint, self.store)

    def kept_in(self, store: str) -> QuotaExhausted:
        """The same error, saying where what was answered is kept and how to go on."""
        return QuotaExhausted(self.endpoint, store)


class EndpointUnusable(EndpointError):
    """An endpoint no waiting can make usable: it cannot be reached (connection refused, no such host), its URL is
    not one, or it refuses the requests themselves (`refused`: a 401 or 403, a 404, a 400 about a parameter or the
    model). Never retried: the run stops. The message names the endpoint (without a password) and the cause, never
    the key; `role` says whose endpoint it is ("the model's", "the grader's") once a caller knows, and `advice`
    what to do, once the run knows where its answers are kept."""

    def __init__(self, endpoint: str, cause: str, *, refused: bool, role: str = "", advice: str = "") -> None:
        whose = f"{role} " if role else ""
        then = f"; {advice}" if advice else ""
        super().__init__(f"{whose}endpoint {endpoint} {cause}{then}")
        self.endpoint = endpoint
        self.cause = cause
        self.refused = refused
        self.role = role
        self.advice = advice

    def of(self, role: str) -> EndpointUnusable:
        """The same error, said of `role`'s endpoint."""
        return EndpointUnusable(self.endpoint, self.cause, refused=self.refused, role=role, advice=self.advice)

    def advised(self, advice: str) -> EndpointUnusable:
        """The same error, with what to do."""
        return EndpointUnusable(self.endpoint, self.cause, refused=self.refused, role=self.role, advice=advice)


class PolicyMisuse(EndpointError):
    """The model's endpoint refuses the requests themselves, not a few prompts: no score can come of it."""

    @classmethod
    def refused_request(cls, endpoint: str, said: str) -> PolicyMisuse:
        """A request refused with a 4xx that is no refusal of the prompt; `said` is what the refusal said."""
        return cls(f"{endpoint} refused a request to the model ({said}); no score is written.")

    @classmethod
    def refusals(cls, refused: int, seen: int, last: str) -> PolicyMisuse:
        """`refused` of the `seen` prompts answered refused, most of them; `last` is the last refusal in words."""
        return cls(
            f"the model refused {refused} of the {seen} prompts answered so far; refusals this common are not a few "
            "prompts a filter flags but a problem with the requests (model, endpoint, parameters, key), so no score "
            f"is written. The last refusal: {last}"
        )


class PaceStoreUnreachable(EndpointError):
    """The store a shared pace was asked to use (`--pace-store`) cannot be reached at start: nothing is sent.
    The URL is named without its password."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"pace store {url} cannot be reached ({cause}); nothing was sent")
        self.url = url
        self.cause = cause


class Deferred(EndpointError):
    """A request left in a batch for a later session to collect (`--no-wait`): neither an answer nor a failure."""

    def __init__(self, purpose: str) -> None:
        super().__init__(f"waiting in a {purpose} batch")
        self.purpose = purpose


# --- grading ---------------------------------------------------------------------------------------------------


class NotGraded(HealthBenchError):
    """A task, rubric item, candidate or meta-eval row that got no score: which one, and the last cause."""


class GradingError(NotGraded):
    """A reply that could not be graded: which task, which rubric item, and the last cause. `lasting`: asking again
    fails the same way (an output cap that ran out, a request the grader's host refuses), so running the same
    command again does not finish the run."""

    def __init__(self, prompt_id: str, criterion: str, cause: str, *, lasting: bool = False) -> None:
        super().__init__(f"task {prompt_id}: rubric item {_clipped(criterion, 100)!r} could not be graded: {cause}")
        self.prompt_id = prompt_id
        self.criterion = criterion
        self.cause = cause
        self.lasting = lasting

    def redacted(self, secret: str | None) -> GradingError:
        """The same error (its class, its `lasting`) with `secret` taken out of its cause: a grader key an endpoint
        echoed in an error body, which must not reach a log or a client. Itself when the cause does not hold it."""
        if not secret or secret not in self.cause:
            return self
        return self._with_cause(self.cause.replace(secret, "[redacted]"))

    def _with_cause(self, cause: str) -> GradingError:
        return GradingError(self.prompt_id, self.criterion, cause, lasting=self.lasting)


class ReplyGradingError(GradingError):
    """A reply whose rubric, asked in one grader call (`per-reply`), got no valid list of verdicts: which task, how
    many items, and the last cause. There is no verdict for any of its items."""

    def __init__(self, prompt_id: str, items: int, cause: str, *, lasting: bool = False) -> None:
        NotGraded.__init__(
            self,
            f"task {prompt_id}: its {items} rubric items, asked in one grader call (per-reply), could not be graded: "
            f"{cause}",
        )
        self.prompt_id = prompt_id
        self.criterion = f"all {items} rubric items (per-reply)"
        self.cause = cause
        self.items = items
        self.lasting = lasting

    def _with_cause(self, cause: str) -> GradingError:
        return ReplyGradingError(self.prompt_id, self.items, cause, lasting=self.lasting)


class SampleError(NotGraded):
    """The evaluated model gave no usable reply for a task within the retry bound."""

    def __init__(self, prompt_id: str, cause: str) -> None:
        super().__init__(f"task {prompt_id}: the model under evaluation gave no reply: {cause}")
        self.prompt_id = prompt_id


class CandidateError(NotGraded):
    """A candidate of a group (OpenReward's `score_group`) that cannot be scored: it has no reply, or its reply
    could not be graded. The message names the candidate's index."""

    def __init__(self, index: int, cause: str) -> None:
        super().__init__(f"candidate {index}: {cause}")
        self.index = index


class MetaGradingError(NotGraded):
    """A meta-eval row the grader could not judge within the retry bound (with `trick`, the row's completion as a
    judge's trial rewrote it)."""

    def __init__(
        self,
        index: int,
        prompt_id: str,
        completion_id: str,
        rubric: str,
        cause: str,
        *,
        lasting: bool = False,
        trick: str | None = None,
    ) -> None:
        rewritten = "" if trick is None else f" rewritten by {trick}"
        super().__init__(
            f"meta-eval row {index} (prompt {prompt_id}, completion {completion_id}{rewritten}, criterion "
            f"{_clipped(rubric, 80)!r}) could not be graded: {cause}"
        )
        self.lasting = lasting  # as `GradingError.lasting`


class RewriteError(NotGraded):
    """A reply the attacker model gave no rewrite of, by one strategy, within the retry bound: the trick is tried
    without that reply."""

    def __init__(self, strategy: str, prompt_id: str, completion_id: str, cause: str) -> None:
        which = f"task {prompt_id}" + (f", completion {completion_id}" if completion_id else "")
        super().__init__(f"{which}: the attacker gave no {strategy} rewrite of the reply: {cause}")
        self.prompt_id = prompt_id
        self.cause = cause


# --- the output folder -----------------------------------------------------------------------------------------


class OutputError(HealthBenchError):
    """An output folder that cannot hold this run: it cannot be used, or it holds another run."""


class OutputUnusable(OutputError):
    """An output folder, or a file in it, that cannot be made, written or read as a run's: the message names the
    path and the cause ("cannot write /proc/nope: No such file or directory")."""

    def __init__(self, path: object, cause: str) -> None:
        super().__init__(f"cannot write {path}: {cause}")
        self.path = path


class FolderBusy(OutputError):
    """A run folder another live process is writing: one writer per folder, so this command stops before it sends
    anything."""

    def __init__(self, path: object, pid: int | None) -> None:
        super().__init__(
            f"{path} is being written by {_holder(pid)}, a run still going: wait for it to end (or stop it), or use "
            "another `out` folder"
        )
        self.path = path
        self.pid = pid


class DiskFull(OutputUnusable):
    """The disk of a run folder filled up mid-run: the run stops, what is in its store stays there, and the same
    command goes on once there is space. The message names the folder and the space left on its disk."""

    def __init__(self, path: object, free: int, store: object | None = None) -> None:
        kept = "" if store is None else f"; everything answered so far is kept in {store}"
        HealthBenchError.__init__(
            self,
            f"cannot write {path}: its disk is full ({self._size(free)} free){kept}: free some space, then run the "
            "same command again to go on from there",
        )
        self.path = path
        self.free = free

    @staticmethod
    def _size(count: int) -> str:
        """A byte count as people read it: "0 bytes", "12 KiB", "3.4 MiB"."""
        if count < 1024:
            return f"{count} bytes"
        amount = count / 1024
        unit = "KiB"
        for larger in ("MiB", "GiB", "TiB"):
            if amount < 1024:
                break
            amount = amount / 1024
            unit = larger
        return f"{amount:.3g} {unit}"


class ConfigMismatch(OutputError):
    """The output folder holds a run made with other settings; `details` names the settings that differ."""

    def __init__(self, details: str) -> None:
        super().__init__(
            f"this output folder holds a run with other settings ({details}). "
            "Use a new `out` folder, or run with the recorded settings to resume."
        )
        self.details = details


class ExportMismatch(OutputError):
    """An export folder holding files of other splits (other data, heldout or seed, named in its manifest, or files
    whose tasks another split holds): adding to it would mix them, so nothing is written. `details` names the
    difference."""

    def __init__(self, path: object, details: str) -> None:
        super().__init__(
            f"{path} holds an export of other splits ({details}); adding to it would put tasks of one split beside "
            "another's. Export into a new `out` folder, or with the settings it was made with."
        )
        self.path = path
        self.details = details


# --- a served environment --------------------------------------------------------------------------------------


class ServeError(HealthBenchError):
    """A request a served environment refuses, or a server that cannot serve as it was built."""


class OverLimit(ServeError):
    """A request to a served environment that asks more than the server's bounds allow (a reply too long to
    grade, a group of too many candidates): nothing of it was graded. The message names the bound and the flag
    that sets it."""

    # The setting that bounds a reply's length, as a server's bound names it; the in-process rewards name theirs.
    SERVED_REPLY_BOUND = "healthbench serve --max-reply-chars"

    @staticmethod
    def reply_cause(chars: int, most: int, setting: str = SERVED_REPLY_BOUND) -> str:
        """Why a reply of `chars` characters is not graded where `setting` (named in the message) bounds a reply to
        `most`."""
        return f"the reply is {chars:,} characters, more than is graded: at most {most:,} ({setting})"

    @classmethod
    def reply(cls, prompt_id: str, chars: int, most: int, setting: str = SERVED_REPLY_BOUND) -> OverLimit:
        """A reply to task `prompt_id` too long to grade."""
        return cls(f"task {prompt_id}: {cls.reply_cause(chars, most, setting)}")

    @classmethod
    def group(cls, size: int, most: int) -> OverLimit:
        """A group of `size` candidates, more than the `most` scored at once."""
        return cls(
            f"a group of {size:,} candidates is more than this server scores at once: at most {most} "
            "(healthbench serve --max-group-size)"
        )


class SessionRefused(ServeError):
    """A request a served session refuses for its state: a group scored after the session's episode finished."""

    def __init__(self, prompt_id: str) -> None:
        super().__init__(
            f"task {prompt_id}: this session's episode has finished (its reply was graded): score a group on a "
            "session of its own"
        )
        self.prompt_id = prompt_id


class NotServing(ServeError, RuntimeError):
    """A server, or an environment class, used before it has what it serves (no rows bound), or started twice."""


# --- a run stopped ---------------------------------------------------------------------------------------------


class Interrupted(HealthBenchError):
    """The user stopped a run (Ctrl-C, or `signal` SIGTERM: docker stop, systemd, SLURM) after what was in flight
    landed; `done` of `total` samples are graded and kept, with every answer that arrived, so the same command
    goes on from there."""

    def __init__(self, done: int, total: int, store: str, signal: str = "SIGINT") -> None:
        how = "interrupted" if signal == "SIGINT" else f"stopped by {signal}"
        super().__init__(
            f"{how}: {done} of {total} graded and saved, and every answer that arrived is kept in {store}; run the "
            "same command again to go on from there"
        )
        self.done = done
        self.total = total
        self.signal = signal
