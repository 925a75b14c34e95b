"""HealthBench rows as the official JSONL files hold them, validated field by field.

Two task schemas exist: HealthBench's own (`prompt`, `rubrics`; the full, hard and consensus files) and
HealthBench Professional's (`conversation`, `rubric_items`; docs/SPEC.md section 7), which becomes the same `Row`. Each
model says what makes a row unusable (`problem`), so the loader can name the line and field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
)

from healthbench.data.tags import PROFESSIONAL_SLICES
from healthbench.errors import DataError

# What an empty id or criterion is said as: an id that names nothing cannot key a reply, a result or a resumed
# sample, and an empty criterion gives the grader nothing to judge.
EMPTY_ID = "is empty: a task needs an id"
EMPTY_CRITERION = "is empty: a rubric item needs a criterion to grade"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Message(_Model):
    """One conversation turn."""

    role: Literal["system", "user", "assistant"]
    content: StrictStr


class RubricItem(_Model):
    """One physician-written criterion; negative points mark undesirable behaviour."""

    criterion: StrictStr
    points: StrictInt
    tags: list[StrictStr]


class IdealCompletions(_Model):
    """Physician-written replies, present on some rows."""

    ideal_completion: StrictStr
    ideal_completions_group: Literal["Group 1", "Group 2", "Group 3"]
    ideal_completions_ref_completions: list[StrictStr] = Field(default_factory=list)


class Row(_Model):
    """One HealthBench task: a conversation ending on a user turn and its rubric."""

    prompt: list[Message] = Field(min_length=1)
    prompt_id: StrictStr
    example_tags: list[StrictStr]
    rubrics: list[RubricItem] = Field(min_length=1)
    ideal_completions_data: IdealCompletions | None = None
    # HealthBench Professional's physician-written reply, which its physician baseline grades.
    physician_response: StrictStr | None = None

    def problem(self) -> tuple[str, str] | None:
        """The first semantic problem of this row as (field, message), or None if it is usable."""
        if not self.prompt_id.strip():
            return "prompt_id", EMPTY_ID
        for number, item in enumerate(self.rubrics):
            if not item.criterion.strip():
                return f"rubrics.{number}.criterion", EMPTY_CRITERION
        if self.prompt[-1].role != "user":
            return "prompt", f"must end on a user turn, ends on {self.prompt[-1].role!r}"
        if not any(item.points > 0 for item in self.rubrics):
            return "rubrics", "no item has positive points, so the row has no score"
        return None


class MetaRow(_Model):
    """One meta-evaluation row: a completion, one consensus criterion, and physicians' binary labels."""

    prompt: list[Message] = Field(min_length=1)
    completion: StrictStr
    rubric: StrictStr
    category: StrictStr
    binary_labels: list[StrictBool] = Field(min_length=1)
    anonymized_physician_ids: list[StrictStr]
    prompt_id: StrictStr
    completion_id: StrictStr

    def problem(self) -> tuple[str, str] | None:
        """The first semantic problem of this row as (field, message), or None if it is usable."""
        if not self.prompt_id.strip():
            return "prompt_id", EMPTY_ID
        if not self.rubric.strip():
            return "rubric", EMPTY_CRITERION
        if len(self.anonymized_physician_ids) != len(self.binary_labels):
            return "anonymized_physician_ids", "must have one id per binary label"
        return None


def _messages_of(value: Any) -> Any:
    # The dataset card allows the conversation as an object holding `messages` as well as a bare list.
    if isinstance(value, dict) and "messages" in value:
        return value["messages"]
    return value


def _id_string(value: Any) -> Any:
    # An integer id is kept as its decimal string: `Row.prompt_id` is a string everywhere else.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


_Id = Annotated[StrictStr | None, BeforeValidator(_id_string)]
ID_FIELDS = ("id", "prompt_id", "task_id")
# A `Row`'s field names as a Professional row names the same fields.
_PROFESSIONAL_NAMES = {"prompt": "conversation", "rubrics": "rubric_items", "criterion": "criterion_text"}


class ProfessionalRubricItem(_Model):
    """One HealthBench Professional criterion; it carries no tags."""

    criterion_text: StrictStr
    points: StrictInt


class ProfessionalRow(_Model):
    """One HealthBench Professional row, as its dataset card describes it (docs/SPEC.md section 7).

    The card does not settle the id's field name, so the id is `id`, else `prompt_id`, else `task_id` (the
    first one present and not null; a string, or an integer kept as its string). `conversation` is a list
    of messages or an object holding `messages`. Fields the card adds later are ignored.
    """

    conversation: Annotated[list[Message], BeforeValidator(_messages_of), Field(min_length=1)]
    rubric_items: list[ProfessionalRubricItem] = Field(min_length=1)
    id: _Id = None
    prompt_id: _Id = None
    task_id: _Id = None
    use_case: StrictStr | None = None
    type: StrictStr | None = None
    difficulty: StrictStr | None = None
    specialty: StrictStr | None = None
    physician_response: StrictStr | None = None

    def identity(self) -> tuple[str, str] | None:
        """The id as (field name, value), or None when the row has none."""
        for name in ID_FIELDS:
            value = getattr(self, name)
            if value is not None:
                return name, value
        return None

    def problem(self) -> tuple[str, str] | None:
        """The first semantic problem of this row as (field, message), or None if it is usable: the problem of
        its `Row` (a task is usable by the same rules in either schema), named as this schema names the field."""
        identity = self.identity()
        if identity is None:
            return "id", f"Field required (the id is read from {', '.join(ID_FIELDS)}, the first present)"
        problem = self.to_row().problem()
        if problem is None:
            return None
        field, message = problem
        if field == "prompt_id":
            return identity[0], message
        return ".".join(_PROFESSIONAL_NAMES.get(part, part) for part in field.split(".")), message

    def to_row(self) -> Row:
        """The same task as a `Row`: its slices become `use_case:<v>`-style example tags, verbatim."""
        identity = self.identity()
        if identity is None:
            raise DataError(f"row has no id ({', '.join(ID_FIELDS)})")
        return Row(
            prompt=self.conversation,
            prompt_id=identity[1],
            example_tags=[
                f"{name}:{value}" for name in PROFESSIONAL_SLICES if (value := getattr(self, name)) and value.strip()
            ],
            rubrics=[
                RubricItem(criterion=item.criterion_text, points=item.points, tags=[]) for item in self.rubric_items
            ],
            ideal_completions_data=None,
            physician_response=self.physician_response,
        )
