"""What hadolint does not say about deploy/container/Containerfile.

- Multi-stage: a named builder stage and a separate runtime stage (the last).
- Every base image pinned: a tag (not `latest`, not missing) or a digest; with
  --require-digest, a digest too. A `rust` builder's version is at least the workspace's
  rust-version.
- The builder builds with `cargo build --release --locked` and SQLX_OFFLINE=true.
- The runtime stage runs nothing (no RUN, so no shell and no package manager), has no SHELL or
  ADD, copies only the declared files from the builder, ends with a numeric non-root USER and
  an exec-form ENTRYPOINT naming the binary it copied (CMD, if any, exec form too).
- OCI labels: title, description, licenses (the workspace's) and version (the gateway crate's);
  with --manifests, every `image:` there is IMAGE at that version.
- .dockerignore at the build context's root keeps target/, .git and node_modules out.

Exits 1 naming each breach.
"""

import argparse
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "ghcr.io/example/sluice"
BUILDER = "builder"
BINARY = "/usr/local/bin/sluice"
# What the runtime stage may copy from the builder: source -> destination. The binary embeds
# everything it serves (include_str!, sqlx::migrate!), so nothing else is declared.
RUNTIME_FILES = {"/out/sluice": BINARY}
REQUIRED_LABELS = ("title", "description", "version", "licenses")
PACKAGE_MANAGERS = re.compile(r"\b(apt|apt-get|aptitude|dpkg|apk|yum|dnf|microdnf|rpm|zypper|pip3?|npm)\b")
SHELLS = re.compile(r"(^|/)(sh|bash|dash|ash|zsh)$")
IGNORED = ("target", ".git", "node_modules")


def instructions(text):
    """(line number, keyword, arguments) of each instruction, continuations joined."""
    out, buf, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        keyword, _, args = buf.partition(" ")
        out.append((start, keyword.upper(), args.strip()))
        buf = ""
    if buf:
        keyword, _, args = buf.partition(" ")
        out.append((start, keyword.upper(), args.strip()))
    return out


def stages(parsed):
    result = []
    for number, keyword, args in parsed:
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append({"line": number, "image": words[0], "name": name, "body": []})
        elif result:
            result[-1]["body"].append((number, keyword, args))
        elif keyword not in ("ARG",):
            result.append({"line": number, "image": None, "name": None, "body": [(number, keyword, args)]})
    return result


def exec_form(args):
    try:
        value = json.loads(args)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def flags_and_words(args):
    """A COPY's `--name=value` flags and its words (shell or exec form)."""
    flags = {}
    while match := re.match(r"--([a-z-]+)(?:=(\S*))?\s+", args):
        flags[match.group(1)] = match.group(2) or ""
        args = args[match.end():]
    words = exec_form(args)
    return flags, words if words is not None else shlex.split(args)


def version_tuple(text):
    return tuple(int(p) for p in text.split("."))


def check_base(where, image, names, workspace, require_digest, breaches):
    if image in names:
        return
    if "$" in image:
        breaches.append(f"{where}: base image {image} is a variable: pin it in the file")
        return
    reference, _, digest = image.partition("@")
    last = reference.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not digest and (not tag or tag == "latest"):
        breaches.append(f"{where}: base image {image} is not pinned (no version tag, no digest)")
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        breaches.append(f"{where}: base image {image} has a malformed digest")
    if require_digest and not digest:
        breaches.append(f"{where}: base image {image} is not pinned by digest")
    repository = last.partition(":")[0]
    if repository == "rust" and tag:
        version = re.match(r"(\d+\.\d+(?:\.\d+)?)", tag)
        wanted = workspace["workspace"]["package"]["rust-version"]
        if not version:
            breaches.append(f"{where}: the rust builder's tag {tag} names no Rust version")
        elif version_tuple(version.group(1))[:3] < version_tuple(wanted):
            breaches.append(f"{where}: the rust builder ({tag}) is older than the workspace's rust-version {wanted}")


def check_builder(builder, breaches):
    body = builder["body"]
    builds = [(n, a) for n, k, a in body if k == "RUN" and "cargo build" in a]
    if not builds:
        breaches.append(f"stage {BUILDER}: no `cargo build`")
    for number, args in builds:
        for flag in ("--release", "--locked"):
            if flag not in args.split():
                breaches.append(f"line {number}: cargo build without {flag}")
    offline = any(k == "ENV" and re.search(r"\bSQLX_OFFLINE=true\b", a) for _, k, a in body) or all(
        "SQLX_OFFLINE=true" in a for _, a in builds
    )
    if builds and not offline:
        breaches.append(f"stage {BUILDER}: SQLX_OFFLINE=true is not set for the build")


def check_runtime(runtime, breaches):
    copied = set()
    user = None
    entrypoint = None
    labels = {}
    for number, keyword, args in runtime["body"]:
        where = f"line {number}"
        if keyword == "RUN":
            if PACKAGE_MANAGERS.search(args):
                breaches.append(f"{where}: a package manager runs in the runtime stage: RUN {args}")
            elif exec_form(args) is None or SHELLS.search(exec_form(args)[0]):
                breaches.append(f"{where}: a shell runs in the runtime stage: RUN {args}")
            else:
                breaches.append(f"{where}: RUN in the runtime stage (it runs nothing at build time)")
        elif keyword in ("SHELL", "ADD", "ONBUILD"):
            breaches.append(f"{where}: {keyword} in the runtime stage")
        elif keyword == "COPY":
            flags, words = flags_and_words(args)
            sources, destination = words[:-1], words[-1] if words else ""
            if flags.get("from") != BUILDER:
                breaches.append(f"{where}: COPY not from the {BUILDER} stage: COPY {args}")
                continue
            for source in sources:
                if RUNTIME_FILES.get(source) != destination:
                    breaches.append(f"{where}: COPY of {source} to {destination} is not a declared runtime file")
                else:
                    copied.add(destination)
        elif keyword == "USER":
            user = (number, args)
        elif keyword in ("ENTRYPOINT", "CMD"):
            form = exec_form(args)
            if form is None:
                breaches.append(f"{where}: {keyword} in shell form (runs /bin/sh -c): use the exec form")
            if keyword == "ENTRYPOINT":
                entrypoint = (number, form or [])
        elif keyword == "LABEL":
            for word in shlex.split(args):
                key, _, value = word.partition("=")
                labels[key] = value
    if user is None:
        breaches.append("runtime stage: no USER (the base image's user is not this file's to rely on)")
    else:
        number, value = user
        uid, _, gid = value.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            breaches.append(f"line {number}: USER {value} is not numeric (runAsNonRoot needs a numeric uid)")
        elif int(uid) == 0 or (gid and int(gid) == 0):
            breaches.append(f"line {number}: USER {value} is root")
    if entrypoint is None:
        breaches.append("runtime stage: no ENTRYPOINT")
    elif entrypoint[1] and (entrypoint[1][:1] != [BINARY] or BINARY not in copied):
        breaches.append(f"line {entrypoint[0]}: ENTRYPOINT is not the copied binary {BINARY}")
    return labels


def check_labels(labels, workspace, gateway, manifests, breaches):
    prefix = "org.opencontainers.image."
    for label in REQUIRED_LABELS:
        if prefix + label not in labels:
            breaches.append(f"runtime stage: no {prefix}{label} label")
    version = gateway["package"]["version"]
    if labels.get(prefix + "version", version) != version:
        breaches.append(f"label {prefix}version is {labels[prefix + 'version']}, the gateway crate is {version}")
    license = workspace["workspace"]["package"]["license"]
    if labels.get(prefix + "licenses", license) != license:
        breaches.append(f"label {prefix}licenses is {labels[prefix + 'licenses']}, the workspace's is {license}")
    wanted = f"{IMAGE}:{version}"
    images = 0
    for path in manifests:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            match = re.match(r"\s*(?:-\s+)?image:\s*(\S+)", line)
            if match:
                images += 1
                if match.group(1).strip("\"'") != wanted:
                    breaches.append(f"{path}:{number}: image {match.group(1)} is not {wanted}")
    if manifests and not images:
        breaches.append("no image: in the manifests given")


def check_ignore(breaches):
    path = ROOT / ".dockerignore"
    if not path.is_file():
        breaches.append(".dockerignore missing at the repository root (the build context)")
        return
    patterns = {p.strip().removeprefix("**/").strip("/") for p in path.read_text(encoding="utf-8").splitlines()}
    for name in IGNORED:
        if name not in patterns:
            breaches.append(f".dockerignore does not exclude {name}")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("containerfile")
    parser.add_argument("--require-digest", action="store_true")
    parser.add_argument("--manifests", nargs="*", default=[])
    args = parser.parse_args(argv)
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text(encoding="utf-8"))
    gateway = tomllib.loads((ROOT / "gateway/Cargo.toml").read_text(encoding="utf-8"))
    parsed = instructions(Path(args.containerfile).read_text(encoding="utf-8"))
    found = stages(parsed)
    breaches = []
    names = {s["name"] for s in found if s["name"]}
    for stage in found:
        if stage["image"] is None:
            breaches.append(f"line {stage['line']}: instructions before the first FROM")
        else:
            check_base(f"line {stage['line']}", stage["image"], names, workspace, args.require_digest, breaches)
    builders = [s for s in found if s["name"] == BUILDER]
    if len(found) < 2 or not builders or found[-1]["name"] == BUILDER:
        breaches.append(f"not multi-stage: a `{BUILDER}` stage and a separate last (runtime) stage are needed")
    if builders:
        check_builder(builders[0], breaches)
    labels = check_runtime(found[-1], breaches) if found else {}
    check_labels(labels, workspace, gateway, args.manifests, breaches)
    check_ignore(breaches)
    for breach in breaches:
        print(f"{args.containerfile}: {breach}", file=sys.stderr)
    if not breaches:
        print(f"policy: {len(found)} stages; runtime: USER, ENTRYPOINT, {len(RUNTIME_FILES)} file(s) "
              f"from {BUILDER}; bases pinned; image {IMAGE}:{gateway['package']['version']}")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
