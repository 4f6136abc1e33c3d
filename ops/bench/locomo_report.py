"""The LoCoMo benchmark's tables (`ops.bench.locomo_recall`): recall by category against plain
cosine, one ablation row per part, and cost."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from models.memory.retrieval import MIN_SIMILARITY
from ops.bench.figures import percentile

# The released data's codes (not the paper's order): 2 ask "When ...", 5 have adversarial answers.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
AGENTQ = "agentq: BM25 + context + date boost + session summaries"
COSINE = "plain cosine (exact, numpy)"


@dataclass(frozen=True)
class Outcome:
    """One retriever on one question: `recall` at (5, k); `share`: of the conversation's tokens."""

    category: int
    recall: tuple[float, float]
    tokens: int
    share: float
    latency_ms: float
    short: bool = False
    text_match: bool = False


def recall_rows(agentq: list[Outcome], cosine: list[Outcome]) -> list[list[str]]:
    """Rows: group, questions, agentq recall@5 and @k, cosine recall@5 and @k; groups: the
    categories, all, all split by a full-text match in agentq's results."""
    pairs = list(zip(agentq, cosine, strict=True))
    groups = {f"{c} {n}": [p for p in pairs if p[0].category == c] for c, n in CATEGORIES.items()}
    groups["all"] = pairs
    groups["all, full-text match in agentq's"] = [p for p in pairs if p[0].text_match]
    groups["all, no full-text match"] = [p for p in pairs if not p[0].text_match]
    rows = []
    for label, group in groups.items():
        cells = [fmean(p[i].recall[n] for p in group) for i in (0, 1) for n in (0, 1)]
        rows += [[label, str(len(group)), *(f"{x:.3f}" for x in cells)]] if group else []
    return rows


def ablation_rows(found: dict[str, list[Outcome]]) -> list[list[str]]:
    """Rows: retriever, recall@5 and @k, recall@k of each category, mean tokens of its top k,
    latency p95 (ms)."""
    rows = []
    for name, outcomes in found.items():
        recall = [fmean(o.recall[n] for o in outcomes) for n in (0, 1)]
        by_category = [
            fmean([o.recall[1] for o in outcomes if o.category == c] or [0.0]) for c in CATEGORIES
        ]
        tokens, p95 = (
            fmean(o.tokens for o in outcomes),
            percentile([o.latency_ms for o in outcomes], 95),
        )
        cells = [*(f"{x:.3f}" for x in [*recall, *by_category]), f"{tokens:.0f}", f"{p95:.2f}"]
        rows.append([name, *cells])
    return rows


def cost_rows(found: dict[str, list[Outcome]]) -> list[list[str]]:
    """Rows: context tokens per question, share of the conversation, latency p50 and p95."""
    rows = []
    for name in (AGENTQ, COSINE):
        outcomes = found[name]
        ms = [o.latency_ms for o in outcomes]
        tokens, share = (
            fmean([o.tokens for o in outcomes]),
            100 * fmean([o.share for o in outcomes]),
        )
        latency = [f"{percentile(ms, p):.2f}" for p in (50, 95)]
        rows.append([name, f"{tokens:.0f}", f"{share:.2f}%", *latency])
    return rows


def render(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    """An aligned text table, or a GitHub markdown table."""
    if markdown:
        lines = [header, ["---"] * len(header), *rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(map(str.ljust, row, widths)) for row in [header, *rows])


def report(
    results: dict[str, Any], sizes: list[tuple[int, int]], skips: Counter[str], k: int
) -> None:
    """Print the counts, then the tables (plain, then markdown)."""
    found, agentq = results["found"], results["found"][AGENTQ]
    turns = sum(n for n, _ in sizes)
    recall_head = ["questions", "agentq R@5", f"agentq R@{k}", "cosine R@5", f"cosine R@{k}"]
    names = [n.split()[0] for n in CATEGORIES.values()]
    ablation_head = ["retriever", "R@5", f"R@{k}", *names, f"tokens of top {k}", "p95 ms"]
    cost_head = ["retriever", f"tokens of top {k}", "of conversation", "p50 ms", "p95 ms"]
    tables = [
        (["category", *recall_head], recall_rows(agentq, found[COSINE])),
        (ablation_head, ablation_rows(found)),
        (cost_head, cost_rows(found)),
    ]
    print(f"""
LoCoMo: {len(sizes)} conversations, {turns} turns, {len(agentq)} questions, k={k}
skipped: {skips["questions"]} questions without valid evidence, {skips["malformed"]} malformed \
evidence entries, {skips["unknown"]} evidence ids of missing turns
ingest: embedding {results["embed_s"]:.1f} s (turns and questions), remember \
{results["store_s"]:.1f} s ({1000 * results["store_s"] / turns:.1f} ms/turn)
conversation tokens: mean {fmean([tokens for _, tokens in sizes]):.0f}
agentq returned fewer than {k} (min_similarity {MIN_SIMILARITY}): {sum(o.short for o in agentq)} \
questions; with a full-text match in its top {k}: {sum(o.text_match for o in agentq)}""")
    for markdown in (False, True):
        for header, rows in tables:
            print("\n" + render(header, rows, markdown))
