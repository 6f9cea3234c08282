"""One work queue for every task type: claims, leases, overlap, skips, gold and repeat placement,
and display-order randomisation (sides for pairs, an order for K responses, stored with each
answer).

- ``policy``: the rules every type shares (when a gold item or a repeat is due, when expired
  leases are looked for and how they are released, how a lease is skipped, who may claim, which
  side or order an annotator is shown).
- ``claims``: the claim primitive over any lease table (lock the first free slot in queue order
  with SKIP LOCKED, re-count it under the lock, lease it, move on when refused).
- ``items``: the claims of rating and ranking items (annotation.models' TaskItem, TaskLease and
  TaskAnswer), on ``claims``.
- ``plugins``: a task type as a small plug-in (its screen template, answer validation, keyboard
  map, agreement and export), and ``registry`` maps a project's ``task_type`` to its plug-in and
  holds the types other apps host on their own tables.

Pairwise labelling keeps its hand-tuned statements (annotation/services/labelling.py: one SQL
statement per claim, measured by bench/load_labelling.py); it takes the shared rules from
``policy`` and is registered as the ``pairwise`` plug-in. Eval rounds claim their items with
``claims`` and ``policy.side_for`` (monitoring/services/eval_queue.py), and their rating is the
``eval_rating`` plug-in that monitoring registers when it loads; their leases share the queue's
kinds and states, skips, repeats and release; nothing here imports monitoring.
Adding a task type touches its plug-in and a registration, not the queue.

This package is light on import (no plug-in is imported here), so labelling can use ``policy``
without a cycle.
"""
