"""Forms of the project lead's pages: parse and show; the rules live in the model and the services."""

from __future__ import annotations

from django import forms

from annotation.models import Project, ProjectMembership
from annotation.services.projects import PROJECT_FIELDS


class ProjectForm(forms.ModelForm):
    """A project's settings (the model's validation runs again in project_create/project_update)."""

    class Meta:
        model = Project
        fields = PROJECT_FIELDS
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 8})}


class MemberAddForm(forms.Form):
    """Who to add (a username, or an email address: an unknown one gets an account and an invite)."""

    identifier = forms.CharField(label="Username or email", max_length=254)
    role = forms.ChoiceField(
        choices=ProjectMembership.Role.choices, initial=ProjectMembership.Role.ANNOTATOR
    )
