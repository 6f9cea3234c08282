"""Fixtures for clustering: a keyword encoder that stands in for Sentence-BERT, and a project whose
prompts fall into three obvious topics."""

import hashlib

import numpy as np
import pytest

from tests.factories import ProjectFactory, PromptFactory

TOPICS = ("python", "sleep", "capital")
TOPIC_PROMPTS = {
    "python": [
        "How do I reverse a python list?",
        "Sort a python dict by value",
        "Python list comprehension example",
        "Why is my python loop slow?",
    ],
    "sleep": [
        "How can I sleep better?",
        "Tips to fall asleep fast: sleep hygiene",
        "Is a nap bad for night sleep?",
        "How many hours of sleep do adults need?",
    ],
    "capital": [
        "What is the capital of Australia?",
        "Capital city of Canada",
        "Which capital lies on the Danube?",
        "Name the capital of Peru",
    ],
}


class KeywordEncoder:
    """texts -> float32 [n, 8]: axis i is 1 when topic i's keyword is in the text, plus a small
    text-specific component so no two texts coincide. Records every text it was asked to embed."""

    dim = 8

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for axis, word in enumerate(TOPICS):
                out[row, axis] = float(word in text.lower())
            digest = int(hashlib.sha256(text.encode()).hexdigest(), 16)
            out[row, len(TOPICS) + digest % (self.dim - len(TOPICS))] = 0.2
        return out

    @property
    def embedded(self) -> list[str]:
        return [text for call in self.calls for text in call]


@pytest.fixture
def encoder(monkeypatch):
    """The keyword encoder, also installed as the service's default (no MiniLM load)."""
    fake = KeywordEncoder()
    monkeypatch.setattr("annotation.services.clustering.sentence_encoder", lambda name: fake)
    return fake


@pytest.fixture
def topic_project(db):
    """12 prompts, 4 per topic; returns (project, {prompt id: topic})."""
    project = ProjectFactory(slug="topics")
    topic_of = {}
    for topic, texts in TOPIC_PROMPTS.items():
        for text in texts:
            topic_of[PromptFactory(project=project, text=text).pk] = topic
    return project, topic_of
