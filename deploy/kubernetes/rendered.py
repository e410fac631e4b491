"""Helpers of verify.sh for `helm template` output.

  rendered.py split RENDERED CORE CUSTOM
      writes the Kubernetes objects (checked by kubernetes-validate) to CORE, as YAML, and the
      Prometheus Operator ones (monitoring.coreos.com, checked by crd_validate.mjs) to CUSTOM,
      as a JSON array.
  rendered.py plain RENDERED DIR [--write]
      the plain manifests DIR/<template>.yaml are the chart's default rendering, one file per
      template; exits 1 with a diff when one differs (--write: rewrite them instead).
"""

import difflib
import json
import os
import re
import sys

import yaml

HEADER = """\
# Generated from deploy/kubernetes/chart with its default values (release "sluice") by
# `deploy/kubernetes/verify.sh --write-plain`: change the chart, then run that.
# deploy/kubernetes/README.md says how to apply them without Helm.
"""
SOURCE = re.compile(r"^# Source: [^/]+/templates/(.+)$")


def documents(text):
    """The rendered documents, each as (template file, text without the Source line)."""
    result = []
    for chunk in re.split(r"(?m)^---\s*$", text):
        lines = chunk.strip("\n").splitlines()
        if not lines or not any(line.strip() and not line.startswith("#") for line in lines):
            continue
        match = SOURCE.match(lines[0])
        if not match:
            raise SystemExit(f"a rendered document without a `# Source:` line: {lines[0]!r}")
        result.append((match.group(1), "\n".join(lines[1:]) + "\n"))
    return result


def split(rendered, core_path, custom_path):
    core, custom = [], []
    with open(rendered, encoding="utf-8") as f:
        for _, text in documents(f.read()):
            doc = yaml.safe_load(text)
            group = doc["apiVersion"].split("/")[0]
            if group == "monitoring.coreos.com":
                custom.append(doc)
            else:
                core.append(text)
    with open(core_path, "w", encoding="utf-8") as f:
        f.write("---\n".join(core))
    with open(custom_path, "w", encoding="utf-8") as f:
        json.dump(custom, f)
    print(f"{rendered}: {len(core)} Kubernetes objects, {len(custom)} Prometheus Operator objects")


def plain(rendered, directory, write):
    files = {}
    with open(rendered, encoding="utf-8") as f:
        for template, text in documents(f.read()):
            files.setdefault(template, []).append(text)
    stale = []
    for template, texts in sorted(files.items()):
        path = os.path.join(directory, template)
        wanted = HEADER + "---\n" + "---\n".join(texts)
        try:
            with open(path, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current == wanted:
            continue
        if write:
            with open(path, "w", encoding="utf-8") as f:
                f.write(wanted)
            print(f"wrote {path}")
        else:
            sys.stderr.writelines(difflib.unified_diff(
                current.splitlines(True), wanted.splitlines(True), path, f"{path} (rendered)"))
            stale.append(path)
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".yaml") and name not in files and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                generated = f.read().startswith(HEADER)
            if generated and write:
                os.remove(path)
                print(f"removed {path}")
            elif generated:
                print(f"{path}: generated, but the chart's default rendering has no such template",
                      file=sys.stderr)
                stale.append(path)
    if stale:
        print(f"{', '.join(stale)}: not the chart's default rendering (diff above); "
              "deploy/kubernetes/verify.sh --write-plain rewrites them", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) == 4 and argv[0] == "split":
        split(*argv[1:])
        return 0
    if len(argv) in (3, 4) and argv[0] == "plain" and argv[3:] in ([], ["--write"]):
        return plain(argv[1], argv[2], argv[3:] == ["--write"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
