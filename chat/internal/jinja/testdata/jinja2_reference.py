#!/usr/bin/env python3
"""Fills in the "want" of every case in cases.json with what Jinja2 renders.

The environment is the one transformers renders chat templates in
(transformers/utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), with tojson replaced by
json.dumps(ensure_ascii=False, ...) and the globals raise_exception and
strftime_now. AssistantTracker only adds the {% generation %} tag; a stand-in
that renders its body is defined below. strftime_now's clock is fixed at
2024-07-26 09:05:03 to match the Go test.

A case whose render raises gets "error": the exception's message, and no
"want". Run: python3 jinja2_reference.py (Jinja2 3.1.6 made the file).
"""
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(2024, 7, 26, 9, 5, 3).strftime(fmt)


env = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json")
with open(path, encoding="utf-8") as f:
    cases = json.load(f)
for c in cases:
    c.pop("want", None)
    c.pop("error", None)
    try:
        c["want"] = env.from_string(c["template"]).render(**c.get("vars", {}))
    except Exception as e:  # the message the Go error must contain
        c["error"] = str(e)
with open(path, "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=False, indent=1)
    f.write("\n")
