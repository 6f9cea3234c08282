"""Forms of the project lead's pages: parse and show; the rules live in the model and the services."""

from __future__ import annotations

from dataclasses import dataclass

from django import forms

from annotation.models import Project, ProjectMembership, TaskType
from annotation.selectors.projects import suggestion_judges
from annotation.services.projects import PROJECT_FIELDS, TASK_SETTINGS, settings_of
from common.roles import machine_account_label


class SuggestionJudgeField(forms.ModelChoiceField):
    """A machine account, shown by its judge's name and version ("helpful-rm v2")."""

    def label_from_instance(self, obj) -> str:
        return machine_account_label(obj.get_username())


class AspectsField(forms.CharField):
    """Rating aspects typed as names separated by commas ("helpfulness, correctness"), kept as a
    list; the names' rule (1-8 distinct slug-like names) is the service's."""

    def prepare_value(self, value: object) -> object:
        if isinstance(value, list):
            return ", ".join(str(name) for name in value)
        return value

    def to_python(self, value: object) -> list[str]:
        if isinstance(value, list):
            return value
        text = super().to_python(value) or ""
        return [name.strip() for name in text.split(",") if name.strip()]


@dataclass(frozen=True)
class SettingRow:
    """One field of the project form as the page lays it out: ``types`` the task types it applies
    to, space-separated ("" for every type), ``shown`` whether it applies to the form's type."""

    field: forms.BoundField
    types: str
    shown: bool


class ProjectForm(forms.ModelForm):
    """A project's settings (the model's validation runs again in project_create/project_update).

    Each task type has its own settings (``TASK_SETTINGS``): the page shows the form's type's
    (``setting_rows``; the others are hidden and a script shows them when the type select changes),
    and a save ignores the others, which keep their stored values; a project that is not a rating
    project has its aspects and thumbs cleared."""

    rating_aspects = AspectsField(
        required=False,
        label="Rating aspects",
        help_text="Rating projects: up to 8 names separated by commas, each scored 1-5 "
        "(lowercase letters, digits, _ and -), e.g. helpfulness, correctness. Leave empty for "
        "thumbs only.",
    )

    class Meta:
        model = Project
        fields = PROJECT_FIELDS
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 8})}
        field_classes = {"suggestion_judge": SuggestionJudgeField}
        labels = {
            "allow_ties": "Allow ties",
            "rating_thumbs": "Rating: thumbs up or down",
        }
        # The queue's settings apply to every task type: said for comparisons and items alike.
        help_texts = {
            "overlap": "Distinct annotators who answer each comparison or item.",
            "lease_minutes": "Minutes an annotator holds a claimed comparison or item before it "
            "returns.",
            "gold_every": "Mix a gold comparison or item (known answer) into every Nth one an "
            "annotator gets; 0 = never.",
            "repeat_every": "Show an already answered comparison or item again (a pair with its "
            "sides flipped, an item's responses in another order) every Nth one; 0 = never.",
            "allow_ties": "Pairwise: a tie verdict; ranking: equal ranks for equally good responses.",
            "task_type": "What annotators do with each item. It is fixed once the project holds "
            "comparisons or items.",
        }

    # Settings a form may leave out (API clients, older pages): they keep their values.
    OPTIONAL_SETTINGS = (
        "queue_order",
        "exploration_share",
        "continuous_rm_every",
        "continuous_rm_ensemble_size",
        "task_type",
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name in self.OPTIONAL_SETTINGS:
            self.fields[name].required = False
        if self.instance.pk is None:  # a new project has no judge yet: nothing to choose
            del self.fields["suggestion_judge"]
            return
        # Only this project's model judges may suggest.
        field = self.fields["suggestion_judge"]
        field.queryset = suggestion_judges(project=self.instance)
        field.empty_label = "(no suggestions)"

    @property
    def task_type(self) -> str:
        """The type the form is for: the one posted when it is a type, else the project's."""
        posted = self.data.get("task_type") if self.is_bound else None
        if posted in TaskType.values:
            return posted
        return self.instance.task_type or TaskType.PAIRWISE

    def setting_rows(self) -> list[SettingRow]:
        """The visible fields in order, each with the types it applies to."""
        applies = settings_of(self.task_type)
        rows = []
        for bound in self.visible_fields():
            types = [t for t, names in TASK_SETTINGS.items() if bound.name in names]
            rows.append(SettingRow(bound, " ".join(types), bound.name in applies))
        return rows

    def full_clean(self) -> None:
        # Settings of other task types are not the form's to check: not required, and what was
        # posted for them is dropped (errors included) so that they keep their stored values.
        if self.is_bound:
            for name in set(self.fields) - settings_of(self.task_type):
                self.fields[name].required = False
        super().full_clean()

    def clean(self) -> dict:
        cleaned = super().clean()
        for name in self.OPTIONAL_SETTINGS:
            if cleaned.get(name) in (None, ""):
                cleaned[name] = getattr(self.instance, name)
        task_type = cleaned.get("task_type") or self.task_type
        for name in set(self.fields) - settings_of(task_type):
            cleaned.pop(name, None)
            self._errors.pop(name, None)
        if task_type != TaskType.RATING:
            cleaned |= {"rating_aspects": [], "rating_thumbs": False}
        return cleaned


class MemberAddForm(forms.Form):
    """Who to add (a username, or an email address: an unknown one gets an account and an invite)."""

    identifier = forms.CharField(label="Username or email", max_length=254)
    role = forms.ChoiceField(
        choices=ProjectMembership.Role.choices, initial=ProjectMembership.Role.ANNOTATOR
    )
