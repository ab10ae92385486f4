"""A TypeScript client generated from the served OpenAPI document (openapi-typescript), run with
its default options, types every request the docs show and every event: tsc type-checks each
JSON body that README.md and docs/ send with curl as the body of its operation (bodies.ts, written
here from the docs), a handler of each event (tests/system/typescript/handlers.ts), and refuses
the one deliberate mistake beside them (tests/system/typescript/mistake.ts), so the check can
fail.

The tools are npm packages pinned by tests/system/typescript/package-lock.json, installed with
`npm ci` into tests/system/typescript/node_modules when that folder does not match the lock (npm's
own cache makes a reinstall work offline). Without npm the run stops and says so.
"""

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FOLDER = Path(__file__).parent / "typescript"
TOOLS = FOLDER / "node_modules"
INSTALLED_LOCK = TOOLS / ".package-lock.json"  # what npm ci installed, written by npm
SOURCES = ("handlers.ts", "mistake.ts", "tsconfig.json")
ROOT = FOLDER.parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BASES = {"$API": "/api/v1", "$RT": "/internal/v1"}  # the docs' shell variables


def installed() -> bool:
    """Whether node_modules holds what the lock pins (npm writes its own copy of the lock)."""
    if not INSTALLED_LOCK.is_file():
        return False
    wanted = json.loads((FOLDER / "package-lock.json").read_text())["packages"]
    have = json.loads(INSTALLED_LOCK.read_text())["packages"]
    return {name: entry.get("version") for name, entry in wanted.items() if name} == {
        name: entry.get("version") for name, entry in have.items()
    }


@pytest.fixture(scope="module")
def tools() -> Path:
    """The folder of the installed tools' commands (openapi-typescript, tsc)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.exit(
            "tests/system/test_typescript_client.py needs npm (Node.js 18 or newer) to install "
            "openapi-typescript and TypeScript. Install it (Debian: `apt-get install npm`).",
            returncode=3,
        )
    if not installed():
        done = subprocess.run(
            [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=FOLDER, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    return TOOLS / ".bin"


def words_of(command: str) -> list[str]:
    """The shell words of a command, up to a pipe or the end of a $( ); ValueError while a
    quote is open."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|)")
    lexer.whitespace_split = True
    words = list(lexer)
    ends = [index for index, word in enumerate(words) if word in ("|", ")")]
    return words[: ends[0]] if ends else words


def curl_commands(page: Path):
    """Each curl command of the page's shell blocks: (its line, its words)."""
    text = page.read_text()
    for block in re.finditer(r"^```sh\n(.*?)^```", text, re.M | re.S):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).split("\n")
        for start, line in enumerate(lines):
            if "curl " not in line or line.lstrip().startswith("#"):
                continue
            command, end = line[line.index("curl ") :], start
            while True:  # a line continued by a backslash, or by a quote left open
                if command.endswith("\\"):
                    end += 1
                    command = command.removesuffix("\\") + " " + lines[end]
                    continue
                try:
                    words = words_of(command)
                except ValueError:
                    end += 1
                    command += "\n" + lines[end]
                    continue
                break
            yield first + start, words


def operation_of(document, method: str, url: str) -> str:
    """The operationId of the document's operation that serves the docs' URL."""
    base, _, rest = url.partition("/")
    segments = (BASES[base] + "/" + rest.split("?")[0]).split("/")
    candidates = []
    for template, item in document["paths"].items():
        parts = template.split("/")
        if (
            len(parts) == len(segments)
            and method in item
            and all(
                part == segment or part.startswith("{")
                for part, segment in zip(parts, segments, strict=True)
            )
        ):
            literal = sum(not part.startswith("{") for part in parts)
            candidates.append((literal, item[method]["operationId"]))
    assert candidates, (method, url)
    return max(candidates)[1]


def documented_bodies(document) -> list[tuple[str, str, object]]:
    """Every JSON body README.md and docs/ send with curl: (page:line, operationId, body)."""
    bodies = []
    for page in PAGES:
        for line, words in curl_commands(page):
            if "-d" not in words:
                continue
            method = words[words.index("-X") + 1] if "-X" in words else "POST"
            url = next(word for word in words if word.split("/")[0] in BASES)
            body = json.loads(words[words.index("-d") + 1])
            where = f"{page.relative_to(ROOT)}:{line}"
            bodies.append((where, operation_of(document, method.lower(), url), body))
    return bodies


def typed_bodies(document) -> str:
    """bodies.ts: each documented body, typed as its operation's request body."""
    lines = [
        'import type { operations } from "./api";',
        "",
        "type RequestBody<K extends keyof operations> =",
        '  NonNullable<operations[K]["requestBody"]>["content"]["application/json"];',
        "",
    ]
    for number, (where, operation, body) in enumerate(documented_bodies(document)):
        lines += [
            f"// {where}",
            f"export const body{number}: RequestBody<{json.dumps(operation)}> =",
        ]
        lines += [f"  {json.dumps(body, ensure_ascii=False)};", ""]
    return "\n".join(lines)


CREATES = (
    "createAgent",
    "assignAgent",
    "createFunction",
    "createWebhook",
    "placeCall",
    "createCampaign",
)


def test_the_docs_show_a_minimal_create_of_every_resource(client):
    """Among the bodies tsc checks: a create of each resource with its required fields only."""
    document = client.get("/api/v1/openapi.json").json
    required = {}
    for item in document["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and operation.get("operationId") in CREATES:
                ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
                required[operation["operationId"]] = set(schema["required"])
    minimal = {
        operation
        for _, operation, body in documented_bodies(document)
        if operation in required and set(body) == required[operation]
    }
    assert minimal == set(CREATES)


def test_a_typescript_client_types_every_documented_body_and_event(client, tools, tmp_path):
    document = tmp_path / "openapi.json"
    document.write_bytes(client.get("/api/v1/openapi.json").data)
    (tmp_path / "bodies.ts").write_text(typed_bodies(json.loads(document.read_bytes())))
    generated = subprocess.run(
        [tools / "openapi-typescript", document, "--output", tmp_path / "api.d.ts"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stdout + generated.stderr
    for name in SOURCES:
        shutil.copy(FOLDER / name, tmp_path / name)
    checked = subprocess.run(
        [tools / "tsc", "--project", tmp_path / "tsconfig.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = re.findall(r"^(\S+\.ts)\((\d+),\d+\): error (TS\d+): (.*)$", checked.stdout, re.M)
    # bodies.ts and handlers.ts type-check; the mistake is the one error, where it was made.
    bodies = (tmp_path / "bodies.ts").read_text().split("\n")
    refused = [
        # The documented command a body comes from: the comment above it, "// docs/….md:N".
        next(text for text in reversed(bodies[: int(line)]) if text.startswith("//")) + ": "
        + message
        for file, line, _, message in errors
        if file == "bodies.ts"
    ]  # fmt: skip
    assert refused == [], "\n".join(refused)
    assert checked.returncode != 0 and len(errors) == 1, checked.stdout + checked.stderr
    ((file, line, code, message),) = errors
    assert (file, line, code) == ("mistake.ts", "7", "TS2339"), message
    assert "'durationSeconds' does not exist" in message
