"""Approvals before effects (issue 30; DESIGN.md, invariant 14): the gated tool calls and their
decisions as rows (`calls`). Which calls are gated is `models.approval_policy` (pure, read by
the settings); what a reviewer's decision does is `models.review.call_decisions`. See
docs/concepts/approvals.md."""
