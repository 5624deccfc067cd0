"""Reflection with human approval (Moltbot): the five phases, approval modes, decisions, applying
approved proposals, sub-agent proposals and the procedural store.

Modules: `modes` (auto | review per being), `survey`, `consolidate`, `core` (phases 1, 3, 4),
`notes` (the reflection folder's files, phase 5), `cycle` (`reflect`: one cycle), `items` (how a
proposal is shown), `decide` (approve, reject, edit, defer), `apply` (approved proposals carried
out and audited), `subagents` (sub-agent proposals and their conflicts), `procedures`.
"""
