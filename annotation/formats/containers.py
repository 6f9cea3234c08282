"""Stream the records of a file, whatever its container: JSONL, a JSON array, Parquet, gzip or zstd.

Pure: no Django. Memory stays constant in the file's size: JSONL is read line by line, a JSON array
item by item (``raw_decode`` over a sliding buffer), Parquet batch by batch within its row groups,
and compressed files through a streaming decompressor. The decompressed bytes are counted and the
read stops with SourceError once they pass ``max_bytes`` (a small archive can unpack to gigabytes).
"""

from __future__ import annotations

import codecs
import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from annotation.formats.base import (
    DECODER,
    MAX_RECORD_BYTES,
    RowError,
    SourceError,
    checked_record,
    load_record,
)

CHUNK_BYTES = 1 << 20
PARQUET_BATCH_ROWS = 1000
PARQUET_MAGIC = b"PAR1"
# The first bytes of compressed files we do not open.
REFUSED_MAGIC = {
    b"PK\x03\x04": "zip",
    b"PK\x05\x06": "zip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"7z\xbc\xaf\x27\x1c": "7z",
}
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Record:
    """One record of the file: its 1-based number in ``unit`` ("line", "item" or "row"), and the
    object read (``data``) or why it could not be read (``error``); ``raw`` is what to write to a
    rejects file (the line's text or the object)."""

    number: int
    unit: str
    data: dict[str, Any] | None
    error: RowError | None
    raw: Any


class _CappedReader(io.RawIOBase):
    """A binary stream that raises SourceError once more than ``limit`` bytes were read from it."""

    def __init__(self, inner: IO[bytes], limit: int, what: str) -> None:
        self.inner, self.limit, self.what, self.count = inner, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(len(buffer))
        self.count += len(data)
        if self.count > self.limit:
            raise SourceError(
                f"the {self.what} file decompresses to more than {self.limit:,} bytes "
                "(CONCORD_IMPORT_MAX_BYTES); nothing imported"
            )
        buffer[: len(data)] = data
        return len(data)


def compression_of(head: bytes) -> str | None:
    """The compression whose signature starts ``head`` (a file's first bytes), or None."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    for magic, name in REFUSED_MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def container_of(path: Path) -> str:
    """ "parquet", "gzip", "zstd", "json" (an array) or "jsonl"; SourceError for refused archives."""
    with path.open("rb") as handle:
        head = handle.read(8)
        compression = compression_of(head)
        if compression in ("gzip", "zstd"):
            return compression
        if compression:
            raise SourceError(
                f"{path.name} is a {compression} archive; accepted: JSONL, a JSON array, Parquet, "
                "or gzip- or zstd-compressed JSONL"
            )
        if head.startswith(PARQUET_MAGIC):
            return "parquet"
        handle.seek(0)
        start = handle.read(4096).decode("utf-8-sig", errors="replace").lstrip()
        return "json" if start.startswith("[") else "jsonl"


def _binary_stream(path: Path, container: str, max_bytes: int) -> IO[bytes]:
    raw = path.open("rb")
    if container == "gzip":
        inner: IO[bytes] = gzip.GzipFile(fileobj=raw)
    elif container == "zstd":
        import zstandard

        inner = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    else:
        return raw
    return io.BufferedReader(_CappedReader(inner, max_bytes, container), CHUNK_BYTES)


def _json_lines(stream: IO[bytes]) -> Iterator[Record]:
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            yield Record(
                number,
                "line",
                None,
                RowError("", f"not valid UTF-8 (byte {exc.start + 1})"),
                raw.decode("utf-8", "replace"),
            )
            continue
        if not text.strip():
            continue
        try:
            yield Record(number, "line", load_record(text), None, text.rstrip("\n"))
        except RowError as exc:
            yield Record(number, "line", None, exc, text.rstrip("\n"))


def _json_array(stream: IO[bytes]) -> Iterator[Record]:
    """Items of a top-level JSON array, one at a time; a syntax error ends the file (SourceError)."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    buffer, pos, eof = "", 0, False

    def fill() -> bool:
        nonlocal buffer, pos, eof
        if eof:
            return False
        chunk = stream.read(CHUNK_BYTES)
        try:
            text = decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise SourceError(f"the JSON file is not valid UTF-8: {exc.reason}") from None
        eof = not chunk
        buffer, pos = buffer[pos:] + text, 0
        return True

    def skip_space() -> str:
        nonlocal pos
        while True:
            while pos < len(buffer) and buffer[pos] in " \t\r\n":
                pos += 1
            if pos < len(buffer):
                return buffer[pos]
            if not fill():
                return ""

    if skip_space() != "[":
        raise SourceError("a .json file must hold one JSON array of records")
    pos += 1
    number = 0
    if skip_space() == "]":
        return
    while True:
        number += 1
        while True:
            try:
                value, end = DECODER.raw_decode(buffer, pos)
                # a number at the buffer's end may continue in the next chunk
                if end == len(buffer) and not eof and fill():
                    continue
                break
            except (ValueError, RecursionError) as exc:
                if len(buffer) - pos > MAX_RECORD_BYTES:
                    raise SourceError(
                        f"item {number} is longer than {MAX_RECORD_BYTES} bytes or malformed"
                    ) from None
                if not fill():
                    message = getattr(exc, "msg", str(exc))
                    raise SourceError(f"item {number}: malformed JSON ({message})") from None
        pos = end
        try:
            yield Record(number, "item", checked_record(value), None, value)
        except RowError as exc:
            yield Record(number, "item", None, exc, value)
        following = skip_space()
        if following == "]":
            return
        if following != ",":
            raise SourceError(f"after item {number}: expected ',' or ']' in the JSON array")
        pos += 1
        skip_space()


def _parquet(path: Path, max_bytes: int) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types for a broken file
        raise SourceError(f"{path.name} is not a readable Parquet file: {exc}") from None
    number, decoded = 0, 0
    for group in range(parquet.num_row_groups):
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[group]):
            decoded += batch.nbytes
            if decoded > max_bytes:
                raise SourceError(
                    f"the Parquet file decodes to more than {max_bytes:,} bytes "
                    "(CONCORD_IMPORT_MAX_BYTES); nothing imported"
                )
            for value in batch.to_pylist():
                number += 1
                try:
                    yield Record(number, "row", checked_record(value), None, value)
                except RowError as exc:
                    yield Record(number, "row", None, exc, value)


def read_records(path: Path, *, max_bytes: int, container: str | None = None) -> Iterator[Record]:
    """Every record of the file at ``path``, streamed; SourceError when the file cannot be read
    (a broken or truncated compressed stream, a corrupt Parquet file, the size guard)."""
    container = container or container_of(path)
    try:
        if container == "parquet":
            yield from _parquet(path, max_bytes)
            return
        with _binary_stream(path, container, max_bytes) as stream:
            if container in ("gzip", "zstd"):
                # a compressed JSON array is read as an array: peek at the first character
                head = stream.peek(64)[:64].decode("utf-8-sig", errors="replace").lstrip()
                container = "json" if head.startswith("[") else container
            if container == "json":
                yield from _json_array(stream)
            else:
                yield from _json_lines(stream)
    except SourceError:
        raise
    except Exception as exc:  # the decompressors and pyarrow raise their own error types
        raise SourceError(f"{path.name}: the {container} data is broken: {exc}") from None


def records_estimate(path: Path, *, max_bytes: int, container: str | None = None) -> int | None:
    """About how many records the file at ``path`` holds, for a progress bar's total and ETA.

    Parquet: the row count in its footer (exact). JSONL, plain or compressed: its newlines (blank
    lines count too, so it may run a little high), counted in one fast pass over the bytes. A JSON
    array, or a file that cannot be read to the end: None (unknown). Never raises.
    """
    try:
        container = container or container_of(path)
        if container == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if container == "json":
            return None
        lines, last = 0, b"\n"
        with _binary_stream(path, container, max_bytes) as stream:
            while block := stream.read(CHUNK_BYTES):
                if lines == 0 and block.lstrip()[:1] == b"[":
                    return None  # a compressed JSON array
                lines += block.count(b"\n")
                last = block[-1:]
        return lines + (last != b"\n")
    except Exception:  # an estimate only: the import itself reports what is wrong with the file
        return None
