"""Re-embedding at volume: what `agentq memory reembed` runs, timed, with its peak RSS.

`python -m ops.bench.reembed_scale [--facts 20000 ...] [--steps hash served-384 served-256]
[--data-dir D]`

For each `--facts` N: a database of its own on the embedded Postgres holds N fact rows of 100
users (every tenth a closed older version: history is re-embedded too), N / 20 episodes and 20
procedures, embedded by `hash-384`, with the HNSW indexes a worker's start-up builds. Then each
step of `STEPS` (those of `--steps`, in order) re-embeds it all: to `hash-256` (the hash
provider), to `served-embedder` at 384 dimensions, and to the same model at 256 (the
dimension-only change of issue 31), both served by the fake OpenAI-compatible server
(`ops.fake_provider`: pure Python, so its time is mostly the server's). A step runs what the
command runs (`models.memory.reembedding.reembed`, without the progress bars) in a child process
(`--child`) and prints its seconds (the process's start and imports left out), rows per second,
and the child's peak RSS (`VmHWM`) with its peak before the re-embed began.
Rows are loaded by COPY before any clock starts. The data dir (new or empty) is deleted unless
`--keep`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import sqlalchemy as sa

from models.db import get_engine, session_scope
from models.memory import memory_admin, reembedding
from models.memory.embeddings import HashEmbedder
from models.memory.facts import content_hash
from models.memory.procedures import embedded_text
from models.memory.retrieval import vector_text
from models.migrate import upgrade
from ops import processes
from ops.fake_provider import FakeOpenAI
from ops.stack import LocalStack

USERS, HISTORY_EVERY, EPISODE_EVERY, PROCEDURES = 100, 10, 20, 20
COPY_FACTS = """COPY facts (user_id, subject, attribute, category, text, content_hash, embedding,
    embedding_model, embedding_dim, valid_to) FROM STDIN"""
COPY_EPISODES = """COPY episodes (user_id, run_id, goal, plan, failures, outcome, final_answer,
    summary, embedding, embedding_model, embedding_dim) FROM STDIN"""
COPY_PROCEDURES = """COPY procedures (scope, title, when_to_use, body, embedding, embedding_model,
    embedding_dim, version, created_by, updated_by) FROM STDIN"""


def fact_rows(n: int, embedder: HashEmbedder) -> Iterator[tuple[object, ...]]:
    """`n` fact rows; every `HISTORY_EVERY`-th is closed (`valid_to` set), an older version."""
    for i in range(n):
        text = f"Fact {i}: project {i % 97} ships in week {i % 52} with tool {i % 13}"
        closed = "2026-01-01" if i % HISTORY_EVERY == 0 else None
        digest = content_hash(subject="user", attribute=f"a{i}", category="knowledge", text=text)
        fact = ("user", f"a{i}", "knowledge", text, digest)
        yield (f"user-{i % USERS:03d}", *fact, *embedded(embedder, text), closed)


def episode_rows(n: int, embedder: HashEmbedder) -> Iterator[tuple[object, ...]]:
    """`n` episodes, of runs 1..n."""
    for i in range(n):
        text = f"Goal: ship project {i % 97} in EUR"
        episode = (i + 1, "g", "[]", "[]", "succeeded", "", text)
        yield (f"user-{i % USERS:03d}", *episode, *embedded(embedder, text))


def procedure_rows(embedder: HashEmbedder) -> Iterator[tuple[object, ...]]:
    """`PROCEDURES` procedures for everyone."""
    for i in range(PROCEDURES):
        spec = (f"Procedure {i}", f"when asked about project {i}", "Step one, step two.")
        yield ("everyone", *spec, *embedded(embedder, embedded_text(*spec)), 1, "bench", "bench")


def embedded(embedder: HashEmbedder, text: str) -> tuple[str, str, int]:
    """The embedding columns of a row of `text`: its vector as text, the model, the dimension."""
    return vector_text(embedder.embed([text])[0]), embedder.model, embedder.dim


def load(url: str, n: int) -> None:
    """Store `n` facts, n / 20 episodes and 20 procedures with `hash-384`, make the HNSW
    indexes as a worker's start-up does (`reembedding.check_embedding_model`), VACUUM ANALYZE."""
    embedder = HashEmbedder(384)
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        for sql, rows in (
            (COPY_FACTS, fact_rows(n, embedder)),
            (COPY_EPISODES, episode_rows(n // EPISODE_EVERY, embedder)),
            (COPY_PROCEDURES, procedure_rows(embedder)),
        ):
            with cur.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
    with session_scope(url) as session:
        reembedding.check_embedding_model(session, embedder)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) facts, episodes, procedures")


SERVED = "served-embedder"  # the fake server's model, served at 384 dimensions, then at 256
# name -> (what the step does, its embedding settings: `MODEL` is the fake server's)
STEPS = {
    "hash": ("hash-384 -> hash-256 (hash)", {"AGENTQ_EMBEDDING_PROVIDER": "hash", "DIM": "256"}),
    "served-384": ("hash-256 -> served-embedder 384 (HTTP)", {"MODEL": SERVED, "DIM": "384"}),
    "served-256": ("served-embedder 384 -> 256, same name (HTTP)", {"MODEL": SERVED, "DIM": "256"}),
}


def step_env(url: str, settings: dict[str, str], fake: FakeOpenAI) -> dict[str, str]:
    """The environment of `agentq memory reembed` on `url` with one step's settings; `MODEL`
    means the fake OpenAI-compatible server's model, which then serves vectors of `DIM`."""
    env = {**os.environ, "AGENTQ_DATABASE_URL": url, "AGENTQ_EMBEDDING_DIM": settings["DIM"]}
    if "MODEL" in settings:
        fake.embedding_dim = int(settings["DIM"])
        env |= {
            "AGENTQ_EMBEDDING_PROVIDER": "openai",
            "AGENTQ_EMBEDDING_MODEL": settings["MODEL"],
            "AGENTQ_OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "bench",
            "NO_PROXY": "127.0.0.1,localhost",
        }
    else:
        env["AGENTQ_EMBEDDING_PROVIDER"] = settings["AGENTQ_EMBEDDING_PROVIDER"]
    return env


def reembed(env: dict[str, str]) -> tuple[float, float, float]:
    """Re-embed in a child process with `env` (`child`); the seconds the re-embed took, and the
    child's peak RSS before it and at its end, in MiB."""
    argv = [sys.executable, "-m", "ops.bench.reembed_scale", "--child"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the re-embed failed:\n{done.stdout}{done.stderr}")
    seconds, before_kib, peak_kib = done.stdout.split()[-3:]
    return float(seconds), int(before_kib) / 1024, int(peak_kib) / 1024


def child() -> None:
    """In the child: what `agentq memory reembed` runs (without its progress bars) with the
    configured embedder; prints its seconds and the process's peak RSS (KiB) before and after."""
    before_kib = peak_rss_kib()
    start = time.perf_counter()
    reembedding.reembed(memory_admin.embedder())
    print(f"{time.perf_counter() - start:.3f} {before_kib} {peak_rss_kib()}")


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB: `VmHWM` of /proc/self/status (proc(5)). Not `ru_maxrss`,
    which a child started by `subprocess` inherits from its parent's peak at the fork."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def database(base: str, n: int) -> str:
    """A new database for `n` facts on the server of `base`, migrated; its URL."""
    with get_engine(base).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"CREATE DATABASE reembed_{n}"))
    url = sa.make_url(base).set(database=f"reembed_{n}").render_as_string(hide_password=False)
    upgrade(url)
    return url


def main() -> None:
    """Start Postgres, and for each size: a database, load, each step of `STEPS`, a row each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--facts", type=int, nargs="+", default=[20_000])
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS))
    parser.add_argument("--data-dir", type=Path, default=None, help="new or empty; default: temp")
    parser.add_argument("--keep", action="store_true", help="keep the data dir afterwards")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child()
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="agentq-reembed-", dir="/var/tmp"))
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"--data-dir {root}: must be new or empty (it is deleted afterwards)")
    stack, fake = LocalStack(root), FakeOpenAI()
    processes.exit_on_sigterm()
    print("| fact rows | episodes | procedures | step | seconds | rows/s | peak RSS MiB (before) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    try:
        base, _ = stack.start_services()
        fake.start()
        for n in args.facts:
            url = database(base, n)
            load(url, n)
            rows, episodes = n + n // EPISODE_EVERY + PROCEDURES, n // EPISODE_EVERY
            for step, settings in (STEPS[name] for name in args.steps):
                seconds, before, peak = reembed(step_env(url, settings, fake))
                print(
                    f"| {n:,} | {episodes:,} | {PROCEDURES} | {step} | {seconds:.1f} "
                    f"| {rows / seconds:,.0f} | {peak:.0f} ({before:.0f}) |",
                    flush=True,
                )
    finally:
        fake.stop()
        stack.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
