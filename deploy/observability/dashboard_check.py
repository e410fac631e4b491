"""Checks that a Grafana dashboard JSON file is well-formed for Grafana, without Grafana.

python3 dashboard_check.py DASHBOARD.json [--rules-out RULES.yml]

- the file parses as JSON, with a `uid` (at most 40 of [A-Za-z0-9_-]), a `title`, a
  `schemaVersion` of 39 or more, `templating.list` and `panels`;
- every panel (rows' nested panels included) has an integer `id` no other panel has, a `type`,
  a `title` and a `gridPos` of integers inside the 24 columns, and no two panels overlap;
- every panel that is not a row has a datasource and targets; every target has a datasource, a
  non-empty `expr` and a `refId` unique within its panel;
- every variable referenced (`$name`, `${name}`, `${name:format}`, `[[name]]`) in a datasource,
  an expression, a legend, a title or a variable's query is defined in `templating.list` or is
  one of Grafana's built-in variables; every variable has a name and a type, and a query variable
  a datasource and a query.

With --rules-out, every target's expression, with Grafana's variables replaced by values
Prometheus accepts, is written as a recording rule to RULES.yml, so that `promtool check rules`
parses each expression as PromQL (deploy/observability/verify.sh does).

Exits 1 naming each breach, 0 with a one-line summary otherwise. Standard library only.
"""

import json
import re
import sys

# Grafana's global variables (https://grafana.com/docs/grafana/latest/dashboards/variables/add-template-variables/#global-variables).
BUILTINS = {
    "__interval", "__interval_ms", "__rate_interval", "__rate_interval_ms", "__range",
    "__range_s", "__range_ms", "__from", "__to", "__dashboard", "__org", "__user", "__name",
    "__timeFilter", "__timezone", "__all", "timeFilter", "interval",
}

# $name, ${name}, ${name:format}, [[name]] and [[name:format]].
REFERENCE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")

UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")

# What each variable becomes in --rules-out (a valid PromQL fragment in its place).
SUBSTITUTES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


def references(text):
    for match in REFERENCE.finditer(text):
        yield next(group for group in match.groups() if group)


def strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def all_panels(panels):
    for panel in panels:
        yield panel
        if isinstance(panel, dict):
            yield from all_panels(panel.get("panels") or [])


def check(dashboard, breaches):
    """Appends each breach to `breaches`; returns the targets' expressions as (where, expr)."""
    if not isinstance(dashboard, dict):
        breaches.append("the dashboard is not a JSON object")
        return []
    uid = dashboard.get("uid")
    if not isinstance(uid, str) or not UID.match(uid):
        breaches.append(f"uid {uid!r}: not 1 to 40 of [A-Za-z0-9_-]")
    if not isinstance(dashboard.get("title"), str) or not dashboard["title"].strip():
        breaches.append("no title")
    version = dashboard.get("schemaVersion")
    if not is_int(version) or version < 39:
        breaches.append(f"schemaVersion {version!r}: 39 or more expected")

    templating = dashboard.get("templating", {})
    variables = templating.get("list") if isinstance(templating, dict) else None
    if not isinstance(variables, list):
        breaches.append("no templating.list")
        variables = []
    defined = set()
    for n, variable in enumerate(variables):
        name = variable.get("name") if isinstance(variable, dict) else None
        where = f"variable {name or n}"
        if not isinstance(name, str) or not re.match(r"^\w+$", name):
            breaches.append(f"{where}: no valid name")
            continue
        if name in defined:
            breaches.append(f"{where}: defined twice")
        defined.add(name)
        if not variable.get("type"):
            breaches.append(f"{where}: no type")
        if variable.get("type") == "query":
            if not variable.get("datasource"):
                breaches.append(f"{where}: a query variable without a datasource")
            query = variable.get("query")
            if isinstance(query, dict):
                query = query.get("query")
            if not isinstance(query, str) or not query.strip():
                breaches.append(f"{where}: a query variable without a query")
        if variable.get("type") == "datasource" and not variable.get("query"):
            breaches.append(f"{where}: a datasource variable without a plugin type in query")

    def undefined(where, value):
        for text in strings(value):
            for ref in references(text):
                if ref not in defined and ref not in BUILTINS:
                    breaches.append(f"{where}: ${ref} is not a defined variable")

    for variable in variables:
        if isinstance(variable, dict) and isinstance(variable.get("name"), str):
            # A variable's own `current` may hold "$__all"; its query and datasource may refer
            # to other variables only.
            undefined(f"variable {variable['name']}",
                      [variable.get("query"), variable.get("definition"), variable.get("datasource")])

    panels = dashboard.get("panels")
    if not isinstance(panels, list) or not panels:
        breaches.append("no panels")
        return []
    exprs = []
    ids = {}
    boxes = []
    for n, panel in enumerate(all_panels(panels)):
        if not isinstance(panel, dict):
            breaches.append(f"panel #{n}: not an object")
            continue
        pid = panel.get("id")
        where = f"panel {pid} ({panel.get('title', '?')})"
        if not is_int(pid):
            breaches.append(f"panel #{n} ({panel.get('title', '?')}): id {pid!r} is not an integer")
        elif pid in ids:
            breaches.append(f"{where}: id {pid} also belongs to panel {ids[pid]!r}")
        else:
            ids[pid] = panel.get("title", "?")
        if not panel.get("type"):
            breaches.append(f"{where}: no type")
        if not isinstance(panel.get("title"), str) or not panel["title"].strip():
            breaches.append(f"{where}: no title")
        pos = panel.get("gridPos")
        if not isinstance(pos, dict) or not all(is_int(pos.get(k)) for k in ("h", "w", "x", "y")):
            breaches.append(f"{where}: gridPos needs integer h, w, x and y: {pos!r}")
        else:
            h, w, x, y = (pos[k] for k in ("h", "w", "x", "y"))
            if h < 1 or w < 1 or x < 0 or y < 0 or x + w > 24:
                breaches.append(f"{where}: gridPos {pos} is outside the 24 columns")
            for other, (ox, oy, ow, oh) in boxes:
                if x < ox + ow and ox < x + w and y < oy + oh and oy < y + h:
                    breaches.append(f"{where}: gridPos {pos} overlaps panel {other}")
            boxes.append((pid, (x, y, w, h)))
        undefined(where, [panel.get("title"), panel.get("datasource")])
        if panel.get("type") == "row":
            if panel.get("targets"):
                breaches.append(f"{where}: a row with targets")
            continue
        if not panel.get("datasource"):
            breaches.append(f"{where}: no datasource")
        targets = panel.get("targets")
        if not isinstance(targets, list) or not targets:
            breaches.append(f"{where}: no targets")
            continue
        refs = set()
        for t, target in enumerate(targets):
            twhere = f"{where} target {target.get('refId', t) if isinstance(target, dict) else t}"
            if not isinstance(target, dict):
                breaches.append(f"{twhere}: not an object")
                continue
            if not target.get("datasource"):
                breaches.append(f"{twhere}: no datasource")
            expr = target.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                breaches.append(f"{twhere}: no expr")
            else:
                exprs.append((twhere, expr))
            ref = target.get("refId")
            if not isinstance(ref, str) or not ref:
                breaches.append(f"{twhere}: no refId")
            elif ref in refs:
                breaches.append(f"{twhere}: refId {ref} twice in the panel")
            refs.add(ref)
            undefined(twhere, [target.get("datasource"), expr, target.get("legendFormat")])
    return exprs


def substitute(expr):
    """The expression with each Grafana variable replaced so that Prometheus can parse it."""
    def value(match):
        name = next(group for group in match.groups() if group)
        return SUBSTITUTES.get(name, ".*")
    return REFERENCE.sub(value, expr)


def write_rules(path, exprs):
    lines = ["# Written by dashboard_check.py: the dashboard's expressions, for promtool check rules.",
             "groups:", "  - name: dashboard-expressions", "    rules:"]
    for n, (where, expr) in enumerate(exprs):
        lines.append(f"      # {where}")
        lines.append(f"      - record: dashboard:expr_{n}")
        lines.append(f"        expr: {json.dumps(substitute(expr))}")
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


def main(argv):
    args = argv[1:]
    rules_out = None
    if "--rules-out" in args:
        i = args.index("--rules-out")
        if i + 1 >= len(args):
            print("--rules-out needs a path", file=sys.stderr)
            return 2
        rules_out = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path = args[0]
    try:
        with open(path, encoding="utf-8") as source:
            dashboard = json.load(source)
    except (OSError, ValueError) as error:
        print(f"{path}: {error}", file=sys.stderr)
        return 1
    breaches = []
    exprs = check(dashboard, breaches)
    if breaches:
        for breach in breaches:
            print(f"{path}: {breach}", file=sys.stderr)
        return 1
    if rules_out:
        write_rules(rules_out, exprs)
    panels = sum(1 for p in all_panels(dashboard["panels"]) if p.get("type") != "row")
    print(f"{path}: {panels} panels, {len(exprs)} expressions, "
          f"{len(dashboard['templating']['list'])} variables: well-formed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
