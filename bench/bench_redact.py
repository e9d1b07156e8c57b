"""Redaction throughput against no redaction, on generated log-like text.

Run from the repository root: ``PYTHONPATH=. python bench/bench_redact.py [--mb 50]``
(``--chunk`` sets the read size, ``--repeat`` the runs per figure; the best run counts).

The text is cut into chunks as a session would read it, and each chunk is decoded from
UTF-8 (the baseline: no redaction), then also redacted chunk by chunk (``Redactor.redact``)
and through a :class:`StreamRedactor`. Figures are MB of input per second of CPU time,
plus the share of one core that redaction would need to keep up with a 400 MB/s stream.
Three kinds of text are measured:

* ``plain``: build and service logs with no secret and no trigger word in them;
* ``web``: the same with URLs and the occasional ``token``/``password`` word (1 line in 50);
* ``leaky``: ``web`` plus a real-looking secret on 1 line in 500.

Then adversarial input, where a backtracking rule would take quadratic or exponential time
(``--adv-mb`` sets their size, ``--line-mb`` the one long line):

* every rule's sample secret cut to a prefix and repeated (``sk-sk-sk-...``, ``eyJeyJ...``,
  ``password="password="...``), redacted in chunks and streamed; the slowest few are listed;
* operator patterns that backtrack catastrophically in Python's ``re`` (``(x+x+)+y``) over long
  runs of ``x``, with Python's ``re`` on 18 and 22 characters for comparison;
* one line of ``--line-mb`` MB with no newline, streamed (words, and one unbroken run).

Every figure is printed next to the decode-only reference of the same run.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Callable, Iterator

from remote_bash.redact import Redactor

_RULE_SAMPLES = (
    "AKIAIOSFODNN7EXAMPLE", "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "github_pat_11ABCDEFG0_abcdefghij",
    "xoxb-123456789012-abcdefABCDEF", "sk-ant-api03-abcdefghijklmnopqrstu1", "sk-proj-abc123def456ghi789",
    "AIzaSyD-1234567890abcdefghijklmnopqrstu", "sk_live_51Habcdefghij", "sk_test_51Habcdefghij",
    "whsec_abcdefghijklmnopqrstu", "xapp-1-A0123456789-abcdef", "hooks.slack.com/services/T0/B0/XXXXXXXX",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx.dozjgNryP4J3jVmNHl0w5N", "Authorization: Bearer 0123abcdef.ghijk",
    "Authorization: Basic dXNlcjpwYXNz", "postgres://admin:s3cr3t@db", "aws_secret_access_key = wJalrXUtnFEMI",
    'password="hunter 2"', "passphrase: x", "client_secret=abc", "access_token: abc", "api_key=abc",
    "private_key: x", "client-key-data: LS0t", '"auth": "dXNlcjpw"', "machine h login u password p",
    "machine h password p", "password: a b c ", "password = a b # c",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "known-secret-value",
    "MYSQL_PWD=x", "db_pass=x", "--db-password x", "curl -u a:x", "sshpass -e -p x", "mysql -u r -px",
    "<password>x</password>", "password:\n  x", "token: |\n  x", "Authorization: token x",
    "curl -fsSLu a:x", '<password a="1" b=\'2\'>x</password>', "<token><![CDATA[x]]></token>",
    "password: !!str &a # c\n\n  x", "passwords:\n  - x", "--auth-token x", "--client-secret-key x", "--x-api-key x",
    "DB_PASSWORD=$'pw\\r'", "DB_PASSWORD='a'\\''S3CRET x'", "password=it\\'s\\ S3CRET", "password: 'it''s x'",
    "password=hunt\rS3CRET6", 'Authorization: Digest username="admin", response="6629fae4"',
    "-H 'Authorization: AWS4-HMAC-SHA256 Credential=A/x, Signature=abc'", '<add key="DbPassword" value="x"/>',
    '<entry key="password">x</entry>', '{"name":"DB_PASSWORD","value":"x"}', "- name: DB_PASSWORD\n  value: x\n",
    "<db_password >\n\n  x</db_password>", '<password\n a="1">x', "<token><![CDATA[\nx]]>",
    "db/password: x", '"/prod/db/password": "x"', "DB/PASSWORD=x", 'password: ["a", [b], c]', '"--password" x',
    '"--password=a b"', "hooks.slack.com:443/services/T0/B0/XXXXXXXX", "hooks.slack.com\\/services\\/T0\\/B0\\/XXXX",
)
"""One sample per built-in rule (and a known secret): their prefixes, repeated, are the adversarial input."""
_BACKTRACKERS = (r"(x+x+)+y", r"(x|x)*y", r"(x*)*y", r"(?:x+){1,20}y")
"""Operator patterns that take exponential time in a backtracking engine on a run of x."""

_PLAIN = (
    "{ts} INFO  worker[{pid}]: processed job {n} in {ms}ms (queue depth {d})",
    "{ts} DEBUG cache: hit ratio {pct}% over {n} lookups, evicted {d} entries",
    "gcc -O2 -Wall -c src/module_{n}.c -o build/module_{n}.o",
    "drwxr-xr-x  {d} root root  4096 May  1 12:{mm} lib{n}",
    "Get:{d} http.deb.example.org bookworm/main amd64 libfoo{n} amd64 1.{d}.{n}-1 [{ms} kB]",
    "{ts} WARN  db: slow query took {ms}ms: SELECT id, name FROM items WHERE owner = $1",
    '  File "/usr/lib/python3/dist-packages/app/handler_{n}.py", line {ms}, in run',
    "test_module_{n}.py::test_case_{d} PASSED                                     [{pct}%]",
)
_WEB = (
    "{ts} INFO  http: GET https://api.example.com/v1/items/{n} -> 200 in {ms}ms",
    "{ts} INFO  auth: refreshed token for client {n}, expires in {ms}s",
    "{ts} WARN  login: wrong password for user{n} from 10.0.{d}.{d}",
)
_SECRETS = (
    "export AWS_ACCESS_KEY_ID=AKIA{up16}",
    "DATABASE_URL=postgres://app:{word}@db{d}.internal:5432/app",
    "curl -H 'Authorization: Bearer {word}{n}' https://api.example.com",
    "{ts} DEBUG config: api_key={word}{n}",
    "GITHUB_TOKEN=ghp_{up16}{up16}abcd",
)


STREAM_MB_S = 400


def _line(rng: random.Random, templates: tuple[str, ...]) -> str:
    return rng.choice(templates).format(
        ts=f"2024-05-01T12:{rng.randrange(60):02}:{rng.randrange(60):02}.{rng.randrange(1000):03}Z",
        pid=rng.randrange(1, 40000),
        n=rng.randrange(100000),
        ms=rng.randrange(1, 5000),
        d=rng.randrange(1, 99),
        pct=rng.randrange(100),
        mm=f"{rng.randrange(60):02}",
        word="".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=12)),
        up16="".join(rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", k=16)),
    )


def make_text(kind: str, megabytes: float, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    target = int(megabytes * 2**20)
    while size < target:
        roll = rng.random()
        if kind == "leaky" and roll < 0.002:
            line = _line(rng, _SECRETS)
        elif kind in ("web", "leaky") and roll < 0.02:
            line = _line(rng, _WEB)
        else:
            line = _line(rng, _PLAIN)
        lines.append(line)
        size += len(line) + 1
    return ("\n".join(lines) + "\n").encode()


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _measure(
    name: str, data: bytes, chunk: int, work: Callable[[Iterator[bytes]], int], repeat: int
) -> float:
    # CPU time of the best run: other processes on the machine disturb it least.
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        produced = work(_chunks(data, chunk))
        best = min(best, time.process_time() - start)
    rate = len(data) / 2**20 / best
    print(f"  {name:<22} {rate:9.1f} MB/s   ({produced / 2**20:.1f} MB out)")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="megabytes of text per kind")
    parser.add_argument("--chunk", type=int, default=65536, help="bytes per read")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the best counts)")
    parser.add_argument("--adv-mb", type=float, default=4.0, help="megabytes per adversarial input")
    parser.add_argument("--line-mb", type=float, default=50.0, help="megabytes of the one long line")
    args = parser.parse_args()
    redactor = Redactor()

    def decode_only(chunks: Iterator[bytes]) -> int:
        return sum(len(c.decode("utf-8", "replace")) for c in chunks)

    def redact_chunks(chunks: Iterator[bytes]) -> int:
        return sum(len(redactor.redact(c.decode("utf-8", "replace"))) for c in chunks)

    def stream(chunks: Iterator[bytes]) -> int:
        sr = redactor.stream()
        total = sum(len(sr.feed(c.decode("utf-8", "replace"))) for c in chunks)
        return total + len(sr.flush())

    reference = 0.0
    for kind in ("plain", "web", "leaky"):
        data = make_text(kind, args.mb)
        print(f"{kind}: {len(data) / 2**20:.0f} MB in {args.chunk}-byte reads")
        reference = _measure("no redaction (decode)", data, args.chunk, decode_only, args.repeat)
        for name, work in (("Redactor.redact", redact_chunks), ("StreamRedactor.feed", stream)):
            rate = _measure(name, data, args.chunk, work, args.repeat)
            stream_share = 100 * STREAM_MB_S / rate
            print(f"  {'':<22} {stream_share:9.0f} % of one core at a {STREAM_MB_S} MB/s stream")
    adversarial(args, reference)


def _rate(size: int, work: Callable[[], object]) -> float:
    start = time.process_time()
    work()
    return size / 2**20 / max(time.process_time() - start, 1e-9)


def _streamed(redactor: Redactor, text: str, chunk: int) -> Callable[[], object]:
    def work() -> object:
        stream = redactor.stream()
        for start in range(0, len(text), chunk):
            stream.feed(text[start : start + chunk])
        return stream.flush()

    return work


def _chunked(redactor: Redactor, text: str, chunk: int) -> Callable[[], object]:
    return lambda: [redactor.redact(text[start : start + chunk]) for start in range(0, len(text), chunk)]


def adversarial(args: argparse.Namespace, reference: float) -> None:
    """Inputs built to make a backtracking expression slow; every figure next to ``reference``."""
    redactor = Redactor(literals=["known-secret-value"])
    size = int(args.adv_mb * 2**20)
    figures: list[tuple[float, float, str]] = []
    for sample in _RULE_SAMPLES:
        for cut in sorted({2, 3, 4, len(sample) // 2, len(sample) - 1}):
            prefix = sample[:cut]
            text = prefix * (size // len(prefix))
            figures.append((_rate(len(text), _chunked(redactor, text, args.chunk)),
                            _rate(len(text), _streamed(redactor, text, args.chunk)), prefix))
    print(f"adversarial: {len(figures)} rule prefixes, each repeated to {args.adv_mb:g} MB "
          f"(decode-only reference: {reference:.1f} MB/s)")
    print(f"  {'slowest (redact, stream MB/s)':<40}")
    for chunked_rate, stream_rate, prefix in sorted(figures, key=lambda f: min(f[:2]))[:6]:
        print(f"  {prefix!r:<40} {chunked_rate:7.1f} {stream_rate:7.1f}   "
              f"({reference / min(chunked_rate, stream_rate):.0f}x slower than decode)")
    worst = min(min(f[:2]) for f in figures)
    median = sorted(min(f[:2]) for f in figures)[len(figures) // 2]
    print(f"  worst {worst:.1f} MB/s, median {median:.1f} MB/s over all prefixes")

    print(f"operator patterns on a run of x ({args.adv_mb:g} MB, chunks of {args.chunk} bytes):")
    run = "x" * size
    for pattern in _BACKTRACKERS:
        custom = Redactor(patterns=[pattern])
        rate = _rate(len(run), _chunked(custom, run, args.chunk))
        short, longer = _backtracking_seconds(pattern, 18), _backtracking_seconds(pattern, 22)
        print(f"  {pattern:<16} RE2 {rate:8.1f} MB/s   Python re: {short:.3f} s on 18 x's, "
              f"{longer:.3f} s on 22 (x{longer / max(short, 1e-9):.0f} for 4 more)")

    line = int(args.line_mb * 2**20)
    print(f"one {args.line_mb:g} MB line, streamed in {args.chunk}-byte reads:")
    for name, text in (("words", "lorem ipsum dolor " * (line // 18)), ("one unbroken run", "a" * line)):
        rate = _rate(len(text), _streamed(redactor, text, args.chunk))
        print(f"  {name:<22} {rate:9.1f} MB/s   ({reference / rate:.0f}x slower than decode)")


def _backtracking_seconds(pattern: str, size: int) -> float:
    compiled = re.compile(pattern)
    start = time.process_time()
    compiled.search("x" * size)
    return time.process_time() - start


if __name__ == "__main__":
    main()
